// Fuzz target: the rendezvous server's request handlers, without gRPC.
//
// The input is a script of requests, each one record:
//   [method: 1 byte][length: 2 bytes, little endian][that many bytes]
// The method byte picks a handler (modulo the count below) and the bytes are
// parsed as its request message (ParseFromArray; bytes that do not parse are
// a refused request). Each request then goes where rendezvous_service.cc
// sends it: the server's own checks (rendezvous/grpc/requests.h: Admit,
// JoinFromProto, CheckWatch, BarrierTimeout, with the server's default
// limits), never a copy of them, and the same domain calls on a RunRegistry
// with a DeadlineTimer. A last pseudo method cancels a parked call, as a
// client that hangs up does.
//
// Deterministic and bounded: nothing sleeps; parked calls (joins, barriers,
// store waits) are answered by later requests, cancelled, or aborted when
// every run is closed at the end of the input, and the registry and timer
// are dropped with it so memory does not grow across inputs.
#include <map>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "meshrun/proto/rendezvous.pb.h"
#include "rendezvous/grpc/requests.h"
#include "rendezvous/run/run.h"
#include "rendezvous/run/run_registry.h"
#include "rendezvous/policy/timer.h"
#include "rendezvous/run/replica_group_placer.h"
#include "proto/wire.h"

namespace {

namespace pb = ::meshrun::v1;
namespace rdzv = ::meshrun::rendezvous;
using rdzv::requests::Admit;

enum Method {
  kJoin, kHeartbeat, kWatch, kReportFailure, kReportFinished, kKvSet, kKvGet, kKvAdd, kKvCompareSet,
  kKvCheck, kKvDelete, kKvMultiGet, kKvMultiSet, kKvWait, kStatus, kCancel, kPlaceReplicaGroup, kReplicaGroupStates, kKvKeys, kNumMethods
};

// Collects what the domain answers, from any thread (the timer's too).
struct Answers {
  absl::Mutex mu;
  int64_t count ABSL_GUARDED_BY(mu) = 0;
  void Add() {
    absl::MutexLock lock(&mu);
    ++count;
  }
};

// The session credentials the server handed out, by node id, so that a
// request whose session is "*" speaks with the node's real one (reaching
// the member paths) while any other value is tried as given (forgeries).
struct Sessions {
  absl::Mutex mu;
  std::map<std::string, std::string> by_node ABSL_GUARDED_BY(mu);
  void Set(const std::string& node, const std::string& cred) {
    absl::MutexLock lock(&mu);
    if (by_node.size() < 4096) by_node[node] = cred;
  }
  std::string For(const std::string& node, const std::string& given) {
    if (given != "*") return given;
    absl::MutexLock lock(&mu);
    auto it = by_node.find(node);
    return it == by_node.end() ? "" : it->second;
  }
};

// A watch stream: converts every event as the adapter's reactor does.
class Sink : public rdzv::EventSink {
 public:
  Sink(std::shared_ptr<Sessions> sessions, std::string node) : sessions_(std::move(sessions)), node_(std::move(node)) {}
  void Push(const rdzv::RunEvent& e) override {
    pb::RunEvent p = rdzv::wire::ToProto(e);
    if (e.kind == rdzv::RunEvent::Kind::kSession) sessions_->Set(node_, e.session);
    absl::MutexLock lock(&mu_);
    bytes_ += p.ByteSizeLong();
  }
  void CloseStale(const std::string&) override {}
  void CloseRun(const std::string&) override {}

 private:
  const std::shared_ptr<Sessions> sessions_;
  const std::string node_;
  absl::Mutex mu_;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Something a later kCancel may cancel.
struct Parked {
  enum Kind { kJoinCall, kBarrier, kKvWaiter, kWatchStream } kind;
  std::shared_ptr<rdzv::Run> run;
  std::string node_id;
  uint64_t id = 0;
  std::shared_ptr<Sink> sink;
};

constexpr char kToken[] = "fuzz-token";

class Harness {
 public:
  Harness() : registry_(&timer_, limits_) {}
  ~Harness() {
    registry_.CloseAll("end of input");
    if (scratch_) scratch_->Close("end of input");
  }

