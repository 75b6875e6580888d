#include "tests/jepsen/history.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace meshrun::jepsen {
namespace {

constexpr size_t kHistoryFields = 9;
constexpr size_t kMaxQuotedValue = 40;

// `-` is the empty string in every field.
std::string FieldValue(absl::string_view field) {
  return field == "-" ? std::string() : std::string(field);
}

absl::StatusOr<OpKind> ParseOpKind(absl::string_view text) {
  if (text == "read") return OpKind::kRead;
  if (text == "write") return OpKind::kWrite;
  if (text == "cas") return OpKind::kCas;
  if (text == "add") return OpKind::kAdd;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown op \"%s\" (expected read, write, cas or add)", absl::CEscape(text)));
}

absl::StatusOr<Outcome> ParseOutcome(absl::string_view text) {
  if (text == "ok") return Outcome::kOk;
  if (text == "fail") return Outcome::kFail;
  if (text == "info") return Outcome::kInfo;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown outcome \"%s\" (expected ok, fail or info)", absl::CEscape(text)));
}

absl::StatusOr<int64_t> ParseInt64(absl::string_view text, absl::string_view what) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s \"%s\" is not a decimal int64", what, absl::CEscape(text)));
  }
  return value;
}

// Checks what the fields of `op` must satisfy beyond their individual syntax.
absl::Status ValidateOperation(Operation& op) {
  if (op.process.empty()) return absl::InvalidArgumentError("empty process");
  if ((op.kind == OpKind::kRead || op.kind == OpKind::kWrite) && !op.arg2.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %s takes no arg2 (got \"%s\")", OpKindName(op.kind), absl::CEscape(op.arg2)));
  }
  if (op.kind == OpKind::kRead && !op.arg1.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a read takes no arg1 (got \"%s\")", absl::CEscape(op.arg1)));
  }
  if (op.kind == OpKind::kAdd) {
    absl::StatusOr<int64_t> delta = ParseInt64(op.arg1, "add delta");
    if (!delta.ok()) return delta.status();
    op.delta = *delta;
    if (op.outcome == Outcome::kOk) {
      absl::StatusOr<int64_t> sum = ParseInt64(op.result, "add result");
      if (!sum.ok()) return sum.status();
    }
  }
  if (op.outcome != Outcome::kInfo && op.complete_ns < op.invoke_ns) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "complete_ns %d is before invoke_ns %d", op.complete_ns, op.invoke_ns));
  }
  return absl::OkStatus();
}

absl::StatusOr<Operation> ParseOperation(const std::vector<absl::string_view>& fields) {
  Operation op;
  op.process = FieldValue(fields[0]);
  absl::StatusOr<OpKind> kind = ParseOpKind(fields[1]);
  if (!kind.ok()) return kind.status();
  op.kind = *kind;
  op.key = FieldValue(fields[2]);
  op.arg1 = FieldValue(fields[3]);
  op.arg2 = FieldValue(fields[4]);
  absl::StatusOr<Outcome> outcome = ParseOutcome(fields[5]);
  if (!outcome.ok()) return outcome.status();
  op.outcome = *outcome;
  op.result = FieldValue(fields[6]);
  absl::StatusOr<int64_t> invoke = ParseInt64(fields[7], "invoke_ns");
  if (!invoke.ok()) return invoke.status();
  op.invoke_ns = *invoke;
  if (op.outcome == Outcome::kInfo && fields[8] == "-") {
    op.complete_ns = op.invoke_ns;
  } else {
    absl::StatusOr<int64_t> complete = ParseInt64(fields[8], "complete_ns");
    if (!complete.ok()) return complete.status();
    op.complete_ns = *complete;
  }
  if (absl::Status valid = ValidateOperation(op); !valid.ok()) return valid;
  return op;
}

std::string FormatMs(int64_t ns, int64_t origin_ns) {
  return absl::StrFormat("%9.3f", static_cast<double>(ns - origin_ns) / 1e6);
}

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kRead: return "read";
    case OpKind::kWrite: return "write";
    case OpKind::kCas: return "cas";
    case OpKind::kAdd: return "add";
  }
  return "?";
}

absl::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kFail: return "fail";
    case Outcome::kInfo: return "info";
  }
  return "?";
}

absl::Status ForEachRecord(
    absl::string_view text, absl::string_view file_name, size_t field_count,
    absl::FunctionRef<absl::Status(const std::vector<absl::string_view>& fields, int line_number)>
        parse_line) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_number = static_cast<int>(i) + 1;
    absl::string_view line = absl::StripSuffix(lines[i], "\r");
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    // Only the last piece can lack its newline: StrSplit yields "" after a final '\n'.
    const bool unterminated = i + 1 == lines.size();
    if (unterminated && fields.size() < field_count) continue;
    absl::Status status;
    if (fields.size() != field_count) {
      status = absl::InvalidArgumentError(
          absl::StrFormat("expected %d tab-separated fields, got %d", field_count, fields.size()));
    } else {
      status = parse_line(fields, line_number);
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: %s", file_name, line_number, status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Operation>> ParseHistory(absl::string_view text,
                                                    absl::string_view file_name) {
  std::vector<Operation> ops;
  absl::Status status = ForEachRecord(
      text, file_name, kHistoryFields,
      [&ops](const std::vector<absl::string_view>& fields, int) -> absl::Status {
        absl::StatusOr<Operation> op = ParseOperation(fields);
        if (!op.ok()) return op.status();
        ops.push_back(*std::move(op));
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return ops;
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) return absl::UnknownError(absl::StrCat("cannot read ", path));
  return contents.str();
}

absl::StatusOr<std::vector<Operation>> ReadHistoryFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return ParseHistory(*text, path);
}

std::string QuoteValue(absl::string_view value) {
  std::string escaped = absl::CHexEscape(value);
  if (escaped.size() > kMaxQuotedValue) {
    escaped.resize(kMaxQuotedValue - 3);
    absl::StrAppend(&escaped, "...");
  }
  return absl::StrCat("\"", escaped, "\"");
}

std::string FormatOperation(const Operation& op, int64_t origin_ns) {
  const bool known = op.outcome == Outcome::kOk;
  std::string end = known ? FormatMs(op.complete_ns, origin_ns) : absl::StrFormat("%-9s", "?");
  std::string call;
  switch (op.kind) {
    case OpKind::kRead:
      call = absl::StrCat("read() = ", known ? QuoteValue(op.result) : "?");
      break;
    case OpKind::kWrite:
      call = absl::StrCat("write(", QuoteValue(op.arg1), ")");
      break;
    case OpKind::kCas:
      call = absl::StrCat("cas(", QuoteValue(op.arg1), " -> ", QuoteValue(op.arg2),
                          ") = ", known ? QuoteValue(op.result) : "?");
      break;
    case OpKind::kAdd:
      call = absl::StrCat("add(", op.delta, ") = ", known ? op.result : "?");
      break;
  }
  std::string line = absl::StrFormat("[%s .. %s ms] %s %s", FormatMs(op.invoke_ns, origin_ns),
                                     end, op.process, call);
  if (!known) absl::StrAppend(&line, " (", OutcomeName(op.outcome), ")");
  return line;
}

int64_t EarliestInvoke(const std::vector<Operation>& ops) {
  if (ops.empty()) return 0;
  return std::min_element(ops.begin(), ops.end(),
                          [](const Operation& a, const Operation& b) {
                            return a.invoke_ns < b.invoke_ns;
                          })
      ->invoke_ns;
}

}  // namespace meshrun::jepsen
