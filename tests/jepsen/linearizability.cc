#include "tests/jepsen/linearizability.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "tests/jepsen/state_cache.h"
#include "tests/jepsen/store_model.h"

namespace meshrun::jepsen {
namespace {

constexpr size_t kPrefixOpsShown = 6;
constexpr size_t kPendingOpsShown = 8;

// Lowe's search over one key's operations. Operation indices follow call
// order. Entries (calls and returns) are numbered in time order from
// kFirstEntry, and threaded on two doubly linked lists of what is not yet
// linearized: the ok ops' calls and returns from kOkHead, and the info ops'
// calls from kInfoHead. From each point the search tries the ok calls up to
// the first return entry (the frontier) first, then the info ops called
// before the frontier: deferring an indeterminate op costs nothing, since it
// may take effect at any later time.
class LinearizationSearch {
 public:
  // `ops` must be sorted by invoke_ns and exclude fail ops and info reads.
  LinearizationSearch(std::vector<const Operation*> ops, int64_t max_states)
      : ops_(std::move(ops)), max_states_(max_states) {
    for (const Operation* op : ops_) model_ops_.push_back(model_.Prepare(*op));
    BuildEntries();
    FindTwins();
  }

  Verdict Run();
  int64_t states() const { return cache_.size(); }
  std::string Explain(Verdict verdict, int64_t origin_ns) const;

 private:
  static constexpr int32_t kOkHead = 0;
  static constexpr int32_t kInfoHead = 1;
  static constexpr int32_t kFirstEntry = 2;
  static constexpr int32_t kEnd = -1;
  static constexpr int32_t kNoFrontier = INT32_MAX;  // No ok op left.

  // Where the search is among the candidates of one point.
  struct Cursor {
    bool info_phase = false;  // Walking the info list (else the ok list).
    int32_t at = kEnd;        // The entry.
    int32_t frontier = kNoFrontier;  // Info phase: the first return entry.
  };
  struct Frame {
    int32_t op;
    ModelState state_before;
    Cursor cursor;  // Where op was found.
  };

  bool IsInfo(int32_t op) const { return info_slot_[op] >= 0; }
  bool InfoLinearized(int32_t op) const {
    return (info_bits_[info_slot_[op] / 32] >> (info_slot_[op] % 32)) & 1;
  }
  // Whether the search may linearize `op` now: an info op only after its twin.
  bool TwinAllows(int32_t op) const {
    return !IsInfo(op) || twin_before_[op] < 0 || InfoLinearized(twin_before_[op]);
  }
  void BuildEntries();
  void LinkLists(const std::vector<bool>& entry_is_info);
  void FindTwins();
  Cursor FirstCandidate() const;
  int32_t Candidate(Cursor& cursor) const;
  void Unlink(int32_t entry);
  void Relink(int32_t entry);
  void Lift(int32_t op);
  void Unlift(int32_t op);
  void Mark(int32_t op);
  void Unmark(int32_t op);
  int32_t FirstUnsettled();
  void PackKey(ModelState state);
  bool TryLinearize(int32_t op, ModelState next_state);
  bool Backtrack(ModelState& state, Cursor& cursor);
  void RecordProgress(ModelState state);
  void AppendOps(absl::Span<const int32_t> ops, int64_t origin_ns,
                 std::vector<std::string>& lines) const;

  std::vector<const Operation*> ops_;
  int64_t max_states_;
  StoreModel model_;
  std::vector<ModelOp> model_ops_;

  std::vector<int32_t> entry_op_;      // Per entry; -1 for the heads.
  std::vector<bool> entry_is_call_;    // Per entry.
  std::vector<int32_t> next_, prev_;   // Both lists.
  std::vector<int32_t> call_entry_;    // Per op.
  std::vector<int32_t> return_entry_;  // Per op; kEnd for info ops.
  std::vector<int32_t> calls_before_return_;  // Per ok op: ops whose call precedes its return.
  std::vector<int32_t> info_slot_;     // Per op: its bit in info_bits_, or -1.
  // Per info op: the latest info op invoked before it with the same kind and
  // arguments (a twin: they are interchangeable), or -1. Twins are linearized
  // in invoke order only: any linearization maps onto such a one by
  // reassigning the twins to their places in invoke order (an earlier invoke
  // fits any place a later one does), and the search avoids trying every
  // subset of, say, indeterminate adds of 1.
  std::vector<int32_t> twin_before_;

