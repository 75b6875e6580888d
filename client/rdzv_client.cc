#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/endpoint.h"
#include "common/standby.h"
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

}  // namespace

std::string DescribeLoss(const grpc::Status& s) {
  const std::string& m = s.error_message();
  auto has = [&](const char* what) { return m.find(what) != std::string::npos; };
  // The server's own words (a replica that stops serving says why; they may
  // quote etcd's connection errors, which are not this connection's).
  if (has("server replica")) return m;
  if (has("Socket closed") || has("Connection reset") || has("Broken pipe") || has("End of TCP stream")) {
    return "the connection closed (the server's process or its host went away)";
  }
  if (has("No route to host") || has("Network is unreachable")) return "no route to the server's host (network cut?)";
  if (has("keepalive")) return "the server stopped answering keepalive pings (its host is down or the network is cut)";
  if (has("Connection refused")) return "connection refused (the server is not running)";
  if (has("failed to connect")) return absl::StrCat("cannot connect (", m, ")");
  return m;
}

namespace {

using wire::FromGrpc;
using wire::FromProto;
using wire::ToProto;

bool IsNumericAddress(const std::string& host) {
  in6_addr buf;
  return inet_pton(AF_INET, host.c_str(), &buf) == 1 || inet_pton(AF_INET6, host.c_str(), &buf) == 1;
}

// "ADDRESS:PORT", an IPv6 address in brackets: an endpoint as Dial takes it.
std::string HostPort(const std::string& addr, int port) {
  return addr.find(':') == std::string::npos ? absl::StrCat(addr, ":", port) : absl::StrCat("[", addr, "]:", port);
}

// The replicas behind one endpoint whose host is a name with several
// addresses, each as "ADDRESS:PORT": when the server reached on `channel`
// lists replicas in its status, or refuses as a standby. Empty otherwise
// (one address, a numeric host, or a server that is not replicated).
std::vector<std::string> ReplicaAddresses(const std::string& endpoint, const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& run_id, const std::string& token) {
  absl::StatusOr<Endpoint> ep = ParseEndpoint(endpoint, 29400);
  if (!ep.ok() || IsNumericAddress(ep->host)) return {};
  absl::StatusOr<std::vector<std::string>> addrs = ResolveNumeric(ep->host);
  if (!addrs.ok() || addrs->size() <= 1) return {};
  auto stub = pb::Admin::NewStub(channel);
  pb::StatusRequest req;
  req.mutable_run()->set_run_id(run_id);
  req.mutable_run()->set_token(token);
  pb::StatusResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  const grpc::Status s = stub->Status(&ctx, req, &resp);
  std::string leader;
  if (!(s.ok() && resp.replicas_size() > 0) && !ParseStandbyDetail(s.error_details(), &leader)) return {};
  std::vector<std::string> out;
  for (const std::string& a : *addrs) out.push_back(HostPort(a, ep->port));
  return out;
}

std::vector<std::string> SplitEndpoints(const std::string& endpoint) {
  std::vector<std::string> out;
  for (absl::string_view e : absl::StrSplit(endpoint, ',', absl::SkipWhitespace())) out.emplace_back(e);
  if (out.empty()) out.push_back(endpoint);
  return out;
}

}  // namespace


RendezvousClient::RendezvousClient(std::string run_id, std::string token, Connection connection)
    : run_id_(std::move(run_id)),
      token_(std::move(token)),
      route_(std::move(connection.route)),
      endpoint_(std::move(connection.endpoint)),
      channel_(std::move(connection.channel)),
      stubs_(std::make_shared<Stubs>(Stubs{pb::Rendezvous::NewStub(channel_)})) {
  endpoints_.push_back(endpoint_);
}

std::shared_ptr<RendezvousClient::Stubs> RendezvousClient::stubs() const {
  absl::MutexLock lock(&mu_);
  return stubs_;
}

