#include "client/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <optional>

#include "absl/synchronization/mutex.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checks.h"
#include "common/endpoint.h"
#include "common/env_registry.h"
#include "common/grpc_tls.h"
#include "common/net.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"

namespace meshrun::client {
namespace {

namespace pb = ::meshrun::v1;

// Why the server at `ep` cannot be reached over this TLS setting, as
// " (cause)"-style ": cause", or "" when the probe finds nothing.
std::string TlsCause(const std::optional<Endpoint>& ep_or_unix, const TlsMaterial& tls) {
  if (!ep_or_unix) return "";  // The node's store proxy on a Unix socket: no TLS.
  std::string cause = TlsMismatchCause(*ep_or_unix, tls);
  return cause.empty() ? "" : absl::StrCat(": ", cause);
}

// Keys as messages show them (common/store.h's Shown): the first three, and how many more.
std::string ShownKeys(absl::Span<const std::string> keys) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < keys.size() && i < 3; ++i) shown.push_back(Shown(keys[i]));
  std::string out = absl::StrJoin(shown, ", ");
  if (keys.size() > 3) absl::StrAppend(&out, " and ", keys.size() - 3, " more");
  return out;
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

int64_t ToMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return INT64_MAX / 4;
  return std::max<int64_t>(0, absl::ToInt64Milliseconds(d));
}

