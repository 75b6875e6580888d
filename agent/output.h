// Worker output: every worker's stdout and stderr come through pipes to one
// pump thread, which writes whole lines to the console (prefixed with node
// and global rank; an unfinished line once idle, kShowUnfinishedAfter)
// and/or to log files, and keeps each worker's last stderr lines for the
// failure summary. No file tailing, no polling sleep.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace meshrun::agent {

// Where one stream of one worker goes.
struct StreamRoute {
  bool console = true;  // To meshrun's own stdout/stderr, prefixed.
  std::string file;     // Appended to this file when non-empty.
  // torchrun's --duplicate-std{out,err}-filters: a line containing any of
  // these substrings is also appended, prefixed, to `duplicate_file`
  // (shared by the attempt's workers; each line is one append).
  std::vector<std::string> duplicate_filters;
  std::string duplicate_file;
};

struct WorkerRoutes {
  std::string prefix;  // E.g. "[n0:r3] ".
  StreamRoute out, err;
};

// torchrun's Std values for --redirects/--tee: "0" none, "1" stdout,
// "2" stderr, "3" both, or per local rank "0:1,1:2". Returns one mask per
// local rank (bit 1 stdout, bit 2 stderr). INVALID_ARGUMENT naming the value.
absl::StatusOr<std::vector<int>> ParseStd(const std::string& text, int nproc, const std::string& flag);

// torchrun's log line prefix template (--log-line-prefix-template or
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE): "${role_name}", "${rank}" (global)
// and "${local_rank}" are replaced; the result is the whole prefix, nothing
// added (torchrun's default is "[${role_name}${local_rank}]:"). Any other
// "${...}" is INVALID_ARGUMENT naming it and the three allowed. Pure.
absl::StatusOr<std::string> ExpandLogLinePrefix(const std::string& tmpl, const std::string& role_name, int rank,
                                                int local_rank);

// torchrun's --duplicate-std*-filters value: a comma list of substrings,
// ",," standing for a literal comma; empty items are dropped. Pure.
std::vector<std::string> ParseDuplicateFilters(const std::string& text);

// Parses --local_ranks_filter "0,2" into a mask per local rank (empty text:
// all). INVALID_ARGUMENT naming the item for one that is not an integer or
// is outside 0..nproc-1.
absl::StatusOr<std::vector<bool>> ParseLocalRanksFilter(const std::string& text, int nproc);

class OutputPump {
 public:
  static constexpr size_t kTailLines = 20;
  // A worker's unfinished console line (a prompt, a progress bar redrawn
  // with '\r') is shown once its stream has written nothing more for
  // this long; whole lines are written at once, never split.
  static constexpr absl::Duration kShowUnfinishedAfter = absl::Milliseconds(100);

  OutputPump();
  // Drains what is left (bounded) and stops the thread.
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  absl::Status Start();

  // Creates the pipes of worker `id` and returns their write ends
  // (stdout, stderr) for the child; the caller closes them after fork.
  // Files are opened (created, appended) here: an error names the file.
  absl::StatusOr<std::pair<int, int>> Add(int id, const WorkerRoutes& routes);

  // Waits until worker `id`'s pipes reached end of file (every writer,
  // grandchildren included, closed them) or `deadline`, then returns its
  // last stderr lines (up to kTailLines), oldest first.
  std::string StderrTail(int id, absl::Time deadline);

  // Forgets every worker after draining them until `deadline`; partial
  // last lines are written out. Call between attempts.
  void Clear(absl::Time deadline);

 private:
  struct Stream {
    int fd = -1;
    bool is_err = false;
    int file_fd = -1;
    bool console = true;
    std::string partial;
    int dup_fd = -1;
    std::vector<std::string> dup_filters;
    // The console's view of an unfinished line (a progress bar, a prompt):
    // `partial`'s first `shown` bytes are on the console already; the rest
    // shows once the stream has been idle for kShowUnfinishedAfter.
    size_t shown = 0;
    absl::Time unshown_since = absl::InfiniteFuture();
    // Another stream's output ended the console line after `shown`: the
    // rest of this line starts a new one, with its prefix.
    bool cut = false;
  };
  struct Worker {
    std::string prefix;
    Stream out, err;
    std::deque<std::string> tail;
  };

  void Loop();
  void Wake();
  // To the console: the rest of `s`'s line (from `shown`), then `end`
  // ("\n", or "" for an unfinished line); each '\r' in it is followed
  // by the prefix again, so that a progress bar redrawn with '\r' keeps it.
  void ConsoleWrite(Worker& w, Stream& s, absl::string_view line, absl::string_view end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shows the unfinished lines idle for kShowUnfinishedAfter by `now`;
  // returns the next time one will be due (InfiniteFuture: none).
  absl::Time ShowUnfinished(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads what is available on `s`; returns false at end of file.
  bool Drain(Worker& w, Stream& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLine(Worker& w, Stream& s, const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseStream(Worker& w, Stream& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Open(const Worker& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return w.out.fd >= 0 || w.err.fd >= 0; }

  absl::Mutex mu_;
  std::map<int, std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // The stream whose unfinished line the console's stdout (0) and stderr
  // (1) end with now; null when they end with a whole line.
  Stream* unfinished_[2] ABSL_GUARDED_BY(mu_) = {nullptr, nullptr};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace meshrun::agent
