#include "agent/store_proxy/store_proxy.h"

#include "agent/store_proxy/forwarded_call.h"
#include "agent/store_proxy/store_batcher.h"
#include "agent/store_proxy/store_upstream.h"

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/channel.h"
#include "common/logging.h"
#include "common/store.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/types.h"
#include "proto/wire.h"

namespace meshrun::agent {
namespace {

namespace pb = ::meshrun::v1;
using Stub = pb::Store::Stub;

// Longest path a Unix socket address holds (sun_path, with its NUL).
constexpr size_t kMaxSocketPath = 107;
// A proxy folder this old whose socket nobody serves is a dead agent's.
constexpr absl::Duration kStaleDirAge = absl::Seconds(60);
// Entries of the base folder looked at per sweep, at most.
constexpr int kMaxSweptEntries = 100000;

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Calls method `m` of the stub's callback API (a callable, since the method
// is overloaded and cannot be named by a member pointer).
#define MESHRUN_ASYNC(m)                                                              \
  [](Stub* stub, grpc::ClientContext* c, const auto* req, auto* resp,                  \
     std::function<void(grpc::Status)> f) { stub->async()->m(c, req, resp, std::move(f)); }

// The workers' side: the server's Store service (and Admin's Status, below).
class ProxyService final : public pb::Store::CallbackService {
 public:
  // `max_forwarded`: calls sent on as they are, held at once (the
  // cache bounds its own by the same figure, store_proxy_max_waiters).
  ProxyService(std::string run_id, std::string shared_run_id, GrpcUpstream* upstream, StoreCache* cache,
               int64_t max_forwarded)
      : run_id_(std::move(run_id)),
        shared_run_id_(std::move(shared_run_id)),
        upstream_(upstream),
        cache_(cache),
        max_forwarded_(max_forwarded) {}

  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* ctx, const pb::KvSetRequest* req,
                                  pb::KvSetResponse* resp) override {
    return Forward(
        ctx, *req, resp, MESHRUN_ASYNC(KvSet),
        [this, req](const pb::KvSetResponse&) { cache_->LearnWrites(req->round(), {req->key()}, {req->value()}); },
        /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvMultiSet(grpc::CallbackServerContext* ctx, const pb::KvMultiSetRequest* req,
                                       pb::KvMultiSetResponse* resp) override {
    return Forward(
        ctx, *req, resp, MESHRUN_ASYNC(KvMultiSet),
        [this, req](const pb::KvMultiSetResponse&) {
          cache_->LearnWrites(req->round(), {req->keys().begin(), req->keys().end()},
                              {req->values().begin(), req->values().end()});
        },
        /*check_run=*/true, /*resend_safe=*/true);
  }
  // An add or a compare-set is sent with a request id (the worker's, else
  // one of this proxy's): the server applies it once however often it is
  // sent (request_records.h), so one that met a server gone away is sent
  // again to the next leader, as a set is.
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* ctx, const pb::KvAddRequest* req,
                                  pb::KvAddResponse* resp) override {
    pb::KvAddRequest identified = *req;
    if (identified.request_id().empty()) identified.set_request_id(NextRequestId());
    return Forward(ctx, identified, resp, MESHRUN_ASYNC(KvAdd), nullptr, /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* ctx, const pb::KvDeleteRequest* req,
                                     pb::KvDeleteResponse* resp) override {
    return Forward(ctx, *req, resp, MESHRUN_ASYNC(KvDelete), nullptr, /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvKeys(grpc::CallbackServerContext* ctx, const pb::KvKeysRequest* req,
                                   pb::KvKeysResponse* resp) override {
    return Forward(ctx, *req, resp, MESHRUN_ASYNC(KvKeys), nullptr, /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvCompareSet(grpc::CallbackServerContext* ctx, const pb::KvCompareSetRequest* req,
                                         pb::KvCompareSetResponse* resp) override {
    pb::KvCompareSetRequest identified = *req;
    if (identified.request_id().empty()) identified.set_request_id(NextRequestId());
    return Forward(
        ctx, identified, resp, MESHRUN_ASYNC(KvCompareSet),
        [this, req](const pb::KvCompareSetResponse& r) {
          cache_->LearnCompareSet(req->round(), req->key(), req->expected(), r.value(), r.swapped());
        },
        /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvCheck(grpc::CallbackServerContext* ctx, const pb::KvCheckRequest* req,
                                    pb::KvCheckResponse* resp) override {
    if (Admit(*req, req->run()).ok() && req->run().run_id() == run_id_ && !req->keys().empty() &&
        cache_->AllCached(req->round(), {req->keys().begin(), req->keys().end()})) {
      resp->set_all_present(true);
      return Answer(ctx, grpc::Status::OK);
    }
    return Forward(ctx, *req, resp, MESHRUN_ASYNC(KvCheck), nullptr, /*check_run=*/true, /*resend_safe=*/true);
  }
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx, const pb::KvGetRequest* req,
                                  pb::KvGetResponse* resp) override {
    if (!Cached(req->run(), req->round(), {req->key()})) {
      return Forward(ctx, *req, resp, MESHRUN_ASYNC(KvGet), nullptr, /*check_run=*/true, /*resend_safe=*/true);
    }
    StoreRequest r{req->round(), {}, {}, {req->key()}, absl::Milliseconds(req->wait_ms())};
    return Submit(ctx, *req, req->run(), std::move(r), [resp](std::vector<std::string>& v) { resp->set_value(std::move(v[0])); });
  }
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* ctx, const pb::KvWaitRequest* req,
                                   pb::KvWaitResponse* resp) override {
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    if (!Cached(req->run(), req->round(), keys)) {
      return Forward(ctx, *req, resp, MESHRUN_ASYNC(KvWait), nullptr, /*check_run=*/true, /*resend_safe=*/true);
    }
    StoreRequest r{req->round(), {}, {}, std::move(keys), absl::Milliseconds(req->wait_ms())};
    return Submit(ctx, *req, req->run(), std::move(r), [](std::vector<std::string>&) {});
  }
  grpc::ServerUnaryReactor* KvMultiGet(grpc::CallbackServerContext* ctx, const pb::KvMultiGetRequest* req,
                                       pb::KvMultiGetResponse* resp) override {
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    if (!Cached(req->run(), req->round(), keys)) {
      return Forward(
          ctx, *req, resp, MESHRUN_ASYNC(KvMultiGet),
          [this, req](const pb::KvMultiGetResponse& r) {
            cache_->LearnWrites(req->round(), {req->set_keys().begin(), req->set_keys().end()},
                                {req->set_values().begin(), req->set_values().end()});
            cache_->LearnWrites(req->round(), {req->keys().begin(), req->keys().end()},
                                {r.values().begin(), r.values().end()});
          },
          /*check_run=*/true, /*resend_safe=*/true);
    }
    StoreRequest r{req->round(),
                   {req->set_keys().begin(), req->set_keys().end()},
                   {req->set_values().begin(), req->set_values().end()},
                   std::move(keys),
                   absl::Milliseconds(req->wait_ms())};
    if (r.set_keys.size() != r.set_values.size()) {
      return Answer(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      absl::StrCat("multi_get: ", r.set_keys.size(), " set keys but ",
                                                   r.set_values.size(), " values")));
    }
    return Submit(ctx, *req, req->run(), std::move(r), [resp](std::vector<std::string>& v) {
      for (auto& s : v) resp->add_values(std::move(s));
    });
  }
  // The server's view of this run (workers count requests with it): its
  // Admin service's Status, for this run.
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const pb::StatusRequest* req,
                                   pb::StatusResponse* resp) {
    pb::StatusRequest mine = *req;
    mine.mutable_run()->set_run_id(run_id_);
    return Forward<v1::Admin::Stub>(
        ctx, mine, resp,
        [](v1::Admin::Stub* stub, grpc::ClientContext* c, const auto* r, auto* out,
           std::function<void(grpc::Status)> f) { stub->async()->Status(c, r, out, std::move(f)); },
        nullptr, /*check_run=*/false);
  }

 private:
  static grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
    auto* r = ctx->DefaultReactor();
    r->Finish(s);
    return r;
  }

  absl::Status Admit(const google::protobuf::Message& req, const pb::RunRef& run) const {
    if (absl::Status s = rendezvous::wire::CheckWellFormed(req); !s.ok()) return s;
    if (run.run_id() == run_id_ || (!shared_run_id_.empty() && run.run_id() == shared_run_id_)) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "this node's store proxy serves run '", run_id_, "'",
        shared_run_id_.empty() ? std::string() : absl::StrCat(" and its lighthouse's run '", shared_run_id_, "'"),
        " only, not '", run.run_id().substr(0, 256), "'"));
  }

  // True when the cache takes these keys: the node's run's, all
  // write-once, of the current round (else the request goes to the server
  // as it is).
  bool Cached(const pb::RunRef& run, int64_t round, const std::vector<std::string>& keys) const {
    return run.run_id() == run_id_ && !keys.empty() && round == cache_->round() &&
           std::all_of(keys.begin(), keys.end(), [](const std::string& k) { return IsWriteOnceKey(k); });
  }

  template <typename Fill>
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx, const google::protobuf::Message& req,
                                   const pb::RunRef& run, StoreRequest r, Fill fill) {
    if (absl::Status s = Admit(req, run); !s.ok()) return Answer(ctx, ToGrpc(s));
    auto* reactor = new ProxyReactor();
    StoreCache::ReadId id =
        cache_->Submit(std::move(r), [reactor, fill = std::move(fill)](absl::StatusOr<std::vector<std::string>> v) mutable {
          if (v.ok()) fill(*v);
          reactor->Complete(ToGrpc(v.status()));
        });
    if (id != 0) reactor->SetOnCancel([cache = cache_, id] { cache->Cancel(id); });
    return reactor;
  }