  // Bit per op: set for info ops and for linearized ok ops.
  std::vector<uint64_t> settled_;
  std::vector<uint32_t> info_bits_;  // Bit per info op: set when linearized.
  int32_t unsettled_hint_ = 0;       // No unsettled op below it.
  int64_t ok_remaining_ = 0;         // Ok ops not linearized.
  std::vector<Frame> stack_;
  std::vector<uint32_t> key_;  // Scratch for PackKey.
  StateCache cache_;

  // The deepest point reached, for Explain.
  size_t best_depth_ = 0;
  std::vector<int32_t> best_tail_;     // The last ops of the prefix, in order.
  ModelState best_state_ = kAbsentState;
  std::vector<int32_t> best_pending_;  // The candidates there.
  int32_t best_blocking_ = -1;         // The op of the frontier.
};

void LinearizationSearch::BuildEntries() {
  const int32_t n = static_cast<int32_t>(ops_.size());
  std::vector<std::tuple<int64_t, bool, int32_t>> events;  // (time, is_return, op)
  info_slot_.assign(n, -1);
  int32_t info_count = 0;
  for (int32_t i = 0; i < n; ++i) {
    events.emplace_back(ops_[i]->invoke_ns, false, i);
    if (ops_[i]->outcome == Outcome::kInfo) {
      info_slot_[i] = info_count++;
    } else {
      events.emplace_back(ops_[i]->complete_ns, true, i);
      ++ok_remaining_;
    }
  }
  std::sort(events.begin(), events.end());
  const int32_t entries = static_cast<int32_t>(events.size()) + kFirstEntry;
  entry_op_.assign(entries, -1);
  entry_is_call_.assign(entries, false);
  call_entry_.assign(n, kEnd);
  return_entry_.assign(n, kEnd);
  calls_before_return_.assign(n, n);
  std::vector<bool> entry_is_info(entries, false);
  int32_t calls_seen = 0;
  for (int32_t e = kFirstEntry; e < entries; ++e) {
    const auto& [time, is_return, op] = events[e - kFirstEntry];
    entry_op_[e] = op;
    entry_is_call_[e] = !is_return;
    entry_is_info[e] = IsInfo(op);
    if (is_return) {
      return_entry_[op] = e;
      calls_before_return_[op] = calls_seen;
    } else {
      call_entry_[op] = e;
      ++calls_seen;
    }
  }
  LinkLists(entry_is_info);
  settled_.assign(n / 64 + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    if (IsInfo(i)) settled_[i / 64] |= uint64_t{1} << (i % 64);
  }
  info_bits_.assign((info_count + 31) / 32, 0);
}

void LinearizationSearch::LinkLists(const std::vector<bool>& entry_is_info) {
  const int32_t entries = static_cast<int32_t>(entry_is_info.size());
  next_.assign(entries, kEnd);
  prev_.assign(entries, kEnd);
  int32_t tail[2] = {kOkHead, kInfoHead};
  for (int32_t e = kFirstEntry; e < entries; ++e) {
    int32_t& last = tail[entry_is_info[e] ? 1 : 0];
    next_[last] = e;
    prev_[e] = last;
    last = e;
  }
}

void LinearizationSearch::FindTwins() {
  twin_before_.assign(ops_.size(), -1);
  absl::flat_hash_map<std::tuple<OpKind, ModelState, ModelState, int64_t>, int32_t> latest;
  for (int32_t op = 0; op < static_cast<int32_t>(ops_.size()); ++op) {
    if (!IsInfo(op)) continue;
    const ModelOp& m = model_ops_[op];
    auto [it, inserted] = latest.try_emplace(std::make_tuple(m.kind, m.arg1, m.arg2, m.delta), op);
    if (!inserted) {
      twin_before_[op] = it->second;
      it->second = op;
    }
  }
}

LinearizationSearch::Cursor LinearizationSearch::FirstCandidate() const {
  Cursor cursor;
  cursor.at = next_[kOkHead];
  return cursor;
}

// The op at `cursor`, or -1 when the point has no candidate left. Moves the
// cursor from the ok list to the info list on reaching the frontier.
int32_t LinearizationSearch::Candidate(Cursor& cursor) const {
  if (!cursor.info_phase) {
    if (cursor.at != kEnd && entry_is_call_[cursor.at]) return entry_op_[cursor.at];
    cursor.info_phase = true;
    cursor.frontier = cursor.at == kEnd ? kNoFrontier : cursor.at;
    cursor.at = next_[kInfoHead];
  }
  if (cursor.at == kEnd || cursor.at > cursor.frontier) return -1;
  return entry_op_[cursor.at];
}

void LinearizationSearch::Unlink(int32_t entry) {
  next_[prev_[entry]] = next_[entry];
  if (next_[entry] != kEnd) prev_[next_[entry]] = prev_[entry];
}

// Undoes the latest Unlink still in effect (dancing links).
void LinearizationSearch::Relink(int32_t entry) {
  next_[prev_[entry]] = entry;
  if (next_[entry] != kEnd) prev_[next_[entry]] = entry;
}

void LinearizationSearch::Lift(int32_t op) {
  Unlink(call_entry_[op]);
  if (return_entry_[op] != kEnd) Unlink(return_entry_[op]);
}

void LinearizationSearch::Unlift(int32_t op) {
  if (return_entry_[op] != kEnd) Relink(return_entry_[op]);
  Relink(call_entry_[op]);
}

void LinearizationSearch::Mark(int32_t op) {
  if (IsInfo(op)) {
    info_bits_[info_slot_[op] / 32] |= uint32_t{1} << (info_slot_[op] % 32);
  } else {
    settled_[op / 64] |= uint64_t{1} << (op % 64);
    --ok_remaining_;
  }
}

void LinearizationSearch::Unmark(int32_t op) {
  if (IsInfo(op)) {
    info_bits_[info_slot_[op] / 32] &= ~(uint32_t{1} << (info_slot_[op] % 32));
  } else {
    settled_[op / 64] &= ~(uint64_t{1} << (op % 64));
    ++ok_remaining_;
    unsettled_hint_ = std::min(unsettled_hint_, op);
  }
}

// The first ok op not linearized. Only called while one exists.
int32_t LinearizationSearch::FirstUnsettled() {
  size_t word = unsettled_hint_ / 64;
  while (settled_[word] == ~uint64_t{0}) ++word;
  unsettled_hint_ = static_cast<int32_t>(word * 64) + __builtin_ctzll(~settled_[word]);
  return unsettled_hint_;
}

// Packs (linearized set, state) into key_. With p the first ok op not
// linearized, every ok op below p is linearized, and any linearized ok op
// above p had its call before p's return (the search never passes the
// frontier, and p's return stays at or after it while p is pending): so the
// settled_ words from p up to that call, with the info bits, determine the set.
void LinearizationSearch::PackKey(ModelState state) {
  const int32_t p = FirstUnsettled();
  const int32_t last = calls_before_return_[p] - 1;
  key_.clear();
  key_.push_back(static_cast<uint32_t>(state));
  key_.push_back(static_cast<uint32_t>(p));
  for (int32_t word = p / 64; word <= last / 64; ++word) {
    key_.push_back(static_cast<uint32_t>(settled_[word]));
    key_.push_back(static_cast<uint32_t>(settled_[word] >> 32));
  }
  key_.insert(key_.end(), info_bits_.begin(), info_bits_.end());
}

// Marks `op` linearized with `next_state` after it; false (and unmarked)
// when that pair was reached before.
bool LinearizationSearch::TryLinearize(int32_t op, ModelState next_state) {
  Mark(op);
  if (ok_remaining_ == 0) return true;
  PackKey(next_state);
  if (cache_.Insert(key_)) return true;
  Unmark(op);
  return false;
}

// Undoes the latest linearization and points `cursor` past its op; false
// when there is none left to undo.
bool LinearizationSearch::Backtrack(ModelState& state, Cursor& cursor) {
  if (stack_.empty()) return false;
  const Frame frame = stack_.back();
  stack_.pop_back();
  Unlift(frame.op);
  Unmark(frame.op);
  state = frame.state_before;
  cursor = frame.cursor;
  cursor.at = next_[cursor.at];
  return true;
}

Verdict LinearizationSearch::Run() {
  ModelState state = kAbsentState;
  RecordProgress(state);
  if (ok_remaining_ == 0) return Verdict::kLinearizable;
  Cursor cursor = FirstCandidate();
  while (true) {
    const int32_t op = Candidate(cursor);
    if (op < 0) {
      if (!Backtrack(state, cursor)) return Verdict::kNotLinearizable;
      continue;
    }
    std::optional<ModelState> next_state;
    if (TwinAllows(op)) next_state = model_.Step(state, model_ops_[op]);
    if (!next_state.has_value() || !TryLinearize(op, *next_state)) {
      cursor.at = next_[cursor.at];
      continue;
    }
    stack_.push_back({op, state, cursor});
    state = *next_state;
    Lift(op);
    if (ok_remaining_ == 0) return Verdict::kLinearizable;
    if (stack_.size() > best_depth_) RecordProgress(state);
    if (cache_.size() >= max_states_) return Verdict::kUndecided;
    cursor = FirstCandidate();
  }
}

void LinearizationSearch::RecordProgress(ModelState state) {
  best_depth_ = stack_.size();
  best_state_ = state;
  best_tail_.clear();
  const size_t tail = std::min(stack_.size(), kPrefixOpsShown);
  for (size_t i = stack_.size() - tail; i < stack_.size(); ++i) best_tail_.push_back(stack_[i].op);
  best_pending_.clear();
  Cursor cursor = FirstCandidate();
  for (int32_t op = Candidate(cursor); op >= 0; op = Candidate(cursor)) {
    best_pending_.push_back(op);
    cursor.at = next_[cursor.at];
  }
  best_blocking_ = cursor.frontier == kNoFrontier ? -1 : entry_op_[cursor.frontier];
}

void LinearizationSearch::AppendOps(absl::Span<const int32_t> ops, int64_t origin_ns,
                                    std::vector<std::string>& lines) const {
  for (int32_t op : ops) {
    std::string line = absl::StrCat("    ", FormatOperation(*ops_[op], origin_ns));
    if (op == best_blocking_) absl::StrAppend(&line, "   <- must take effect by its completion");
    lines.push_back(std::move(line));
  }
}

std::string LinearizationSearch::Explain(Verdict verdict, int64_t origin_ns) const {
  if (verdict == Verdict::kLinearizable) return "";
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat(
      "  %s: the longest linearizable prefix found has %d of %d ops (%d states searched)%s",
      verdict == Verdict::kUndecided ? "search stopped at the state limit" : "no linearization",
      best_depth_, ops_.size(), cache_.size(), best_tail_.empty() ? "" : "; it ends with:"));
  AppendOps(best_tail_, origin_ns, lines);
  lines.push_back(absl::StrCat("  state after it: ", model_.Describe(best_state_)));
  lines.push_back(absl::StrFormat("  pending then (%d), none of which %s:", best_pending_.size(),
                                  verdict == Verdict::kUndecided
                                      ? "had been shown to fit next yet"
                                      : "can be linearized next"));
  std::vector<int32_t> shown = best_pending_;
  if (shown.size() > kPendingOpsShown) {
    shown.resize(kPendingOpsShown - 1);
    const bool blocking_shown =
        std::find(shown.begin(), shown.end(), best_blocking_) != shown.end();
    shown.push_back(blocking_shown ? best_pending_[kPendingOpsShown - 1] : best_blocking_);
  }
  AppendOps(shown, origin_ns, lines);
  if (best_pending_.size() > shown.size()) {
    lines.push_back(absl::StrFormat("    ... and %d more", best_pending_.size() - shown.size()));
  }
  return absl::StrJoin(lines, "\n");
}

// Whether `value` could be the state an ok op observes or depends on: an
// empty or numeric value always could (an absent key reads as "", adds need
// numbers); any other only when `mentioned` (an ok read's or cas's result,
// or any cas's expected value).
bool Observable(absl::string_view value, const absl::flat_hash_set<absl::string_view>& mentioned) {
  int64_t number = 0;
  return value.empty() || absl::SimpleAtoi(value, &number) || mentioned.contains(value);
}

// `ops` without the info writes and cas whose new value is not Observable.
// Such an op can always be taken as never having happened: once it has set
// its value v, every op until the next write or swap either is an ok write
// (which overwrites), or an info cas or add that v turned into a no-op (no
// cas expects v, and v is not a number); no other ok op accepts state v. So
// dropping it, and those no-op info ops with it, leaves every other output
// and the state after that overwrite unchanged. The search would otherwise
// carry each such op along, untried or tried, doubling its states each time.
std::vector<const Operation*> DropUnobservableInfo(const std::vector<const Operation*>& ops) {
  absl::flat_hash_set<absl::string_view> mentioned;
  for (const Operation* op : ops) {
    if (op->kind == OpKind::kCas) mentioned.insert(op->arg1);
    if (op->outcome == Outcome::kOk && (op->kind == OpKind::kRead || op->kind == OpKind::kCas)) {
      mentioned.insert(op->result);
    }
  }
  std::vector<const Operation*> kept;
  for (const Operation* op : ops) {
    const bool info_update =
        op->outcome == Outcome::kInfo && (op->kind == OpKind::kWrite || op->kind == OpKind::kCas);
    const std::string& new_value = op->kind == OpKind::kWrite ? op->arg1 : op->arg2;
    if (!info_update || Observable(new_value, mentioned)) kept.push_back(op);
  }
  return kept;
}

}  // namespace

