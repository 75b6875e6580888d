// NodeList: a run's nodes in one role (joining, members, re-forming), kept
// in insertion order with O(1) lookup and removal by node id. A round of N
// nodes then costs O(N) in all, not O(N) per join, finish or disconnect
// (bench/rdzv_scale: 10,000 agents). Pure container, no locking: the Run
// guards it with its own mutex.
#pragma once

#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace meshrun::rendezvous {

// T has a `node` with a `node_id` (Run's Joiner and Member). Ids are
// unique: push_back of an id already held replaces nothing and returns
// false.
template <typename T>
class NodeList {
 public:
  using iterator = typename std::list<T>::iterator;
  using const_iterator = typename std::list<T>::const_iterator;

  NodeList() = default;
  NodeList(NodeList&&) noexcept = default;
  NodeList& operator=(NodeList&&) noexcept = default;
  NodeList(const NodeList&) = delete;
  NodeList& operator=(const NodeList&) = delete;

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

  // Appends `item`; false (and nothing changes) when its id is held.
  bool push_back(T item) {
    if (index_.contains(item.node.node_id)) return false;
    items_.push_back(std::move(item));
    // The key views the id inside the list's element: elements never move,
    // and an id is not changed while held.
    index_.emplace(absl::string_view(items_.back().node.node_id), std::prev(items_.end()));
    return true;
  }
  bool contains(const std::string& node_id) const { return index_.contains(node_id); }
  // The item with this id, or nullptr. Valid until it is removed.
  T* find(const std::string& node_id) {
    auto it = index_.find(node_id);
    return it == index_.end() ? nullptr : &*it->second;
  }
  // Removes the item with this id and returns it (nullopt when absent).
  std::optional<T> erase(const std::string& node_id) {
    auto it = index_.find(node_id);
    if (it == index_.end()) return std::nullopt;
    const iterator item = it->second;
    index_.erase(it);  // First: its key views the item's id.
    std::optional<T> out(std::move(*item));
    items_.erase(item);
    return out;
  }
  // Removes and returns the first `n` items (all when fewer), in order.
  std::vector<T> take_front(size_t n) {
    std::vector<T> out;
    out.reserve(std::min(n, items_.size()));
    while (out.size() < n && !items_.empty()) {
      index_.erase(items_.front().node.node_id);
      out.push_back(std::move(items_.front()));
      items_.pop_front();
    }
    return out;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }

 private:
  std::list<T> items_;
  absl::flat_hash_map<absl::string_view, iterator> index_;
};

}  // namespace meshrun::rendezvous