  // Sends the worker's request on as it is, with the agent's token and node
  // id and the worker's deadline; `learn` sees a successful answer. With
  // `resend_safe` (a request whose repetition changes nothing more: a set,
  // a delete, a read), one that met a server gone away (UNAVAILABLE) is
  // kept until the agent finds the next leader and sent again there, as
  // the batches' reads are (forwarded_call.h says when it gives up).
  template <typename StubT = Stub, typename Req, typename Resp, typename Method, typename Learn>
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* ctx, const Req& worker_req, Resp* resp,
                                    Method method, Learn learn, bool check_run = true, bool resend_safe = false) {
    if (absl::Status s = check_run ? Admit(worker_req, worker_req.run()) : rendezvous::wire::CheckWellFormed(worker_req);
        !s.ok()) {
      return Answer(ctx, ToGrpc(s));
    }
    if (const int64_t n = upstream_->in_flight(); n >= max_forwarded_) {
      return Answer(ctx, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                      absl::StrCat("store proxy has ", n,
                                                   " requests in flight: store_proxy_max_waiters=", max_forwarded_)));
    }
    Req forwarded = worker_req;
    upstream_->FillRun(forwarded.mutable_run());
    // The shared run's answers go around the cache (it holds the node's run's round).
    const bool shared = check_run && worker_req.run().run_id() != run_id_;
    if (shared) forwarded.mutable_run()->set_run_id(shared_run_id_);
    auto* reactor = new ProxyReactor();
    auto answered = [learn, resp, shared](const grpc::Status& s) {
      if constexpr (!std::is_same_v<Learn, std::nullptr_t>) {
        if (s.ok() && !shared) learn(*resp);
      }
    };
    ForwardedCall<StubT, Req, Resp>::Start(upstream_, reactor, std::move(forwarded), resp, ctx->deadline(), resend_safe,
                                           method, std::move(answered));
    return reactor;
  }

  // "<32 random hex digits>-<n>": unique across this proxy's requests and,
  // by its random part, across proxies and agents' lives.
  std::string NextRequestId() {
    return absl::StrCat(request_id_prefix_, "-", next_request_.fetch_add(1, std::memory_order_relaxed));
  }
  static std::string RandomHex128() {
    std::random_device rd;
    std::string out;
    for (int i = 0; i < 4; ++i) absl::StrAppend(&out, absl::Hex(rd(), absl::kZeroPad8));
    return out;
  }

  const std::string run_id_;
  const std::string shared_run_id_;
  GrpcUpstream* const upstream_;
  StoreCache* const cache_;
  const int64_t max_forwarded_;
  const std::string request_id_prefix_ = RandomHex128();
  std::atomic<uint64_t> next_request_{1};
};