  void Handle(int method, const uint8_t* data, size_t size) {
    switch (method) {
      case kJoin: {
        pb::JoinRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size))) return;
        if (!Admitted(req.run())) return;
        auto args = rdzv::requests::JoinFromProto(req, "10.0.0.1", limits_);
        if (!args.ok()) return;
        absl::StatusOr<std::shared_ptr<rdzv::Run>> found = registry_.ForJoin(req.run().run_id(), req.last_round());
        if (!found.ok()) return;
        std::shared_ptr<rdzv::Run> run = *found;
        auto answers = answers_;
        auto sessions = sessions_;
        std::string node = args->node.node_id;
        // With answer_on_stream, as the adapter: the answer goes to the
        // node's stream (or waits for it), and the call is not parked.
        rdzv::Run::JoinCallback on_stream;
        if (req.answer_on_stream()) {
          on_stream = [answers, sessions, node](absl::StatusOr<rdzv::Assignment> a) {
            if (a.ok()) sessions->Set(node, a->session);
            answers->Add();
          };
        }
        const bool answered_on_stream =
            run->Join(args->node, args->config, req.last_round(), sessions_->For(node, req.session()),
                      [answers, sessions, node](absl::StatusOr<rdzv::Assignment> a) {
                        pb::JoinResponse resp;
                        if (a.ok()) {
                          rdzv::wire::ToProto(*a, resp.mutable_assignment());
                          sessions->Set(node, a->session);
                        }
                        answers->Add();
                      },
                      "", std::move(on_stream));
        if (!answered_on_stream) parked_.push_back({Parked::kJoinCall, run, args->node.node_id, 0, nullptr});
        return;
      }
      case kHeartbeat: {
        pb::HeartbeatRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        if (auto run = registry_.Find(req.run().run_id())) {
          (void)run->Heartbeat(req.node_id(), sessions_->For(req.node_id(), req.session()));
        }
        return;
      }
      case kWatch: {
        pb::WatchRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        if (!rdzv::requests::CheckWatch(req, limits_).ok()) return;
        absl::StatusOr<std::shared_ptr<rdzv::Run>> found = registry_.ForJoin(req.run().run_id(), req.known_round());
        if (!found.ok()) return;
        std::shared_ptr<rdzv::Run> run = *found;
        auto sink = std::make_shared<Sink>(sessions_, req.node_id());
        if (!run->Watch(req.node_id(), sink, req.known_round(), sessions_->For(req.node_id(), req.session())).ok()) {
          return;
        }
        parked_.push_back({Parked::kWatchStream, run, req.node_id(), 0, sink});
        return;
      }
      case kReportFailure: {
        pb::ReportFailureRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        auto run = registry_.Find(req.run().run_id());
        if (!run) return;
        absl::StatusOr<rdzv::FailureVerdict> v = run->ReportFailure(
            rdzv::wire::FromProto(req.failure()), sessions_->For(req.failure().node_id(), req.session()));
        if (v.ok()) {
          pb::ReportFailureResponse resp;
          rdzv::wire::ToProto(v->root_cause, resp.mutable_root_cause());
        }
        return;
      }
      case kReportFinished: {
        pb::ReportFinishedRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        auto run = registry_.Find(req.run().run_id());
        if (!run) return;
        absl::StatusOr<absl::Duration> timeout = rdzv::requests::BarrierTimeout(req, limits_);
        if (!timeout.ok()) return;
        auto answers = answers_;
        uint64_t id = run->ReportFinished(req.node_id(), req.round(), sessions_->For(req.node_id(), req.session()),
                                          *timeout,
                                          [answers](absl::StatusOr<rdzv::BarrierResult>) { answers->Add(); });
        if (id != 0) parked_.push_back({Parked::kBarrier, run, "", id, nullptr});
        return;
      }
      case kKvSet: {
        pb::KvSetRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())->kv().Set(req.round(), req.key(), req.value());
        return;
      }
      case kKvGet: {
        pb::KvGetRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        Await(Store(req.run().run_id()), req.round(), {req.key()}, req.wait_ms());
        return;
      }
      case kKvAdd: {
        pb::KvAddRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())->kv().Add(req.round(), req.key(), req.delta(), req.request_id());
        return;
      }
      case kKvCompareSet: {
        pb::KvCompareSetRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())
            ->kv()
            .CompareSet(req.round(), req.key(), req.expected(), req.desired(), req.request_id());
        return;
      }
      case kKvCheck: {
        pb::KvCheckRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        std::vector<std::string> keys(req.keys().begin(), req.keys().end());
        (void)Store(req.run().run_id())->kv().Check(req.round(), keys);
        return;
      }
      case kKvKeys: {
        pb::KvKeysRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())->kv().Keys(req.round(), req.prefix(), req.max_keys());
        return;
      }
      case kKvDelete: {
        pb::KvDeleteRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())->kv().Delete(req.round(), req.key());
        return;
      }
      case kKvMultiGet: {
        pb::KvMultiGetRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        if (!req.set_keys().empty()) {
          absl::Status st = Store(req.run().run_id())
                                ->kv()
                                .MultiSet(req.round(),
                                          std::vector<std::string>(req.set_keys().begin(), req.set_keys().end()),
                                          std::vector<std::string>(req.set_values().begin(),
                                                                   req.set_values().end()));
          if (!st.ok()) return;
        }
        Await(Store(req.run().run_id()), req.round(),
              std::vector<std::string>(req.keys().begin(), req.keys().end()), req.wait_ms());
        return;
      }
      case kKvMultiSet: {
        pb::KvMultiSetRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        (void)Store(req.run().run_id())
            ->kv()
            .MultiSet(req.round(), std::vector<std::string>(req.keys().begin(), req.keys().end()),
                      std::vector<std::string>(req.values().begin(), req.values().end()));
        return;
      }
      case kKvWait: {
        pb::KvWaitRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        Await(Store(req.run().run_id()), req.round(),
              std::vector<std::string>(req.keys().begin(), req.keys().end()), req.wait_ms());
        return;
      }
      case kStatus: {
        pb::StatusRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size))) return;
        if (!Admit(kToken, req.run(), /*need_run_id=*/false, limits_).ok()) return;
        (void)registry_.Status();
        return;
      }
      case kPlaceReplicaGroup: {
        pb::PlaceReplicaGroupRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        if (!rdzv::requests::CheckPlaceReplicaGroup(req, limits_).ok()) return;
        (void)placer_.Place(req.run().run_id(), req.node_id(), req.replica_groups(), req.min_nodes_per_group(),
                            req.max_nodes_per_group());
        return;
      }
      case kReplicaGroupStates: {
        pb::ReplicaGroupStatesRequest req;
        if (!req.ParseFromArray(data, static_cast<int>(size)) || !Admitted(req.run())) return;
        if (!rdzv::requests::CheckReplicaGroupStates(req, limits_).ok()) return;
        (void)placer_.States(req.run().run_id(), req.replica_groups());
        return;
      }
      case kCancel: {
        if (parked_.empty() || size == 0) return;
        size_t i = data[0] % parked_.size();
        Parked p = std::move(parked_[i]);
        parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
        switch (p.kind) {
          case Parked::kJoinCall: p.run->CancelJoin(p.node_id); break;
          case Parked::kBarrier: p.run->CancelFinished(p.id); break;
          case Parked::kKvWaiter: p.run->kv().Cancel(p.id); break;
          case Parked::kWatchStream: p.run->Unwatch(p.node_id, p.sink.get()); break;
        }
        return;
      }
    }
  }

 private:
  // The server has a token: requests without it are refused (the seeds carry it).
  bool Admitted(const pb::RunRef& run) { return Admit(kToken, run, /*need_run_id=*/true, limits_).ok(); }

  // The run a store request goes to; a refused one (max_runs, a run id too
  // long) goes to a scratch run so that the rest of the request is still
  // exercised.
  std::shared_ptr<rdzv::Run> Store(const std::string& run_id) {
    absl::StatusOr<std::shared_ptr<rdzv::Run>> run = registry_.FindOrCreate(run_id);
    if (run.ok()) return *run;
    if (!scratch_) scratch_ = std::make_shared<rdzv::Run>("scratch", &timer_);
    return scratch_;
  }

  void Await(std::shared_ptr<rdzv::Run> run, int64_t round, std::vector<std::string> keys, int64_t wait_ms) {
    auto answers = answers_;
    rdzv::KvStore::WaiterId id =
        run->kv().Await(round, std::move(keys), absl::Milliseconds(wait_ms),
                        [answers](absl::StatusOr<std::vector<std::string>>) { answers->Add(); });
    if (id != 0) parked_.push_back({Parked::kKvWaiter, run, "", id, nullptr});
  }

  // The server's default limits, as a `meshrun server` without --limit has.
  const rdzv::ServerLimits limits_;
  // Declared first: destroyed last, after the registry closed every run.
  rdzv::DeadlineTimer timer_;
  rdzv::RunRegistry registry_;
  rdzv::ReplicaGroupPlacer placer_{&registry_, limits_};
  std::shared_ptr<Answers> answers_ = std::make_shared<Answers>();
  std::shared_ptr<Sessions> sessions_ = std::make_shared<Sessions>();
  std::shared_ptr<rdzv::Run> scratch_;
  std::vector<Parked> parked_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  constexpr int kMaxRequests = 64;
  for (int n = 0; n < kMaxRequests && size >= 3; ++n) {
    const int method = data[0] % kNumMethods;
    size_t len = data[1] | (static_cast<size_t>(data[2]) << 8);
    data += 3;
    size -= 3;
    if (len > size) len = size;
    h.Handle(method, data, len);
    data += len;
    size -= len;
  }
  return 0;
}
