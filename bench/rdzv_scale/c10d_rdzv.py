#!/usr/bin/python3
"""torchrun's c10d rendezvous at N simulated agents, for bench/rdzv_scale.

Each simulated agent is what torchrun's agent creates for --rdzv_backend=c10d
(PyTorch 1.13, Debian's python3-torch): a TCPStore client of its own, a
C10dRendezvousBackend over it and a DynamicRendezvousHandler
(from_backend, min_nodes = max_nodes = N, torchrun's default timeouts and
keep-alive: 5 s x 3). One TCPStore server (the process that runs this
script, as torchrun's agent on the endpoint host hosts it) serves them all.
The agents live in several processes (--processes, default one per 64
agents, at least 2), many per process, each in a thread of its own; after
every agent connected, all call next_rendezvous() at once.

Measured per run: from the first next_rendezvous() call to the last one
returning (every agent's rendezvous complete), on CLOCK_MONOTONIC, which
all processes share. A run that does not complete within --timeout seconds
is stopped and reported as "did not complete in X s".

Output, one line per run on stdout:
  RESULT n=64 run=1 complete=1 seconds=1.2345 note=
Usage: /usr/bin/python3 c10d_rdzv.py --agents 64 --runs 3 --timeout 120
"""
import argparse
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta


def exit_with_parent():
    """Ends this worker when the driver is gone (its own session: no signal reaches it)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def worker(args):
    """One process's agents: connect, say ready, wait for go, rendezvous."""
    exit_with_parent()
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler, RendezvousTimeout)

    handlers = []
    for _ in range(args.count):
        # As torchrun's c10d backend (_create_tcp_store): a client store
        # with the read timeout, then the backend and handler over it.
        store = TCPStore("127.0.0.1", args.port, is_master=False, timeout=timedelta(seconds=args.timeout))
        backend = C10dRendezvousBackend(store, args.run_id)
        handlers.append(DynamicRendezvousHandler.from_backend(
            args.run_id, store, backend, args.nnodes, args.nnodes,
            RendezvousTimeout(join=timedelta(seconds=args.timeout))))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != "go":
        os._exit(1)
    starts, ends, errors = [], [], []
    lock = threading.Lock()

    def one(h):
        t0 = time.monotonic()
        try:
            h.next_rendezvous()
            t1 = time.monotonic()
            with lock:
                starts.append(t0)
                ends.append(t1)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            with lock:
                starts.append(t0)
                errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in handlers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdout.write(json.dumps({"starts": starts, "ends": ends, "errors": errors[:3], "failed": len(errors)}) + "\n")
    sys.stdout.flush()
    os._exit(0)  # The handlers' keep-alive timers would keep it alive.


def one_run(n, run, args):
    from torch.distributed import TCPStore
    master = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=args.timeout))
    procs_n = args.processes or max(2, math.ceil(n / 64))
    procs_n = min(procs_n, n)
    run_id = f"c10d-scale-{n}-{run}-{os.getpid()}"
    procs = []
    deadline = time.monotonic() + args.timeout
    note = ""
    try:
        for p in range(procs_n):
            count = n * (p + 1) // procs_n - n * p // procs_n
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", "--port", str(master.port),
                 "--run_id", run_id, "--count", str(count), "--nnodes", str(n), "--timeout", str(args.timeout)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True))
        # Every agent connected (bounded by the same timeout).
        if not read_all(procs, deadline, lambda line: line.strip() == "ready"):
            return False, -1, f"agents did not connect in {args.timeout:g} s"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        if not read_all(procs, deadline, lambda line: results.append(json.loads(line)) or True):
            return False, -1, f"did not complete in {args.timeout:g} s"
        failed = sum(r["failed"] for r in results)
        if failed:
            errs = [e for r in results for e in r["errors"]]
            return False, -1, f"{failed} of {n} handlers failed: {errs[0] if errs else ''}"
        starts = [t for r in results for t in r["starts"]]
        ends = [t for r in results for t in r["ends"]]
        return True, max(ends) - min(starts), note
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        del master


def read_all(procs, deadline, accept):
    """Reads one line from every process before `deadline`."""
    pending = {p.stdout.fileno(): p for p in procs}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select(list(pending), [], [], left)
        for fd in ready:
            line = pending[fd].stdout.readline()
            if not line or not accept(line):
                return False
            del pending[fd]
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", default="64,256", help="comma-separated N list")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120, help="seconds a run may take")
    ap.add_argument("--processes", type=int, default=0, help="load processes (0: one per 64 agents, >= 2)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--run_id", default="", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--nnodes", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    try:
        ns = [int(x) for x in args.agents.split(",") if x]
    except ValueError:
        sys.exit(f"c10d_rdzv.py: --agents={args.agents}: expected comma-separated positive integers")
    if not ns or min(ns) < 1 or args.runs < 1 or args.timeout <= 0:
        sys.exit("c10d_rdzv.py: --agents needs positive integers, --runs >= 1, --timeout > 0")
    for n in ns:
        for run in range(1, args.runs + 1):
            ok, seconds, note = one_run(n, run, args)
            print(f"RESULT n={n} run={run} complete={int(ok)} seconds={seconds:.4f} note={note}", flush=True)


if __name__ == "__main__":
    main()