// The workers' side of the server's Admin service: Status, for this run.
class ProxyAdminService final : public pb::Admin::CallbackService {
 public:
  explicit ProxyAdminService(ProxyService* store) : store_(store) {}
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const pb::StatusRequest* req,
                                   pb::StatusResponse* resp) override {
    return store_->Status(ctx, req, resp);
  }

 private:
  ProxyService* const store_;
};

// True when something listens on the Unix socket `path` (a connect that
// does not wait: a full backlog counts as listening).
bool Listening(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // Cannot tell: keep it.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  return rc == 0 || (err != ECONNREFUSED && err != ENOENT);
}

}  // namespace

int SweepStaleProxyDirs(const std::string& base, absl::Duration min_age) {
  std::error_code ec;
  std::filesystem::directory_iterator it(base, ec), end;
  const int64_t cutoff = absl::ToUnixSeconds(absl::Now() - min_age);
  int removed = 0;
  for (int seen = 0; !ec && it != end && seen < kMaxSweptEntries; it.increment(ec), ++seen) {
    const std::string name = it->path().filename().string();
    if (name.rfind("meshrun-store-", 0) != 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() ||
        st.st_mtime > cutoff) {
      continue;
    }
    if (Listening((it->path() / "store.sock").string())) continue;
    std::error_code rm;
    std::filesystem::remove_all(it->path(), rm);
    if (!rm) ++removed;
  }
  return removed;
}

