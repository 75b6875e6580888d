#include "backends.h"

#include <csignal>
#include <cstdio>

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/net.h"
#include "gloo/gloo_group.h"

namespace meshrun::mesh::internal {

Watchdog::Watchdog(absl::Duration interval, std::function<absl::Status(ProcessGroup*)> check)
    : interval_(interval), check_(std::move(check)), thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  stop_.Notify();
  thread_.join();
}

void Watchdog::Watch(ProcessGroup* group) {
  absl::MutexLock lock(&mu_);
  groups_.push_back(group);
}

void Watchdog::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    std::vector<ProcessGroup*> groups;
    {
      absl::MutexLock lock(&mu_);
      groups = groups_;
    }
    for (ProcessGroup* g : groups) {
      absl::Status s = check_(g);
      if (s.ok()) continue;
      std::fprintf(stderr, "[meshrun mesh] error: %s; aborting every communicator of the mesh\n",
                   std::string(s.message()).c_str());
      for (ProcessGroup* other : groups) other->Abort();
      return;
    }
  }
}

void Backend::StartWatchdog(const std::vector<ProcessGroup*>& groups) {
  if (!health_check) return;
  watchdog = std::make_shared<Watchdog>(watchdog_interval, health_check);
  for (ProcessGroup* g : groups) watchdog->Watch(g);
}

void Backend::WatchGroup(ProcessGroup* group) {
  if (watchdog) watchdog->Watch(group);
}

absl::StatusOr<Backend> MakeGlooBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options) {
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer closing while a
  // write is in flight would kill this process with SIGPIPE instead of
  // failing the call. Like the Python interpreter every PyTorch worker runs
  // in, ignore SIGPIPE, unless the program installed a handler of its own.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  // Gloo's tcp device gets a numeric address: the one this host uses to
  // reach the rendezvous server (a hostname may resolve to 127.0.1.1).
  absl::StatusOr<Endpoint> ep = ParseEndpoint(world.store_endpoint, 29400);
  if (!ep.ok()) return ep.status();
  absl::StatusOr<std::string> addr = LocalAddressFor(*ep);
  if (!addr.ok()) return addr.status();
  absl::StatusOr<Backend::CreateGroups> create = MakeGlooGroupCreator(store, *addr, options.timeout, options.gloo_loop_nice);
  if (!create.ok()) return create.status();
  Backend b;
  b.name = "gloo";
  b.create_groups = std::move(*create);
  return b;
}

absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(Store& store, const std::vector<GroupSpec>& rows,
                                                           const Description& desc, absl::Duration timeout,
                                                           const std::function<absl::StatusOr<std::string>()>& make_id) {
  const std::string encoded = desc.Encode();
  std::vector<std::string> ids(rows.size());
  // Keyed by the writer's global rank: a member with another view of the
  // mesh cannot overwrite a peer's description.
  auto desc_key = [](const GroupSpec& row, int c) { return absl::StrCat(row.key, "/desc/r", row.ranks[c]); };
  auto id_key = [](const GroupSpec& row) { return absl::StrCat(row.key, "/id"); };
  // One request per rank for every dimension: all of this rank's sets (ids
  // of the rows it leads, its description for the others), then all of its
  // reads. Every set lands before any read waits, so no member waits on one
  // that is still setting.
  std::vector<std::string> set_keys, set_values, wanted;
  std::vector<size_t> first_value(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    first_value[i] = wanted.size();
    if (row.ranks.size() <= 1) {
      if (row.group_rank == 0) {
        absl::StatusOr<std::string> id = make_id();
        if (!id.ok()) return id.status();
        ids[i] = *id;
      }
      continue;
    }
    if (row.group_rank == 0) {
      absl::StatusOr<std::string> id = make_id();
      if (!id.ok()) return id.status();
      ids[i] = *id;
      set_keys.push_back(id_key(row));
      set_values.push_back(absl::StrCat(encoded, "\n", *id));
      for (int c = 1; c < static_cast<int>(row.ranks.size()); ++c) wanted.push_back(desc_key(row, c));
    } else {
      set_keys.push_back(desc_key(row, row.group_rank));
      set_values.push_back(encoded);
      wanted.push_back(id_key(row));
    }
  }
  if (set_keys.empty() && wanted.empty()) return ids;
  absl::StatusOr<std::vector<std::string>> got = store.SetThenMultiGet(set_keys, set_values, wanted, timeout);
  if (absl::IsDeadlineExceeded(got.status())) {
    // Name who is missing, row by row.
    for (const GroupSpec& row : rows) {
      if (row.ranks.size() <= 1) continue;
      if (row.group_rank == 0) {
        std::vector<std::string> keys;
        for (int c = 1; c < static_cast<int>(row.ranks.size()); ++c) keys.push_back(desc_key(row, c));
        absl::StatusOr<bool> all = store.Check(keys);
        if (all.ok() && *all) continue;
        return absl::DeadlineExceededError(absl::StrCat(
            "mesh dimension '", row.dim_name, "': ",
            MissingMembers(store, row, [&](int c) { return desc_key(row, c); }), " did not arrive within ",
            absl::FormatDuration(timeout)));
      }
      absl::StatusOr<bool> present = store.Check({id_key(row)});
      if (present.ok() && *present) continue;
      return absl::DeadlineExceededError(absl::StrCat("mesh dimension '", row.dim_name, "': rank ", row.ranks[0],
                                                      " (coordinate 0, which creates the unique id) did not "
                                                      "arrive within ",
                                                      absl::FormatDuration(timeout)));
    }
    return got.status();
  }
  if (!got.ok()) return got.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    if (row.ranks.size() <= 1) continue;
    if (row.group_rank == 0) {
      for (size_t k = 0; k + 1 < row.ranks.size(); ++k) {
        Description theirs = Description::Decode((*got)[first_value[i] + k]);
        if (theirs.rank < 0) theirs.rank = row.ranks[k + 1];
        if (std::string diff = theirs.Diff(desc); !diff.empty()) return MismatchError(theirs, desc, diff);
      }
    } else {
      const std::string& blob = (*got)[first_value[i]];
      size_t nl = blob.find('\n');
      Description theirs = Description::Decode(blob.substr(0, nl));
      if (theirs.rank < 0) theirs.rank = row.ranks[0];
      if (std::string diff = desc.Diff(theirs); !diff.empty()) return MismatchError(desc, theirs, diff);
      ids[i] = nl == std::string::npos ? std::string() : blob.substr(nl + 1);
    }
  }
  return ids;
}

#ifndef MESHRUN_WITH_NCCL
absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store>, const World&, const MeshOptions&, bool) {
  return absl::UnimplementedError("device type 'cuda' needs libmesh built with NCCL (CUDA toolkit not found at build time)");
}
#endif

}  // namespace meshrun::mesh::internal
