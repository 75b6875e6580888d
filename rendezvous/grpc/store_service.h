// The Store gRPC service (KvSet, KvGet, ... KvBatch): the gRPC side of each
// run's key-value store (rendezvous/store/kv_store.h), torch.distributed's
// Store for workers (through their agent's proxy) and other launchers. A
// store call for a run id no node has joined makes a store-only run
// (RunRegistry::FindOrCreate). Thread-safe; holds no state of its own
// (service_core.h is the door it shares with the other services).
#pragma once

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc/service_core.h"

namespace meshrun::rendezvous {

class StoreService final : public ::meshrun::v1::Store::CallbackService {
 public:
  // `core` must outlive the service.
  explicit StoreService(ServiceCore* core) : core_(core) {}

  // Each answers as its KvStore method does (kv_store.h); KvGet, KvMultiGet
  // and KvWait park until their keys are set, wait_ms passes, or the call
  // is cancelled; KvBatch streams one answer per item; KvKeys counts (and
  // lists) a round's keys under a prefix (INVALID_ARGUMENT for a negative
  // max_keys).
  grpc::ServerUnaryReactor* KvSet(grpc::CallbackServerContext* ctx, const v1::KvSetRequest* req,
                                  v1::KvSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvGet(grpc::CallbackServerContext* ctx, const v1::KvGetRequest* req,
                                  v1::KvGetResponse* resp) override;
  grpc::ServerUnaryReactor* KvAdd(grpc::CallbackServerContext* ctx, const v1::KvAddRequest* req,
                                  v1::KvAddResponse* resp) override;
  grpc::ServerUnaryReactor* KvCompareSet(grpc::CallbackServerContext* ctx, const v1::KvCompareSetRequest* req,
                                         v1::KvCompareSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvCheck(grpc::CallbackServerContext* ctx, const v1::KvCheckRequest* req,
                                    v1::KvCheckResponse* resp) override;
  grpc::ServerUnaryReactor* KvDelete(grpc::CallbackServerContext* ctx, const v1::KvDeleteRequest* req,
                                     v1::KvDeleteResponse* resp) override;
  grpc::ServerUnaryReactor* KvMultiGet(grpc::CallbackServerContext* ctx, const v1::KvMultiGetRequest* req,
                                       v1::KvMultiGetResponse* resp) override;
  grpc::ServerUnaryReactor* KvMultiSet(grpc::CallbackServerContext* ctx, const v1::KvMultiSetRequest* req,
                                       v1::KvMultiSetResponse* resp) override;
  grpc::ServerUnaryReactor* KvWait(grpc::CallbackServerContext* ctx, const v1::KvWaitRequest* req,
                                   v1::KvWaitResponse* resp) override;
  grpc::ServerUnaryReactor* KvKeys(grpc::CallbackServerContext* ctx, const v1::KvKeysRequest* req,
                                   v1::KvKeysResponse* resp) override;
  grpc::ServerWriteReactor<v1::KvBatchResponse>* KvBatch(grpc::CallbackServerContext* ctx,
                                                         const v1::KvBatchRequest* req) override;

 private:
  ServiceCore* const core_;
};

}  // namespace meshrun::rendezvous