void RendezvousClient::Stop() {
  CancelJoin();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // Before the cancels: no call starts after them.
    if (finish_ctx_) finish_ctx_->TryCancel();
    for (grpc::ClientContext* hb : heartbeats_) hb->TryCancel();
  }
  StopWatch();
}

RendezvousClient::~RendezvousClient() {
  Stop();
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
  std::vector<std::string> endpoints = SplitEndpoints(endpoint);
  std::string tls_name;
  if (endpoints.size() == 1) {
    absl::StatusOr<Connection> c = Dial(endpoint, auth.tls, o);
    if (!c.ok()) return c.status();
    // One DNS name with several addresses (a Kubernetes headless Service):
    // when the server reached says it is a replica, each address is one.
    std::vector<std::string> replicas = ReplicaAddresses(endpoint, c->channel, run_id, auth.token);
    if (replicas.size() <= 1) {
      return std::unique_ptr<RendezvousClient>(new RendezvousClient(run_id, auth.token, std::move(*c)));
    }
    Logger("agent")->info("{} names {} replicas of the rendezvous server: {}", endpoint, replicas.size(),
                          absl::StrJoin(replicas, ","));
    absl::StatusOr<Endpoint> ep = ParseEndpoint(endpoint, 29400);
    if (ep.ok()) tls_name = ep->host;
    endpoints = std::move(replicas);
  }
  // Replicas: the one that leads (a standby names it; it is asked in turn).
  const absl::Time deadline = absl::Now() + connect_timeout;
  std::vector<std::string> said(endpoints.size());
  for (int sweep = 0; sweep < 100000 && absl::Now() < deadline; ++sweep) {
    for (size_t i = 0; i < endpoints.size(); ++i) {
      if (o.interrupted) {
        if (absl::Status s = o.interrupted(); !s.ok()) return s;
      }
      const absl::Duration left = std::max(absl::Milliseconds(100), std::min(absl::Seconds(1), deadline - absl::Now()));
      DialOptions replica = ReplicaDial(left);
      replica.tls_name = tls_name;
      absl::StatusOr<Connection> c = Dial(endpoints[i], auth.tls, replica);
      if (!c.ok()) {
        said[i] = std::string(c.status().message());
        continue;
      }
      std::string leader;
      if (Probe(c->channel, run_id, auth.token, "", "", &leader, &said[i]) != Probed::kServes) continue;
      auto client = std::unique_ptr<RendezvousClient>(new RendezvousClient(run_id, auth.token, std::move(*c)));
      client->endpoints_ = endpoints;
      client->tls_ = auth.tls;
      client->tls_name_ = tls_name;
      return client;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i < endpoints.size(); ++i) lines.push_back(absl::StrCat(endpoints[i], ": ", said[i]));
  return absl::UnavailableError(absl::StrCat("no rendezvous server replica leads within ",
                                             absl::FormatDuration(connect_timeout), " (", absl::StrJoin(lines, "; "),
                                             ")"));

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
  const absl::Time deadline = absl::Now() + timeout;
  auto ctx = std::make_shared<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(deadline));
  {
    absl::MutexLock lock(&mu_);
    join_ctx_ = ctx;
    join_cancelled_ = false;
  }
  // A blocking call on a thread of its own rather than gRPC's client
  // callback API: Debian's gRPC 1.51 can abort in its callback completion
  // queue's reference counting when a client goes away (seen as
  // "ref_counted.h: assertion failed: prior > 0" at exit).
  StartCall([this, req, resp, ctx, deadline, done = std::move(done)]() mutable {
    grpc::Status s;
    std::optional<absl::StatusOr<Assignment>> answer;
    // Bounded: by the join's deadline, and by the count.
    for (int attempt = 0; attempt < 16; ++attempt) {
      int64_t ends = 0;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_ || join_cancelled_) {
          s = grpc::Status(grpc::StatusCode::CANCELLED, "join cancelled");
          break;
        }
        req->set_answer_on_stream(join_on_stream_ && !watch_ended_);
        // The credential known now, if any: a new node's join needs none (the
        // server matches it with this connection's event stream, whichever
        // of the two arrives first), and waiting for the stream's would race
        // with the server ending that stream to make room.
        req->set_session(has_assignment_ ? session_ : std::string());
        stream_answer_.reset();
        ends = watch_ends_;
      }
      const std::shared_ptr<Stubs> on = stubs();
      s = on->stub->Join(ctx.get(), *req, resp.get());
      if (s.ok() && resp->on_stream()) {
        // Taken: the answer comes on the event stream. A stream that ends
        // first withdraws the join at the server: it is sent again (on the
        // re-opened stream, or to the next leader).
        absl::MutexLock lock(&mu_);
        join_taken_ = true;
        auto answered = [this, ends]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stream_answer_.has_value() || watch_ends_ != ends || watch_ended_ || stopping_ || join_cancelled_;
        };
        mu_.AwaitWithDeadline(absl::Condition(&answered), deadline);
        if (stream_answer_) {
          answer = std::move(stream_answer_);
          stream_answer_.reset();
          break;
        }
        if (stopping_ || join_cancelled_) {
          s = grpc::Status(grpc::StatusCode::CANCELLED, "join cancelled");
          break;
        }
        if (watch_ended_ && !watch_end_.ok()) {
          answer = watch_end_;  // Why the stream ended (a refusal, a lost server) is why the join did.
          break;
        }
        if (watch_ended_) {
          s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the event stream ended while this node was joining");
          break;
        }
        if (watch_ends_ == ends) {
          s = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
          break;
        }
        s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the event stream ended too often while this node joined");
        ctx = std::make_shared<grpc::ClientContext>();
        ctx->set_deadline(absl::ToChronoTime(deadline));
        join_ctx_ = ctx;
        resp->Clear();
        continue;
      }
      // The leader died, or stopped leading, while this join waited for its
      // round: once the event stream has found the next leader (FailOver),
      // the same join goes there (torchrun's c10d re-sends a join whose
      // store went away in the same way, to the same store).
      if (s.ok() || !WaitForNextLeader(s, on, deadline)) break;
      ctx = std::make_shared<grpc::ClientContext>();
      ctx->set_deadline(absl::ToChronoTime(deadline));
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      join_ctx_ = ctx;
    }
    if (answer) {
      done(std::move(*answer));
    } else if (!s.ok()) {
      done(FromGrpc(s, "join"));
    } else {
      {
        absl::MutexLock lock(&mu_);
        session_ = resp->assignment().session();
        has_assignment_ = true;
        join_taken_ = true;
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
  join_cancelled_ = true;
  if (join_ctx_) join_ctx_->TryCancel();
}

std::string RendezvousClient::session() const {
  absl::MutexLock lock(&mu_);
  return session_;
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
    if (stopping_) return absl::CancelledError("heartbeat: the client is stopping");
    if (silence_limit_ > absl::ZeroDuration() && last_answer_ != absl::InfinitePast()) {
      timeout = std::min(timeout, std::max(kMinHeartbeatWait, last_answer_ + silence_limit_ - absl::Now()));
    }
    heartbeats_.insert(&ctx);  // Stop cancels it.
  }
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Status s = replicated() ? HeartbeatAmongReplicas(&ctx, req, &resp) : stubs()->stub->Heartbeat(&ctx, req, &resp);
  {
    absl::MutexLock lock(&mu_);
    heartbeats_.erase(&ctx);
  }
  NoteHeartbeat(s);
  if (std::string leader; endpoints_.size() > 1 && ParseStandbyDetail(s.error_details(), &leader)) {
    RequestFailover(leader);
  }
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
  Logger("agent")->debug("rendezvous server at {}: {}", endpoint_, server_lost_);  // Under mu_.
  if (watch_ctx_) watch_ctx_->TryCancel();  // The stream's end says why (StartWatch).
}

}  // namespace meshrun::client
