// Session credentials (docs/design.md section 4c): secrets the server hands to a
// node, and their comparison.
#pragma once

#include <string>

namespace meshrun::rendezvous {

// 128 bits from the kernel's CSPRNG (getrandom), as 32 lowercase hex digits.
// Thread-safe.
std::string NewCredential();

// True when `a` equals `b`; constant time for equal lengths (credentials
// all have one length, so the length reveals nothing). Pure.
bool CredentialEquals(const std::string& a, const std::string& b);

}  // namespace meshrun::rendezvous
