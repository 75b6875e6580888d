// Membership: who a run knows, and how it tells them apart. Every node the
// run knows has a secret session credential (docs/design.md section 4c),
// the connection that made it known, and its last sign of life (its join or
// heartbeat); the credentials that the last round close replaced are still
// accepted for heartbeats for a grace; nodes declared lost are remembered so
// that their later requests are refused as stale (torchrun's c10d rendezvous
// has no such credential: any process that knows the run id can act as any
// node). The memory budget is charged kNodeCost for every known node.
//
// Not thread-safe: a Run holds one under its lock, and decides (by its
// rounds) which nodes to forget. Node ids are opaque (the agent's id); the
// error texts cut them and the run id to 64 characters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rendezvous/policy/memory_budget.h"

namespace meshrun::rendezvous {

class Membership {
 public:
  // One known node.
  struct Node {
    std::string session;  // Its current credential.
    std::string peer;     // The connection that made it known (gRPC's peer string; may be empty).
    absl::Time last_seen = absl::InfinitePast();  // Its last join or heartbeat; InfinitePast before its first join.
  };

  // `run_id` names the run in errors; `budget`, when given, must outlive
  // this and is charged for every node (HeldKind::kNode).
  Membership(std::string run_id, MemoryBudget* budget);
  ~Membership();  // Gives the budget's charge back.
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // The node, or nullptr when the run does not know it. The pointer is good
  // until the next call that adds or forgets a node.
  Node* Find(const std::string& node_id);
  const Node* Find(const std::string& node_id) const;
  bool Knows(const std::string& node_id) const { return nodes_.contains(node_id); }
  // Nodes known now.
  size_t size() const { return nodes_.size(); }

  // OK when `node_id` is known and `session` is its current credential
  // (compared in constant time); PERMISSION_DENIED otherwise ("is not a
  // member of run ..." or "wrong session credential ...").
  absl::Status Check(const std::string& node_id, const std::string& session) const;

  // Makes `node_id` (not known yet) known, with a new credential and `peer`:
  // the budget is charged first, for `who`; its refusal
  // (RESOURCE_EXHAUSTED) is returned and nothing changes.
  absl::Status Admit(const std::string& node_id, const std::string& peer, Claimant who);
  // Makes `node_id` known with `session` and `last_seen` (a run restored
  // from its durable record after a failover); charged to the budget
  // whatever it holds (never refused: etcd holds it).
  void Restore(const std::string& node_id, std::string session, absl::Time last_seen);
  // Forgets `node_id` (no-op when unknown) and gives its charge back. A
  // node declared lost is never forgotten while the run is whole (its later
  // requests must be refused as stale): the caller checks IsLost.
  void Forget(const std::string& node_id);

  // A sign of life from a known node (no-op for an unknown one).
  void Touch(const std::string& node_id, absl::Time now);
  // Its last sign of life; InfinitePast when unknown or never seen.
  absl::Time LastSeen(const std::string& node_id) const;

  // A round closed: each of `node_ids` (known nodes) gets a new credential,
  // returned in the same order. Their replaced credentials are accepted by
  // AcceptsPrevious until `grace_until`, replacing those of the round
  // before. O(node_ids).
  std::vector<std::string> RenewCredentials(absl::Span<const std::string> node_ids, absl::Time grace_until);
  // True when `session` is `node_id`'s credential of the round before and
  // `now` is before its grace's end; past that end the replaced credentials
  // are dropped (their memory too). The caller decides who may use them
  // (Run: only a node that still takes part, and only for heartbeats and
  // re-opened streams).
  bool AcceptsPrevious(const std::string& node_id, const std::string& session, absl::Time now);
  // Drops the replaced credentials now (the run ended, or their grace
  // passed: DropPreviousIfPast).
  void DropPrevious();
  void DropPreviousIfPast(absl::Time now);

  // Declares `node_id` lost (it stays known).
  void MarkLost(const std::string& node_id) { lost_.insert(node_id); }
  bool IsLost(const std::string& node_id) const { return lost_.contains(node_id); }
  // Nodes declared lost so far (kept after Release).
  int lost_count() const { return static_cast<int>(lost_.size()) + released_lost_; }

  // Re-allocates the node map in one go. Its keys were allocated as nodes
  // connected and joined, scattered among those connections' gRPC buffers,
  // and each pinned a heap page that could not go back to the system once
  // the buffers were freed (10,000 agents kept ~150 MiB after they left).
  // O(nodes); a Run calls it once per round.
  void Compact();
  // Frees every node, credential and lost node's id (their memory too), and
  // gives the budget's charge back; lost_count() stays. For an ended run
  // whose nodes have left (Run keeps only its summary then).
  void Release();

 private:
  // Gives back the charge of nodes no longer known.
  void SyncCharge();

  const std::string run_id_;
  MemoryBudget* const budget_;
  int64_t charged_ = 0;  // Nodes charged to budget_.
  absl::flat_hash_map<std::string, Node> nodes_;
  absl::flat_hash_map<std::string, std::string> previous_;  // Replaced credentials, by node.
  absl::Time previous_until_ = absl::InfinitePast();
  absl::flat_hash_set<std::string> lost_;
  int released_lost_ = 0;  // lost_.size() when Release freed it.
};

}  // namespace meshrun::rendezvous
