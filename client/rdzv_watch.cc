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
      watch_ended_ = true;  // A join waiting for its answer here stops waiting.
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
      bool stopping = false;
      {
        absl::MutexLock lock(&mu_);
        stopping = stopping_;
        if (!stopping) {
          watch_ctx_ = ctx;
          req.set_known_round(known_round_);
          req.set_session(session_);
        }
      }
      if (stopping) {
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
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && reopens < kMaxReopens) {
        Logger("agent")->warn("the rendezvous server cut off this node's event stream ({}); re-opening it",
                              s.error_message());
        // Paced (0.1 s, 0.2 s, ...: 1.5 s in all): a stream refused for room
        // before this node's join arrived is a member's once it has.
        absl::SleepFor(absl::Milliseconds(100 * (reopens + 1)));
        continue;
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
      const std::string& endpoint_ = endpoint;  // The server this stream was on.
      if (s.error_code() == grpc::StatusCode::CANCELLED && !server_lost.empty()) {
        on_closed(absl::UnavailableError(absl::StrCat("lost the rendezvous server at ", endpoint_, ": ", server_lost)));
      } else if (s.error_code() == grpc::StatusCode::CANCELLED) {
        on_closed(absl::OkStatus());
      } else if (s.ok()) {
        on_closed(absl::UnavailableError(absl::StrCat("the rendezvous server at ", endpoint_,
                                                      " closed the event stream")));
      } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        // (A stale node's stream keeps the mark the agent goes by: common/stale.h.)
        absl::Status closed = absl::FailedPreconditionError(s.error_message());
        if (IsStaleDetail(s.error_details())) closed = StaleStatus(s.error_message());
        on_closed(closed);
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

void RendezvousClient::StopWatch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_ctx_) watch_ctx_->TryCancel();
  }
  if (watch_thread_.joinable()) watch_thread_.join();
}

}  // namespace meshrun::client
