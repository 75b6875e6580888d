#include "rendezvous/grpc/store_service.h"

#include "absl/strings/str_cat.h"
#include "proto/wire.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/grpc/kv_batch_reactor.h"
#include "rendezvous/grpc/reactors.h"

namespace meshrun::rendezvous {

namespace pb = ::meshrun::v1;
using wire::ToGrpc;
using M = ServiceCore::Method;

namespace {

// A store call answered when the store answers it (at once, or once the
// writes it saw are saved): `fill` writes the result into the response
// unless the call was cancelled meanwhile (its response is gone then).
template <typename T, typename Fill>
absl::AnyInvocable<void(absl::StatusOr<T>)> AnswerLater(ServiceCore* core, M method,
                                                       std::shared_ptr<ParkedReactor> reactor, Fill fill) {
  return [core, method, reactor = std::move(reactor), fill = std::move(fill)](absl::StatusOr<T> result) mutable {
    const grpc::Status status = ToGrpc(result.status());
    core->Count(method, status);
    if (!reactor->Claim()) return;
    if (result.ok()) fill(*result);
    reactor->Finish(status);
  };
}

absl::AnyInvocable<void(absl::Status)> StatusLater(ServiceCore* core, M method,
                                                   std::shared_ptr<ParkedReactor> reactor) {
  return [core, method, reactor = std::move(reactor)](absl::Status s) {
    const grpc::Status status = ToGrpc(s);
    core->Count(method, status);
    reactor->Complete(status);
  };
}

}  // namespace

grpc::ServerUnaryReactor* StoreService::KvSet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvSetRequest* req, pb::KvSetResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvSet, ctx, ToGrpc(run.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().Set(req->round(), req->key(), req->value(), StatusLater(core_, M::kKvSet, reactor));
  return reactor.get();
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

grpc::ServerUnaryReactor* StoreService::KvGet(grpc::CallbackServerContext* ctx,
                                                   const pb::KvGetRequest* req, pb::KvGetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 1);
  if (!run.ok()) return core_->Reply(M::kKvGet, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), {req->key()}, req->wait_ms(),
      [resp](std::vector<std::string>& v) { resp->set_value(std::move(v[0])); },
      [this](const grpc::Status& s) { core_->Count(M::kKvGet, s); });
}

