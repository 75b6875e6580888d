// The sequential model of one key of the c10d store, for the linearizability
// checker: the key's state, and which outputs each operation may return from
// a state.
//
// Semantics (PyTorch c10d):
//   read:  returns the value; an absent key reads as "".
//   write: sets the value.
//   cas(expected, desired): on an absent key, when expected is "" the key is
//     set to desired and desired is returned, else nothing changes and
//     expected is returned; on a present key, when the value equals expected
//     the key becomes desired and desired is returned, else nothing changes
//     and the value is returned.
//   add(delta): an absent key counts as 0; the key becomes the decimal string
//     of value + delta, which is returned. An ok add is impossible on a value
//     that is not a decimal int64 or when the sum overflows; an info add there
//     changes nothing.
// An info (indeterminate) write, cas or add accepts any output; its effect on
// the state is still applied.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "tests/jepsen/history.h"

namespace meshrun::jepsen {

// One key's state: kAbsentState, or the id of an interned value.
using ModelState = int32_t;
inline constexpr ModelState kAbsentState = 0;

// An operation with its values interned, ready for StoreModel::Step.
struct ModelOp {
  OpKind kind = OpKind::kRead;
  bool info = false;        // Any output is accepted.
  ModelState arg1 = 0;      // write: the value; cas: expected.
  ModelState arg2 = 0;      // cas: desired.
  ModelState result = 0;    // read, cas (ok only): the value returned.
  int64_t delta = 0;        // add: the delta.
  int64_t result_sum = 0;   // add (ok only): the new value returned.
};

// The model of one key. Values are interned: equal strings get equal ids,
// so states compare as integers. Not thread-safe (Step interns new sums);
// use one instance per key and per thread.
class StoreModel {
 public:
  StoreModel();

  // Interns the values of `op` (a read, write, cas or add with outcome ok or
  // info; fail ops belong to no model). Info reads have no effect and no
  // result: callers drop them.
  ModelOp Prepare(const Operation& op);

  // The state after `op` is applied to `state`, or nullopt when `op` could not
  // have returned its recorded output from `state` (never for an info op).
  std::optional<ModelState> Step(ModelState state, const ModelOp& op);

  // The state for reports: "absent" or the quoted value (QuoteValue).
  std::string Describe(ModelState state) const;

 private:
  ModelState Intern(absl::string_view value);
  ModelState InternNumber(int64_t number);
  // The integer value of `state` for add: 0 when absent, nullopt when the
  // value is not a decimal int64.
  std::optional<int64_t> NumberOf(ModelState state) const;
  std::optional<ModelState> StepCas(ModelState state, const ModelOp& op) const;
  std::optional<ModelState> StepAdd(ModelState state, const ModelOp& op);

  std::vector<std::string> values_;              // Indexed by state id; [0] unused.
  std::vector<std::optional<int64_t>> numbers_;  // Parallel to values_.
  absl::flat_hash_map<std::string, ModelState> ids_;
  absl::flat_hash_map<int64_t, ModelState> number_ids_;  // Canonical decimal strings only.
  ModelState empty_ = 0;                         // The id of "".
};

}  // namespace meshrun::jepsen
