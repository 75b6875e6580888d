#include "rendezvous/run/credential.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace meshrun::rendezvous {

// 128 bits from the kernel's CSPRNG, as hex.
std::string NewCredential() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // No getrandom (a very old kernel): the same source through the file.
      std::FILE* f = std::fopen("/dev/urandom", "rb");
      if (f == nullptr || std::fread(bytes, 1, sizeof(bytes), f) != sizeof(bytes)) {
        std::fprintf(stderr, "meshrun: fatal: no source of random bytes for session credentials\n");
        std::abort();
      }
      std::fclose(f);
      got = sizeof(bytes);
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * sizeof(bytes), '0');
  for (size_t i = 0; i < sizeof(bytes); ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

// Constant time for equal lengths; credentials all have one length.
bool CredentialEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace meshrun::rendezvous
