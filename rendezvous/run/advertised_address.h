// Each node's advertised address, decided once per round by the server
// (docs/design.md section 4b): the one address every other node of the round can
// reach it on. MASTER_ADDR, libmesh's Gloo pairs and GLOO_SOCKET_IFNAME all
// derive from it.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

// Rewrites `nodes[i].addr` (on input: the explicit --local_addr, resolved,
// when `local_addr` is set; else the source address the server saw for the
// node's connection) into the node's advertised address:
// - an explicit --local_addr is kept as given;
// - a node that reached the server over loopback (it runs on the server's
//   host) takes the address the other nodes dialed to reach the server
//   (the most common `dialed_addr` among non-loopback nodes; ties go to the
//   smallest address), because its own loopback address is useless to them;
// - when every node is on loopback, the job is on one host and loopback
//   addresses are kept.
// Never "the first interface" of a host, never a name.
// Errors (INVALID_ARGUMENT) when the job spans hosts and a node would still
// advertise a loopback address: an explicit --local_addr that resolved to
// loopback (e.g. a host name mapped to 127.0.1.1 by Debian's /etc/hosts),
// or a node on the server's host when no other node reported the address it
// dialed. The message names the node and the value. Pure function.
absl::Status DecideAddresses(std::vector<NodeDesc>& nodes);

}  // namespace meshrun::rendezvous
