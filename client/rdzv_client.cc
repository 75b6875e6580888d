#include "client/rdzv_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/net.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::client {
namespace {

namespace pb = ::meshrun::v1;
namespace wire = ::meshrun::rendezvous::wire;
using rendezvous::Assignment;
using rendezvous::RunEvent;
using rendezvous::WorkerFailure;

// Says in words why a stream to the server broke, for gRPC's transport
// errors ("Socket closed", "recvmsg:No route to host", ...); a message the
// server sent (e.g. why it shut down) is kept as it is.
std::string DescribeLoss(const grpc::Status& s) {
  const std::string& m = s.error_message();
  auto has = [&](const char* what) { return m.find(what) != std::string::npos; };
  if (has("Socket closed") || has("Connection reset") || has("Broken pipe") || has("End of TCP stream")) {
    return "the connection closed (the server's process or its host went away)";
  }
  if (has("No route to host") || has("Network is unreachable")) return "no route to the server's host (network cut?)";
  if (has("keepalive")) return "the server stopped answering keepalive pings (its host is down or the network is cut)";
  if (has("Connection refused")) return "connection refused (the server is not running)";
  if (has("failed to connect")) return absl::StrCat("cannot connect (", m, ")");
  return m;
}

using wire::FromGrpc;
using wire::FromProto;
using wire::ToProto;

}  // namespace

struct RendezvousClient::Stubs {
  std::unique_ptr<pb::Rendezvous::Stub> stub;
};

RendezvousClient::RendezvousClient(std::string run_id, std::string token, Connection connection)
    : endpoint_(std::move(connection.endpoint)),
      run_id_(std::move(run_id)),
      token_(std::move(token)),
      channel_(std::move(connection.channel)),
      route_(std::move(connection.route)),
      stubs_(std::make_unique<Stubs>(Stubs{pb::Rendezvous::NewStub(channel_)})) {}

RendezvousClient::~RendezvousClient() {
  CancelJoin();
  {
    absl::MutexLock lock(&mu_);
    if (finish_ctx_) finish_ctx_->TryCancel();
  }
  StopWatch();
  // Every call was cancelled above; their threads return promptly.
  std::vector<std::thread> calls;
  {
    absl::MutexLock lock(&mu_);
    calls.swap(calls_);
  }
  for (auto& t : calls) t.join();
}

absl::Duration ServerSilenceLimit(absl::Duration keep_alive_interval, int keep_alive_max_attempt,
                                  absl::Duration server_silence_timeout) {
  const absl::Duration run_limit = keep_alive_interval * std::max(1, keep_alive_max_attempt);
  return std::max(std::min(run_limit, server_silence_timeout), keep_alive_interval + RendezvousClient::kMinHeartbeatWait);
}

absl::StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Connect(
    const std::string& endpoint, const std::string& run_id, const ClientAuth& auth, absl::Duration connect_timeout,
    std::function<absl::Status()> interrupted) {
  DialOptions o;
  o.timeout = connect_timeout;
  o.wait_bound_name = "read_timeout";
  o.interrupted = std::move(interrupted);
  o.channel.own_connection = true;
  // A vanished (not just closed) server is noticed by the heartbeats
  // (Heartbeat below: the run's keep-alive limit without an answer). HTTP/2
  // keepalive is the backstop for a client that sends none; it is slow on
  // purpose: pings every 2 s with a 4 s timeout went unanswered while a
  // server busy with 10,000 joining agents caught up, and every agent
  // dropped its connection at once (bench/rdzv_scale, docs/performance.md).
  o.channel.keepalive_time = kKeepaliveTime;
  o.channel.keepalive_timeout = kKeepaliveTimeout;
  absl::StatusOr<Connection> c = Dial(endpoint, auth.tls, o);
  if (!c.ok()) return c.status();
  return std::unique_ptr<RendezvousClient>(new RendezvousClient(run_id, auth.token, std::move(*c)));
}

