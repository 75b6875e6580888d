// `meshrun [flags] prog [args...]`: CLI11 flags and torchrun's command-line forms
// (standalone, static, meshrun) resolved into a LaunchConfig (launch_config.h).
#include <limits>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/output.h"
#include "agent/process.h"
#include "common/build_info.h"
#include "common/endpoint.h"
#include "common/env_registry.h"
#include "common/security.h"
#include "launcher/cli.h"
#include "launcher/launch_config.h"
#include "launcher/numa_binding.h"
#include "launcher/rdzv_conf.h"
#include "launcher/worker_command.h"

namespace meshrun::launcher {
namespace {

int UsageError(const std::string& msg) {
  std::fprintf(stderr, "meshrun: error: %s\n", msg.c_str());
  return 2;
}

std::string RandomRunId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()));
  // A version-4 UUID, as torchrun's --standalone uses.
  uint64_t a = gen(), b = gen();
  a = (a & ~0xF000ULL) | 0x4000ULL;
  b = (b & ~(0x3ULL << 62)) | (0x2ULL << 62);
  std::string hex = absl::StrCat(absl::Hex(a, absl::kZeroPad16), absl::Hex(b, absl::kZeroPad16));
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-", hex.substr(16, 4), "-",
                      hex.substr(20));
}

void PrintEnvTable() {
  std::printf("%-32s %-8s %-34s %s\n", "VARIABLE", "TYPE", "USE", "MEANING");
  for (const env::Var& v : env::AllVars()) {
    std::printf("%-32s %-8s %-34s %s\n", std::string(v.name).c_str(), std::string(env::TypeName(v.type)).c_str(),
                std::string(env::UseName(v.use)).c_str(), std::string(v.description).c_str());
  }
  std::printf("%-32s %-8s %-34s %s\n", "PET_<FLAG>", "string", "read by meshrun",
              "Default of --<flag> (e.g. PET_NPROC_PER_NODE), as torchrun.");
}

}  // namespace

absl::StatusOr<std::pair<int, int>> ParseNnodes(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int lo = 0, hi = 0;
  bool ok = false;
  if (parts.size() == 1) {
    ok = absl::SimpleAtoi(parts[0], &lo);
    hi = lo;
  } else if (parts.size() == 2) {
    ok = absl::SimpleAtoi(parts[0], &lo) && absl::SimpleAtoi(parts[1], &hi);
  }
  if (!ok || lo <= 0 || hi < lo) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", text, ": must be N or MIN:MAX with 0 < MIN <= MAX"));
  }
  return std::make_pair(lo, hi);
}