class GrpcStore : public Store {
 public:
  // `ep`: the server's endpoint; nullopt for a Unix socket (`target`).
  GrpcStore(GrpcStoreOptions options, std::shared_ptr<grpc::Channel> channel, std::optional<Endpoint> ep,
            std::string target)
      : options_(std::move(options)),
        ep_(std::move(ep)),
        channel_(channel),
        stub_(pb::Store::NewStub(channel)),
        target_(std::move(target)),
        connected_(options_.wait_for_connection) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    pb::KvSetRequest req;
    Fill(req);
    req.set_key(std::string(key));
    req.set_value(std::string(value));
    pb::KvSetResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    return Result(stub_->KvSet(&ctx, req, &resp), absl::StrCat("store set '", Shown(key), "'"));
  }

  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    pb::KvGetRequest req;
    Fill(req);
    req.set_key(std::string(key));
    req.set_wait_ms(ToMs(timeout));
    pb::KvGetResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, timeout);
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvGet(&ctx, req, &resp), absl::StrCat("store get '", Shown(key), "'")));
    return std::move(*resp.mutable_value());
  }

  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    pb::KvAddRequest req;
    Fill(req);
    req.set_key(std::string(key));
    req.set_delta(delta);
    pb::KvAddResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvAdd(&ctx, req, &resp), absl::StrCat("store add '", Shown(key), "'")));
    return resp.value();
  }

  absl::StatusOr<CompareSetResult> CompareSwap(absl::string_view key, absl::string_view expected,
                                               absl::string_view desired) override {
    pb::KvCompareSetRequest req;
    Fill(req);
    req.set_key(std::string(key));
    req.set_expected(std::string(expected));
    req.set_desired(std::string(desired));
    pb::KvCompareSetResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvCompareSet(&ctx, req, &resp),
                                     absl::StrCat("store compare_set '", Shown(key), "'")));
    return CompareSetResult{std::move(*resp.mutable_value()), resp.swapped()};
  }

  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override {
    pb::KvWaitRequest req;
    Fill(req);
    for (const auto& k : keys) req.add_keys(k);
    req.set_wait_ms(ToMs(timeout));
    pb::KvWaitResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, timeout);
    return Result(stub_->KvWait(&ctx, req, &resp),
                    absl::StrCat("store wait [", ShownKeys(keys), "]"));
  }

  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
    pb::KvCheckRequest req;
    Fill(req);
    for (const auto& k : keys) req.add_keys(k);
    pb::KvCheckResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvCheck(&ctx, req, &resp), "store check"));
    return resp.all_present();
  }

  absl::StatusOr<KeyList> Keys(absl::string_view prefix, int64_t max_keys) override {
    pb::KvKeysRequest req;
    Fill(req);
    req.set_prefix(std::string(prefix));
    req.set_max_keys(max_keys);
    pb::KvKeysResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvKeys(&ctx, req, &resp), absl::StrCat("store keys '", Shown(prefix), "'")));
    KeyList list;
    list.count = resp.count();
    list.keys.assign(resp.keys().begin(), resp.keys().end());
    return list;
  }

  absl::StatusOr<bool> Delete(absl::string_view key) override {
    pb::KvDeleteRequest req;
    Fill(req);
    req.set_key(std::string(key));
    pb::KvDeleteResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvDelete(&ctx, req, &resp), absl::StrCat("store delete '", Shown(key), "'")));
    return resp.deleted();
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(absl::Span<const std::string> keys,
                                                    absl::Duration timeout) override {
    return SetThenGet({}, {}, keys, timeout, "store multi_get");
  }

  absl::StatusOr<std::vector<std::string>> SetThenMultiGet(absl::Span<const std::string> set_keys,
                                                           absl::Span<const std::string> set_values,
                                                           absl::Span<const std::string> keys,
                                                           absl::Duration timeout) override {
    if (set_keys.size() != set_values.size()) {
      return absl::InvalidArgumentError(absl::StrCat("store set_then_multi_get: ", set_keys.size(),
                                                     " keys but ", set_values.size(), " values"));
    }
    return SetThenGet(set_keys, set_values, keys, timeout, "store set_then_multi_get");
  }

  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override {
    if (keys.size() != values.size()) {
      return absl::InvalidArgumentError(absl::StrCat("store multi_set: ", keys.size(), " keys but ",
                                                     values.size(), " values"));
    }
    pb::KvMultiSetRequest req;
    Fill(req);
    for (const auto& k : keys) req.add_keys(k);
    for (const auto& v : values) req.add_values(v);
    pb::KvMultiSetResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, absl::ZeroDuration());
    return Result(stub_->KvMultiSet(&ctx, req, &resp), "store multi_set");
  }

 private:
  // One KvMultiGet: the sets (if any), then the wait for `keys`.
  absl::StatusOr<std::vector<std::string>> SetThenGet(absl::Span<const std::string> set_keys,
                                                      absl::Span<const std::string> set_values,
                                                      absl::Span<const std::string> keys, absl::Duration timeout,
                                                      absl::string_view what) {
    pb::KvMultiGetRequest req;
    Fill(req);
    for (const auto& k : keys) req.add_keys(k);
    for (const auto& k : set_keys) req.add_set_keys(k);
    for (const auto& v : set_values) req.add_set_values(v);
    req.set_wait_ms(ToMs(timeout));
    pb::KvMultiGetResponse resp;
    grpc::ClientContext ctx;
    Deadline(ctx, timeout);
    MESHRUN_RETURN_IF_ERROR(Result(stub_->KvMultiGet(&ctx, req, &resp), what));
    return std::vector<std::string>(resp.values().begin(), resp.values().end());
  }

  template <typename Req>
  void Fill(Req& req) const {
    req.mutable_run()->set_run_id(options_.run_id);
    req.mutable_run()->set_token(options_.token);
    req.set_round(options_.round);
  }

  // Until the connection has answered once (wait_for_connection = false),
  // calls wait for it to come up within their own deadlines.
  void Deadline(grpc::ClientContext& ctx, absl::Duration wait) const {
    if (!connected_.load(std::memory_order_relaxed)) ctx.set_wait_for_ready(true);
    absl::Duration total = options_.rpc_slack;
    if (wait != absl::InfiniteDuration()) {
      total += wait;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + total));
    }
  }

  absl::Status Result(const grpc::Status& s, absl::string_view what) {
    if (!connected_.load(std::memory_order_relaxed)) {
      const bool down = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (down && channel_->GetState(false) != GRPC_CHANNEL_READY) {
        return absl::UnavailableError(absl::StrCat(ep_ ? "rendezvous store at " : "this node's store proxy at ",
                                                   target_, " is unreachable (", what, ": ",
                                                   s.error_message(), ")", TlsCause(ep_, options_.tls)));
      }
      connected_.store(true, std::memory_order_relaxed);
    }
    return FromGrpc(s, what);
  }

  const GrpcStoreOptions options_;
  const std::optional<Endpoint> ep_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<pb::Store::Stub> stub_;
  const std::string target_;
  std::atomic<bool> connected_;
};