absl::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kLinearizable: return "linearizable";
    case Verdict::kNotLinearizable: return "NOT linearizable";
    case Verdict::kUndecided: return "undecided";
  }
  return "?";
}

KeyVerdict CheckKey(absl::string_view key, const std::vector<const Operation*>& ops,
                    int64_t origin_ns, const CheckOptions& options) {
  KeyVerdict verdict;
  verdict.key = std::string(key);
  std::vector<const Operation*> checked;
  for (const Operation* op : ops) {
    const bool info = op->outcome == Outcome::kInfo;
    if (op->outcome == Outcome::kFail || (info && op->kind == OpKind::kRead)) {
      ++verdict.dropped_ops;
      continue;
    }
    ++(info ? verdict.info_ops : verdict.ok_ops);
    checked.push_back(op);
  }
  checked = DropUnobservableInfo(checked);
  std::stable_sort(checked.begin(), checked.end(), [](const Operation* a, const Operation* b) {
    return a->invoke_ns < b->invoke_ns;
  });
  LinearizationSearch search(std::move(checked), options.max_states);
  verdict.verdict = search.Run();
  verdict.states = search.states();
  verdict.explanation = search.Explain(verdict.verdict, origin_ns);
  return verdict;
}

std::vector<KeyVerdict> CheckLinearizability(const std::vector<Operation>& history,
                                             const CheckOptions& options) {
  std::map<std::string, std::vector<const Operation*>> by_key;
  for (const Operation& op : history) by_key[op.key].push_back(&op);
  const int64_t origin_ns = EarliestInvoke(history);
  std::vector<KeyVerdict> verdicts;
  for (const auto& [key, ops] : by_key) {
    verdicts.push_back(CheckKey(key, ops, origin_ns, options));
  }
  return verdicts;
}

}  // namespace meshrun::jepsen