ParseOutcome ParseCommandLine(int argc, char** argv) {
  ParseOutcome out;
  CLI::App app{
      "meshrun: launch multi-process, multi-host jobs (torchrun's command line).\n"
      "Usage: meshrun [flags] prog [args...]\n"
      "       meshrun server [flags]   (the rendezvous server as a daemon; see meshrun server --help)\n"
      "       meshrun mesh [flags]     (print a mesh layout; see meshrun mesh --help)\n"
      "       meshrun status [flags]   (a run as the server sees it; see meshrun status --help)",
      "meshrun"};
  app.prefix_command();
  // Line 1 is the version alone (the manual pages take it); line 2 the build.
  app.set_version_flag("--version", "meshrun " MESHRUN_VERSION "\ncommit " + std::string(BuildCommit()) + ", built " +
                                        std::string(BuildDate()));
  app.get_formatter()->column_width(44);

  std::string nnodes = "1:1", nproc = "1", backend, endpoint, run_id = "none", rdzv_conf;
  std::string role = "default", master_addr = "127.0.0.1", local_addr, log_dir, start_method, signals;
  std::string shutdown_timeout, redirects, tee, local_ranks_filter;
  std::string prefix_template, dup_stdout, dup_stderr, numa_binding, logs_specs, event_log_handler;
  int node_rank = -1, master_port = 29500, max_restarts = 0, permanent_code = 78;
  // --replica_groups: unset unless given (0 is refused like any R < 1).
  constexpr int kNoReplicaGroups = std::numeric_limits<int>::min();
  int replica_groups = kNoReplicaGroups;
  int min_replica_groups = kNoReplicaGroups;  // --min_replica_groups: 1 unless given.
  double monitor_interval = 0;
  bool standalone = false, module = false, no_python = false, help_env = false, keep_orphans = false;
  bool run_path = false, virtual_local_rank = false;

  const std::string g_job = "Job size";
  const std::string g_rdzv = "Rendezvous";
  const std::string g_workers = "Workers";
  const std::string g_fault = "Failures and signals";
  const std::string g_static = "Static rendezvous (torchrun --rdzv_backend=static)";
  const std::string g_compat = "Accepted for torchrun compatibility";

  app.add_option("--nnodes", nnodes, "Nodes: N, or MIN:MAX for an elastic job")
      ->envname("PET_NNODES")->group(g_job)->default_str("1:1");
  app.add_option("--nproc_per_node,--nproc-per-node", nproc,
                 "Workers per node: an integer, cpu, gpu or auto")
      ->envname("PET_NPROC_PER_NODE")->group(g_job)->default_str("1");
  app.add_option("--node_rank,--node-rank", node_rank,
                 "This node's rank; honoured when the nodes give exactly 0..n-1")
      ->envname("PET_NODE_RANK")->group(g_job);
  app.add_option("--role", role, "Worker role name (ROLE_NAME)")->envname("PET_ROLE")->group(g_job)
      ->default_str("default");

  app.add_option("--rdzv_backend,--rdzv-backend", backend,
                 "meshrun (c10d is a synonym) or static; default: meshrun with --rdzv_endpoint, else static "
                 "(torchrun's default) at --master_addr:--master_port")
      ->envname("PET_RDZV_BACKEND")->group(g_rdzv);
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", endpoint,
                 "host:port of the rendezvous server ([v6]:port for IPv6; default port 29400)")
      ->envname("PET_RDZV_ENDPOINT")->group(g_rdzv);
  app.add_option("--rdzv_id,--rdzv-id", run_id, "Run id shared by every node of the job")
      ->envname("PET_RDZV_ID")->group(g_rdzv)->default_str("none");
  app.add_option("--rdzv_conf,--rdzv-conf", rdzv_conf,
                 "key=value,... : join_timeout, last_call_timeout, read_timeout, exit_barrier_timeout, is_host, ...")
      ->envname("PET_RDZV_CONF")->group(g_rdzv);
  app.add_flag("--standalone", standalone, "One node: an embedded server on a free loopback port")
      ->envname("PET_STANDALONE")->group(g_rdzv);
  app.add_option("--local_addr,--local-addr", local_addr,
                 "Address other nodes use to reach this one (MASTER_ADDR when node rank 0)")
      ->envname("PET_LOCAL_ADDR")->group(g_rdzv);

  app.add_flag("-m,--module", module, "Run prog as a Python module (python -u -m prog)")
      ->envname("PET_MODULE")->group(g_workers);
  app.add_flag("--no_python,--no-python", no_python, "Run prog directly, even a .py file")
      ->envname("PET_NO_PYTHON")->group(g_workers);
  app.add_option("--log_dir,--log-dir", log_dir,
                 "Keep every worker's stdout/stderr/error file per attempt under this folder")
      ->envname("PET_LOG_DIR")->group(g_workers);
  app.add_option("-r,--redirects", redirects,
                 "Streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:1,1:2")
      ->envname("PET_REDIRECTS")->group(g_workers)->default_str("0");
  app.add_option("-t,--tee", tee, "Streams to files and the console (same values as --redirects)")
      ->envname("PET_TEE")->group(g_workers)->default_str("0");
  app.add_option("--local_ranks_filter,--local-ranks-filter", local_ranks_filter,
                 "Only these local ranks (e.g. 0,1) reach the console; files keep everything")
      ->envname("PET_LOCAL_RANKS_FILTER")->group(g_workers);

  app.add_flag("--run_path,--run-path", run_path,
               "Run prog as a Python script ($PYTHON_EXEC -u prog), whatever its name; wins over --no_python")
      ->envname("PET_RUN_PATH")->group(g_workers);
  app.add_option("--log_line_prefix_template,--log-line-prefix-template", prefix_template,
                 "Console prefix of worker lines: ${role_name}, ${rank}, ${local_rank} (default [n<node>:r<rank>] )")
      ->envname(std::string(env::kLogLinePrefixTemplate.name))->group(g_workers);
  app.add_option("--duplicate_stdout_filters,--duplicate-stdout-filters", dup_stdout,
                 "Comma list of substrings (,, for a comma): matching stdout lines also go to attempt_<round>/filtered_stdout.log")
      ->envname("PET_DUPLICATE_STDOUT_FILTERS")->group(g_workers);
  app.add_option("--duplicate_stderr_filters,--duplicate-stderr-filters", dup_stderr,
                 "The same for stderr (filtered_stderr.log)")
      ->envname("PET_DUPLICATE_STDERR_FILTERS")->group(g_workers);
  app.add_flag("--virtual_local_rank,--virtual-local-rank", virtual_local_rank,
               "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES its one device")
      ->envname("PET_VIRTUAL_LOCAL_RANK")->group(g_workers);
  app.add_option("--numa_binding,--numa-binding", numa_binding,
                 "Bind local rank i to the CPUs and memory near GPU i: node, socket, exclusive or core-complex")
      ->envname("PET_NUMA_BINDING")->group(g_workers);

  app.add_option("--max_restarts,--max-restarts", max_restarts,
                 "Job-wide restarts allowed after worker failures")
      ->envname("PET_MAX_RESTARTS")->group(g_fault)->default_str("0");
  app.add_option("--replica_groups,--replica-groups", replica_groups,
                 "Split the job into R replica groups, each its own restart scope (run '<rdzv_id>-group-<g>' of "
                 "--nnodes / R nodes), sharing one torchft lighthouse")
      ->envname("PET_REPLICA_GROUPS")->group(g_fault);
  app.add_option("--min_replica_groups,--min-replica-groups", min_replica_groups,
                 "With --replica_groups: the job fails when fewer than M groups are alive (not failed), and "
                 "succeeds when at least M groups finished")
      ->envname("PET_MIN_REPLICA_GROUPS")->group(g_fault)->default_str("1");
  app.add_option("--shutdown_timeout,--shutdown-timeout", shutdown_timeout,
                 "Seconds between SIGTERM and SIGKILL when stopping workers (default 30)")
      ->envname("PET_SHUTDOWN_TIMEOUT")->group(g_fault);
  app.add_option("--signals_to_handle,--signals-to-handle", signals,
                 "Signals passed to each worker's main process (default SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2)")
      ->envname("PET_SIGNALS_TO_HANDLE")->group(g_fault);
  app.add_option("--permanent_failure_exit_code,--permanent-failure-exit-code", permanent_code,
                 "A worker exiting with this code fails the job at once, without restarts (1..255; 0: none)")
      ->envname("PET_PERMANENT_FAILURE_EXIT_CODE")->group(g_fault)->default_str("78");
  app.add_flag("--keep_orphans,--keep-orphans", keep_orphans,
               "At the end of the job, leave running what the workers left behind (default: stop it)")
      ->envname("PET_KEEP_ORPHANS")->group(g_fault);

  app.add_option("--master_addr,--master-addr", master_addr, "Node rank 0's address (static backend)")
      ->envname("PET_MASTER_ADDR")->group(g_static)->default_str("127.0.0.1");
  CLI::Option* master_port_opt =
      app.add_option("--master_port,--master-port", master_port, "Port of the server on node rank 0 (static)")
          ->envname("PET_MASTER_PORT")->group(g_static)->default_str("29500");

  CLI::Option* monitor_interval_opt = app.add_option("--monitor_interval,--monitor-interval", monitor_interval,
                 "Ignored: meshrun is told of worker exits at once")
      ->envname("PET_MONITOR_INTERVAL")->group(g_compat);
  app.add_option("--start_method,--start-method", start_method, "Ignored: workers are always exec'ed")
      ->envname("PET_START_METHOD")->group(g_compat);
  app.add_option("--logs_specs,--logs-specs", logs_specs, "Ignored: meshrun's log layout is fixed (see --log_dir)")
      ->envname("PET_LOGS_SPECS")->group(g_compat);
  app.add_option("--event_log_handler,--event-log-handler", event_log_handler,
                 "Ignored: meshrun logs its events through MESHRUN_LOG_LEVEL")
      ->envname("PET_EVENT_LOG_HANDLER")->group(g_compat);

  app.add_flag("--help-env,--help_env", help_env, "List every environment variable meshrun reads or sets")
      ->group("Help");

  // "--flag=" with nothing after '=' would make CLI11 take the next argument
  // (the program) as the value: refuse it before parsing.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--" || !absl::StartsWith(arg, "-")) break;
    if (absl::StartsWith(arg, "--") && absl::EndsWith(arg, "=")) {
      out.exit_code = UsageError(absl::StrCat(arg, ": empty value; give a value or leave the flag out"));
      return out;
    }
  }
  if (std::optional<int> done = ParseCli(app, argc, argv, "meshrun")) {
    out.exit_code = *done;
    return out;
  }
  if (help_env) {
    PrintEnvTable();
    out.exit_code = 0;
    return out;
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest[0] == "--") rest.erase(rest.begin());
  if (rest.empty()) {
    out.exit_code = UsageError("no program given: usage: meshrun [flags] prog [args...] (see meshrun --help)");
    return out;
  }
  if (absl::StartsWith(rest[0], "-")) {
    out.exit_code =
        UsageError(absl::StrCat("unknown flag '", rest[0], "'", DidYouMeanFlag(app, rest[0]), " (see meshrun --help)"));
    return out;
  }

  LaunchConfig cfg;
  agent::AgentOptions& a = cfg.agent;
  auto nn = ParseNnodes(nnodes);
  if (!nn.ok()) return {std::nullopt, UsageError(std::string(nn.status().message()))};
  a.min_nodes = nn->first;
  a.max_nodes = nn->second;
  auto np = ResolveNprocPerNode(nproc);
  if (!np.ok()) return {std::nullopt, UsageError(std::string(np.status().message()))};
  a.nproc = *np;
  if (max_restarts < 0) {
    return {std::nullopt, UsageError(absl::StrCat("--max_restarts=", max_restarts, ": must be >= 0"))};
  }
  a.max_restarts = max_restarts;
  a.role = role;
  a.local_addr = local_addr;
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--redirects", redirects}, {"--tee", tee}}) {
    auto std_masks = agent::ParseStd(value, a.nproc, flag);
    if (!std_masks.ok()) return {std::nullopt, UsageError(std::string(std_masks.status().message()))};
  }
  if (auto f = agent::ParseLocalRanksFilter(local_ranks_filter, a.nproc); !f.ok()) {
    return {std::nullopt, UsageError(std::string(f.status().message()))};
  }
  a.log_dir = log_dir;
  a.redirects = redirects;
  a.tee = tee;
  a.local_ranks_filter = local_ranks_filter;
  a.node_rank = node_rank;
  if (module && no_python) {
    return {std::nullopt, UsageError("--module and --no_python cannot be used together")};
  }

  if (shutdown_timeout.empty()) {
    shutdown_timeout = env::Get(env::kShutdownTimeoutEnv).value_or("30");
  }
  absl::StatusOr<absl::Duration> grace = ParseSeconds("--shutdown_timeout", shutdown_timeout);
  if (!grace.ok()) return {std::nullopt, UsageError(std::string(grace.status().message()))};
  a.shutdown_timeout = *grace;
  a.keep_orphans = keep_orphans;
  if (permanent_code < 0 || permanent_code > 255) {
    return {std::nullopt, UsageError(absl::StrCat("--permanent_failure_exit_code=", permanent_code,
                                                  ": must be an exit code 1..255, or 0 for none"))};
  }
  a.permanent_failure_exit_code = permanent_code;
  if (!prefix_template.empty()) {
    if (auto p = agent::ExpandLogLinePrefix(prefix_template, role, 0, 0); !p.ok()) {
      return {std::nullopt, UsageError(std::string(p.status().message()))};
    }
  }
  a.log_line_prefix_template = prefix_template;
  a.duplicate_stdout_filters = agent::ParseDuplicateFilters(dup_stdout);
  a.duplicate_stderr_filters = agent::ParseDuplicateFilters(dup_stderr);
  a.virtual_local_rank = virtual_local_rank;
  if (!numa_binding.empty()) {
    absl::StatusOr<NumaMode> mode = ParseNumaMode(numa_binding);
    if (!mode.ok()) return {std::nullopt, UsageError(std::string(mode.status().message()))};
    auto placed = PlaceOnThisMachine(*mode, a.nproc, env::Get(env::kCudaVisibleDevices));
    if (!placed.ok()) return {std::nullopt, UsageError(std::string(placed.status().message()))};
    for (const NumaPlacement& p : *placed) a.numa_bindings.push_back({p.cpus, p.mem_nodes});
  }
  if (virtual_local_rank) {
    std::optional<std::string> visible = env::Get(env::kCudaVisibleDevices);
    if (visible) {
      std::vector<std::string> list = absl::StrSplit(*visible, ',');
      if (static_cast<int>(list.size()) < a.nproc) {
        return {std::nullopt, UsageError(absl::StrCat("--virtual_local_rank: CUDA_VISIBLE_DEVICES=", *visible, " lists ",
                                                      list.size(), " devices for --nproc_per_node=", a.nproc,
                                                      "; give one device per worker"))};
      }
    }
  }

  if (!signals.empty()) {
    a.forwarded_signals.clear();
    for (absl::string_view s : absl::StrSplit(signals, ',', absl::SkipWhitespace())) {
      auto sig = agent::ParseSignal(std::string(s));
      if (!sig.ok()) {
        return {std::nullopt, UsageError(absl::StrCat("--signals_to_handle: ", sig.status().message()))};
      }
      if (*sig == SIGKILL || *sig == SIGSTOP || *sig == SIGCHLD) {
        return {std::nullopt, UsageError(absl::StrCat("--signals_to_handle: ", s,
                                                      " cannot be handled; use e.g. SIGTERM,SIGUSR1"))};
      }
      a.forwarded_signals.push_back(*sig);
    }
  }

  // torchrun's default backend is static: with neither --rdzv_backend nor
  // --rdzv_endpoint, the classic --master_addr/--master_port form (also
  // Kubeflow's PET_* variables) is a static rendezvous; one node without a
  // master port is standalone, as newest torchrun. An endpoint alone means
  // meshrun's own rendezvous there.
  bool implicit_standalone = false;
  if (backend.empty()) {
    backend = endpoint.empty() ? "static" : "meshrun";
    implicit_standalone = endpoint.empty() && a.max_nodes == 1 && master_port_opt->count() == 0;
  }
  if (backend == "c10d" || backend == "meshrun") {
    cfg.backend = Backend::kMeshrun;
  } else if (backend == "static") {
    cfg.backend = Backend::kStatic;
  } else if (backend == "etcd" || backend == "etcd-v2") {
    // torchrun's etcd backends have each agent talk to etcd; meshrun's
    // agents talk to its rendezvous servers, which keep their state in etcd.
    const std::string etcd = endpoint.empty() ? "HOST:2379" : endpoint;
    return {std::nullopt,
            UsageError(absl::StrCat("--rdzv_backend=", backend, ": meshrun's agents do not use etcd themselves; its ",
                                    "rendezvous servers keep their state there: run `meshrun server --state etcd://",
                                    etcd, "` on 2 or 3 hosts and give every node --rdzv_endpoint=<those servers' ",
                                    "host:port, comma-separated> (docs/etcd.md); allowed: meshrun, c10d (synonym), ",
                                    "static"))};
  } else {
    return {std::nullopt, UsageError(absl::StrCat("--rdzv_backend=", backend,
                                                  ": allowed: meshrun, c10d (synonym), static"))};
  }

  if (absl::Status s = ApplyRdzvConf(rdzv_conf, &cfg); !s.ok()) {
    return {std::nullopt, UsageError(std::string(s.message()))};
  }

  if (monitor_interval_opt->count() > 0 && !(monitor_interval > 0)) {
    // torchrun's WorkerSpec asserts the same.
    return {std::nullopt, UsageError(absl::StrCat("--monitor_interval=", monitor_interval,
                                                  ": must be a number of seconds > 0 (and is not needed: "
                                                  "meshrun is told of worker exits at once)"))};
  }
  if (monitor_interval != 0) cfg.notes.push_back("--monitor_interval is not needed: meshrun is told of worker exits at once");
  if (!start_method.empty()) cfg.notes.push_back("--start_method is not needed: meshrun always execs its workers");
  if (!logs_specs.empty()) {
    cfg.notes.push_back(absl::StrCat("--logs_specs=", logs_specs, " is ignored: meshrun has one log layout (see --log_dir)"));
  }
  if (!event_log_handler.empty()) {
    cfg.notes.push_back(absl::StrCat("--event_log_handler=", event_log_handler,
                                     " is ignored: meshrun's events go to its log (MESHRUN_LOG_LEVEL=info)"));
  }

  // --standalone: one node, an embedded server on a free loopback port, a
  // fresh run id (torchrun's meaning).
  if (standalone || implicit_standalone || (cfg.backend == Backend::kMeshrun && endpoint.empty() && a.max_nodes == 1)) {
    cfg.standalone = true;
    a.min_nodes = a.max_nodes = 1;
    a.last_call_timeout = absl::ZeroDuration();
    cfg.endpoint_host = "127.0.0.1";
    cfg.endpoint_port = 0;
    a.run_id = RandomRunId();
  } else {
    a.run_id = run_id;
    if (cfg.backend == Backend::kStatic) {
      if (master_port <= 0 || master_port > 65535) {
        return {std::nullopt, UsageError(absl::StrCat("--master_port=", master_port, ": must be in 1..65535"))};
      }
      if (node_rank < 0) a.node_rank = 0;
      endpoint = HostPort(master_addr, master_port);
      cfg.static_master_port = master_port;
      if (!cfg.is_host) cfg.is_host = (a.node_rank == 0);
      a.last_call_timeout = absl::ZeroDuration();
      if (a.min_nodes != a.max_nodes) {
        return {std::nullopt, UsageError(absl::StrCat("--nnodes=", nnodes,
                                                      ": the static backend needs a fixed node count"))};
      }
    }
    if (endpoint.empty()) {
      return {std::nullopt, UsageError("--rdzv_endpoint is required for a multi-node job (or use --standalone)")};
    }
    if (endpoint.find(',') != std::string::npos) {
      // Replicas of one replicated server (meshrun server --state): the
      // agents follow their leader; no meshrun hosts a server itself.
      std::vector<std::string> list;
      for (absl::string_view one : absl::StrSplit(endpoint, ',')) {
        auto ep = ParseEndpoint(std::string(one), 29400);
        if (!ep.ok()) {
          return {std::nullopt, UsageError(absl::StrCat("--rdzv_endpoint=", endpoint, ": '", one, "': ",
                                                        ep.status().message()))};
        }
        list.push_back(ep->ToString());
      }
      auto first = ParseEndpoint(list.front(), 29400);
      cfg.endpoint_host = first->host;
      cfg.endpoint_port = first->port;
      cfg.endpoint_list = absl::StrJoin(list, ",");
      cfg.is_host = false;
    } else {
      auto ep = ParseEndpoint(endpoint, 29400);
      if (!ep.ok()) return {std::nullopt, UsageError(absl::StrCat("--rdzv_endpoint: ", ep.status().message()))};
      cfg.endpoint_host = ep->host;
      cfg.endpoint_port = ep->port;
    }
  }

  // --replica_groups=R: R runs of --nnodes / R nodes each (agent/node_agent.h).
  if (replica_groups != kNoReplicaGroups) {
    const std::string flag = absl::StrCat("--replica_groups=", replica_groups);
    if (replica_groups < 1) return {std::nullopt, UsageError(absl::StrCat(flag, ": must be >= 1"))};
    if (cfg.standalone && replica_groups > 1) {
      return {std::nullopt, UsageError(absl::StrCat(flag, ": --standalone runs one node; replica groups need "
                                                    "--nnodes of at least ", replica_groups, " and --rdzv_endpoint"))};
    }
    if (cfg.backend == Backend::kStatic && !cfg.standalone) {
      return {std::nullopt, UsageError(absl::StrCat(flag, ": needs the rendezvous server (--rdzv_backend=c10d or "
                                                          "meshrun): each group is a run of it; the static backend has none"))};
    }
    if (a.min_nodes % replica_groups != 0 || a.max_nodes % replica_groups != 0) {
      return {std::nullopt, UsageError(absl::StrCat(flag, ": --nnodes=", nnodes, " must be a multiple of ",
                                                    replica_groups, " (MIN and MAX): each group has --nnodes / ",
                                                    replica_groups, " nodes"))};
    }
    a.replica_groups = replica_groups;
    a.min_nodes /= replica_groups;
    a.max_nodes /= replica_groups;
    if (min_replica_groups != kNoReplicaGroups) {
      if (min_replica_groups < 1 || min_replica_groups > replica_groups) {
        return {std::nullopt, UsageError(absl::StrCat("--min_replica_groups=", min_replica_groups, ": allowed: 1..",
                                                      replica_groups, " (--replica_groups)"))};
      }
      a.min_replica_groups = min_replica_groups;
    }
  } else if (min_replica_groups != kNoReplicaGroups) {
    return {std::nullopt, UsageError(absl::StrCat("--min_replica_groups=", min_replica_groups,
                                                  ": needs --replica_groups (the job has no replica groups)"))};
  }

  // The worker command, like torchrun (worker_command.h); a program that
  // cannot run exits 127, as a shell does.
  absl::StatusOr<std::vector<std::string>> cmd =
      WorkerCommand({rest[0], std::vector<std::string>(rest.begin() + 1, rest.end()), module, run_path, no_python});
  if (!cmd.ok()) {
    std::fprintf(stderr, "meshrun: error: %s\n", std::string(cmd.status().message()).c_str());
    return {std::nullopt, 127};
  }
  a.command = std::move(*cmd);
  // The token and the TLS files are read and checked now, so a bad one
  // fails at start naming the file.
  absl::StatusOr<ClientAuth> auth = LoadClientAuth(cfg.token_file, cfg.tls_files);
  if (!auth.ok()) return {std::nullopt, UsageError(std::string(auth.status().message()))};
  a.auth = std::move(*auth);
  out.config = std::move(cfg);
  return out;
}

}  // namespace meshrun::launcher