// One channel per server endpoint for the whole process: every store (every
// mesh a worker builds) shares its connection instead of opening a new one.
// A Unix socket ("unix:/path") gets a plain channel: it reaches the node's
// store proxy, which holds the token and TLS (agent/store_proxy/store_proxy.h).
std::shared_ptr<grpc::Channel> SharedChannel(const std::string& target, const std::string& tls_host,
                                             const TlsMaterial& tls, bool unix_socket) {
  static absl::Mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  absl::MutexLock lock(&mu);
  auto& slot = (*channels)[unix_socket ? target
                                       : absl::StrCat(target, "\n", tls.files.cert, "\n", tls.files.key, "\n",
                                                      tls.files.ca)];
  if (!slot) slot = NewChannel(target, tls_host, tls);
  return slot;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Store>> ConnectGrpcStore(const GrpcStoreOptions& options) {
  std::optional<Endpoint> ep;
  std::string target;
  const bool unix_socket = IsUnixStoreEndpoint(options.endpoint);
  if (unix_socket) {
    MESHRUN_RETURN_IF_ERROR(CheckUnixEndpoint(options.endpoint));
    target = options.endpoint;
  } else {
    MESHRUN_ASSIGN_OR_RETURN(ep, ParseEndpoint(options.endpoint, 29400));
    target = ep->ToString();
  }
  if (options.channel) {
    if (!unix_socket) {
      return absl::InvalidArgumentError(
          absl::StrCat("a store over a given channel names its store proxy's unix: endpoint, not '", options.endpoint,
                       "'"));
    }
    // In-process: nothing to connect (and GetState, which tells a lost
    // connection, is not a client channel's there): connected from the start.
    GrpcStoreOptions o = options;
    o.wait_for_connection = true;
    return std::shared_ptr<Store>(std::make_shared<GrpcStore>(o, options.channel, ep, target));
  }
  auto channel = SharedChannel(target, ep ? ep->host : "", options.tls, unix_socket);
  if (!options.wait_for_connection) {
    channel->GetState(/*try_to_connect=*/true);
    return std::shared_ptr<Store>(std::make_shared<GrpcStore>(options, std::move(channel), ep, target));
  }
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat(
        unix_socket ? "this node's store proxy at " : "rendezvous store at ", target, " is unreachable (waited ",
        absl::FormatDuration(options.connect_timeout), ")", TlsCause(ep, options.tls)));
  }
  return std::shared_ptr<Store>(std::make_shared<GrpcStore>(options, std::move(channel), ep, target));
}

bool IsUnixStoreEndpoint(absl::string_view endpoint) { return IsUnixEndpoint(endpoint); }

absl::StatusOr<GrpcStoreOptions> GrpcStoreOptionsFromEnv() {
  GrpcStoreOptions o;
  auto need = [](const env::Var& var) -> absl::StatusOr<std::string> {
    auto v = env::Get(var);
    if (!v) {
      return absl::FailedPreconditionError(absl::StrCat(
          var.name, " is not set: was this process started by meshrun?"));
    }
    return *v;
  };
  MESHRUN_ASSIGN_OR_RETURN(o.endpoint, need(env::kStoreEndpoint));
  MESHRUN_ASSIGN_OR_RETURN(o.run_id, need(env::kMeshrunRunId));
  MESHRUN_ASSIGN_OR_RETURN(std::optional<long long> round, env::GetInt(env::kRound));
  if (!round) return absl::FailedPreconditionError("MESHRUN_ROUND is not set: was this process started by meshrun?");
  o.round = *round;
  // Through the node's store proxy (a Unix socket), the agent adds the token
  // and TLS: none is read here.
  if (IsUnixStoreEndpoint(o.endpoint)) return o;
  absl::StatusOr<ClientAuth> auth = LoadClientAuth("", {});
  if (!auth.ok()) return auth.status();
  o.token = std::move(auth->token);
  o.tls = std::move(auth->tls);
  return o;
}

}  // namespace meshrun::client
