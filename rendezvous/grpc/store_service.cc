// The store methods of the Rendezvous service (Kv*): the gRPC side of each
// run's KvStore (kv_store.h). The rest of the service is in
// rendezvous_service.cc.
#include "absl/strings/str_cat.h"
#include "common/standby.h"
#include "proto/wire.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/grpc/kv_batch_reactor.h"
#include "rendezvous/grpc/reactors.h"
#include "rendezvous/grpc/rendezvous_service.h"

namespace meshrun::rendezvous {

namespace pb = ::meshrun::v1;
using wire::ToGrpc;

absl::StatusOr<std::shared_ptr<Run>> RendezvousService::StoreRun(grpc::CallbackServerContext* ctx,
                                                                const pb::RunRef& run, int64_t keys_read) {
  if (traffic_ == nullptr) return registry_->FindOrCreate(run.run_id(), nullptr, ctx->peer());
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kNodeMetadataKey);
  const absl::string_view node =
      it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  // Counted under the registry's lock: for this run, never for one removed
  // meanwhile (whose counts ForgetRun dropped).
  return registry_->FindOrCreate(
      run.run_id(), [&] { traffic_->OnStoreRequest(run.run_id(), node, keys_read); }, ctx->peer());
}

absl::StatusOr<std::shared_ptr<Run>> RendezvousService::AdmitStore(Method m, grpc::CallbackServerContext* ctx,
                                                                  const google::protobuf::Message& req,
                                                                  const pb::RunRef& run, int64_t keys_read) {
  (void)m;
  if (absl::Status s = wire::CheckWellFormed(req); !s.ok()) return s;
  if (absl::Status s = requests::Admit(token_, run, /*need_run_id=*/true, limits_); !s.ok()) return s;
  if (gate_ != nullptr && !gate_->serving()) return StandbyStatus(gate_->Refusal(), gate_->leader());
  return StoreRun(ctx, run, keys_read);
}

grpc::ServerUnaryReactor* RendezvousService::KvSet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvSetRequest* req, pb::KvSetResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvSet, ctx, *req, req->run(), 0);
  if (!run.ok()) return Reply(kKvSet, ctx, ToGrpc(run.status()));
  return Reply(kKvSet, ctx, ToGrpc((*run)->kv().Set(req->round(), req->key(), req->value())));
}

namespace {

// Parks a waiting store read on the run's store; answers through `fill`.
template <typename Fill, typename Counted>
grpc::ServerUnaryReactor* AwaitKeys(std::shared_ptr<Run> run, int64_t round, std::vector<std::string> keys,
                                    int64_t wait_ms, Fill fill, Counted counted) {
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  std::shared_ptr<KvStore> kv(run, &run->kv());
  KvStore::WaiterId id = kv->Await(
      round, std::move(keys), absl::Milliseconds(wait_ms),
      [reactor, fill = std::move(fill), counted = std::move(counted)](
          absl::StatusOr<std::vector<std::string>> values) mutable {
        counted(ToGrpc(values.status()));
        if (!reactor->Claim()) return;  // The call ended: its response is gone.
        if (values.ok()) fill(*values);
        reactor->Finish(ToGrpc(values.status()));
      });
  if (id != 0) reactor->SetOnCancel([kv, id] { kv->Cancel(id); });
  return reactor.get();
}

}  // namespace

grpc::ServerUnaryReactor* RendezvousService::KvGet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvGetRequest* req, pb::KvGetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvGet, ctx, *req, req->run(), 1);
  if (!run.ok()) return Reply(kKvGet, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), {req->key()}, req->wait_ms(),
      [resp](std::vector<std::string>& v) { resp->set_value(std::move(v[0])); },
      [this](const grpc::Status& s) { Count(kKvGet, s); });
}

