// Turns POSIX failures into absl::Status values that name the failing call.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace meshrun {

// Returns a status for `errno_value` raised by `call` (e.g. "bind"), with
// `context` (e.g. "127.0.0.1:29400") appended when non-empty. The code maps
// ENOENT to NOT_FOUND, EACCES/EPERM to PERMISSION_DENIED, EADDRINUSE to
// ALREADY_EXISTS, ETIMEDOUT to DEADLINE_EXCEEDED, ECONNREFUSED to
// UNAVAILABLE, anything else to INTERNAL. Thread-safe.
absl::Status PosixError(int errno_value, absl::string_view call,
                        absl::string_view context = {});

}  // namespace meshrun

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define MESHRUN_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::absl::Status _meshrun_status = (expr);       \
    if (!_meshrun_status.ok()) return _meshrun_status; \
  } while (0)

#define MESHRUN_CONCAT_INNER(a, b) a##b
#define MESHRUN_CONCAT(a, b) MESHRUN_CONCAT_INNER(a, b)
#define MESHRUN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(*tmp)

// Evaluates `expr` (an absl::StatusOr<T>); on error returns its status, else
// assigns the value to `lhs` (which may be a declaration).
#define MESHRUN_ASSIGN_OR_RETURN(lhs, expr) \
  MESHRUN_ASSIGN_OR_RETURN_IMPL(MESHRUN_CONCAT(_meshrun_or_, __LINE__), lhs, expr)
