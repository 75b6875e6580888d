#include "rendezvous/lighthouse/lighthouse_registry.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace meshrun::rendezvous::lighthouse {

LighthouseRegistry::LighthouseRegistry(RegistryOptions options) : options_(std::move(options)) {
  ticker_ = std::thread([this] { TickLoop(); });
}

LighthouseRegistry::~LighthouseRegistry() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  ticker_.join();
  CloseAll(absl::UnavailableError("the rendezvous server stops"));
}

absl::StatusOr<std::shared_ptr<Lighthouse>> LighthouseRegistry::Get(const std::string& run_id,
                                                                    const LighthouseSettings& settings) {
  const bool exists = !options_.run_exists || options_.run_exists(run_id);
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("the rendezvous server stops");
  auto it = lighthouses_.find(run_id);
  if (it != lighthouses_.end()) return it->second.lighthouse;
  if (!exists) return absl::NotFoundError(absl::StrCat("no run '", run_id, "' on this rendezvous server"));
  if (static_cast<int64_t>(lighthouses_.size()) >= options_.max_lighthouses) {
    return absl::ResourceExhaustedError(absl::StrCat(lighthouses_.size(),
                                                     " runs have a lighthouse already (max_lighthouses)"));
  }
  auto lh = std::make_shared<Lighthouse>(settings, options_.max_replica_groups, quorum_id_floor_,
                                         options_.max_quorum_bytes);
  lighthouses_.emplace(run_id, Entry{lh, absl::Now() + settings.quorum_tick});
  return lh;
}

void LighthouseRegistry::CloseAll(const absl::Status& why) {
  absl::flat_hash_map<std::string, Entry> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(lighthouses_);
  }
  int64_t highest = 0;
  for (auto& [id, e] : all) {
    e.lighthouse->Close(why);
    highest = std::max(highest, e.lighthouse->quorum_id());
  }
  RaiseQuorumIdFloor(highest);
}

void LighthouseRegistry::RaiseQuorumIdFloor(int64_t floor) {
  absl::MutexLock lock(&mu_);
  quorum_id_floor_ = std::max(quorum_id_floor_, floor);
}

int64_t LighthouseRegistry::size() {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(lighthouses_.size());
}

std::vector<std::pair<std::string, Lighthouse::View>> LighthouseRegistry::Views(const std::string& run_id) {
  std::vector<std::pair<std::string, std::shared_ptr<Lighthouse>>> all;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : lighthouses_) {
      if (run_id.empty() || id == run_id) all.emplace_back(id, e.lighthouse);
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::string, Lighthouse::View>> views;
  for (const auto& [id, l] : all) views.emplace_back(id, l->view());
  return views;
}

void LighthouseRegistry::TickLoop() {
  // At most this long between two looks (a lighthouse made meanwhile
  // ticks at its first look).
  const absl::Duration kMaxSleep = absl::Milliseconds(100);
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    std::vector<std::shared_ptr<Lighthouse>> due;
    std::vector<std::string> gone;
    absl::Time next = now + kMaxSleep;
    for (auto& [id, e] : lighthouses_) {
      if (e.next_tick <= now) {
        due.push_back(e.lighthouse);
        e.next_tick = now + e.lighthouse->settings().quorum_tick;
        if (e.lighthouse->waiting() == 0) gone.push_back(id);
      }
      next = std::min(next, e.next_tick);
    }
    mu_.Unlock();
    for (const auto& lh : due) lh->Tick(now);
    // Runs that ended: their lighthouse goes (no call waits on it).
    std::vector<std::string> drop;
    if (options_.run_exists) {
      for (const std::string& id : gone) {
        if (!options_.run_exists(id)) drop.push_back(id);
      }
    }
    mu_.Lock();
    for (const std::string& id : drop) {
      auto it = lighthouses_.find(id);
      if (it == lighthouses_.end() || it->second.lighthouse->waiting() != 0) continue;
      // A run id used again later gets a lighthouse numbering above this one.
      quorum_id_floor_ = std::max(quorum_id_floor_, it->second.lighthouse->quorum_id());
      lighthouses_.erase(it);
    }
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
  }
}

}  // namespace meshrun::rendezvous::lighthouse
