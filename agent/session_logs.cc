#include "agent/session.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace meshrun::agent {

// The run's log folder: --log_dir/<run id>_<start time>_<pid> (the pid
// keeps nodes sharing one folder, or one host, apart), else a temporary
// folder that holds the error files (and redirected streams).
absl::Status Session::PrepareLogDir() {
  std::error_code ec;
  std::filesystem::path base = o_.log_dir.empty()
                                   ? std::filesystem::temp_directory_path(ec) / absl::StrCat("meshrun-", ::getuid())
                                   : std::filesystem::path(o_.log_dir);
  run_dir_ = base / absl::StrCat(o_.run_id, "_", absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()),
                                 "_", node_.pid);
  // Another run on this host may remove the empty per-user folder between
  // the two levels' creation: tried again (bounded).
  for (int attempt = 0; attempt < 3; ++attempt) {
    ec.clear();
    if (std::filesystem::create_directories(run_dir_, ec) || std::filesystem::is_directory(run_dir_)) break;
  }
  if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create ", run_dir_.string(), ": ", ec.message()));
  temp_run_dir_ = o_.log_dir.empty();
  auto redirects = ParseStd(o_.redirects, o_.nproc, "--redirects");
  if (!redirects.ok()) return redirects.status();
  auto tee = ParseStd(o_.tee, o_.nproc, "--tee");
  if (!tee.ok()) return tee.status();
  auto filter = ParseLocalRanksFilter(o_.local_ranks_filter, o_.nproc);
  if (!filter.ok()) return filter.status();
  redirects_ = *redirects;
  tee_ = *tee;
  console_ranks_ = *filter;
  bool any_file = !o_.log_dir.empty();
  for (int lr = 0; lr < o_.nproc; ++lr) any_file = any_file || redirects_[lr] != 0 || tee_[lr] != 0;
  if (any_file && o_.log_dir.empty()) {
    std::fprintf(stderr, "meshrun: worker logs go to %s\n", run_dir_.c_str());
    keep_run_dir_ = true;
  }
  return pump_.Start();
}

// Where worker `lr` (global rank `rank`) writes, for this attempt.
WorkerRoutes Session::Routes(int lr, int rank, const std::filesystem::path& attempt) const {
  WorkerRoutes r;
  if (o_.log_line_prefix_template.empty()) {
    r.prefix = absl::StrCat("[n", round_.node_rank, ":r", rank, "] ");
  } else {
    // Checked by the launcher: a bad macro never gets here.
    r.prefix = ExpandLogLinePrefix(o_.log_line_prefix_template, o_.role, rank, lr).value_or("");
  }
  const bool all_files = !o_.log_dir.empty();
  auto route = [&](int bit) {
    StreamRoute s;
    const bool redirected = (redirects_[lr] & bit) != 0;
    const bool teed = (tee_[lr] & bit) != 0;
    s.console = console_ranks_[lr] && !redirected;
    if (all_files || redirected || teed) {
      s.file = (attempt / absl::StrCat("rank_", rank, bit == 1 ? ".stdout" : ".stderr")).string();
    }
    return s;
  };
  r.out = route(1);
  r.err = route(2);
  r.out.duplicate_filters = o_.duplicate_stdout_filters;
  r.out.duplicate_file = (attempt / "filtered_stdout.log").string();
  r.err.duplicate_filters = o_.duplicate_stderr_filters;
  r.err.duplicate_file = (attempt / "filtered_stderr.log").string();
  return r;
}

// The temporary log folder goes after a successful job; after a failed one
// it stays only for what it holds (the error files the summary names):
// empty attempt folders go, and the folder itself when nothing is left.
void Session::CleanLogDir(int code) {
  if (!temp_run_dir_ || keep_run_dir_) return;
  std::error_code ec;
  bool any_file = false;
  if (code != 0) {
    for (auto it = std::filesystem::recursive_directory_iterator(run_dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      any_file = any_file || it->is_regular_file(ec);
    }
  }
  if (!any_file) {
    std::filesystem::remove_all(run_dir_, ec);
    // The per-user folder too, once no other run uses it (rmdir refuses
    // while it holds anything).
    std::filesystem::remove(run_dir_.parent_path(), ec);
    return;
  }
  for (const auto& attempt : std::filesystem::directory_iterator(run_dir_, ec)) {
    if (attempt.is_directory(ec) && std::filesystem::is_empty(attempt.path(), ec)) {
      std::filesystem::remove(attempt.path(), ec);
    }
  }
}

}  // namespace meshrun::agent
