#include "rendezvous/run/membership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rendezvous/run/credential.h"

namespace meshrun::rendezvous {

Membership::Membership(std::string run_id, MemoryBudget* budget) : run_id_(std::move(run_id)), budget_(budget) {}

Membership::~Membership() {
  if (budget_ != nullptr && charged_ > 0) budget_->Release(HeldKind::kNode, charged_, charged_ * kNodeCost);
}

Membership::Node* Membership::Find(const std::string& node_id) {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const Membership::Node* Membership::Find(const std::string& node_id) const {
  auto it = nodes_.find(node_id);
  return it == nodes_.end() ? nullptr : &it->second;
}

absl::Status Membership::Check(const std::string& node_id, const std::string& session) const {
  const Node* n = Find(node_id);
  if (n == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("node '", node_id.substr(0, 64), "' is not a member of run '",
                                                    run_id_.substr(0, 64), "'"));
  }
  if (!CredentialEquals(n->session, session)) {
    return absl::PermissionDeniedError(absl::StrCat("wrong session credential for node '", node_id.substr(0, 64),
                                                    "' in run '", run_id_.substr(0, 64), "'"));
  }
  return absl::OkStatus();
}

absl::Status Membership::Admit(const std::string& node_id, const std::string& peer, Claimant who) {
  if (budget_ != nullptr) {
    if (absl::Status s = budget_->Charge(HeldKind::kNode, 1, kNodeCost, who,
                                         absl::StrCat("node '", node_id.substr(0, 64), "' in run '",
                                                      run_id_.substr(0, 64), "'"));
        !s.ok()) {
      return s;
    }
    ++charged_;
  }
  Node& n = nodes_[node_id];
  n.session = NewCredential();
  n.peer = peer;
  return absl::OkStatus();
}

void Membership::Restore(const std::string& node_id, std::string session, absl::Time last_seen) {
  auto [it, added] = nodes_.insert_or_assign(node_id, Node{std::move(session), std::string(), last_seen});
  if (added && budget_ != nullptr) {
    // What etcd holds is restored whatever the budget holds (charged, never refused).
    budget_->ForceCharge(HeldKind::kNode, 1, kNodeCost);
    ++charged_;
  }
}

void Membership::Forget(const std::string& node_id) {
  nodes_.erase(node_id);
  SyncCharge();
}

void Membership::Touch(const std::string& node_id, absl::Time now) {
  if (Node* n = Find(node_id)) n->last_seen = now;
}

absl::Time Membership::LastSeen(const std::string& node_id) const {
  const Node* n = Find(node_id);
  return n == nullptr ? absl::InfinitePast() : n->last_seen;
}

std::vector<std::string> Membership::RenewCredentials(absl::Span<const std::string> node_ids,
                                                      absl::Time grace_until) {
  std::vector<std::string> fresh;
  fresh.reserve(node_ids.size());
  absl::flat_hash_map<std::string, std::string> previous;
  previous.reserve(node_ids.size());
  for (const std::string& id : node_ids) {
    Node& n = nodes_[id];
    previous[id] = std::move(n.session);
    n.session = NewCredential();
    fresh.push_back(n.session);
  }
  previous_ = std::move(previous);
  previous_until_ = grace_until;
  return fresh;
}

bool Membership::AcceptsPrevious(const std::string& node_id, const std::string& session, absl::Time now) {
  if (previous_.empty()) return false;
  if (now >= previous_until_) {
    DropPrevious();
    return false;
  }
  auto it = previous_.find(node_id);
  return it != previous_.end() && CredentialEquals(it->second, session);
}

void Membership::DropPrevious() {
  absl::flat_hash_map<std::string, std::string>().swap(previous_);
  previous_until_ = absl::InfinitePast();
}

void Membership::DropPreviousIfPast(absl::Time now) {
  if (!previous_.empty() && now >= previous_until_) DropPrevious();
}

void Membership::Compact() {
  absl::flat_hash_map<std::string, Node> nodes;
  nodes.reserve(nodes_.size());
  for (auto& [id, n] : nodes_) nodes.emplace(id, Node{std::string(n.session), std::string(n.peer), n.last_seen});
  nodes_ = std::move(nodes);
}

void Membership::Release() {
  absl::flat_hash_map<std::string, Node>().swap(nodes_);
  DropPrevious();
  released_lost_ += static_cast<int>(lost_.size());
  absl::flat_hash_set<std::string>().swap(lost_);
  SyncCharge();
}

void Membership::SyncCharge() {
  const int64_t held = static_cast<int64_t>(nodes_.size());
  if (budget_ == nullptr || held >= charged_) return;
  budget_->Release(HeldKind::kNode, charged_ - held, (charged_ - held) * kNodeCost);
  charged_ = held;
}

}  // namespace meshrun::rendezvous
