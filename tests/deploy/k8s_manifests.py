#!/usr/bin/env python3
"""Checks deploy/kubernetes/ and turns its manifests into the pods Kubernetes would run.

  k8s_manifests.py check DEPLOY_DIR OUT_YAML
      Structural checks of every manifest (the custom resources have no schema anywhere
      here: apiVersion, kind, required fields, no unknown fields, and that the pieces agree
      with each other), and that each runs one of the repository's examples where the image
      holds them (/opt/meshrun/examples/<file>, a file of examples/). Writes the core objects embedded in the custom resources (their pod
      templates, the TrainJob's trainer as a container) to OUT_YAML for kubernetes-validate.
      Prints one line per problem; exit 1 when there is any.

  k8s_manifests.py pods DEPLOY_DIR OUT_DIR TOKEN NPROC PROGRAM [ARGS...]
      For each scenario (job: the indexed Job; pytorchjob, trainjob: Kubeflow), writes what
      each pod would run: OUT_DIR/<scenario>.<i>.argv and .env (NUL-separated; the command
      after Kubernetes' $(VAR) expansion, the environment Kubernetes and the operator give),
      .hostname, and OUT_DIR/<scenario>.hosts ("<pod index> <name>" lines: names that must
      resolve to that pod). The manifest's own program and arguments are replaced by PROGRAM
      ARGS (everything before them, meshrun's flags, is kept as written); the workers per
      node by NPROC (the manifests ask for 8 GPUs); the Secret's value by TOKEN.

Kubeflow's environment follows the operators' code: training-operator (PyTorchJob: MASTER_*,
PET_MASTER_ADDR/PORT, PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, WORLD_SIZE, RANK,
PYTHONUNBUFFERED) and Trainer v2's torch plugin (TrainJob: PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK from the completion index, PET_MASTER_ADDR <name>-node-0-0.<name>,
PET_MASTER_PORT 29400).
"""
import os
import re
import sys

import yaml

IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the image (deploy/container) puts the repository's examples/.
EXAMPLES_IN_IMAGE = "/opt/meshrun/examples/"
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

problems = []


def problem(msg):
    problems.append(msg)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_one(path, api_version, kind):
    docs = load_all(path)
    if len(docs) != 1:
        problem(f"{os.path.basename(path)}: expected one document, found {len(docs)}")
        return None
    d = docs[0]
    if d.get("apiVersion") != api_version or d.get("kind") != kind:
        problem(f"{os.path.basename(path)}: expected {api_version} {kind}, "
                f"found {d.get('apiVersion')} {d.get('kind')}")
        return None
    return d


def get(obj, path, where, kind=None):
    """obj[path...] or a problem naming the missing field."""
    cur = obj
    for key in path:
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
        elif isinstance(cur, list) and isinstance(key, int) and key < len(cur):
            cur = cur[key]
        else:
            problem(f"{where}: missing {'.'.join(str(p) for p in path)}")
            return None
    if kind is not None and not isinstance(cur, kind):
        problem(f"{where}: {'.'.join(str(p) for p in path)} is a {type(cur).__name__}, "
                f"expected {kind.__name__ if isinstance(kind, type) else kind}")
        return None
    return cur


def only_keys(obj, allowed, where):
    if isinstance(obj, dict):
        for k in obj:
            if k not in allowed:
                problem(f"{where}: unknown field '{k}' (known: {', '.join(sorted(allowed))})")


def probes_ok(container, flags, where):
    """Liveness and readiness probes: gRPC on the plaintext health port that meshrun opens
    (--rdzv_conf=health_port=N), declared as a container port."""
    conf = flag_value(flags, "--rdzv_conf") or ""
    m = re.search(r"(?:^|,)health_port=(\d+)(?:,|$)", conf)
    if not m:
        problem(f"{where}: meshrun needs --rdzv_conf=health_port=N for the probes")
        return
    port = int(m.group(1))
    c_ports = [p.get("containerPort") for p in container.get("ports") or []]
    if port not in c_ports:
        problem(f"{where}: the health port {port} must be a container port ({c_ports})")
    for kind in ("livenessProbe", "readinessProbe"):
        probe = container.get(kind)
        if not isinstance(probe, dict) or (probe.get("grpc") or {}).get("port") != port:
            problem(f"{where}: {kind} must be a gRPC probe of the health port {port}: {probe}")


