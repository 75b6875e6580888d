// Linearizability checking of a store history against StoreModel
// (store_model.h), one key at a time: every operation touches a single key,
// so a history is linearizable exactly when each key's sub-history is
// (P-compositionality).
//
// The search is Wing & Gong's with Lowe's memoization: the operations become
// a time-ordered list of call and return entries; a depth-first search
// linearizes a pending call whose model step accepts its recorded output,
// remembers each (set of linearized operations, model state) pair it has
// reached, and backtracks on reaching a return entry whose operation is not
// linearized yet or a pair seen before. At equal timestamps calls come
// before returns, so operations that merely touch are concurrent.
//
// Indeterminate operations: fail operations and info reads are dropped. An
// info write, cas or add has no return entry (it returns at +infinity) and
// accepts any output, so it may be linearized anywhere after its call, or
// never. Three rules keep them cheap, none of which loses a linearization:
//   - from each point the search tries the pending ok calls first and info
//     ones only after those (deferring an info op never hurts);
//   - info ops with the same kind and arguments are interchangeable, so they
//     are linearized in invoke order only (many indeterminate adds of 1 cost
//     states in proportion to their number, not to that of their subsets);
//   - info writes and cas whose new value no ok operation could observe (not
//     empty, not a number, never a read's or cas's result nor a cas's
//     expected value) are taken as never having happened.
//
// Cost: each remembered pair takes about 60 bytes (more with long-running
// operations or over 32 info operations), about 100 with the containers'
// slack, and a million of them take about a second; a search stops as
// undecided after CheckOptions::max_states pairs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tests/jepsen/history.h"

namespace meshrun::jepsen {

struct CheckOptions {
  // The most (linearized set, state) pairs one key's search may remember
  // before it gives up as kUndecided (the default: about 2 GB, 20 s). Must
  // be positive.
  int64_t max_states = 20'000'000;
};

enum class Verdict { kLinearizable, kNotLinearizable, kUndecided };

// "linearizable", "NOT linearizable" or "undecided". Pure.
absl::string_view VerdictName(Verdict verdict);

// The outcome of checking one key.
struct KeyVerdict {
  std::string key;
  int ok_ops = 0;       // Checked operations that completed.
  int info_ops = 0;     // Indeterminate writes, cas and adds (each may or may not apply).
  int dropped_ops = 0;  // Fail operations and info reads (not checked).
  Verdict verdict = Verdict::kLinearizable;
  int64_t states = 0;   // Pairs the search remembered.
  // Empty when linearizable. Otherwise at most ~20 lines ('\n'-separated, no
  // final newline), times in ms from the history's origin: for a violation,
  // the last operations of the longest linearizable prefix found, the state
  // after it, and the pending operations none of which could be linearized
  // next; for kUndecided, the same for the prefix reached so far.
  std::string explanation;
};

// Checks the operations of one key. `ops` must all have that key (not
// checked); their order does not matter. `origin_ns` is the time reports
// count from (see EarliestInvoke). Never fails: bad values simply make
// operations impossible in the model. Thread-safe (no shared state).
KeyVerdict CheckKey(absl::string_view key, const std::vector<const Operation*>& ops,
                    int64_t origin_ns, const CheckOptions& options);

// Checks every key of `history` with CheckKey, times counted from the
// history's earliest invoke. Returns one verdict per key present in
// `history` (even one with only dropped operations), sorted by key.
// Thread-safe.
std::vector<KeyVerdict> CheckLinearizability(const std::vector<Operation>& history,
                                             const CheckOptions& options);

}  // namespace meshrun::jepsen
