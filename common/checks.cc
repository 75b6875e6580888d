#include "common/checks.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace meshrun {

absl::Status PosixError(int errno_value, absl::string_view call,
                        absl::string_view context) {
  std::string msg = absl::StrCat(call, " failed: ", std::strerror(errno_value));
  if (!context.empty()) absl::StrAppend(&msg, " (", context, ")");
  switch (errno_value) {
    case ENOENT: return absl::NotFoundError(msg);
    case EACCES:
    case EPERM: return absl::PermissionDeniedError(msg);
    case EADDRINUSE: return absl::AlreadyExistsError(msg);
    case ETIMEDOUT: return absl::DeadlineExceededError(msg);
    case ECONNREFUSED: return absl::UnavailableError(msg);
    default: return absl::InternalError(msg);
  }
}

}  // namespace meshrun
