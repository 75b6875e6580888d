#include "backends.h"

#include <algorithm>
#include <csignal>
#include <iterator>
#include <cstdio>

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

namespace {

// The status a member returns for a verdict other than "ok".
absl::Status VerdictError(const std::string& verdict) {
  const size_t nl = verdict.find('\n');
  const std::string kind = verdict.substr(0, nl);
  const std::string msg = nl == std::string::npos ? verdict : verdict.substr(nl + 1);
  if (kind == "timeout") return absl::DeadlineExceededError(msg);
  return absl::FailedPreconditionError(msg);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AgreeAndExchange(Store& store, const Agreement& agreement,
                                                          const Exchange& exchange, absl::Duration timeout) {
  const Description& desc = agreement.desc;
  const int me = desc.rank;
  const int first = agreement.members.front();
  if (agreement.members.size() < 2) {
    // Nothing to agree on, nobody to meet.
    if (exchange.set_keys.empty() && exchange.read_keys.empty()) return std::vector<std::string>();
    return store.SetThenMultiGet(exchange.set_keys, exchange.set_values, exchange.read_keys, timeout);
  }
  auto desc_key = [&](int rank) { return absl::StrCat(agreement.key, "/desc/r", rank); };
  const std::string verdict_key = absl::StrCat(agreement.key, "/verdict");

  std::vector<std::string> keys = exchange.set_keys, values = exchange.set_values;
  keys.push_back(desc_key(me));
  values.push_back(desc.Encode());
  std::vector<int> others;  // first member only: every other member
  std::vector<std::string> wanted;
  if (me == first) {
    for (int r : agreement.members) {
      if (r != me) others.push_back(r);
    }
    for (int r : others) wanted.push_back(desc_key(r));
  } else {
    wanted.push_back(verdict_key);
  }
  const size_t reads_at = wanted.size();
  wanted.insert(wanted.end(), exchange.read_keys.begin(), exchange.read_keys.end());

  // After a wait ran out: names who is missing (the first member from every
  // member's description, the others from their peers' and the first
  // member's) and proposes that as the verdict; returns the verdict.
  auto ProposeTimeout = [&]() -> absl::StatusOr<std::string> {
    std::vector<int> expected = others;
    if (me != first) {
      expected = exchange.peers;
      if (std::find(expected.begin(), expected.end(), first) == expected.end()) expected.insert(expected.begin(), first);
    }
    std::vector<std::string> late;
    for (int r : expected) {
      absl::StatusOr<bool> present = store.Check({desc_key(r)});
      if (present.ok() && !*present) late.push_back(agreement.describe(r));
    }
    const std::string msg =
        late.empty() ? absl::StrCat("rank ", first, " (the mesh's first rank) did not confirm within ",
                                    absl::FormatDuration(timeout), " that every member agrees")
                     : absl::StrCat(absl::StrJoin(late, ", "), " did not arrive within ",
                                    absl::FormatDuration(timeout));
    return store.CompareSet(verdict_key, "", absl::StrCat("timeout\n", msg));
  };

  absl::StatusOr<std::vector<std::string>> got = store.SetThenMultiGet(keys, values, wanted, timeout);
  // The verdict is decided once, by whoever sets it first (a CompareSet on
  // the absent key): the first member's "ok" or "mismatch", or the
  // "timeout" of whichever member's wait ran out first. Every member acts
  // on that one verdict, so all go on or all fail with the same message.
  if (absl::IsDeadlineExceeded(got.status())) {
    // The first member, which sees every description, times out at about
    // the same moment and names every absent member: a member that is not
    // the first waits a little for that verdict before proposing its own.
    absl::StatusOr<std::string> verdict =
        me == first ? absl::NotFoundError("") : store.Get(verdict_key, std::min(timeout, absl::Milliseconds(500)));
    if (!verdict.ok()) verdict = ProposeTimeout();
    if (!verdict.ok()) return verdict.status();
    if (*verdict != "ok") return VerdictError(*verdict);
    // The first member confirmed just before: every member has published,
    // so what this member reads is there.
    return store.MultiGet(exchange.read_keys, timeout);
  }
  if (!got.ok()) return got.status();
  if (me == first) {
    std::string msg;
    int differ = 0;
    for (size_t k = 0; k < others.size(); ++k) {
      Description theirs = Description::Decode((*got)[k]);
      if (theirs.rank < 0) theirs.rank = others[k];
      std::string diff = theirs.Diff(desc);
      if (diff.empty()) continue;
      if (differ++ == 0) msg = std::string(MismatchError(theirs, desc, diff).message());
    }
    if (differ > 1) {
      absl::StrAppend(&msg, "; ", differ, " of ", agreement.members.size(), " members differ from rank ", first);
    }
    absl::StatusOr<std::string> verdict =
        store.CompareSet(verdict_key, "", differ ? absl::StrCat("mismatch\n", msg) : "ok");
    if (!verdict.ok()) return verdict.status();
    if (*verdict != "ok") return VerdictError(*verdict);
  } else if ((*got)[0] != "ok") {
    return VerdictError((*got)[0]);
  }
  return std::vector<std::string>(std::make_move_iterator(got->begin() + reads_at),
                                  std::make_move_iterator(got->end()));
}

absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(Store& store, const std::vector<GroupSpec>& rows,
                                                           const Agreement& agreement, absl::Duration timeout,
                                                           const std::function<absl::StatusOr<std::string>()>& make_id) {
  const int me = agreement.desc.rank;
  std::vector<std::string> ids(rows.size());
  auto id_key = [](const GroupSpec& row) { return absl::StrCat(row.key, "/id"); };
  // One request per member for every dimension: the ids of the rows it
  // leads, then the ids of the others (and the agreement's keys).
  Exchange x;
  std::vector<size_t> read_of(rows.size(), 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    for (int r : row.ranks) {
      if (r != me && std::find(x.peers.begin(), x.peers.end(), r) == x.peers.end()) x.peers.push_back(r);
    }
    if (row.group_rank == 0) {
      absl::StatusOr<std::string> id = make_id();
      if (!id.ok()) return id.status();
      ids[i] = *id;
      if (row.ranks.size() > 1) {
        x.set_keys.push_back(id_key(row));
        x.set_values.push_back(*id);
      }
    } else {
      read_of[i] = x.read_keys.size();
      x.read_keys.push_back(id_key(row));
    }
  }
  absl::StatusOr<std::vector<std::string>> got = AgreeAndExchange(store, agreement, x, timeout);
  if (!got.ok()) return got.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].group_rank != 0) ids[i] = (*got)[read_of[i]];
  }
  return ids;
}

#ifndef MESHRUN_WITH_NCCL
absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store>, const World&, const MeshOptions&, bool) {
  return absl::UnimplementedError("device type 'cuda' needs libmesh built with NCCL (CUDA toolkit not found at build time)");
}
#endif

}  // namespace meshrun::mesh::internal
