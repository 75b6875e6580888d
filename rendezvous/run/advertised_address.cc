#include "rendezvous/run/advertised_address.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "common/setting.h"

namespace meshrun::rendezvous {
namespace {

std::string Describe(const NodeDesc& n) {
  return absl::StrCat("node ", n.hostname.empty() ? n.node_id : n.hostname, " (pid ", n.pid, ")");
}

}  // namespace

absl::Status DecideAddresses(std::vector<NodeDesc>& nodes) {
  bool any_remote = false;
  std::map<std::string, int> dialed;  // Ordered: ties go to the smallest.
  for (const NodeDesc& n : nodes) {
    if (n.addr.empty() || IsLoopback(n.addr)) continue;
    any_remote = true;
    if (!n.dialed_addr.empty() && !IsLoopback(n.dialed_addr)) ++dialed[n.dialed_addr];
  }
  if (!any_remote) return absl::OkStatus();  // One host: loopback is right.

  std::string server_addr;
  int best = 0;
  for (const auto& [addr, count] : dialed) {
    if (count > best) best = count, server_addr = addr;
  }
  for (NodeDesc& n : nodes) {
    if (!n.addr.empty() && !IsLoopback(n.addr)) continue;
    if (!n.local_addr.empty()) {
      return SettingStatus(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat(Describe(n), ": its advertised address ", n.local_addr, " is the loopback address ", n.addr,
                       " there, which the other hosts of this multi-host job cannot reach; give an address or a "
                       "name that resolves to one they reach (Debian maps the host's own name to 127.0.1.1 in "
                       "/etc/hosts)"),
          kAdvertisedAddress);
    }
    if (server_addr.empty()) {
      return SettingStatus(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat(Describe(n), " reached the server over loopback (", n.addr.empty() ? "no address" : n.addr,
                       ") and no other node reported an address it reached the server on; give it an advertised "
                       "address"),
          kAdvertisedAddress);
    }
    n.addr = server_addr;
  }
  return absl::OkStatus();
}

}  // namespace meshrun::rendezvous
