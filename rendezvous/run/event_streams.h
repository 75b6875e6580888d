// EventStreams: a run's open event streams (Run::Watch), one per node. A
// member's stream (a node of the running round, of the round being
// re-formed, or joining) is counted against max_watchers_per_run by the Run;
// every other one (a node that has not joined, a status watcher) is a
// non-member's, kept in opening order so that the oldest can be ended to make
// room for a newer one (max_nonmember_watchers_per_run): streams of nodes
// about to join always get in, however many others are opened. torchrun's
// c10d agents poll the store instead and have no streams.
//
// Not thread-safe: a Run holds one under its lock. The sinks' own rules
// apply (proto/types.h EventSink: Push never blocks, never calls back).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

class EventStreams {
 public:
  // `node_id`'s stream, or nullptr. Good until the next call that opens or
  // ends a stream.
  EventSink* Find(const std::string& node_id) const;
  bool Has(const std::string& node_id) const { return sinks_.contains(node_id); }
  bool empty() const { return sinks_.empty(); }
  // Streams open now, and how many of them are non-members'.
  int64_t size() const { return static_cast<int64_t>(sinks_.size()); }
  int64_t nonmembers() const { return static_cast<int64_t>(nonmember_seq_.size()); }
  int64_t members() const { return size() - nonmembers(); }
  bool IsNonMember(const std::string& node_id) const { return nonmember_seq_.contains(node_id); }

  // Subscribes `sink` as `node_id`'s stream, a member's or not. An older
  // stream of that node still open is ended here (CloseRun: "replaced by a
  // newer event stream of node ..."): left open it would be counted by
  // nobody and outlive the run. A non-member's stream is the newest one.
  void Open(const std::string& node_id, std::shared_ptr<EventSink> sink, bool member);
  // `node_id` joined: its stream (if open) is a member's from now on, and
  // told so (EventSink::PromoteToMember).
  void PromoteToMember(const std::string& node_id);
  // Ends the oldest non-member's stream (CloseEvicted with
  // `why(node id, non-members' streams open before it ended)`) and returns
  // its node id; nullopt when no non-member's stream is open.
  std::optional<std::string> EvictOldestNonMember(
      const std::function<std::string(const std::string& node_id, int64_t open)>& why);
  // Drops `node_id`'s stream if it is `sink` (its call ended: Run::Unwatch)
  // and returns true; false, and nothing changes, when the node has another
  // stream or none.
  bool Drop(const std::string& node_id, const EventSink* sink);
  // `node_id`'s stream (shared), or nullptr.
  std::shared_ptr<EventSink> FindShared(const std::string& node_id) const;
  // Drops `node_id`'s stream and returns it (nullptr without one): its
  // node was declared lost, and the caller ends it as stale
  // (EventOutbox::CloseStale) once the loss may be announced.
  std::shared_ptr<EventSink> Remove(const std::string& node_id);
  // Every stream open now.
  std::vector<std::shared_ptr<EventSink>> All() const;
  // Pushes `event` to every stream.
  void PushAll(const RunEvent& event);
  // Ends every stream (CloseRun) and drops them all.
  void EndAll(const std::string& why);
  // Drops every stream and frees the maps' memory (an ended run keeping
  // only its summary).
  void Release();

 private:
  // `node_id`'s stream is no longer a non-member's (it joined, or it ended).
  void ForgetNonMember(const std::string& node_id);

  absl::flat_hash_map<std::string, std::shared_ptr<EventSink>> sinks_;
  // The nodes of sinks_ whose stream is a non-member's, by opening order:
  // (sequence, node id); an entry of nonmember_order_ whose sequence is no
  // longer the node's in nonmember_seq_ is stale and skipped.
  absl::flat_hash_map<std::string, uint64_t> nonmember_seq_;
  std::deque<std::pair<uint64_t, std::string>> nonmember_order_;
  uint64_t next_nonmember_seq_ = 1;
};

}  // namespace meshrun::rendezvous