void RendezvousClient::JoinAsync(const rendezvous::NodeDesc& node, const rendezvous::RunConfig& config,
                                 int64_t last_round, absl::Duration timeout,
                                 std::function<void(absl::StatusOr<Assignment>)> done) {
  {
    absl::MutexLock lock(&mu_);
    silence_limit_ = ServerSilenceLimit(config.keep_alive_interval, config.keep_alive_max_attempt,
                                        server_silence_timeout_);
  }
  auto req = std::make_shared<pb::JoinRequest>();
  req->mutable_run()->set_run_id(run_id_);
  req->mutable_run()->set_token(token_);
  pb::NodeInfo* n = req->mutable_node();
  n->set_node_id(node.node_id);
  n->set_hostname(node.hostname);
  n->set_addr(node.addr);
  n->set_pid(node.pid);
  n->set_nproc(node.nproc);
  n->set_node_rank_hint(node.node_rank_hint);
  n->set_is_endpoint_host(node.is_endpoint_host);
  n->set_master_port(node.master_port);
  n->set_role(node.role);
  n->set_local_addr(node.local_addr);
  n->set_dialed_addr(node.dialed_addr);
  pb::RunConfig* c = req->mutable_config();
  c->set_min_nodes(config.min_nodes);
  c->set_max_nodes(config.max_nodes);
  c->set_last_call_timeout_ms(absl::ToInt64Milliseconds(config.last_call_timeout));
  c->set_max_restarts(config.max_restarts);
  c->set_exit_barrier_timeout_ms(absl::ToInt64Milliseconds(config.exit_barrier_timeout));
  c->set_keep_alive_interval_ms(absl::ToInt64Milliseconds(config.keep_alive_interval));
  c->set_keep_alive_max_attempt(config.keep_alive_max_attempt);
  req->set_last_round(last_round);
  auto resp = std::make_shared<pb::JoinResponse>();
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  {
    absl::MutexLock lock(&mu_);
    join_ctx_ = ctx;
  }
  // A blocking call on a thread of its own rather than gRPC's client
  // callback API: Debian's gRPC 1.51 can abort in its callback completion
  // queue's reference counting when a client goes away (seen as
  // "ref_counted.h: assertion failed: prior > 0" at exit).
  StartCall([this, req, resp, ctx, timeout, done = std::move(done)]() mutable {
    {
      // A node whose event stream is opening gets its credential in the
      // stream's first event: the join must carry it (bounded wait).
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !watch_opening_ || !session_.empty() || stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
      req->set_session(session_);
    }
    grpc::Status s = stubs_->stub->Join(ctx.get(), *req, resp.get());
    if (!s.ok()) {
      done(FromGrpc(s, "join"));
    } else {
      {
        absl::MutexLock lock(&mu_);
        session_ = resp->assignment().session();
        known_round_ = std::max(known_round_, resp->assignment().round());
      }
      done(FromProto(resp->assignment()));
    }
  });
}

void RendezvousClient::StartCall(std::function<void()> call) {
  absl::MutexLock lock(&mu_);
  calls_.emplace_back(std::move(call));
}

void RendezvousClient::CancelJoin() {
  absl::MutexLock lock(&mu_);
  if (join_ctx_) join_ctx_->TryCancel();
}

void RendezvousClient::StartWatch(const std::string& node_id, int64_t known_round,
                                  std::function<void(const RunEvent&)> on_event,
                                  std::function<void(const absl::Status&)> on_closed) {
  {
    absl::MutexLock lock(&mu_);
    known_round_ = std::max(known_round_, known_round);
    watch_opening_ = session_.empty();
  }
  watch_thread_ = std::thread([this, node_id, on_event = std::move(on_event), on_closed = std::move(on_closed)] {
    // A stream the server cut off because this node read too slowly
    // (RESOURCE_EXHAUSTED) is re-opened from the round known so far, with
    // this node's credential; the server's catch-up event says what was
    // missed. Bounded: a few cut-offs in a row end the stream.
    constexpr int kMaxReopens = 5;
    for (int reopens = 0;; ++reopens) {
      auto ctx = std::make_shared<grpc::ClientContext>();
      pb::WatchRequest req;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) {
          on_closed(absl::OkStatus());
          return;
        }
        watch_ctx_ = ctx;
        req.set_known_round(known_round_);
        req.set_session(session_);
      }
      req.mutable_run()->set_run_id(run_id_);
      req.mutable_run()->set_token(token_);
      req.set_node_id(node_id);
      std::unique_ptr<grpc::ClientReader<pb::RunEvent>> reader = stubs_->stub->Watch(ctx.get(), req);
      pb::RunEvent ev;
      while (reader->Read(&ev)) {
        NoteAnswer();
        if (ev.kind() == pb::RunEvent::SESSION) {
          absl::MutexLock lock(&mu_);
          session_ = ev.session();
          watch_opening_ = false;
          continue;
        }
        {
          absl::MutexLock lock(&mu_);
          watch_opening_ = false;  // A known node's stream has no SESSION event.
        }
        reopens = 0;
        on_event(FromProto(ev));
      }
      grpc::Status s = reader->Finish();
      {
        absl::MutexLock lock(&mu_);
        watch_opening_ = false;
      }
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && reopens < kMaxReopens) {
        Logger("agent")->warn("the rendezvous server cut off this node's event stream ({}); re-opening it",
                              s.error_message());
        continue;
      }
      std::string server_lost;
      {
        absl::MutexLock lock(&mu_);
        server_lost = server_lost_;
      }
      if (s.error_code() == grpc::StatusCode::CANCELLED && !server_lost.empty()) {
        on_closed(absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint_, ": ", server_lost)));
      } else if (s.error_code() == grpc::StatusCode::CANCELLED) {
        on_closed(absl::OkStatus());
      } else if (s.ok()) {
        on_closed(absl::UnavailableError(absl::StrCat("the rendezvous server at ", endpoint_,
                                                      " closed the event stream")));
      } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        on_closed(absl::FailedPreconditionError(s.error_message()));
      } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                 s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        on_closed(absl::UnauthenticatedError(absl::StrCat("the rendezvous server at ", endpoint_,
                                                          " refused this node: ", s.error_message())));
      } else {
        on_closed(absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint_,
                                                      ": ", DescribeLoss(s))));
      }
      return;
    }
  });
}

