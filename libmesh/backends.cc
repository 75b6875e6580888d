#include "backends.h"

#include "client/grpc_store.h"

#include <csignal>
#include <cstdio>

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/net.h"
#include "gloo/gloo_group.h"

namespace meshrun::mesh::internal {

Watchdog::Watchdog(absl::Duration interval, std::function<absl::Status(ProcessGroup*)> check)
    : interval_(interval), check_(std::move(check)), thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  stop_.Notify();
  thread_.join();
}

void Watchdog::Watch(ProcessGroup* group) {
  absl::MutexLock lock(&mu_);
  groups_.push_back(group);
}

void Watchdog::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(interval_)) {
    std::vector<ProcessGroup*> groups;
    {
      absl::MutexLock lock(&mu_);
      groups = groups_;
    }
    for (ProcessGroup* g : groups) {
      absl::Status s = check_(g);
      if (s.ok()) continue;
      std::fprintf(stderr, "[meshrun mesh] error: %s; aborting every communicator of the mesh\n",
                   std::string(s.message()).c_str());
      for (ProcessGroup* other : groups) other->Abort();
      return;
    }
  }
}

void Backend::StartWatchdog(const std::vector<ProcessGroup*>& groups) {
  if (!health_check) return;
  watchdog = std::make_shared<Watchdog>(watchdog_interval, health_check);
  for (ProcessGroup* g : groups) watchdog->Watch(g);
}

void Backend::WatchGroup(ProcessGroup* group) {
  if (watchdog) watchdog->Watch(group);
}

absl::StatusOr<Backend> MakeGlooBackend(std::shared_ptr<Store> store, const World& world, const MeshOptions& options) {
  // Gloo writes to its sockets without MSG_NOSIGNAL: a peer closing while a
  // write is in flight would kill this process with SIGPIPE instead of
  // failing the call. Like the Python interpreter every PyTorch worker runs
  // in, ignore SIGPIPE, unless the program installed a handler of its own.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  // Gloo's tcp device binds and publishes a numeric address: this node's
  // advertised address from the rendezvous (MESHRUN_NODE_ADDR, which every
  // other node reaches); for a worker started by hand without it, the one
  // this host uses to reach the store (a host name may resolve to 127.0.1.1).
  absl::StatusOr<std::string> addr = world.node_addr;
  if (world.node_addr.empty() && client::IsUnixStoreEndpoint(world.store_endpoint)) {
    addr = std::string("127.0.0.1");  // Started by hand beside an agent's proxy: this host only.
  } else if (world.node_addr.empty()) {
    absl::StatusOr<Endpoint> ep = ParseEndpoint(world.store_endpoint, 29400);
    if (!ep.ok()) return ep.status();
    addr = LocalAddressFor(*ep);
    if (!addr.ok()) return addr.status();
  }
  absl::StatusOr<Backend::CreateGroups> create = MakeGlooGroupCreator(store, *addr, options.timeout, options.gloo_loop_nice);
  if (!create.ok()) return create.status();
  Backend b;
  b.name = "gloo";
  b.create_groups = std::move(*create);
  return b;
}

#ifndef MESHRUN_WITH_NCCL
absl::StatusOr<Backend> MakeNcclBackend(std::shared_ptr<Store>, const World&, const MeshOptions&) {
  return absl::UnimplementedError("device type 'cuda' needs libmesh built with NCCL (CUDA toolkit not found at build time)");
}
#endif

}  // namespace meshrun::mesh::internal