grpc::ServerUnaryReactor* RendezvousService::KvAdd(grpc::CallbackServerContext* ctx,
                                                   const pb::KvAddRequest* req, pb::KvAddResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvAdd, ctx, *req, req->run(), 0);
  if (!run.ok()) return Reply(kKvAdd, ctx, ToGrpc(run.status()));
  absl::StatusOr<int64_t> v = (*run)->kv().Add(req->round(), req->key(), req->delta());
  if (v.ok()) resp->set_value(*v);
  return Reply(kKvAdd, ctx, ToGrpc(v.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvCompareSet(grpc::CallbackServerContext* ctx,
                                                          const pb::KvCompareSetRequest* req,
                                                          pb::KvCompareSetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvCompareSet, ctx, *req, req->run(), 0);
  if (!run.ok()) return Reply(kKvCompareSet, ctx, ToGrpc(run.status()));
  absl::StatusOr<std::pair<std::string, bool>> r =
      (*run)->kv().CompareSet(req->round(), req->key(), req->expected(), req->desired());
  if (r.ok()) {
    resp->set_value(std::move(r->first));
    resp->set_swapped(r->second);
  }
  return Reply(kKvCompareSet, ctx, ToGrpc(r.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvCheck(grpc::CallbackServerContext* ctx,
                                                     const pb::KvCheckRequest* req, pb::KvCheckResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvCheck, ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return Reply(kKvCheck, ctx, ToGrpc(run.status()));
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  resp->set_all_present((*run)->kv().Check(req->round(), keys));
  return Reply(kKvCheck, ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* RendezvousService::KvDelete(grpc::CallbackServerContext* ctx,
                                                      const pb::KvDeleteRequest* req,
                                                      pb::KvDeleteResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvDelete, ctx, *req, req->run(), 0);
  if (!run.ok()) return Reply(kKvDelete, ctx, ToGrpc(run.status()));
  absl::StatusOr<bool> deleted = (*run)->kv().Delete(req->round(), req->key());
  if (deleted.ok()) resp->set_deleted(*deleted);
  return Reply(kKvDelete, ctx, ToGrpc(deleted.status()));
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiGet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiGetRequest* req,
                                                        pb::KvMultiGetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvMultiGet, ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return Reply(kKvMultiGet, ctx, ToGrpc(run.status()));
  if (!req->set_keys().empty()) {
    absl::Status st = (*run)->kv().MultiSet(
        req->round(), std::vector<std::string>(req->set_keys().begin(), req->set_keys().end()),
        std::vector<std::string>(req->set_values().begin(), req->set_values().end()));
    if (!st.ok()) return Reply(kKvMultiGet, ctx, ToGrpc(st));
  }
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [resp](std::vector<std::string>& v) {
        for (auto& s : v) resp->add_values(std::move(s));
      },
      [this](const grpc::Status& s) { Count(kKvMultiGet, s); });
}

grpc::ServerUnaryReactor* RendezvousService::KvMultiSet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiSetRequest* req,
                                                        pb::KvMultiSetResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvMultiSet, ctx, *req, req->run(), 0);
  if (!run.ok()) return Reply(kKvMultiSet, ctx, ToGrpc(run.status()));
  absl::Status st = (*run)->kv().MultiSet(req->round(),
                                          std::vector<std::string>(req->keys().begin(), req->keys().end()),
                                          std::vector<std::string>(req->values().begin(), req->values().end()));
  return Reply(kKvMultiSet, ctx, ToGrpc(st));
}

grpc::ServerUnaryReactor* RendezvousService::KvWait(grpc::CallbackServerContext* ctx,
                                                    const pb::KvWaitRequest* req, pb::KvWaitResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = AdmitStore(kKvWait, ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return Reply(kKvWait, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [](std::vector<std::string>&) {}, [this](const grpc::Status& s) { Count(kKvWait, s); });
}

grpc::ServerWriteReactor<pb::KvBatchResponse>* RendezvousService::KvBatch(grpc::CallbackServerContext* ctx,
                                                                          const pb::KvBatchRequest* req) {
  int64_t keys_read = 0;
  for (const pb::KvBatchItem& item : req->items()) keys_read += item.keys_size();
  grpc::Status s = Admit(kKvBatch, *req, req->run());
  if (s.ok()) s = ToGrpc(requests::CheckKvBatch(*req, limits_));
  absl::StatusOr<std::shared_ptr<Run>> run = absl::UnknownError("");
  if (s.ok()) {
    // One call is one request of its node, however many items it carries.
    run = StoreRun(ctx, req->run(), keys_read);
    s = ToGrpc(run.status());
  }
  if (!s.ok()) {
    Count(kKvBatch, s);
    return new RefusedStream<pb::KvBatchResponse>(s);
  }
  std::shared_ptr<KvStore> kv(*run, &(*run)->kv());
  return StartKvBatch(std::move(kv), *req, [this](const grpc::Status& st) { Count(kKvBatch, st); });
}

}  // namespace meshrun::rendezvous
