#include "tests/jepsen/store_model.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace meshrun::jepsen {

StoreModel::StoreModel() {
  values_.emplace_back();  // Id 0 is kAbsentState, not a value.
  numbers_.emplace_back(0);
  empty_ = Intern("");
}

ModelState StoreModel::Intern(absl::string_view value) {
  auto [it, inserted] = ids_.try_emplace(value, static_cast<ModelState>(values_.size()));
  if (inserted) {
    values_.emplace_back(value);
    int64_t number = 0;
    numbers_.push_back(absl::SimpleAtoi(value, &number) ? std::optional<int64_t>(number)
                                                        : std::nullopt);
  }
  return it->second;
}

ModelState StoreModel::InternNumber(int64_t number) {
  auto it = number_ids_.find(number);
  if (it != number_ids_.end()) return it->second;
  ModelState id = Intern(absl::StrCat(number));
  number_ids_.emplace(number, id);
  return id;
}

std::optional<int64_t> StoreModel::NumberOf(ModelState state) const {
  if (state == kAbsentState) return 0;
  return numbers_[state];
}

ModelOp StoreModel::Prepare(const Operation& op) {
  ModelOp prepared;
  prepared.kind = op.kind;
  prepared.info = op.outcome == Outcome::kInfo;
  prepared.arg1 = Intern(op.arg1);
  prepared.arg2 = Intern(op.arg2);
  prepared.result = Intern(op.result);
  prepared.delta = op.delta;
  if (op.kind == OpKind::kAdd && !prepared.info) {
    // The parser guarantees an ok add's result is a decimal int64.
    absl::SimpleAtoi(op.result, &prepared.result_sum);
  }
  return prepared;
}

std::optional<ModelState> StoreModel::StepCas(ModelState state, const ModelOp& op) const {
  ModelState next = state;
  ModelState returned = state;
  if (state == kAbsentState) {
    if (op.arg1 == empty_) {
      next = returned = op.arg2;
    } else {
      returned = op.arg1;
    }
  } else if (state == op.arg1) {
    next = returned = op.arg2;
  }
  if (!op.info && returned != op.result) return std::nullopt;
  return next;
}

std::optional<ModelState> StoreModel::StepAdd(ModelState state, const ModelOp& op) {
  std::optional<int64_t> current = NumberOf(state);
  int64_t sum = 0;
  if (!current.has_value() || __builtin_add_overflow(*current, op.delta, &sum)) {
    // The store refuses the add: an ok one cannot have happened here.
    if (op.info) return state;
    return std::nullopt;
  }
  if (!op.info && sum != op.result_sum) return std::nullopt;
  return InternNumber(sum);
}

std::optional<ModelState> StoreModel::Step(ModelState state, const ModelOp& op) {
  switch (op.kind) {
    case OpKind::kRead: {
      const ModelState seen = state == kAbsentState ? empty_ : state;
      if (op.info || seen == op.result) return state;
      return std::nullopt;
    }
    case OpKind::kWrite:
      return op.arg1;
    case OpKind::kCas:
      return StepCas(state, op);
    case OpKind::kAdd:
      return StepAdd(state, op);
  }
  return std::nullopt;
}

std::string StoreModel::Describe(ModelState state) const {
  if (state == kAbsentState) return "absent";
  return QuoteValue(values_[state]);
}

}  // namespace meshrun::jepsen
