// The members' agreement before any communicator exists: one store
// exchange per member that checks their descriptions (every member itself
// in a small mesh, else through the first member's verdict) and carries
// each backend's payload (libmesh internal).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "mesh_internal.h"

namespace meshrun::mesh::internal {

// What the members of a mesh (or of a flattened row) must agree on before
// any communicator is created, and who they are.
struct Agreement {
  Description desc;          // This member's view.
  std::string key;           // Store prefix of the check: "mesh/<id>", or the flattened row's key.
  std::vector<int> members;  // Every member's global rank; members.front() gives the verdict.
  // Names a member in messages: "rank 5 (coordinate (1, 1) in (replicate, shard))".
  std::function<std::string(int rank)> describe;
  // At most this many members: every member checks (MeshOptions::
  // everyone_checks_up_to); more: the first member's verdict.
  int everyone_checks_up_to = MeshOptions().everyone_checks_up_to;
};

// The members of `rows` other than `me`, each once, in row order: whom a
// member waits for in the agreement.
std::vector<int> PeersOf(const std::vector<GroupSpec>& rows, int me);

// What one member publishes and reads while the members agree.
struct Exchange {
  // Published under "<key>/data/r<rank>" with the description. One key
  // name for both backends, so members on different backends still find
  // each other's keys and get a mismatch, not a timeout.
  std::string payload;
  // Whose payloads this member reads, in this order.
  std::vector<int> read_from;
  // The members this one waits for (named when they never arrive).
  std::vector<int> peers;
};

// The members' agreement on `agreement.desc`, with `exchange` carried in the
// same store request. Every member publishes its payload and its
// description ("<key>/desc/r<rank>") and reads the payloads of read_from in
// one SetThenMultiGet, and with them:
//  - a mesh of at most everyone_checks_up_to members: every other member's
//    description. Every member derives the verdict from the same
//    descriptions (compared with the first member's, in member order), so
//    members that agree all reach "ok" without a further request; a member
//    whose verdict is not "ok" records it in "<key>/verdict" (a
//    CompareSet: the first stays) and fails with the stored one, so members
//    whose views differ still fail with one message. A member whose wait
//    runs out decides each absent member's description (and payload) once,
//    as "absent" (a CompareSet on the unset key; a member arriving later
//    finds its own description taken and fails too), and every member then
//    reads the same descriptions again.
//  - a larger mesh: the first member (members.front()) every other
//    description, the others the verdict ("<key>/verdict"). The first
//    member compares the descriptions and proposes the verdict with a
//    CompareSet; a member whose wait runs out proposes "timeout" naming the
//    absent members (those of its peers, or with the first member: of all,
//    whose description is missing). The first proposal is the verdict.
// Either way every member acts on one verdict ("ok"; the mismatch naming
// both ranks and the field; two members of one node on one GPU; absent
// members): all go on or all fail with the same message
// (FAILED_PRECONDITION for a mismatch or a shared GPU, DEADLINE_EXCEEDED
// for an absent member). Requests: one per member (plus, for a larger
// mesh, the first member's CompareSet; for a small one, a CompareSet per
// member that fails; on a timeout, one per other member and one more per
// absent one); none for a mesh of one member. Returns the payloads of
// read_from, in order.
absl::StatusOr<std::vector<std::string>> AgreeAndExchange(Store& store, const Agreement& agreement,
                                                          const Exchange& exchange, absl::Duration timeout);

// One member's agreement as store requests, planned without I/O:
// AgreeAndExchange sends exactly these, and so can an asynchronous client
// (bench/rdzv_scale's simulated workers). Pure.
struct AgreementPlan {
  bool everyone = false;                // Every member checks (a small mesh).
  bool first = false;                   // This member is members.front().
  bool proposes = false;                // This member sets the verdict (first, not everyone).
  std::vector<std::string> set_keys;    // Its payload and description, set...
  std::vector<std::string> set_values;  // ...in the one SetThenMultiGet,
  std::vector<std::string> wanted;      // which reads these keys:
  size_t reads_at = 0;                  // wanted[reads_at..] are read_from's payloads.
  std::vector<int> others;              // Everyone, or the first member: every other
                                        // member, whose descriptions are wanted[0..reads_at).
  std::string verdict_key;              // "<key>/verdict" (wanted[0] of a member that reads it).
};
AgreementPlan PlanAgreement(const Agreement& agreement, const Exchange& exchange);

// After the SetThenMultiGet answered `got` (the values of plan.wanted): the
// verdict ("ok", or "mismatch\n<message>" naming both ranks and the field,
// or the shared GPU; "timeout\n<message>" when a description was decided
// absent) when every member checks; the first member's proposal, to be set
// with a CompareSet on plan.verdict_key (whose outcome is the verdict); for
// the others the verdict they read. Pure.
std::string VerdictOf(const Agreement& agreement, const AgreementPlan& plan, const std::vector<std::string>& got);
// What a member returns for `verdict`: OK for "ok", else the error every
// member returns (FAILED_PRECONDITION, or DEADLINE_EXCEEDED for "timeout").
absl::Status VerdictStatus(const std::string& verdict);

// The NCCL unique-id exchange, without creating communicators (it needs no
// GPU), inside the members' agreement (AgreeAndExchange): per row, the
// coordinate-0 member calls `make_id`; its payload carries the ids of the
// rows it leads, by row key; the others read their rows' leaders'
// payloads. One request per member for every dimension (plus the verdict).
// Rows of one member need no store traffic. Returns one id per row.
// The unique-id exchange planned without I/O (ExchangeUniqueIds is Plan,
// AgreeAndExchange, Finish): the ids of the rows this member leads (from
// make_id) and the Exchange to agree with; Finish takes the payloads of
// exchange.read_from and returns one id per row (DATA_LOSS when a leader's
// payload lacks its row). Pure but for make_id.
struct UniqueIdPlan {
  Exchange exchange;
  std::vector<std::string> ids;  // Per row: filled for the rows it leads.
};
absl::StatusOr<UniqueIdPlan> PlanUniqueIds(const std::vector<GroupSpec>& rows, const Agreement& agreement,
                                          const std::function<absl::StatusOr<std::string>()>& make_id);
absl::StatusOr<std::vector<std::string>> FinishUniqueIds(const std::vector<GroupSpec>& rows, UniqueIdPlan plan,
                                                         const std::vector<std::string>& payloads);

absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(Store& store, const std::vector<GroupSpec>& rows,
                                                           const Agreement& agreement, absl::Duration timeout,
                                                           const std::function<absl::StatusOr<std::string>()>& make_id);

}  // namespace meshrun::mesh::internal