def token_ref_ok(container, secret, where):
    """The container's MESHRUN_TOKEN comes from the example Secret's key."""
    env = {e.get("name"): e for e in container.get("env") or []}
    e = env.get("MESHRUN_TOKEN")
    if e is None:
        problem(f"{where}: no MESHRUN_TOKEN in env")
        return
    ref = (e.get("valueFrom") or {}).get("secretKeyRef") or {}
    if not ref:
        problem(f"{where}: MESHRUN_TOKEN must come from a secretKeyRef, not a literal")
        return
    if secret is not None:
        name = secret["metadata"]["name"]
        keys = set((secret.get("stringData") or {}).keys()) | set((secret.get("data") or {}).keys())
        if ref.get("name") != name or ref.get("key") not in keys:
            problem(f"{where}: MESHRUN_TOKEN refers to secret {ref.get('name')}/{ref.get('key')}, "
                    f"the example Secret is {name} with keys {sorted(keys)}")


def flag_value(args, flag):
    for a in args:
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def split_program(argv, where):
    """(meshrun and its flags, program and its args). Flags must use --flag=value."""
    for i, a in enumerate(argv[1:], start=1):
        if not a.startswith("-"):
            return argv[:i], argv[i:]
        if "=" not in a:
            problem(f"{where}: write meshrun flags as --flag=value ('{a}'), so the program "
                    f"starts at the first word without a dash")
    problem(f"{where}: no program after meshrun's flags")
    return argv, []


def program_ok(prog, deploy, where):
    """The manifest runs one of the repository's examples, at its path in the image."""
    if not prog:
        return
    path = prog[0]
    if not path.startswith(EXAMPLES_IN_IMAGE):
        problem(f"{where}: the program {path} is not one of the examples in the image "
                f"({EXAMPLES_IN_IMAGE}...)")
        return
    local = os.path.join(os.path.dirname(os.path.abspath(deploy)), "examples", path[len(EXAMPLES_IN_IMAGE):])
    if not os.path.isfile(local):
        problem(f"{where}: the program {path} has no source in the repository ({local})")


def expand(s, env):
    """Kubernetes' $(VAR) expansion in command, args and env values ($$ escapes)."""
    out, i = [], 0
    while i < len(s):
        if s.startswith("$$", i):
            out.append("$")
            i += 2
        elif s.startswith("$(", i):
            j = s.find(")", i + 2)
            name = s[i + 2:j] if j >= 0 else None
            if name is not None and name in env:
                out.append(env[name])
                i = j + 1
            else:
                out.append(s[i] if j < 0 else s[i:j + 1])
                i = len(s) if j < 0 else j + 1
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def container_env(container, base, token, field_values):
    """base (what Kubernetes/the operator/the image add) + the container's own env."""
    env = dict(base)
    for e in container.get("env") or []:
        name = e["name"]
        if "value" in e:
            env[name] = expand(str(e["value"]), env)
        elif "secretKeyRef" in (e.get("valueFrom") or {}):
            env[name] = token
        elif "fieldRef" in (e.get("valueFrom") or {}):
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in field_values:
                problem(f"env {name}: fieldRef {path} is not emulated by this test")
                continue
            env[name] = field_values[path]
        else:
            problem(f"env {name}: unsupported source {e}")
    return env


# ---------------------------------------------------------------------------- check

