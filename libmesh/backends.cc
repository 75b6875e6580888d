#include "backends.h"

#include <cstdio>

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
  // Gloo's tcp device gets a numeric address: the one this host uses to
  // reach the rendezvous server (a hostname may resolve to 127.0.1.1).
  absl::StatusOr<Endpoint> ep = ParseEndpoint(world.store_endpoint, 29400);
  if (!ep.ok()) return ep.status();
  absl::StatusOr<std::string> addr = LocalAddressFor(*ep);
  if (!addr.ok()) return addr.status();
  absl::StatusOr<GroupFactory> factory = MakeGlooFactory(store, *addr, options.timeout);
  if (!factory.ok()) return factory.status();
  Backend b;
  b.name = "gloo";
  absl::Duration timeout = options.timeout;
  b.create_groups = [store, factory = *factory, timeout](const std::vector<GroupSpec>& rows, const Description& desc,
                                                         const std::string& check_key, int first)
      -> absl::StatusOr<std::vector<std::unique_ptr<ProcessGroup>>> {
    if (absl::Status s = CheckDescriptions(*store, check_key, first, desc, timeout); !s.ok()) return s;
    return factory(rows);
  };
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
  // Phase 1: every set, so that no member waits on one still setting.
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    if (row.group_rank == 0) {
      absl::StatusOr<std::string> id = make_id();
      if (!id.ok()) return id.status();
      ids[i] = *id;
      if (row.ranks.size() > 1) {
        if (absl::Status s = store.Set(absl::StrCat(row.key, "/id"), absl::StrCat(encoded, "\n", *id)); !s.ok()) {
          return s;
        }
      }
    } else {
      if (absl::Status s = store.Set(desc_key(row, row.group_rank), encoded); !s.ok()) return s;
    }
  }
  // Phase 2: every read.
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    if (row.ranks.size() <= 1) continue;
    if (row.group_rank == 0) {
      std::vector<std::string> keys;
      for (int c = 1; c < static_cast<int>(row.ranks.size()); ++c) keys.push_back(desc_key(row, c));
      absl::StatusOr<std::vector<std::string>> peers = store.MultiGet(keys, timeout);
      if (absl::IsDeadlineExceeded(peers.status())) {
        return absl::DeadlineExceededError(absl::StrCat(
            "mesh dimension '", row.dim_name, "': ",
            MissingMembers(store, row, [&](int c) { return desc_key(row, c); }), " did not arrive within ",
            absl::FormatDuration(timeout)));
      }
      if (!peers.ok()) return peers.status();
      for (size_t k = 0; k < peers->size(); ++k) {
        Description theirs = Description::Decode((*peers)[k]);
        std::string diff = desc.Diff(theirs);
        if (!diff.empty()) {
          return absl::FailedPreconditionError(absl::StrCat("mesh mismatch in dimension '", row.dim_name,
                                                            "' with rank ",
                                                            theirs.rank >= 0 ? theirs.rank : row.ranks[k + 1], ": ",
                                                            diff,
                                                            " (this rank vs that rank)"));
        }
      }
    } else {
      absl::StatusOr<std::string> blob = store.Get(absl::StrCat(row.key, "/id"), timeout);
      if (absl::IsDeadlineExceeded(blob.status())) {
        return absl::DeadlineExceededError(absl::StrCat("mesh dimension '", row.dim_name, "': rank ", row.ranks[0],
                                                        " (coordinate 0, which creates the unique id) did not "
                                                        "arrive within ",
                                                        absl::FormatDuration(timeout)));
      }
      if (!blob.ok()) return blob.status();
      size_t nl = blob->find('\n');
      Description theirs = Description::Decode(blob->substr(0, nl));
      std::string diff = desc.Diff(theirs);
      if (!diff.empty()) {
        return absl::FailedPreconditionError(absl::StrCat("mesh mismatch in dimension '", row.dim_name,
                                                          "' with rank ", theirs.rank >= 0 ? theirs.rank : row.ranks[0],
                                                          ": ", diff,
                                                          " (this rank vs that rank)"));
      }
      ids[i] = blob->substr(nl + 1);
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
