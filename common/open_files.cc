#include "common/open_files.h"

#include "common/logging.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checks.h"

namespace meshrun {
namespace {

// Read in a forked child: a lock-free atomic, never a lock.
std::atomic<uint64_t> g_soft_at_start{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

constexpr uint64_t kMargin = 64;
constexpr uint64_t kPerWorker = 4;

uint64_t FromRlim(rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); }

// The kernel's ceiling for RLIMIT_NOFILE (fs.nr_open), 1048576 when unreadable.
uint64_t NrOpen() {
  std::ifstream f("/proc/sys/fs/nr_open");
  uint64_t v = 0;
  if (f >> v && v > 0) return v;
  return 1048576;
}

std::string Figure(uint64_t v) { return v == UINT64_MAX ? "unlimited" : absl::StrCat(v); }

}  // namespace

absl::StatusOr<OpenFilesLimit> RaiseOpenFilesLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return PosixError(errno, "getrlimit", "RLIMIT_NOFILE");
  OpenFilesLimit out;
  out.soft_at_start = FromRlim(rl.rlim_cur);
  out.hard = FromRlim(rl.rlim_max);
  const rlim_t target = rl.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(NrOpen()) : rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < target) {
    rlimit raised = rl;
    raised.rlim_cur = target;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return PosixError(errno, "setrlimit", absl::StrCat("RLIMIT_NOFILE soft ", rl.rlim_cur, " -> ", target));
    }
    uint64_t expected = 0;
    g_soft_at_start.compare_exchange_strong(expected, out.soft_at_start);
    rl = raised;
  }
  const uint64_t first = g_soft_at_start.load();
  if (first != 0) out.soft_at_start = first;
  out.soft = FromRlim(rl.rlim_cur);
  return out;
}

std::optional<OpenFilesLimit> RaiseOpenFilesLimitOrWarn(const char* logger) {
  absl::StatusOr<OpenFilesLimit> limit = RaiseOpenFilesLimit();
  if (!limit.ok()) {
    Logger(logger)->warn("cannot raise the open files limit: {}", std::string(limit.status().message()));
    return std::nullopt;
  }
  Logger(logger)->debug("open files limit: soft {} (was {}), hard {}", limit->soft, limit->soft_at_start,
                        limit->hard);
  return *limit;
}

absl::StatusOr<OpenFilesLimit> CurrentOpenFilesLimit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return PosixError(errno, "getrlimit", "RLIMIT_NOFILE");
  OpenFilesLimit out;
  out.soft = FromRlim(rl.rlim_cur);
  out.hard = FromRlim(rl.rlim_max);
  const uint64_t first = g_soft_at_start.load();
  out.soft_at_start = first != 0 ? first : out.soft;
  return out;
}

uint64_t OpenFilesSoftLimitAtStart() { return g_soft_at_start.load(std::memory_order_relaxed); }

void RestoreOpenFilesLimitInChild() {
  const uint64_t soft = g_soft_at_start.load(std::memory_order_relaxed);
  if (soft == 0) return;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rl.rlim_cur = soft == UINT64_MAX ? RLIM_INFINITY : static_cast<rlim_t>(soft);
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

int64_t OpenDescriptorCount() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // The directory's own descriptor.
}

int64_t FreeDescriptors(int64_t up_to) {
  std::vector<int> taken;
  taken.reserve(static_cast<size_t>(std::max<int64_t>(up_to, 0)));
  while (static_cast<int64_t>(taken.size()) < up_to) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    taken.push_back(fd);
  }
  for (int fd : taken) ::close(fd);
  return static_cast<int64_t>(taken.size());
}

uint64_t DescriptorsNeeded(int64_t agents, int64_t workers) {
  return static_cast<uint64_t>(agents > 0 ? agents : 0) + kPerWorker * static_cast<uint64_t>(workers > 0 ? workers : 0) +
         kMargin;
}

std::string OpenFilesWarning(const OpenFilesLimit& limit, uint64_t needed, absl::string_view need_for) {
  if (limit.soft >= needed) return "";
  return absl::StrCat("the open files limit (ulimit -n) is ", Figure(limit.soft), " (hard limit ", Figure(limit.hard),
                      ") but ", need_for, " needs about ", needed,
                      " descriptors (one per agent connection, plus margin): past the limit new connections wait "
                      "until descriptors are free; raise the hard limit (ulimit -Hn; LimitNOFILE= in a systemd unit; "
                      "nofile in /etc/security/limits.conf; docker --ulimit nofile=)");
}

}  // namespace meshrun