def check(deploy, out_yaml):
    kdir = os.path.join(deploy, "kubernetes")
    secret = load_one(os.path.join(kdir, "secret.example.yaml"), "v1", "Secret")
    if secret is not None:
        if not (secret.get("stringData") or secret.get("data")):
            problem("secret.example.yaml: no data")

    # --- the indexed Job and its headless Service
    docs = load_all(os.path.join(kdir, "meshrun-job.yaml"))
    svcs = [d for d in docs if d.get("kind") == "Service"]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    if len(svcs) != 1 or len(jobs) != 1 or len(docs) != 2:
        problem(f"meshrun-job.yaml: expected one Service and one Job, found "
                f"{[d.get('kind') for d in docs]}")
    else:
        svc, job = svcs[0], jobs[0]
        w = "meshrun-job.yaml"
        svc_name = get(svc, ["metadata", "name"], w, str)
        job_name = get(job, ["metadata", "name"], w, str)
        if get(svc, ["spec", "clusterIP"], w) != "None":
            problem(f"{w}: the Service must be headless (clusterIP: None)")
        if get(svc, ["spec", "publishNotReadyAddresses"], w) is not True:
            problem(f"{w}: the Service needs publishNotReadyAddresses: true (pod 0's name must "
                    f"resolve before any probe passes)")
        spec = get(job, ["spec"], w, dict) or {}
        if spec.get("completionMode") != "Indexed":
            problem(f"{w}: completionMode must be Indexed")
        n = spec.get("completions")
        if not isinstance(n, int) or n < 1 or spec.get("parallelism") != n:
            problem(f"{w}: completions ({n}) and parallelism ({spec.get('parallelism')}) "
                    f"must be the same node count")
        pod = get(job, ["spec", "template", "spec"], w, dict) or {}
        labels = get(job, ["spec", "template", "metadata", "labels"], w, dict) or {}
        selector = get(svc, ["spec", "selector"], w, dict) or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            problem(f"{w}: the Service's selector {selector} does not select the pods {labels}")
        if pod.get("subdomain") != svc_name:
            problem(f"{w}: the pods' subdomain ({pod.get('subdomain')}) must be the Service's "
                    f"name ({svc_name})")
        if pod.get("restartPolicy") != "Never":
            problem(f"{w}: restartPolicy must be Never (meshrun restarts workers itself)")
        cs = pod.get("containers") or []
        if len(cs) != 1:
            problem(f"{w}: expected one container, found {len(cs)}")
        else:
            c = cs[0]
            argv = list(c.get("command") or []) + list(c.get("args") or [])
            if not argv or os.path.basename(argv[0]) != "meshrun":
                problem(f"{w}: the container must run meshrun, runs {argv[:1]}")
            flags, prog = split_program(argv, w)
            program_ok(prog, deploy, w)
            env_names = {e.get("name") for e in c.get("env") or []}
            env_values = {e.get("name"): e.get("value") for e in c.get("env") or []}
            ep = flag_value(flags, "--rdzv_endpoint")
            svc_ports = [p.get("port") for p in (svc.get("spec") or {}).get("ports") or []]
            c_ports = [p.get("containerPort") for p in c.get("ports") or []]
            m = re.fullmatch(r"(.+):(\d+)", ep or "")
            if not m or m.group(1) != f"{job_name}-0.{svc_name}":
                problem(f"{w}: --rdzv_endpoint ({ep}) must be pod 0's name "
                        f"{job_name}-0.{svc_name}:PORT")
            elif int(m.group(2)) not in svc_ports or int(m.group(2)) not in c_ports:
                problem(f"{w}: the endpoint's port {m.group(2)} must be the Service's "
                        f"({svc_ports}) and the container's ({c_ports})")
            if flag_value(flags, "--rdzv_id") != job_name:
                problem(f"{w}: --rdzv_id must be the Job's name ({job_name})")
            if flag_value(flags, "--node_rank") != "$(JOB_COMPLETION_INDEX)":
                problem(f"{w}: --node_rank must be $(JOB_COMPLETION_INDEX)")
            nn = flag_value(flags, "--nnodes")
            nn_val = expand(nn or "", {k: str(v) for k, v in env_values.items() if v is not None})
            if nn_val != str(n):
                problem(f"{w}: --nnodes ({nn} = {nn_val}) must equal completions ({n})")
            for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", " ".join(argv)):
                if ref not in env_names and ref != "JOB_COMPLETION_INDEX":
                    problem(f"{w}: $({ref}) is not defined in the container's env")
            if flag_value(flags, "--rdzv_backend") not in (None, "c10d", "meshrun"):
                problem(f"{w}: --rdzv_backend must be c10d/meshrun")
            token_ref_ok(c, secret, w)
            probes_ok(c, flags, w)

    embedded = []

    # --- Kubeflow training operator: PyTorchJob
    w = "kubeflow-pytorchjob.yaml"
    pj = load_one(os.path.join(kdir, w), "kubeflow.org/v1", "PyTorchJob")
    if pj is not None:
        only_keys(pj, {"apiVersion", "kind", "metadata", "spec"}, w)
        name = get(pj, ["metadata", "name"], w, str)
        if name and not DNS_LABEL.match(name):
            problem(f"{w}: metadata.name {name!r} is not a DNS label")
        spec = get(pj, ["spec"], w, dict) or {}
        only_keys(spec, {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"}, w + " spec")
        if "elasticPolicy" in spec:
            problem(f"{w}: no elasticPolicy (the example uses the static rendezvous)")
        npn = spec.get("nprocPerNode")
        if not isinstance(npn, str):
            problem(f"{w}: spec.nprocPerNode must be a string, got {npn!r}")
        reps = get(pj, ["spec", "pytorchReplicaSpecs"], w, dict) or {}
        only_keys(reps, {"Master", "Worker"}, w + " pytorchReplicaSpecs")
        if (reps.get("Master") or {}).get("replicas") != 1:
            problem(f"{w}: exactly one Master replica")
        for rtype, rs in reps.items():
            where = f"{w} {rtype}"
            only_keys(rs, {"replicas", "template", "restartPolicy"}, where)
            if not isinstance(rs.get("replicas"), int) or rs["replicas"] < 1:
                problem(f"{where}: replicas must be a positive integer")
            if rs.get("restartPolicy") not in ("Always", "OnFailure", "Never", "ExitCode"):
                problem(f"{where}: restartPolicy {rs.get('restartPolicy')!r}")
            tmpl = get(rs, ["template"], where, dict)
            if tmpl is None:
                continue
            embedded.append({"apiVersion": "v1", "kind": "PodTemplate",
                             "metadata": {"name": f"{name}-{rtype.lower()}"}, "template": tmpl})
            cs = [c for c in (tmpl.get("spec") or {}).get("containers") or [] if c.get("name") == "pytorch"]
            if len(cs) != 1:
                problem(f"{where}: needs one container named 'pytorch'")
                continue
            c = cs[0]
            argv = list(c.get("command") or []) + list(c.get("args") or [])
            if not argv or os.path.basename(argv[0]) != "meshrun":
                problem(f"{where}: the container must run meshrun, runs {argv[:1]}")
            flags, prog = split_program(argv, where)
            program_ok(prog, deploy, where)
            if flag_value(flags, "--rdzv_backend") != "static":
                problem(f"{where}: meshrun needs --rdzv_backend=static under the training operator")
            if not any(p.get("name") == "pytorchjob-port" for p in c.get("ports") or []):
                problem(f"{where}: no container port named pytorchjob-port")
            token_ref_ok(c, secret, where)
            probes_ok(c, flags, where)

    # --- Kubeflow Trainer v2: TrainJob
    w = "kubeflow-trainjob.yaml"
    tj = load_one(os.path.join(kdir, w), "trainer.kubeflow.org/v1alpha1", "TrainJob")
    if tj is not None:
        only_keys(tj, {"apiVersion", "kind", "metadata", "spec"}, w)
        name = get(tj, ["metadata", "name"], w, str)
        if name and (not DNS_LABEL.match(name) or len(name) > 63):
            problem(f"{w}: metadata.name {name!r} is not an RFC 1035 label")
        spec = get(tj, ["spec"], w, dict) or {}
        only_keys(spec, {"runtimeRef", "initializer", "trainer", "runtimePatches", "suspend",
                         "activeDeadlineSeconds", "managedBy", "labels", "annotations",
                         "podTemplateOverrides", "podSpecOverrides"}, w + " spec")
        ref = get(tj, ["spec", "runtimeRef"], w, dict) or {}
        only_keys(ref, {"name", "apiGroup", "kind"}, w + " runtimeRef")
        if not ref.get("name"):
            problem(f"{w}: spec.runtimeRef.name is required")
        tr = get(tj, ["spec", "trainer"], w, dict) or {}
        only_keys(tr, {"image", "command", "args", "env", "numNodes", "resourcesPerNode",
                       "numProcPerNode"}, w + " trainer")
        if not isinstance(tr.get("numNodes"), int) or tr["numNodes"] < 1:
            problem(f"{w}: trainer.numNodes must be a positive integer")
        if not isinstance(tr.get("numProcPerNode"), int) or tr["numProcPerNode"] < 1:
            problem(f"{w}: trainer.numProcPerNode must be a positive integer")
        argv = list(tr.get("command") or []) + list(tr.get("args") or [])
        if not argv or os.path.basename(argv[0]) != "meshrun":
            problem(f"{w}: trainer.command must run meshrun, runs {argv[:1]}")
        flags, prog = split_program(argv, w)
        program_ok(prog, deploy, w)
        if flag_value(flags, "--rdzv_backend") != "static":
            problem(f"{w}: meshrun needs --rdzv_backend=static under the torch runtime")
        reserved = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                    "PET_MASTER_PORT"}
        for e in tr.get("env") or []:
            if e.get("name") in reserved:
                problem(f"{w}: trainer.env must not set {e.get('name')} (the runtime sets it)")
        token_ref_ok(tr, secret, w)
        ctr = {"name": "node", "image": tr.get("image", "x"), "command": tr.get("command"),
               "env": tr.get("env")}
        if tr.get("args"):
            ctr["args"] = tr["args"]
        if tr.get("resourcesPerNode"):
            ctr["resources"] = tr["resourcesPerNode"]
        embedded.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-trainer"},
                         "spec": {"containers": [ctr]}})

    with open(out_yaml, "w") as f:
        yaml.safe_dump_all(embedded, f, sort_keys=False)
    for p in problems:
        print(f"manifest problem: {p}")
    return 1 if problems else 0


