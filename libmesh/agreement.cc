#include "agreement.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshrun::mesh::internal {

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

namespace {

// The first member's check beyond the descriptions' fields: no two members
// of one node on one GPU (NCCL refuses that, or hangs). "" when none.
std::string SharedGpu(const std::vector<Description>& all) {
  std::map<std::pair<int, std::string>, const Description*> seen;
  for (const Description& d : all) {
    if (d.gpu.empty()) continue;
    auto [it, fresh] = seen.emplace(std::make_pair(d.node, d.gpu), &d);
    if (fresh) continue;
    const int a = std::min(it->second->local_rank, d.local_rank), b = std::max(it->second->local_rank, d.local_rank);
    return absl::StrCat("local ranks ", a, " and ", b, " of node ", d.node, " share one GPU (PCI bus ", d.gpu,
                        "); give each process its own device");
  }
  return "";
}

}  // namespace

namespace {

std::string DescKey(const Agreement& agreement, int rank) { return absl::StrCat(agreement.key, "/desc/r", rank); }
std::string DataKey(const Agreement& agreement, int rank) { return absl::StrCat(agreement.key, "/data/r", rank); }

// The value that decides an absent member's description (when every member
// checks): "absent\n" and the message naming it. A real description never
// starts so (Description::Encode starts with "device=").
constexpr absl::string_view kAbsent = "absent\n";

std::string AbsentValue(const Agreement& agreement, int rank, absl::Duration timeout) {
  return absl::StrCat(kAbsent, agreement.describe(rank), " did not arrive within ", absl::FormatDuration(timeout));
}

// The verdict from every member's stored description (`all`, in member
// order): the same on every member that reads the same values.
std::string VerdictOfAll(const Agreement& agreement, const std::vector<std::string>& all) {
  // Absent members first: their names, in member order.
  std::vector<absl::string_view> absent;
  for (const std::string& v : all) {
    if (absl::StartsWith(v, kAbsent)) absent.push_back(absl::string_view(v).substr(kAbsent.size()));
  }
  if (!absent.empty()) return absl::StrCat("timeout\n", absl::StrJoin(absent, "; "));
  // Everyone compared with the first member, in member order.
  const int first = agreement.members.front();
  std::vector<Description> descs;
  descs.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    descs.push_back(Description::Decode(all[i]));
    if (descs.back().rank < 0) descs.back().rank = agreement.members[i];
  }
  const Description& reference = descs.front();
  std::string msg;
  int differ = 0;
  for (size_t i = 1; i < descs.size(); ++i) {
    std::string diff = descs[i].Diff(reference);
    if (diff.empty()) continue;
    if (differ++ == 0) msg = std::string(MismatchError(descs[i], reference, diff).message());
  }
  if (differ > 1) {
    absl::StrAppend(&msg, "; ", differ, " of ", agreement.members.size(), " members differ from rank ", first);
  }
  if (differ == 0) msg = SharedGpu(descs);
  return msg.empty() ? std::string("ok") : absl::StrCat("mismatch\n", msg);
}

}  // namespace

std::vector<int> PeersOf(const std::vector<GroupSpec>& rows, int me) {
  // A set beside the list: a row of a 4,096-node mesh has 4,096 members.
  std::vector<int> peers;
  absl::flat_hash_set<int> seen;
  for (const GroupSpec& row : rows) {
    for (int r : row.ranks) {
      if (r != me && seen.insert(r).second) peers.push_back(r);
    }
  }
  return peers;
}

AgreementPlan PlanAgreement(const Agreement& agreement, const Exchange& exchange) {
  AgreementPlan plan;
  const int me = agreement.desc.rank;
  plan.everyone = static_cast<int64_t>(agreement.members.size()) <= agreement.everyone_checks_up_to;
  plan.first = me == agreement.members.front();
  plan.proposes = plan.first && !plan.everyone;
  auto desc_key = [&](int rank) { return DescKey(agreement, rank); };
  auto data_key = [&](int rank) { return DataKey(agreement, rank); };
  plan.verdict_key = absl::StrCat(agreement.key, "/verdict");
  plan.set_keys = {data_key(me), desc_key(me)};
  plan.set_values = {exchange.payload, agreement.desc.Encode()};
  if (plan.everyone || plan.first) {
    for (int r : agreement.members) {
      if (r != me) plan.others.push_back(r);
    }
    for (int r : plan.others) plan.wanted.push_back(desc_key(r));
  } else {
    plan.wanted.push_back(plan.verdict_key);
  }
  plan.reads_at = plan.wanted.size();
  for (int r : exchange.read_from) plan.wanted.push_back(data_key(r));
  return plan;
}