namespace {

// A fresh directory of mode 0700 for the socket: under `base`, $TMPDIR or
// /tmp, falling back to /tmp when the socket path would be too long. Stale
// folders of agents that died there first go (SweepStaleProxyDirs).
absl::StatusOr<std::string> MakePrivateDir(std::string base) {
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  const std::string leaf = "/meshrun-store-XXXXXX";
  if (base.size() + leaf.size() + std::string("/store.sock").size() > kMaxSocketPath) base = "/tmp";
  // Once a minute per folder and process at most: a sweep reads the whole
  // folder, and one process may start many proxies (one per re-join of its
  // agent; thousands in bench/rdzv_scale, where a sweep each was O(N^2)).
  static absl::Mutex sweep_mu(absl::kConstInit);
  static auto* last_sweep = new absl::flat_hash_map<std::string, absl::Time>();  // Never freed: static.
  bool sweep = false;
  {
    absl::MutexLock lock(&sweep_mu);
    auto it = last_sweep->find(base);
    if (it == last_sweep->end()) {
      // Bounded: a process remembers at most 1,024 folders (and sweeps no others).
      sweep = last_sweep->size() < 1024;
      if (sweep) last_sweep->emplace(base, absl::Now());
    } else if (absl::Now() - it->second >= kStaleDirAge) {
      it->second = absl::Now();
      sweep = true;
    }
  }
  if (sweep) {
    if (int n = SweepStaleProxyDirs(base, kStaleDirAge); n > 0) {
      Logger("agent")->debug("removed {} store proxy folder(s) of agents gone from {}", n, base);
    }
  }
  std::string templ = base + leaf;
  if (::mkdtemp(templ.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("store proxy: cannot make a directory ", templ, ": ",
                                                      std::strerror(errno)));
  }
  ::chmod(templ.c_str(), 0700);  // mkdtemp's mode already; said again for the record.
  return templ;
}

}  // namespace

