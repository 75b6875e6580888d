// RendezvousClient's event stream (Watch): opened once, re-opened with the
// node's credential after a cut-off or an eviction before joining, and what
// its end means to the agent. The rest of the client is in rdzv_client.cc.
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/rdzv_client.h"
#include "client/rdzv_client_internal.h"
#include "common/logging.h"
#include "common/stale.h"
#include "common/standby.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"

namespace meshrun::client {

namespace pb = ::meshrun::v1;
using rendezvous::RunEvent;
using rendezvous::wire::FromGrpc;
using rendezvous::wire::FromProto;

namespace {

// What the end of the event stream on the server at `endpoint` (no
// failover) tells the agent: OK for a stream this client cancelled; the
// server's refusal with its own code and words (a stale node's keeps its
// mark, common/stale.h; a refused credential or token is UNAUTHENTICATED);
// UNAVAILABLE for a lost server (`server_lost`: why the heartbeats gave it
// up, when they did). Pure.
absl::Status EndOfStream(const grpc::Status& s, const std::string& endpoint, const std::string& server_lost) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return absl::UnavailableError(absl::StrCat("the rendezvous server at ", endpoint, " closed the event stream"));
    case grpc::StatusCode::CANCELLED:
      if (server_lost.empty()) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint, ": ", server_lost));
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (IsStaleDetail(s.error_details())) return StaleStatus(s.error_message());
      return absl::FailedPreconditionError(s.error_message());
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::UnauthenticatedError(
          absl::StrCat("the rendezvous server at ", endpoint, " refused this node: ", s.error_message()));
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::OUT_OF_RANGE:
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("the rendezvous server at ", endpoint, " refused this node's event stream: ",
                                       s.error_message()));
    default:
      return absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint, ": ", DescribeLoss(s)));
  }
}

}  // namespace

