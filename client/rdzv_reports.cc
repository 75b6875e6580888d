// RendezvousClient's reports to the server: a worker's failure and this
// node's arrival at the exit barrier, each sent again to the next leader
// when the one it went to was lost (replicas, docs/etcd.md).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"
#include "common/logging.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::client {

namespace pb = ::meshrun::v1;
using rendezvous::wire::FromGrpc;
using rendezvous::wire::FromProto;
using rendezvous::wire::ToProto;

// Replicas: a report is sent again (at most this many times) when the
// leader it went to was lost and the watch has found the next one.
constexpr int kMaxReportResends = 10;

absl::StatusOr<rendezvous::FailureVerdict> RendezvousClient::ReportFailure(
    const rendezvous::WorkerFailure& failure, absl::Duration timeout) {
  pb::ReportFailureRequest req;
  req.mutable_run()->set_run_id(run_id_);
  req.mutable_run()->set_token(token_);
  ToProto(failure, req.mutable_failure());
  req.set_session(session());
  pb::ReportFailureResponse resp;
  std::shared_ptr<Stubs> stubs = this->stubs();
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = stubs->stub->ReportFailure(ctx.get(), req, &resp);
  // The leader was lost (a failover while a worker failed): reported again
  // to the next one (a report the old leader had saved makes this one
  // secondary: same verdict), within the failover timeout.
  absl::Time deadline;
  {
    absl::MutexLock lock(&mu_);
    deadline = absl::Now() + std::max(timeout, failover_timeout_);
  }
  for (int tries = 0; tries < kMaxReportResends && WaitForNextLeader(s, stubs, deadline, /*cancelled_is_lost=*/true); ++tries) {
    stubs = this->stubs();
    req.set_session(session());
    Logger("agent")->warn("reporting the worker failure again, to the new leader");
    ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + timeout)));
    s = stubs->stub->ReportFailure(ctx.get(), req, &resp);
  }
  if (!s.ok()) return FromGrpc(s, absl::StrCat("report failure to ", endpoint()));
  rendezvous::FailureVerdict v;
  v.decision = resp.decision() == pb::ReportFailureResponse::RESTART ? rendezvous::Decision::kRestart
                                                                     : rendezvous::Decision::kStop;
  v.next_round = resp.next_round();
  v.root_cause = FromProto(resp.root_cause());
  v.is_root_cause = resp.is_root_cause();
  return v;
}

void RendezvousClient::ReportFinishedAsync(
    const std::string& node_id, int64_t round, absl::Duration timeout,
    std::function<void(absl::StatusOr<rendezvous::BarrierResult>)> done) {
  auto req = std::make_shared<pb::ReportFinishedRequest>();
  req->mutable_run()->set_run_id(run_id_);
  req->mutable_run()->set_token(token_);
  req->set_node_id(node_id);
  req->set_round(round);
  req->set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  req->set_session(session());
  auto resp = std::make_shared<pb::ReportFinishedResponse>();
  const absl::Time deadline = absl::Now() + timeout + absl::Seconds(5);
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(deadline));
  {
    absl::MutexLock lock(&mu_);
    finish_ctx_ = ctx;
  }
  StartCall([this, req, resp, ctx, deadline, done = std::move(done)]() mutable {
    std::shared_ptr<Stubs> stubs = this->stubs();
    grpc::Status s = stubs->stub->ReportFinished(ctx.get(), *req, resp.get());
    // The leader was lost while this node waited at the barrier (its
    // arrival is durable): reported again to the next one, within the
    // call's deadline.
    for (int tries = 0; tries < kMaxReportResends && WaitForNextLeader(s, stubs, deadline, /*cancelled_is_lost=*/true); ++tries) {
      stubs = this->stubs();
      req->set_session(session());
      ctx = std::make_shared<grpc::ClientContext>();
      ctx->set_deadline(absl::ToChronoTime(deadline));
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) break;
        finish_ctx_ = ctx;
      }
      Logger("agent")->warn("exit barrier: reporting this node's finish again, to the new leader");
      s = stubs->stub->ReportFinished(ctx.get(), *req, resp.get());
    }
    if (!s.ok()) {
      done(FromGrpc(s, "exit barrier"));
      return;
    }
    rendezvous::BarrierResult r;
    r.all_finished = resp->all_finished();
    r.finished_nodes = resp->finished_nodes();
    r.node_count = resp->node_count();
    done(r);
  });
}

}  // namespace meshrun::client