struct StoreProxy::Impl {
  std::unique_ptr<GrpcUpstream> upstream;
  std::unique_ptr<StoreBatcher> batcher;
  std::unique_ptr<StoreCache> cache;
  std::unique_ptr<ProxyService> service;
  std::unique_ptr<ProxyAdminService> admin;
  std::unique_ptr<grpc::Server> server;
};

absl::StatusOr<std::unique_ptr<StoreProxy>> StoreProxy::Start(StoreProxyOptions options,
                                                              std::shared_ptr<grpc::Channel> server,
                                                              std::string node_id) {
  absl::StatusOr<std::string> dir = MakePrivateDir(options.dir_base);
  if (!dir.ok()) return dir.status();
  std::unique_ptr<StoreProxy> proxy(new StoreProxy());
  proxy->dir_ = *dir;
  proxy->endpoint_ = absl::StrCat("unix:", *dir, "/store.sock");
  auto impl = std::make_unique<Impl>();
  impl->upstream = std::make_unique<GrpcUpstream>(options.run_id, options.token, options.kept_retry);
  impl->upstream->SetChannel(std::move(server), std::move(node_id));
  if (options.cache.label.empty()) options.cache.label = options.run_id;
  impl->batcher = std::make_unique<StoreBatcher>(impl->upstream.get(), options.batch);
  impl->cache = std::make_unique<StoreCache>(impl->batcher.get(), options.cache);
  impl->service = std::make_unique<ProxyService>(options.run_id, options.shared_run_id, impl->upstream.get(), impl->cache.get(),
                                                 options.cache.max_waiters);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(proxy->endpoint_, grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(INT32_MAX, options.max_message_bytes)));
  impl->admin = std::make_unique<ProxyAdminService>(impl->service.get());
  builder.RegisterService(impl->service.get());
  builder.RegisterService(impl->admin.get());
  impl->server = builder.BuildAndStart();
  proxy->impl_ = std::move(impl);
  if (!proxy->impl_->server) {
    return absl::FailedPreconditionError(absl::StrCat("store proxy: cannot listen on ", proxy->endpoint_));
  }
  Logger("agent")->debug("store proxy for run '{}' on {}", options.run_id, proxy->endpoint_);
  return proxy;
}

StoreProxy::~StoreProxy() {
  if (impl_) {
    if (impl_->server) {
      // Workers' calls in flight are cancelled: a cancelled call cancels its
      // server request, whose answer ends the call.
      impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
      impl_->server->Wait();
    }
    impl_->cache->Shutdown();
    if (!impl_->upstream->Drain(absl::Seconds(5))) {
      Logger("agent")->warn("store proxy: server requests still in flight after 5 s at exit");
    }
    const StoreCacheStats s = impl_->cache->stats();
    const StoreBatcherStats b = impl_->batcher->stats();
    Logger("agent")->info(
        "store proxy: {} worker requests, {} server requests in {} calls ({} passed through), {} keys from the "
        "round's cache, {} keys joined a read in flight",
        s.requests, s.upstream_requests, b.batches, s.passed_through, s.keys_from_cache, s.keys_coalesced);
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

void StoreProxy::SetUpstream(std::shared_ptr<grpc::Channel> server, std::string node_id) {
  impl_->upstream->SetChannel(std::move(server), std::move(node_id));
}

std::shared_ptr<grpc::Channel> StoreProxy::InProcessChannel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(client::kMaxStoreAnswerBytes);
  return impl_->server->InProcessChannel(args);
}

void StoreProxy::SetFollowLeader(bool follow) { impl_->upstream->SetFollowLeader(follow); }

void StoreProxy::SetRound(int64_t round) { impl_->cache->SetRound(round); }

StoreCacheStats StoreProxy::stats() const { return impl_->cache->stats(); }

StoreBatcherStats StoreProxy::batch_stats() const { return impl_->batcher->stats(); }

int64_t StoreProxy::upstream_calls() const { return impl_->upstream->in_flight(); }

}  // namespace meshrun::agent
