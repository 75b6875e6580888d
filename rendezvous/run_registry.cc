// RunRegistry: every run of a server by run id, within max_runs.
#include "rendezvous/run.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace meshrun::rendezvous {

RunRegistry::RunRegistry(DeadlineTimer* timer, const ServerLimits& limits)
    : timer_(timer), limits_(limits), server_bytes_(std::make_shared<std::atomic<int64_t>>(0)) {}

RunRegistry::~RunRegistry() { CloseAll("the rendezvous server is shutting down"); }

absl::Status RunRegistry::MakeRoomLocked(const std::string& run_id, std::shared_ptr<Run>* evicted) {
  if (absl::Status s = CheckLength("run id", run_id, limits_.max_run_id_bytes, "max_run_id_bytes"); !s.ok()) return s;
  if (static_cast<int64_t>(runs_.size()) < limits_.max_runs) return absl::OkStatus();
  // Full: an ended run makes room (the oldest id first would need an
  // index; any ended one will do, its agents are gone or going).
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    if (it->second && it->second->terminal()) {
      *evicted = std::move(it->second);
      runs_.erase(it);
      return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat("the server holds ", runs_.size(),
                                                   " live runs: max_runs=", limits_.max_runs,
                                                   "; refused new run '", run_id.substr(0, 64), "'"));
}

absl::StatusOr<std::shared_ptr<Run>> RunRegistry::ForJoin(const std::string& run_id, int64_t last_round) {
  std::shared_ptr<Run> old;
  std::shared_ptr<Run> evicted;
  std::shared_ptr<Run> fresh;
  {
    absl::MutexLock lock(&mu_);
    auto it = runs_.find(run_id);
    if (it != runs_.end() && !(it->second->terminal() && last_round < 0)) return it->second;
    if (it == runs_.end()) {
      if (absl::Status s = MakeRoomLocked(run_id, &evicted); !s.ok()) return s;
    }
    auto& slot = runs_[run_id];
    old = std::move(slot);
    slot = std::make_shared<Run>(run_id, timer_, limits_, server_bytes_);
    fresh = slot;
  }
  if (evicted) evicted->Close(absl::StrCat("run '", evicted->run_id(), "' ended and was removed"));
  if (old) old->Close(absl::StrCat("run '", run_id, "' was restarted by a new job with the same id"));
  return fresh;
}

std::shared_ptr<Run> RunRegistry::Find(const std::string& run_id) const {
  absl::MutexLock lock(&mu_);
  auto it = runs_.find(run_id);
  return it == runs_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<Run>> RunRegistry::FindOrCreate(const std::string& run_id) {
  std::shared_ptr<Run> evicted;
  std::shared_ptr<Run> run;
  {
    absl::MutexLock lock(&mu_);
    auto it = runs_.find(run_id);
    if (it != runs_.end()) return it->second;
    if (absl::Status s = MakeRoomLocked(run_id, &evicted); !s.ok()) return s;
    run = runs_[run_id] = std::make_shared<Run>(run_id, timer_, limits_, server_bytes_);
  }
  if (evicted) evicted->Close(absl::StrCat("run '", evicted->run_id(), "' ended and was removed"));
  return run;
}

std::vector<RunStatus> RunRegistry::Status() const {
  std::vector<std::shared_ptr<Run>> runs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, run] : runs_) runs.push_back(run);
  }
  std::vector<RunStatus> out;
  for (const auto& r : runs) out.push_back(r->Status());
  std::sort(out.begin(), out.end(), [](const RunStatus& a, const RunStatus& b) { return a.run_id < b.run_id; });
  return out;
}

void RunRegistry::CloseAll(const std::string& why) {
  std::vector<std::shared_ptr<Run>> runs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, run] : runs_) runs.push_back(run);
  }
  for (auto& r : runs) r->Close(why);
}

}  // namespace meshrun::rendezvous