# ---------------------------------------------------------------------------- pods

def write_pod(out, scenario, i, hostname, argv, env):
    with open(os.path.join(out, f"{scenario}.{i}.argv"), "w") as f:
        f.write("".join(a + "\0" for a in argv))
    with open(os.path.join(out, f"{scenario}.{i}.env"), "w") as f:
        f.write("".join(f"{k}={v}\0" for k, v in env.items()))
    with open(os.path.join(out, f"{scenario}.{i}.hostname"), "w") as f:
        f.write(hostname + "\n")


def image_env(hostname):
    return {"PATH": IMAGE_PATH, "HOME": "/root", "HOSTNAME": hostname}


def pods(deploy, out, token, nproc, program):
    kdir = os.path.join(deploy, "kubernetes")

    # The indexed Job: pods <job>-<i>, JOB_COMPLETION_INDEX, kubelet's /etc/hosts line.
    docs = load_all(os.path.join(kdir, "meshrun-job.yaml"))
    svc = next(d for d in docs if d["kind"] == "Service")
    job = next(d for d in docs if d["kind"] == "Job")
    job_name, svc_name = job["metadata"]["name"], svc["metadata"]["name"]
    n = job["spec"]["completions"]
    c = job["spec"]["template"]["spec"]["containers"][0]
    c = dict(c, env=[dict(e, value=str(nproc)) if e["name"] == "NPROC_PER_NODE" else e
                     for e in c.get("env") or []])
    hosts = []
    for i in range(n):
        hostname = f"{job_name}-{i}"
        base = image_env(hostname)
        base["JOB_COMPLETION_INDEX"] = str(i)
        ann = {"metadata.annotations['batch.kubernetes.io/job-completion-index']": str(i),
               "metadata.labels['batch.kubernetes.io/job-completion-index']": str(i),
               "metadata.name": f"{hostname}-abcde"}
        env = container_env(c, base, token, ann)
        argv = [expand(a, env) for a in list(c.get("command") or []) + list(c.get("args") or [])]
        flags, _ = split_program(argv, "meshrun-job.yaml")
        write_pod(out, "job", i, hostname, flags + program, env)
        hosts.append(f"{i} {hostname}.{svc_name}")
        hosts.append(f"{i} {hostname}.{svc_name}.default.svc.cluster.local")
    with open(os.path.join(out, "job.hosts"), "w") as f:
        f.write("\n".join(hosts) + "\n")

    # PyTorchJob: pods <job>-master-0, <job>-worker-<i>; services of the same names.
    pj = load_one(os.path.join(kdir, "kubeflow-pytorchjob.yaml"), "kubeflow.org/v1", "PyTorchJob")
    name = pj["metadata"]["name"]
    reps = pj["spec"]["pytorchReplicaSpecs"]
    order = [("Master", k) for k in range(reps["Master"]["replicas"])]
    order += [("Worker", k) for k in range((reps.get("Worker") or {}).get("replicas", 0))]
    total = len(order)
    mc = next(c for c in reps["Master"]["template"]["spec"]["containers"] if c["name"] == "pytorch")
    port = next(p["containerPort"] for p in mc["ports"] if p["name"] == "pytorchjob-port")
    hosts = []
    for i, (rtype, k) in enumerate(order):
        hostname = f"{name}-{rtype.lower()}-{k}"
        c = next(c for c in reps[rtype]["template"]["spec"]["containers"] if c["name"] == "pytorch")
        rank = k if rtype == "Master" else k + 1
        base = image_env(hostname)
        base.update({
            "PYTHONUNBUFFERED": "0",
            "MASTER_PORT": str(port), "MASTER_ADDR": f"{name}-master-0",
            "PET_MASTER_PORT": str(port), "PET_MASTER_ADDR": f"{name}-master-0",
            "WORLD_SIZE": str(total * int(nproc)), "RANK": str(rank),
            "PET_NPROC_PER_NODE": str(nproc), "PET_NODE_RANK": str(rank),
            "PET_NNODES": str(total),
        })
        env = container_env(c, base, token, {})
        argv = [expand(a, env) for a in list(c.get("command") or []) + list(c.get("args") or [])]
        flags, _ = split_program(argv, "kubeflow-pytorchjob.yaml")
        write_pod(out, "pytorchjob", i, hostname, flags + program, env)
        hosts.append(f"{i} {hostname}")
    with open(os.path.join(out, "pytorchjob.hosts"), "w") as f:
        f.write("\n".join(hosts) + "\n")

    # TrainJob (torch-distributed runtime, a JobSet): pods <name>-node-0-<i>, subdomain <name>.
    tj = load_one(os.path.join(kdir, "kubeflow-trainjob.yaml"), "trainer.kubeflow.org/v1alpha1",
                  "TrainJob")
    name = tj["metadata"]["name"]
    tr = tj["spec"]["trainer"]
    hosts = []
    for i in range(tr["numNodes"]):
        hostname = f"{name}-node-0-{i}"
        base = image_env(hostname)
        base.update({
            "JOB_COMPLETION_INDEX": str(i),
            "PET_NNODES": str(tr["numNodes"]), "PET_NPROC_PER_NODE": str(nproc),
            "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
            "PET_MASTER_PORT": "29400",
        })
        env = container_env(tr, base, token, {})
        argv = [expand(a, env) for a in list(tr.get("command") or []) + list(tr.get("args") or [])]
        flags, _ = split_program(argv, "kubeflow-trainjob.yaml")
        write_pod(out, "trainjob", i, hostname, flags + program, env)
        hosts.append(f"{i} {hostname}.{name}")
    with open(os.path.join(out, "trainjob.hosts"), "w") as f:
        f.write("\n".join(hosts) + "\n")

    for p in problems:
        print(f"manifest problem: {p}")
    return 1 if problems else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    if len(argv) >= 7 and argv[1] == "pods":
        return pods(argv[2], argv[3], argv[4], argv[5], argv[6:])
    print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