std::string VerdictOf(const Agreement& agreement, const AgreementPlan& plan, const std::vector<std::string>& got) {
  if (!plan.everyone && !plan.first) return got.empty() ? std::string() : got[0];
  // Every member's stored description, in member order: this member's own,
  // the others' as read.
  std::vector<std::string> all;
  all.reserve(agreement.members.size());
  size_t k = 0;
  for (int r : agreement.members) {
    if (r == agreement.desc.rank) {
      all.push_back(agreement.desc.Encode());
    } else if (k < got.size() && k < plan.others.size()) {
      all.push_back(got[k++]);
    } else {
      all.emplace_back();
    }
  }
  return VerdictOfAll(agreement, all);
}

absl::Status VerdictStatus(const std::string& verdict) {
  if (verdict == "ok") return absl::OkStatus();
  return VerdictError(verdict);
}

namespace {

// AgreeAndExchange when every member checks (a small mesh).
absl::StatusOr<std::vector<std::string>> AgreeEveryone(Store& store, const Agreement& agreement,
                                                       const AgreementPlan& plan,
                                                       const std::vector<std::string>& read_keys,
                                                       absl::Duration timeout) {
  // Members that agree derive the same "ok" with no further request. One
  // that does not records its verdict in "<key>/verdict" (a CompareSet: the
  // first stays) and acts on what is stored there: members whose views
  // differ (rank arrays in another order, so another first difference)
  // still fail with one message, and a member of a larger view that waits
  // for that key (its everyone_checks_up_to differs, which the descriptions
  // show) gets it.
  auto decide = [&](const std::string& verdict) -> absl::Status {
    if (verdict == "ok") return absl::OkStatus();
    absl::StatusOr<std::string> stored = store.CompareSet(plan.verdict_key, "", verdict);
    return VerdictStatus(stored.ok() ? *stored : verdict);
  };
  absl::StatusOr<std::vector<std::string>> got =
      store.SetThenMultiGet(plan.set_keys, plan.set_values, plan.wanted, timeout);
  if (got.ok()) {
    if (absl::Status s = decide(VerdictOf(agreement, plan, *got)); !s.ok()) return s;
    return std::vector<std::string>(std::make_move_iterator(got->begin() + static_cast<std::ptrdiff_t>(plan.reads_at)),
                                    std::make_move_iterator(got->end()));
  }
  if (absl::IsFailedPrecondition(got.status())) {
    // Refused because another member decided this one absent (its
    // description key holds that)? Then it fails as they do; any other
    // refusal is this member's own.
    absl::StatusOr<std::string> own = store.Get(DescKey(agreement, agreement.desc.rank), absl::ZeroDuration());
    if (!own.ok() || !absl::StartsWith(*own, kAbsent)) return got.status();
  } else if (absl::IsDeadlineExceeded(got.status())) {
    // Decides every description still missing, once: "absent" (a
    // CompareSet on the unset key; one that arrived meanwhile stays). An
    // absent member's payload is decided too, so that members waiting for
    // it (its row peers, with longer timeouts) wake now: they read its
    // description with it, so none takes the value for a payload.
    for (int r : plan.others) {
      absl::StatusOr<std::string> set = store.CompareSet(DescKey(agreement, r), "", AbsentValue(agreement, r, timeout));
      if (!set.ok()) return set.status();
      if (!absl::StartsWith(*set, kAbsent)) continue;
      absl::StatusOr<std::string> data = store.CompareSet(DataKey(agreement, r), "", std::string(kAbsent));
      if (!data.ok()) return data.status();
    }
  } else {
    return got.status();
  }
  // Every description is decided (a member deciding them may still be at
  // it): read them all, this member's own too, and act on their verdict.
  std::vector<std::string> keys;
  keys.reserve(agreement.members.size());
  for (int r : agreement.members) keys.push_back(DescKey(agreement, r));
  absl::StatusOr<std::vector<std::string>> all = store.MultiGet(keys, timeout);
  if (!all.ok()) return all.status();
  if (absl::Status s = decide(VerdictOfAll(agreement, *all)); !s.ok()) return s;
  // Everyone arrived after all: what this member reads is there.
  return store.MultiGet(read_keys, timeout);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AgreeAndExchange(Store& store, const Agreement& agreement,
                                                          const Exchange& exchange, absl::Duration timeout) {
  const Description& desc = agreement.desc;
  const int me = desc.rank;
  const int first = agreement.members.front();
  // A mesh of one member: nothing to agree on, nobody to meet.
  if (agreement.members.size() < 2) return std::vector<std::string>();
  const AgreementPlan plan = PlanAgreement(agreement, exchange);
  auto desc_key = [&](int rank) { return DescKey(agreement, rank); };
  const std::string& verdict_key = plan.verdict_key;
  std::vector<std::string> read_keys(plan.wanted.begin() + static_cast<std::ptrdiff_t>(plan.reads_at),
                                     plan.wanted.end());
  if (plan.everyone) return AgreeEveryone(store, agreement, plan, read_keys, timeout);

  // After a wait ran out: names who is missing (the first member from every
  // member's description, the others from their peers' and the first
  // member's) and proposes that as the verdict; returns the verdict.
  auto ProposeTimeout = [&]() -> absl::StatusOr<std::string> {
    std::vector<int> expected = plan.others;
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

  absl::StatusOr<std::vector<std::string>> got = store.SetThenMultiGet(plan.set_keys, plan.set_values, plan.wanted, timeout);
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
    return store.MultiGet(read_keys, timeout);
  }
  if (!got.ok()) return got.status();
  std::string verdict = VerdictOf(agreement, plan, *got);
  if (plan.proposes) {
    absl::StatusOr<std::string> set = store.CompareSet(verdict_key, "", verdict);
    if (!set.ok()) return set.status();
    verdict = *set;
  }
  if (absl::Status s = VerdictStatus(verdict); !s.ok()) return s;
  return std::vector<std::string>(std::make_move_iterator(got->begin() + static_cast<std::ptrdiff_t>(plan.reads_at)),
                                  std::make_move_iterator(got->end()));
}

namespace {

// A leader's payload: for each row it leads, "<row key>\0<id length>\0<id>".
std::string EncodeIds(const std::vector<std::pair<std::string, std::string>>& ids) {
  std::string out;
  for (const auto& [key, id] : ids) {
    out.append(key);
    out.push_back('\0');
    out.append(std::to_string(id.size()));
    out.push_back('\0');
    out.append(id);
  }
  return out;
}

// The id of row `key` in a leader's payload; NOT_FOUND when absent.
absl::StatusOr<std::string> IdFor(absl::string_view payload, absl::string_view key) {
  size_t at = 0;
  while (at < payload.size()) {
    const size_t k_end = payload.find('\0', at);
    const size_t n_end = k_end == absl::string_view::npos ? k_end : payload.find('\0', k_end + 1);
    size_t n = 0;
    if (n_end == absl::string_view::npos || !absl::SimpleAtoi(payload.substr(k_end + 1, n_end - k_end - 1), &n) ||
        n_end + 1 + n > payload.size()) {
      break;
    }
    if (payload.substr(at, k_end - at) == key) return std::string(payload.substr(n_end + 1, n));
    at = n_end + 1 + n;
  }
  return absl::DataLossError(absl::StrCat("mesh bootstrap: no unique id for ", key, " from its leader"));
}

}  // namespace

absl::StatusOr<UniqueIdPlan> PlanUniqueIds(const std::vector<GroupSpec>& rows, const Agreement& agreement,
                                          const std::function<absl::StatusOr<std::string>()>& make_id) {
  const int me = agreement.desc.rank;
  UniqueIdPlan plan;
  plan.ids.resize(rows.size());
  // One request per member for every dimension: the ids of the rows it
  // leads in its payload, its rows' leaders' payloads read.
  Exchange& x = plan.exchange;
  x.peers = PeersOf(rows, me);
  std::vector<std::pair<std::string, std::string>> led;
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    if (row.group_rank == 0) {
      absl::StatusOr<std::string> id = make_id();
      if (!id.ok()) return id.status();
      plan.ids[i] = *id;
      if (row.ranks.size() > 1) led.emplace_back(row.key, *id);
    } else if (std::find(x.read_from.begin(), x.read_from.end(), row.ranks[0]) == x.read_from.end()) {
      x.read_from.push_back(row.ranks[0]);
    }
  }
  x.payload = EncodeIds(led);
  return plan;
}

absl::StatusOr<std::vector<std::string>> FinishUniqueIds(const std::vector<GroupSpec>& rows, UniqueIdPlan plan,
                                                         const std::vector<std::string>& payloads) {
  const std::vector<int>& read_from = plan.exchange.read_from;
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroupSpec& row = rows[i];
    if (row.group_rank == 0) continue;
    const size_t k = std::find(read_from.begin(), read_from.end(), row.ranks[0]) - read_from.begin();
    if (k >= payloads.size()) {
      return absl::DataLossError(absl::StrCat("mesh bootstrap: no payload of rank ", row.ranks[0], " for ", row.key));
    }
    absl::StatusOr<std::string> id = IdFor(payloads[k], row.key);
    if (!id.ok()) return id.status();
    plan.ids[i] = *id;
  }
  return std::move(plan.ids);
}

absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(Store& store, const std::vector<GroupSpec>& rows,
                                                           const Agreement& agreement, absl::Duration timeout,
                                                           const std::function<absl::StatusOr<std::string>()>& make_id) {
  absl::StatusOr<UniqueIdPlan> plan = PlanUniqueIds(rows, agreement, make_id);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<std::string>> got = AgreeAndExchange(store, agreement, plan->exchange, timeout);
  if (!got.ok()) return got.status();
  return FinishUniqueIds(rows, std::move(*plan), *got);
}

}  // namespace meshrun::mesh::internal