grpc::ServerUnaryReactor* StoreService::KvAdd(grpc::CallbackServerContext* ctx,
                                                   const pb::KvAddRequest* req, pb::KvAddResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvAdd, ctx, ToGrpc(run.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().Add(req->round(), req->key(), req->delta(),
                   AnswerLater<int64_t>(core_, M::kKvAdd, reactor, [resp](int64_t v) { resp->set_value(v); }),
                   req->request_id());
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvCompareSet(grpc::CallbackServerContext* ctx,
                                                          const pb::KvCompareSetRequest* req,
                                                          pb::KvCompareSetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvCompareSet, ctx, ToGrpc(run.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().CompareSet(req->round(), req->key(), req->expected(), req->desired(),
                          AnswerLater<std::pair<std::string, bool>>(
                              core_, M::kKvCompareSet, reactor, [resp](std::pair<std::string, bool>& r) {
                                resp->set_value(std::move(r.first));
                                resp->set_swapped(r.second);
                              }),
                          req->request_id());
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvCheck(grpc::CallbackServerContext* ctx,
                                                     const pb::KvCheckRequest* req, pb::KvCheckResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return core_->Reply(M::kKvCheck, ctx, ToGrpc(run.status()));
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().Check(req->round(), keys,
                     AnswerLater<bool>(core_, M::kKvCheck, reactor, [resp](bool all) { resp->set_all_present(all); }));
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvDelete(grpc::CallbackServerContext* ctx,
                                                      const pb::KvDeleteRequest* req,
                                                      pb::KvDeleteResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvDelete, ctx, ToGrpc(run.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().Delete(req->round(), req->key(),
                      AnswerLater<bool>(core_, M::kKvDelete, reactor, [resp](bool d) { resp->set_deleted(d); }));
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvKeys(grpc::CallbackServerContext* ctx, const pb::KvKeysRequest* req,
                                               pb::KvKeysResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvKeys, ctx, ToGrpc(run.status()));
  if (req->max_keys() < 0) {
    return core_->Reply(M::kKvKeys, ctx,
                        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     absl::StrCat("max_keys ", req->max_keys(), " is negative (0: the count alone)")));
  }
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().Keys(req->round(), req->prefix(), req->max_keys(),
                    AnswerLater<KvStore::KeyList>(core_, M::kKvKeys, reactor, [resp](KvStore::KeyList& list) {
                      resp->set_count(list.count);
                      for (std::string& k : list.keys) resp->add_keys(std::move(k));
                    }));
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvMultiGet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiGetRequest* req,
                                                        pb::KvMultiGetResponse* resp) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return core_->Reply(M::kKvMultiGet, ctx, ToGrpc(run.status()));
  if (!req->set_keys().empty()) {
    // Refused at once, or applied: the read below is answered only once
    // these sets are saved (or fails with their error).
    auto outcome = std::make_shared<WriteOutcome>();
    (*run)->kv().MultiSet(req->round(), std::vector<std::string>(req->set_keys().begin(), req->set_keys().end()),
                          std::vector<std::string>(req->set_values().begin(), req->set_values().end()),
                          [outcome](absl::Status s) { outcome->Set(std::move(s)); });
    if (absl::Status refused = outcome->Get(); !refused.ok()) {
      return core_->Reply(M::kKvMultiGet, ctx, ToGrpc(refused));
    }
  }
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [resp](std::vector<std::string>& v) {
        for (auto& s : v) resp->add_values(std::move(s));
      },
      [this](const grpc::Status& s) { core_->Count(M::kKvMultiGet, s); });
}

grpc::ServerUnaryReactor* StoreService::KvMultiSet(grpc::CallbackServerContext* ctx,
                                                        const pb::KvMultiSetRequest* req,
                                                        pb::KvMultiSetResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), 0);
  if (!run.ok()) return core_->Reply(M::kKvMultiSet, ctx, ToGrpc(run.status()));
  std::shared_ptr<ParkedReactor> reactor = ParkedReactor::Create();
  (*run)->kv().MultiSet(req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()),
                        std::vector<std::string>(req->values().begin(), req->values().end()),
                        StatusLater(core_, M::kKvMultiSet, reactor));
  return reactor.get();
}

grpc::ServerUnaryReactor* StoreService::KvWait(grpc::CallbackServerContext* ctx,
                                                    const pb::KvWaitRequest* req, pb::KvWaitResponse*) {
  absl::StatusOr<std::shared_ptr<Run>> run = core_->AdmitStore(ctx, *req, req->run(), req->keys_size());
  if (!run.ok()) return core_->Reply(M::kKvWait, ctx, ToGrpc(run.status()));
  return AwaitKeys(
      *run, req->round(), std::vector<std::string>(req->keys().begin(), req->keys().end()), req->wait_ms(),
      [](std::vector<std::string>&) {}, [this](const grpc::Status& s) { core_->Count(M::kKvWait, s); });
}

grpc::ServerWriteReactor<pb::KvBatchResponse>* StoreService::KvBatch(grpc::CallbackServerContext* ctx,
                                                                          const pb::KvBatchRequest* req) {
  int64_t keys_read = 0;
  for (const pb::KvBatchItem& item : req->items()) keys_read += item.keys_size();
  grpc::Status s = core_->Admit(M::kKvBatch, *req, req->run());
  if (s.ok()) s = ToGrpc(requests::CheckKvBatch(*req, core_->limits()));
  absl::StatusOr<std::shared_ptr<Run>> run = absl::UnknownError("");
  if (s.ok()) {
    // One call is one request of its node, however many items it carries.
    run = core_->StoreRun(ctx, req->run(), keys_read);
    s = ToGrpc(run.status());
  }
  if (!s.ok()) {
    core_->Count(M::kKvBatch, s);
    return new RefusedStream<pb::KvBatchResponse>(s);
  }
  std::shared_ptr<KvStore> kv(*run, &(*run)->kv());
  return StartKvBatch(std::move(kv), *req, [this](const grpc::Status& st) { core_->Count(M::kKvBatch, st); });
}

}  // namespace meshrun::rendezvous
