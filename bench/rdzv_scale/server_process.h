// bench/rdzv_scale: the server under test, a real `meshrun server` process,
// and what the benchmark reads about it: CPU time, memory and descriptors
// from /proc/<pid>, and its Prometheus metrics (--metrics_port).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace meshrun::bench {

// One look at the server process.
struct ProcSample {
  double cpu_s = 0;      // utime + stime, seconds (/proc/<pid>/stat).
  int64_t rss_kib = 0;   // VmRSS (/proc/<pid>/status).
  int64_t hwm_kib = 0;   // VmHWM: the peak RSS so far.
  int fds = 0;           // Open descriptors.
  int sockets = -1;      // Of them sockets (-1 when not counted).
};

class ServerProcess {
 public:
  // Starts `meshrun_binary server --host 127.0.0.1 --port 0 --metrics_port 0
  // --shutdown_grace 1` plus `extra_args`, stderr to `log_path`, and waits up
  // to `timeout` for it to print both ports. The process inherits this
  // process's RLIMIT_NOFILE. UNAVAILABLE with the log's tail on failure.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::string& meshrun_binary,
                                                              const std::vector<std::string>& extra_args,
                                                              const std::string& log_path, absl::Duration timeout);
  // Stops it: SIGTERM, then SIGKILL after 10 s.
  ~ServerProcess();

  pid_t pid() const { return pid_; }
  std::string endpoint() const;  // "127.0.0.1:PORT"
  int metrics_port() const { return metrics_port_; }

  // Reads /proc/<pid>; `count_sockets` also reads every descriptor's link
  // (costly with 10,000 open: only between phases). Error when it is gone.
  absl::StatusOr<ProcSample> Sample(bool count_sockets) const;
  // GET /metrics over HTTP/1.0, bounded by `timeout`; the body.
  absl::StatusOr<std::string> Metrics(absl::Duration timeout) const;
  // Whether its standard output has printed `needle` (a replica's
  // "meshrun server: leading"), reading what it printed for at most
  // `timeout` (0: only what is there now).
  bool Printed(const std::string& needle, absl::Duration timeout);
  // SIGKILLs it (its process group) and reaps it: a host dying.
  void Kill();

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  int stdout_fd_ = -1;
  std::string stdout_text_;  // What it printed so far (read by Start and Printed).
  std::string log_path_;
};

// Sums the samples of metric `name` in Prometheus text `text` by the value
// of label `label` ("" sums them all under the key ""). Lines of other
// metrics, comments and malformed lines are skipped. Pure.
std::map<std::string, double> SumByLabel(const std::string& text, const std::string& name, const std::string& label);

}  // namespace meshrun::bench
