#include "rendezvous/policy/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace meshrun::rendezvous {
namespace {

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20)); }

// The cgroup v2 memory limit of this process, or -1 when there is none.
int64_t CgroupMemoryMax() {
  std::ifstream cg("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(cg, line)) {
    if (absl::StartsWith(line, "0::")) path = line.substr(3);
  }
  if (path.empty()) return -1;
  std::ifstream f(absl::StrCat("/sys/fs/cgroup", path, "/memory.max"));
  std::string v;
  int64_t n = 0;
  if (!(f >> v) || !absl::SimpleAtoi(v, &n) || n <= 0) return -1;  // "max": none.
  return n;
}

}  // namespace

absl::string_view HeldKindName(HeldKind kind) {
  switch (kind) {
    case HeldKind::kStoreKey: return "store keys";
    case HeldKind::kRun: return "runs";
    case HeldKind::kNode: return "nodes";
    case HeldKind::kEventStream: return "event streams";
    case HeldKind::kQueuedEvent: return "queued events";
    case HeldKind::kParkedWait: return "parked store reads";
    case HeldKind::kHealthStream: return "health Watch streams";
    case HeldKind::kParkedJoin: return "parked joins";
    case HeldKind::kCount: break;
  }
  return "?";
}

int64_t DefaultServerMemory() {
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page = sysconf(_SC_PAGESIZE);
  int64_t machine = pages > 0 && page > 0 ? pages * page : (int64_t{8} << 30);
  if (int64_t cg = CgroupMemoryMax(); cg > 0) machine = std::min(machine, cg);
  return std::clamp<int64_t>(machine / 4, int64_t{64} << 20, int64_t{2} << 30);
}

MemoryBudget::MemoryBudget(int64_t limit, int64_t member_reserve)
    : limit_(std::max<int64_t>(limit, 1)), reserve_(std::clamp<int64_t>(member_reserve, 0, limit_)) {}

absl::Status MemoryBudget::Charge(HeldKind kind, int64_t count, int64_t bytes, Claimant who, absl::string_view what) {
  const int64_t cap = who == Claimant::kMember ? limit_ : limit_ - reserve_;
  int64_t now = held_.load(std::memory_order_relaxed);
  do {
    if (bytes > 0 && now + bytes > cap) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server's memory budget is spent: ", Describe(), who == Claimant::kOther
              ? absl::StrCat("; ", MiB(reserve_), " of it is kept for members of running jobs")
              : "",
          "; refused ", what, " (", bytes, " bytes)"));
    }
  } while (!held_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  bytes_[Index(kind)].fetch_add(bytes, std::memory_order_relaxed);
  counts_[Index(kind)].fetch_add(count, std::memory_order_relaxed);
  return absl::OkStatus();
}

void MemoryBudget::ForceCharge(HeldKind kind, int64_t count, int64_t bytes) {
  held_.fetch_add(bytes, std::memory_order_relaxed);
  bytes_[Index(kind)].fetch_add(bytes, std::memory_order_relaxed);
  counts_[Index(kind)].fetch_add(count, std::memory_order_relaxed);
}

void MemoryBudget::Release(HeldKind kind, int64_t count, int64_t bytes) {
  held_.fetch_sub(bytes, std::memory_order_relaxed);
  bytes_[Index(kind)].fetch_sub(bytes, std::memory_order_relaxed);
  counts_[Index(kind)].fetch_sub(count, std::memory_order_relaxed);
  if (!hook_ || bytes <= 0) return;
  const int64_t since = released_since_hook_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (since >= release_batch_ && released_since_hook_.exchange(0, std::memory_order_relaxed) > 0) hook_();
}

std::string MemoryBudget::Describe() const {
  std::vector<std::pair<int64_t, std::string>> parts;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const int64_t b = bytes_[i].load(std::memory_order_relaxed);
    if (b <= 0) continue;
    parts.emplace_back(b, absl::StrCat(HeldKindName(static_cast<HeldKind>(i)), " ", MiB(b), " in ",
                                       counts_[i].load(std::memory_order_relaxed)));
  }
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> names;
  for (auto& p : parts) names.push_back(std::move(p.second));
  return absl::StrCat("max_server_memory=", MiB(limit_), ", ", MiB(held()), " held",
                      names.empty() ? "" : absl::StrCat(" (", absl::StrJoin(names, "; "), ")"));
}

void MemoryBudget::SetReleaseHook(std::function<void()> fn, int64_t release_batch) {
  hook_ = std::move(fn);
  release_batch_ = std::max<int64_t>(release_batch, 1);
}

HeldCharge& HeldCharge::operator=(HeldCharge&& o) noexcept {
  if (this != &o) {
    Reset();
    budget_ = std::exchange(o.budget_, nullptr);
    kind_ = o.kind_;
    count_ = o.count_;
    bytes_ = o.bytes_;
  }
  return *this;
}

void HeldCharge::Reset() {
  if (budget_ != nullptr) budget_->Release(kind_, count_, bytes_);
  budget_ = nullptr;
}

}  // namespace meshrun::rendezvous
