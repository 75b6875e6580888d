// The server side of one KvBatch call (rendezvous.proto): several store
// requests of one node in one call, each answered on its own as soon as it
// can be. Internal to the server's gRPC adapter; the store itself is the
// run's KvStore (kv_store.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/functional/any_invocable.h"
#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/store/kv_store.h"

namespace meshrun::rendezvous {

// Serves `req` on `kv` (the request is copied: gRPC may free it): every
// item's sets are applied in item order (an item whose sets are refused is
// answered with that error and not awaited), the call's initial metadata
// then says the batch is accepted, and each item's answer is written as
// soon as its keys are all set (or its wait ran out: DEADLINE_EXCEEDED
// naming the keys, as KvMultiGet); answers ready while a write is in
// flight share the next message. The call ends OK with the last answers;
// cancelling it cancels every wait still parked. `done` runs once with the
// call's final status. `kv` is kept alive until then. Thread-safe.
grpc::ServerWriteReactor<v1::KvBatchResponse>* StartKvBatch(std::shared_ptr<KvStore> kv,
                                                           const v1::KvBatchRequest& req,
                                                           absl::AnyInvocable<void(const grpc::Status&)> done);

}  // namespace meshrun::rendezvous