std::string RendezvousClient::session() const {
  absl::MutexLock lock(&mu_);
  return session_;
}

void RendezvousClient::StopWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_ctx_) watch_ctx_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

absl::StatusOr<int64_t> RendezvousClient::Heartbeat(const std::string& node_id, int64_t round,
                                                  absl::Duration timeout) {
  pb::HeartbeatRequest req;
  req.mutable_run()->set_run_id(run_id_);
  req.mutable_run()->set_token(token_);
  req.set_node_id(node_id);
  req.set_round(round);
  req.set_session(session());
  pb::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  {
    // No longer than the server may stay silent: a frozen server is noticed
    // when this heartbeat's wait ends (NoteHeartbeat).
    absl::MutexLock lock(&mu_);
    if (silence_limit_ > absl::ZeroDuration() && last_answer_ != absl::InfinitePast()) {
      timeout = std::min(timeout, std::max(kMinHeartbeatWait, last_answer_ + silence_limit_ - absl::Now()));
    }
  }
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = stubs_->stub->Heartbeat(&ctx, req, &resp);
  NoteHeartbeat(s);
  if (!s.ok()) return FromGrpc(s, "heartbeat");
  return resp.current_round();
}

void RendezvousClient::NoteAnswer() {
  absl::MutexLock lock(&mu_);
  last_answer_ = absl::Now();
  missed_heartbeats_ = 0;
}

void RendezvousClient::NoteHeartbeat(const grpc::Status& s) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  // Any answer, a refusal included, shows the server is there.
  const bool unanswered = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                          s.error_code() == grpc::StatusCode::UNAVAILABLE;
  if (!unanswered) {
    last_answer_ = now;
    missed_heartbeats_ = 0;
    return;
  }
  if (last_answer_ == absl::InfinitePast()) last_answer_ = now;  // Nothing answered yet: count from here.
  ++missed_heartbeats_;
  // Lost once nothing was answered for the limit (ServerSilenceLimit):
  // heartbeats wait no longer than that, so the one that ends here says so.
  if (silence_limit_ <= absl::ZeroDuration() || now - last_answer_ < silence_limit_ ||
      !server_lost_.empty() || stopping_) {
    return;
  }
  server_lost_ = absl::StrCat("no answer for ", absl::FormatDuration(absl::Trunc(now - last_answer_, absl::Milliseconds(100))),
                              " (", missed_heartbeats_, missed_heartbeats_ == 1 ? " heartbeat" : " heartbeats",
                              " unanswered; limit ", absl::FormatDuration(silence_limit_), "; last: ", DescribeLoss(s),
                              ")");
  Logger("agent")->debug("rendezvous server at {}: {}", endpoint_, server_lost_);
  if (watch_ctx_) watch_ctx_->TryCancel();  // The stream's end says why (StartWatch).
}

absl::StatusOr<rendezvous::FailureVerdict> RendezvousClient::ReportFailure(
    const WorkerFailure& failure, absl::Duration timeout) {
  pb::ReportFailureRequest req;
  req.mutable_run()->set_run_id(run_id_);
  req.mutable_run()->set_token(token_);
  ToProto(failure, req.mutable_failure());
  req.set_session(session());
  pb::ReportFailureResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = stubs_->stub->ReportFailure(&ctx, req, &resp);
  if (!s.ok()) return FromGrpc(s, absl::StrCat("report failure to ", endpoint_));
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
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(5)));
  {
    absl::MutexLock lock(&mu_);
    finish_ctx_ = ctx;
  }
  StartCall([this, req, resp, ctx, done = std::move(done)]() mutable {
    grpc::Status s = stubs_->stub->ReportFinished(ctx.get(), *req, resp.get());
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
