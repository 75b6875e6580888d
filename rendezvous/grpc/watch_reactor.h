// The server side of one agent's Watch stream: the run's events, written
// one at a time as the run pushes them (an EventSink), with a bounded queue
// (a watcher that does not read is cut off RESOURCE_EXHAUSTED and re-opens
// its stream from its known round). Internal to the server's gRPC adapter.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "rendezvous/policy/limits.h"
#include "rendezvous/run/run.h"

namespace meshrun::rendezvous {

class ServiceCore;

// Starts serving a Watch call of `node_id` on `run`: subscribes to the
// run's events after `known_round` (`session`: the node's credential).
// Returns the reactor to hand to gRPC; *status is the subscription's
// outcome (a refusal ends the stream with it). The service is told when
// the stream starts and ends (open watchers). The stream is charged to the
// service's memory budget (kEventStreamCost, and its queued events' bytes)
// as a member's or not (Run::Watch); a non-member's stream whose queued
// event the budget refuses is cut off RESOURCE_EXHAUSTED. A stream ended to
// make room for others (EventSink::CloseEvicted) ends RESOURCE_EXHAUSTED
// with trailing metadata kEvictedMetadataKey: its node had not joined, and
// was forgotten (its credential too). Thread-safe.
inline constexpr char kEvictedMetadataKey[] = "meshrun-evicted";
grpc::ServerWriteReactor<v1::RunEvent>* StartWatch(grpc::CallbackServerContext* ctx, std::shared_ptr<Run> run,
                                                   std::string node_id,
                                                   ServiceCore* service, const ServerLimits& limits,
                                                   int64_t known_round, const std::string& session,
                                                   grpc::Status* status);

}  // namespace meshrun::rendezvous
