#include "rendezvous/run/event_streams.h"

#include "absl/strings/str_cat.h"
#include "rendezvous/run/sparse_maps.h"

namespace meshrun::rendezvous {

EventSink* EventStreams::Find(const std::string& node_id) const {
  auto it = sinks_.find(node_id);
  return it == sinks_.end() ? nullptr : it->second.get();
}

void EventStreams::Open(const std::string& node_id, std::shared_ptr<EventSink> sink, bool member) {
  std::shared_ptr<EventSink>& slot = sinks_[node_id];
  if (slot && slot != sink) {
    slot->CloseRun(absl::StrCat("replaced by a newer event stream of node '", node_id.substr(0, 64), "'"));
  }
  slot = std::move(sink);
  if (!member) {
    const uint64_t seq = next_nonmember_seq_++;
    nonmember_seq_[node_id] = seq;
    nonmember_order_.emplace_back(seq, node_id);
  } else {
    ForgetNonMember(node_id);
  }
}

void EventStreams::PromoteToMember(const std::string& node_id) {
  ForgetNonMember(node_id);
  if (EventSink* s = Find(node_id)) s->PromoteToMember();
}

std::optional<std::string> EventStreams::EvictOldestNonMember(
    const std::function<std::string(const std::string& node_id, int64_t open)>& why) {
  while (!nonmember_order_.empty()) {
    auto [seq, id] = std::move(nonmember_order_.front());
    nonmember_order_.pop_front();
    auto it = nonmember_seq_.find(id);
    if (it == nonmember_seq_.end() || it->second != seq) continue;
    const int64_t open = nonmembers();
    nonmember_seq_.erase(it);
    auto s = sinks_.find(id);
    if (s == sinks_.end()) continue;
    s->second->CloseEvicted(why(id, open));
    // Its call's end (Run::Unwatch, when gRPC is done with it) finds the sink gone.
    sinks_.erase(s);
    return id;
  }
  return std::nullopt;
}

bool EventStreams::Drop(const std::string& node_id, const EventSink* sink) {
  auto it = sinks_.find(node_id);
  if (it == sinks_.end() || it->second.get() != sink) return false;
  sinks_.erase(it);
  ShrinkIfSparse(sinks_);
  ForgetNonMember(node_id);
  return true;
}

std::shared_ptr<EventSink> EventStreams::FindShared(const std::string& node_id) const {
  auto it = sinks_.find(node_id);
  return it == sinks_.end() ? nullptr : it->second;
}

std::shared_ptr<EventSink> EventStreams::Remove(const std::string& node_id) {
  auto it = sinks_.find(node_id);
  if (it == sinks_.end()) return nullptr;
  std::shared_ptr<EventSink> sink = std::move(it->second);
  sinks_.erase(it);
  ShrinkIfSparse(sinks_);
  ForgetNonMember(node_id);
  return sink;
}

std::vector<std::shared_ptr<EventSink>> EventStreams::All() const {
  std::vector<std::shared_ptr<EventSink>> out;
  out.reserve(sinks_.size());
  for (const auto& [node, sink] : sinks_) out.push_back(sink);
  return out;
}

void EventStreams::PushAll(const RunEvent& event) {
  for (auto& [node, sink] : sinks_) sink->Push(event);
}

void EventStreams::EndAll(const std::string& why) {
  for (auto& [id, sink] : sinks_) sink->CloseRun(why);
  sinks_.clear();
  nonmember_seq_.clear();
  nonmember_order_.clear();
}

void EventStreams::Release() {
  absl::flat_hash_map<std::string, std::shared_ptr<EventSink>>().swap(sinks_);
  absl::flat_hash_map<std::string, uint64_t>().swap(nonmember_seq_);
  std::deque<std::pair<uint64_t, std::string>>().swap(nonmember_order_);
}

void EventStreams::ForgetNonMember(const std::string& node_id) {
  if (nonmember_seq_.erase(node_id) == 0) return;
  // The order keeps stale entries until they reach its front; it never
  // holds more than twice the live ones.
  while (!nonmember_order_.empty()) {
    auto it = nonmember_seq_.find(nonmember_order_.front().second);
    if (it != nonmember_seq_.end() && it->second == nonmember_order_.front().first) break;
    nonmember_order_.pop_front();
  }
  if (nonmember_order_.size() > 2 * nonmember_seq_.size() + 64) {
    std::deque<std::pair<uint64_t, std::string>> live;
    for (auto& e : nonmember_order_) {
      auto it = nonmember_seq_.find(e.second);
      if (it != nonmember_seq_.end() && it->second == e.first) live.push_back(std::move(e));
    }
    nonmember_order_.swap(live);
  }
}

}  // namespace meshrun::rendezvous
