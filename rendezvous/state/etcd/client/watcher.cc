// Client::Watch: one thread per watch, holding one Watch stream at a time and
// opening the next one (on the next member when the last one broke) from the
// revision after the last event delivered.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/state/etcd/client/client_impl.h"
#include "rendezvous/state/etcd/client/etcd_client.h"
#include "rendezvous/state/etcd/client/etcd_wire.h"

namespace meshrun::rendezvous::state::etcd {
namespace pb = ::etcdserverpb;

struct Watcher::Impl {
  Client::Impl* client = nullptr;
  std::string key;
  WatchOptions options;
  WatchCallbacks callbacks;

  struct State {
    bool cancelled = false;
    grpc::ClientContext* stream_ctx = nullptr;  // The open stream's, for Cancel's TryCancel.
    int64_t next_revision = 0;
  };
  mutable absl::Mutex mu;
  State state ABSL_GUARDED_BY(mu);
  std::thread thread;

  bool cancelled() const {
    absl::MutexLock lock(&mu);
    return state.cancelled;
  }
  // Waits `d` or until cancelled; true when cancelled.
  bool WaitCancelled(absl::Duration d) {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(&state.cancelled), d);
    return state.cancelled;
  }
  void Status(const absl::Status& s, const std::string& member, bool final) {
    if (callbacks.on_status) callbacks.on_status(WatchStatus{s, member, final});
  }
  void Run();
  // One stream on member `i` until it ends. Returns a final error (the
  // watch ends), or OK to go on with another stream; `broke` says why
  // this one ended.
  absl::Status Stream(int i, std::string* broke);
};

absl::Status Watcher::Impl::Stream(int i, std::string* broke) {
  Member& m = *client->members[i];
  grpc::Status auth_failure;
  absl::StatusOr<std::string> token = client->Token(m, absl::Now() + client->options.call_timeout, &auth_failure);
  if (!token.ok()) {
    if (wire::Classify(auth_failure) == wire::Failure::kFinal) return token.status();
    *broke = absl::StrCat("Authenticate: ", auth_failure.error_message());
    return absl::OkStatus();
  }
  grpc::ClientContext ctx;
  // No deadline: a watch lasts. The "hasleader" metadata makes etcd end the
  // stream when its member loses the leader for long (its monitorLeader);
  // keep-alive pings end it when the member stops answering.
  ctx.AddMetadata("hasleader", "true");
  if (!token->empty()) ctx.AddMetadata("token", *token);
  int64_t from;
  {
    absl::MutexLock lock(&mu);
    if (state.cancelled) return absl::OkStatus();
    state.stream_ctx = &ctx;
    from = state.next_revision;
  }
  auto stream = m.watch->Watch(&ctx);
  pb::WatchRequest req;
  pb::WatchCreateRequest* create = req.mutable_create_request();
  create->set_key(key);
  create->set_range_end(options.range_end);
  create->set_start_revision(from);
  create->set_prev_kv(options.prev_kv);
  absl::Status final_error;
  if (stream->Write(req)) {
    pb::WatchResponse resp;
    while (stream->Read(&resp)) {
      if (resp.created()) {
        {
          absl::MutexLock lock(&mu);
          if (state.next_revision == 0) state.next_revision = resp.header().revision() + 1;
        }
        Status(absl::OkStatus(), m.name, false);
      }
      if (resp.canceled()) {
        const std::string& why = resp.cancel_reason();
        if (resp.compact_revision() > 0) {
          final_error = absl::OutOfRangeError(absl::StrCat(
              "etcd ", m.name, ": watch of ", wire::ShowKey(key), " from revision ", from,
              ": etcd compacted its history up to revision ", resp.compact_revision(),
              ": read the keys again and watch from the revision of that read + 1"));
        } else if (absl::StrContains(why, "invalid auth token")) {
          client->DropToken(*token);
          *broke = why;
        } else if (absl::StrContains(why, "permission denied")) {
          final_error = absl::PermissionDeniedError(absl::StrCat("etcd ", m.name, ": watch of ", wire::ShowKey(key),
                                                                 ": permission denied for user '",
                                                                 client->options.user, "'"));
        } else {
          *broke = why.empty() ? "etcd cancelled the watch" : why;
        }
        break;
      }
      if (resp.events_size() > 0) {
        for (const auto& ev : resp.events()) {
          if (callbacks.on_event) callbacks.on_event(wire::FromPb(ev));
        }
        absl::MutexLock lock(&mu);
        state.next_revision = resp.events(resp.events_size() - 1).kv().mod_revision() + 1;
      }
    }
  }
  {
    absl::MutexLock lock(&mu);
    state.stream_ctx = nullptr;
  }
  ctx.TryCancel();
  grpc::Status s = stream->Finish();
  if (broke->empty()) {
    *broke = s.ok() ? "the stream ended" : s.error_message().empty() ? absl::StrCat("gRPC code ", s.error_code())
                                                                      : s.error_message();
  }
  return final_error;
}

void Watcher::Impl::Run() {
  int failures = 0;
  int start = client->current();
  while (!cancelled()) {
    absl::StatusOr<int> i = client->PickReady(start, absl::Now() + client->options.call_timeout);
    if (!i.ok()) {
      if (cancelled()) return;
      Status(i.status(), client->members[start]->name, false);
    } else {
      std::string broke;
      absl::Status final_error = Stream(*i, &broke);
      if (cancelled()) return;
      if (!final_error.ok()) {
        Logger("rdzv")->warn("{}", std::string(final_error.message()));
        Status(final_error, client->members[*i]->name, true);
        return;
      }
      const std::string name = client->members[*i]->name;
      Logger("rdzv")->info("etcd {}: watch of {} broke ({}); re-establishing", name, wire::ShowKey(key), broke);
      Status(absl::UnavailableError(absl::StrCat("etcd ", name, ": watch of ", wire::ShowKey(key), " broke: ", broke)),
             name, false);
      // The next stream starts on the next member: this one may be cut off
      // from its leader although it still answers.
      start = (*i + 1) % static_cast<int>(client->members.size());
    }
    ++failures;
    const absl::Duration backoff =
        std::min(options.max_backoff, absl::Milliseconds(50) * (1 << std::min(failures - 1, 6)));
    if (WaitCancelled(backoff)) return;
  }
}

Watcher::Watcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Watcher::~Watcher() { Cancel(); }

void Watcher::Cancel() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->state.cancelled = true;
    if (impl_->state.stream_ctx != nullptr) impl_->state.stream_ctx->TryCancel();
  }
  if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id()) impl_->thread.join();
}

int64_t Watcher::next_revision() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->state.next_revision;
}

std::unique_ptr<Watcher> Client::Watch(const std::string& key, WatchOptions options, WatchCallbacks callbacks) {
  auto impl = std::make_unique<Watcher::Impl>();
  impl->client = impl_.get();
  impl->key = key;
  impl->options = std::move(options);
  impl->callbacks = std::move(callbacks);
  impl->state.next_revision = impl->options.start_revision;
  Watcher::Impl* raw = impl.get();
  auto watcher = std::make_unique<Watcher>(std::move(impl));
  raw->thread = std::thread([raw] { raw->Run(); });
  return watcher;
}

}  // namespace meshrun::rendezvous::state::etcd
