// bench/rdzv_scale: the workers phase. After the round closed, each
// simulated agent starts the node agent's own store proxy
// (agent::StoreProxy, over the agent client's channel, in its node id, with
// the node's workers as its expected publishers, as the agent does) and
// `workers_per_agent` simulated workers per agent fetch the NCCL unique ids
// of a 3-D mesh through it, sending exactly libmesh's requests: the
// exchange is planned by libmesh's own code (libmesh/agreement.cc
// PlanUniqueIds and PlanAgreement: per row, the coordinate-0 member's id
// under "mesh/<id>/d<dim>/row<r>", inside the members' agreement on
// "mesh/<id>"), sent as its one SetThenMultiGet (a KvMultiGet with sets)
// and, for the first member, the verdict's KvCompareSet, and read back
// with libmesh's VerdictOf / FinishUniqueIds.
//
// The workers are asynchronous (gRPC's callback API), not a thread each:
// 32,768 threads (4,096 agents x 8) exceed what this machine can schedule
// beside the server. The workers of one agent share one channel to its
// proxy's Unix socket (a real worker has its own; connections to the proxy
// are the node's own work, not the server's). Only the exchange's normal
// path is simulated: a worker whose request fails is counted failed with
// the error (libmesh would propose a timeout verdict).
//
// Two steps, so that every load process's clock starts together: first,
// untimed, the proxies, the workers' channels to them and every worker's
// planned request (libmesh's planning is O(its rows' sizes) per worker:
// on a cluster each worker does it on its own core before its first store
// request; serialised on 2 cores, 32,768 workers' plans took seconds, and
// one load process's plans ran inside another's clock); then the requests.
//
// Mesh: (nnodes, 2, workers_per_agent / 2) named (node, pair, local) for an
// even workers_per_agent, else (nnodes, 1, workers_per_agent); rank =
// node_rank * workers_per_agent + local index.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/rdzv_scale/sim_agents.h"

#include "agent/store_proxy/store_proxy.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace grpc {
class Channel;
}

namespace meshrun::bench {

struct SimNode {
  std::shared_ptr<grpc::Channel> channel;  // The agent client's channel to the server.
  std::string node_id;
  int node_rank = -1;
  int64_t round = 0;
};

// The mesh shape used for `nnodes` x `workers_per_agent` ranks.
std::vector<int> WorkersMeshShape(int nnodes, int workers_per_agent);

struct Tally;  // sim_workers.cc
class Worker;

// The phase for one load process's agents, in two steps, so that the
// driver can start every load process's clock together: Prepare, in every
// load process, then Run.
class WorkersPhase {
 public:
  explicit WorkersPhase(SimConfig config);
  // Cancels what is still in flight (the proxies' shutdown).
  ~WorkersPhase();
  WorkersPhase(const WorkersPhase&) = delete;
  WorkersPhase& operator=(const WorkersPhase&) = delete;

  // Untimed set-up for `nodes` (this process's agents): their store proxies
  // and the workers' channels to them, connected; every worker's exchange
  // planned and its request built (a real worker does that on its own core
  // before its first store request). ok: workers ready; failed: those whose
  // planning failed (or all, when a proxy did not start). Call once.
  PhaseResult Prepare(const std::vector<SimNode>& nodes);

  // Sends every prepared worker's request and waits for all answers.
  // start: the first worker's first store request; end: the last worker
  // having all its ids; ok / failed count workers (a worker whose ids are
  // not its rows' leaders' is failed). Call once, after Prepare.
  PhaseResult Run();

 private:
  const SimConfig config_;
  std::shared_ptr<Tally> tally_;
  std::vector<std::unique_ptr<agent::StoreProxy>> proxies_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::shared_ptr<::meshrun::v1::Store::Stub>> stubs_;
  std::vector<Worker*> unsent_;
};

}  // namespace meshrun::bench