void RendezvousClient::StartWatch(const std::string& node_id, int64_t known_round,
                                  std::function<void(const RunEvent&)> on_event,
                                  std::function<void(const absl::Status&)> on_closed) {
  {
    absl::MutexLock lock(&mu_);
    known_round_ = std::max(known_round_, known_round);
    watch_opening_ = session_.empty();
  }
  watch_node_id_ = node_id;
  on_closed = [this, closed = std::move(on_closed)](const absl::Status& s) {
    {
      absl::MutexLock lock(&mu_);
      watch_ended_ = true;  // A join waiting for its answer here stops waiting, with `s`.
      watch_end_ = s;
    }
    closed(s);
  };
  watch_thread_ = std::thread([this, node_id, on_event = std::move(on_event), on_closed = std::move(on_closed)] {
    // A stream the server cut off because this node read too slowly
    // (RESOURCE_EXHAUSTED) is re-opened from the round known so far, with
    // this node's credential; the server's catch-up event says what was
    // missed. Bounded: a few cut-offs in a row end the stream.
    constexpr int kMaxReopens = 5;
    // Evictions before joining (see below): each costs the server's flood
    // a slot it had to free, so allow more of them.
    constexpr int kMaxEvictions = 20;
    constexpr char kEvictedMetadata[] = "meshrun-evicted";  // rendezvous/grpc/watch_reactor.h
    for (int reopens = 0;; ++reopens) {
      auto ctx = std::make_shared<grpc::ClientContext>();
      pb::WatchRequest req;
      bool stopped = false;
      // The server held this node's join (or assignment) before the stream
      // opened: it judges the stream as a member's, and a refusal is final.
      bool member = false;
      {
        absl::MutexLock lock(&mu_);
        stopped = stopping_;
        member = join_taken_;
        watch_ctx_ = ctx;
        req.set_known_round(known_round_);
        req.set_session(session_);
      }
      if (stopped) {
        on_closed(absl::OkStatus());  // Without mu_: on_closed takes it.
        return;
      }
      req.mutable_run()->set_run_id(run_id_);
      req.mutable_run()->set_token(token_);
      req.set_node_id(node_id);
      std::unique_ptr<grpc::ClientReader<pb::RunEvent>> reader = stubs()->stub->Watch(ctx.get(), req);
      pb::RunEvent ev;
      bool admitted = false;  // The server took this stream: it sent an event.
      while (reader->Read(&ev)) {
        admitted = true;
        NoteAnswer();
        if (ev.kind() == pb::RunEvent::SESSION) {
          absl::MutexLock lock(&mu_);
          // A join's answer carries the newer credential: a SESSION event
          // read after it (handed to this stream while the join was parked)
          // is older.
          if (!has_assignment_) session_ = ev.session();
          watch_opening_ = false;
          continue;
        }
        if (ev.kind() == pb::RunEvent::JOIN_ANSWERED) {
          // The answer to this node's join (JoinAsync waits for it).
          absl::MutexLock lock(&mu_);
          watch_opening_ = false;
          if (ev.refusal_code() != 0) {
            stream_answer_ = FromGrpc(
                grpc::Status(static_cast<grpc::StatusCode>(ev.refusal_code()), ev.refusal_message(),
                             ev.refusal_details()),
                "join");
          } else {
            session_ = ev.assignment().session();
            has_assignment_ = true;
            join_taken_ = true;
            known_round_ = std::max(known_round_, ev.assignment().round());
            stream_answer_ = FromProto(ev.assignment());
          }
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
        // The end of a stream the server had taken withdrew a join waiting
        // for its answer on it (one it refused at once withdrew nothing).
        if (admitted) ++watch_ends_;
      }
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          ctx->GetServerTrailingMetadata().count(kEvictedMetadata) > 0 && reopens < kMaxEvictions) {
        // Ended to make room among nodes that have not joined (a flood of
        // streams on this run): the server forgot this node; open a new
        // stream as a new node, and join with its credential.
        Logger("agent")->warn("the rendezvous server ended this node's event stream before it joined ({}); "
                              "re-opening it", s.error_message());
        absl::MutexLock lock(&mu_);
        if (!has_assignment_) session_.clear();  // A joined node keeps its credential.
        watch_opening_ = session_.empty();
        continue;
      }
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && !admitted && !member && reopens < kMaxReopens) {
        // Refused at open before the server had this node's join: a
        // non-member's stream may be refused room (the members' reserve,
        // memory_budget.h) that a joining member's gets. Re-opened once the
        // join is taken (at most 0.1 s, 0.2 s, ... later); a refusal of the
        // member's stream is final.
        Logger("agent")->debug("the rendezvous server refused this node's event stream before its join ({}); "
                               "re-opening it once the join is taken", s.error_message());
        if (PauseUnlessStopping(absl::Milliseconds(100 * (reopens + 1)), /*until_join_taken=*/true)) continue;
        on_closed(absl::OkStatus());
        return;
      }
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && admitted && reopens < kMaxReopens) {
        Logger("agent")->warn("the rendezvous server cut off this node's event stream ({}); re-opening it",
                              s.error_message());
        // Paced (0.1 s, 0.2 s, ...: 1.5 s in all), and ended by a stop.
        if (PauseUnlessStopping(absl::Milliseconds(100 * (reopens + 1)), /*until_join_taken=*/false)) continue;
        on_closed(absl::OkStatus());
        return;
      }
      std::string server_lost, endpoint, wanted_why;
      absl::Duration failover_timeout;
      bool wanted = false;
      {
        absl::MutexLock lock(&mu_);
        server_lost = server_lost_;
        wanted_why = failover_why_;
        endpoint = endpoint_;
        failover_timeout = failover_timeout_;
        wanted = failover_wanted_;
        if (stopping_) wanted = false;
      }
      // Replicas: a lost or standing-by server is a failover, not the end.
      std::string standby_leader;
      const bool standby = ParseStandbyDetail(s.error_details(), &standby_leader);
      const bool lost = standby || wanted || (s.error_code() == grpc::StatusCode::CANCELLED && !server_lost.empty()) ||
                        s.error_code() == grpc::StatusCode::UNAVAILABLE || s.ok();
      if (endpoints_.size() > 1 && lost && !(s.error_code() == grpc::StatusCode::CANCELLED && !wanted && server_lost.empty())) {
        if (standby) {
          absl::MutexLock lock(&mu_);
          failover_hint_ = standby_leader;
        }
        const std::string why = standby ? std::string(s.error_message())
                                : wanted ? (wanted_why.empty()
                                                ? std::string("a heartbeat was refused by a replica that does not serve")
                                                : wanted_why)
                                : !server_lost.empty() ? server_lost
                                : s.ok() ? std::string("it closed the event stream")
                                         : DescribeLoss(s);
        absl::Status f = FailOver(why, absl::Now() + failover_timeout);
        if (f.ok()) {
          reopens = 0;
          {
            // A join taken but not answered yet is not in etcd (a round
            // that has not closed is never saved): the next leader, or this
            // one after a reload, does not have it. It is sent again
            // (JoinAsync) when the stream's end did not count already: the
            // stream had received nothing (its first event held back by a
            // save that failed). Counted once: a second count would send
            // the join again while the first re-sent one waits.
            absl::MutexLock lock(&mu_);
            if (!admitted) ++watch_ends_;
          }
          continue;
        }
        if (absl::IsCancelled(f)) {
          on_closed(absl::OkStatus());
        } else {
          on_closed(absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint, " (", why, "): ",
                                                        f.message())));
        }
        return;
      }
      on_closed(EndOfStream(s, endpoint, server_lost));
      return;
    }
  });
}

void RendezvousClient::StopWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_ctx_) watch_ctx_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

bool RendezvousClient::PauseUnlessStopping(absl::Duration d, bool until_join_taken) {
  absl::MutexLock lock(&mu_);
  auto over = [this, until_join_taken]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || (until_join_taken && join_taken_);
  };
  mu_.AwaitWithTimeout(absl::Condition(&over), d);
  return !stopping_;
}

}  // namespace meshrun::client
