// Jepsen-style operation histories of a key-value store: the record of one
// client operation, and the parser of history files.
//
// A history file is text, one operation per line, 9 tab-separated fields:
//   process  op  key  arg1  arg2  outcome  result  invoke_ns  complete_ns
// `-` stands for the empty string in every field. Lines starting with `#` and
// empty lines are skipped. A last line with fewer than 9 fields and no
// trailing newline (the writer was killed mid-line) is ignored; any other
// malformed line is an error. The complete_ns of an info operation may be `-`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshrun::jepsen {

// The operations of the store's model (PyTorch c10d store semantics).
enum class OpKind {
  kRead,   // Result: the value read (an absent key reads as "").
  kWrite,  // arg1: the value written. No result.
  kCas,    // arg1: expected, arg2: desired. Result: the value the store returned.
  kAdd,    // arg1: the delta (decimal int64). Result: the new value (decimal).
};

// What the client learned about the operation.
enum class Outcome {
  kOk,    // Completed; the result is valid.
  kFail,  // Definitely did not take effect; checkers drop it.
  kInfo,  // Indeterminate: may have taken effect at any time after invoke_ns;
          // the result and complete_ns are meaningless.
};

// One client operation on one key.
struct Operation {
  std::string process;  // The client; its operations never overlap each other.
  OpKind kind = OpKind::kRead;
  std::string key;
  std::string arg1;
  std::string arg2;
  Outcome outcome = Outcome::kOk;
  std::string result;
  int64_t invoke_ns = 0;    // On one clock shared by all processes.
  int64_t complete_ns = 0;  // >= invoke_ns for kOk and kFail; ignored for kInfo.
  int64_t delta = 0;        // kAdd only: arg1 parsed.
};

// "read", "write", "cas" or "add". Pure.
absl::string_view OpKindName(OpKind kind);

// "ok", "fail" or "info". Pure.
absl::string_view OutcomeName(Outcome outcome);

// Parses the text of a history file; `file_name` only names the file in
// errors. Returns the operations in file order, kFail ones included.
// Errors: INVALID_ARGUMENT "<file_name>:<line>: <what is wrong>" for the first
// malformed line: a field count other than 9 (except on a truncated last
// line, which is ignored), an empty process, an unknown op or outcome, a
// non-integer time, complete_ns < invoke_ns on an ok or fail operation, an
// add whose delta (or, when ok, result) is not a decimal int64, a read with
// a non-empty arg1, a read or write with a non-empty arg2. Pure; thread-safe.
absl::StatusOr<std::vector<Operation>> ParseHistory(absl::string_view text,
                                                    absl::string_view file_name);

// Reads the file at `path` and parses it with ParseHistory. Errors: those of
// ParseHistory; NOT_FOUND or UNKNOWN (naming the path) when the file cannot
// be read. Thread-safe.
absl::StatusOr<std::vector<Operation>> ReadHistoryFile(const std::string& path);

// Reads the whole file at `path`. Errors: NOT_FOUND or UNKNOWN naming the
// path. Thread-safe. Shared by the history and probe parsers.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Splits `text` into the tab-separated fields of its lines for the history
// and probe parsers: calls `parse_line(fields, line_number)` for each line
// that is neither empty nor a `#` comment, except a truncated last line
// (fewer than `field_count` fields and no trailing newline), which is
// skipped. Returns the first error of `parse_line`, prefixed with
// "<file_name>:<line_number>: ". Thread-safe when `parse_line` is.
absl::Status ForEachRecord(
    absl::string_view text, absl::string_view file_name, size_t field_count,
    absl::FunctionRef<absl::Status(const std::vector<absl::string_view>& fields,
                                   int line_number)>
        parse_line);

// One operation on one line for reports, times in ms relative to
// `origin_ns`, e.g.
//   [  12.345 ..   13.001 ms] w0.1 cas("a" -> "b") = "b"
//   [  12.345 ..  ?        ms] w0.2 add(1) = ? (info)
// Long values are shortened and non-printable bytes escaped. Pure.
std::string FormatOperation(const Operation& op, int64_t origin_ns);

// A value for reports: C-escaped, quoted, shortened to about 40 bytes. Pure.
std::string QuoteValue(absl::string_view value);

// The earliest invoke_ns of `ops` (0 when empty): the origin of the times
// in reports. Pure.
int64_t EarliestInvoke(const std::vector<Operation>& ops);

}  // namespace meshrun::jepsen
