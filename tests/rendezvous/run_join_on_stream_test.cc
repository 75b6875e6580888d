// Joins answered on the node's event stream (JoinRequest.answer_on_stream):
// the run takes the join at once and pushes its result to that node's stream
// alone, or keeps it for a stream that opens later; a stream that ends first
// withdraws the join. Over gRPC: the call ends at once, the answer follows on
// the stream.
#include <catch2/catch.hpp>

#include <grpcpp/grpcpp.h>

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "meshrun/proto/rendezvous.grpc.pb.h"
#include "proto/wire.h"
#include "rendezvous/run/run.h"
#include "rendezvous/server.h"
#include "tests/rendezvous/run_test_support.h"

using namespace meshrun::rendezvous;
using namespace meshrun::rendezvous::testing;

namespace {

// Counts the answers the run gave through `done` (never, on the stream path).
struct Answers {
  int via_done = 0;
  int via_hook = 0;
};

std::optional<Assignment> AnsweredIn(const Recorder& sink) {
  for (const RunEvent& e : sink.events) {
    if (e.kind == RunEvent::Kind::kJoinAnswered && e.assignment) return e.assignment;
  }
  return std::nullopt;
}

int JoinAnsweredCount(const Recorder& sink) {
  int n = 0;
  for (const RunEvent& e : sink.events) n += e.kind == RunEvent::Kind::kJoinAnswered ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("joins taken on the stream: each node's stream alone gets its assignment", "[run][join_on_stream]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  Answers answers;
  std::map<std::string, std::shared_ptr<Recorder>> sinks;
  for (const char* id : {"a", "b"}) {
    sinks[id] = std::make_shared<Recorder>();
    REQUIRE(run->Watch(id, sinks[id], -1, "").ok());
    REQUIRE(sinks[id]->events.at(0).kind == RunEvent::Kind::kSession);
    const std::string cred = sinks[id]->events[0].session;
    const bool on_stream =
        run->Join(Node(id, 2, id), Config(2, 2), -1, cred, [&](absl::StatusOr<Assignment>) { ++answers.via_done; },
                  "", [&](absl::StatusOr<Assignment> a) { answers.via_hook += a.ok() ? 1 : 0; });
    CHECK(on_stream);
  }
  CHECK(answers.via_done == 0);
  CHECK(answers.via_hook == 2);
  std::set<int> ranks;
  for (const char* id : {"a", "b"}) {
    CHECK(JoinAnsweredCount(*sinks[id]) == 1);
    std::optional<Assignment> a = AnsweredIn(*sinks[id]);
    REQUIRE(a.has_value());
    CHECK(a->world_size == 4);
    CHECK(a->node_count == 2);
    CHECK(a->node_addr == id);  // Its own assignment, not the other's.
    CHECK_FALSE(a->session.empty());
    CHECK(a->session != sinks[id]->events[0].session);  // The round's new credential.
    ranks.insert(a->node_rank);
    // The new credential is the node's from now on.
    CHECK(run->Heartbeat(id, a->session).ok());
  }
  CHECK(ranks == std::set<int>{0, 1});
}

TEST_CASE("a join answered before its stream opens is sent when the stream opens", "[run][join_on_stream]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  int via_done = 0;
  // The agent's order: the join first, its stream right after.
  CHECK(run->Join(Node("a", 1, "a"), Config(1, 1), -1, "", [&](absl::StatusOr<Assignment>) { ++via_done; }, "peer-a",
                  [](absl::StatusOr<Assignment>) {}));
  CHECK(via_done == 0);
  auto sink = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", sink, -1, "", nullptr, "peer-a").ok());
  std::optional<Assignment> a = AnsweredIn(*sink);
  REQUIRE(a.has_value());
  CHECK(a->round == 0);
  CHECK(a->world_size == 1);
  // Then the round's close, as the other streams saw it.
  REQUIRE_FALSE(sink->events.empty());
  CHECK(sink->events.back().kind == RunEvent::Kind::kRoundClosed);
  CHECK(sink->events.back().round == 0);
  // Sent once: a later stream of the node does not get it again.
  auto again = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", again, 0, a->session).ok());
  CHECK(JoinAnsweredCount(*again) == 0);
}

TEST_CASE("a stream opened after its answer and a restart hears of both: the answer, then RESTART",
          "[run][join_on_stream]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  // "a" watches; "b" joins last (closing round 0), its stream still to come.
  auto sink_a = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", sink_a, -1, "").ok());
  REQUIRE(run->Join(Node("a", 1, "a"), Config(2, 2, 1), -1, sink_a->events.at(0).session,
                    [](absl::StatusOr<Assignment>) {}, "", [](absl::StatusOr<Assignment>) {}));
  REQUIRE(run->Join(Node("b", 1, "b"), Config(2, 2, 1), -1, "", [](absl::StatusOr<Assignment>) {}, "peer-b",
                    [](absl::StatusOr<Assignment>) {}));
  std::optional<Assignment> a = AnsweredIn(*sink_a);
  REQUIRE(a.has_value());
  // A worker of "a" fails at once: round 1, before "b"'s stream opened.
  WorkerFailure f;
  f.node_id = "a";
  f.hostname = "a";
  f.exit_code = 5;
  REQUIRE(run->ReportFailure(f, a->session).ok());
  auto sink_b = std::make_shared<Recorder>();
  REQUIRE(run->Watch("b", sink_b, -1, "", nullptr, "peer-b").ok());
  std::vector<RunEvent::Kind> kinds;
  for (const RunEvent& e : sink_b->events) kinds.push_back(e.kind);
  // Without the RESTART, "b" would run round 0 alone and wait at its exit barrier.
  REQUIRE(kinds.size() >= 2);
  CHECK(kinds[kinds.size() - 2] == RunEvent::Kind::kJoinAnswered);
  CHECK(kinds.back() == RunEvent::Kind::kRestart);
  CHECK(sink_b->events.back().round == 1);
}

TEST_CASE("a stream that ends before the round closes withdraws its join", "[run][join_on_stream]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", sink, -1, "").ok());
  REQUIRE(run->Join(Node("a", 1, "a"), Config(2, 2), -1, sink->events.at(0).session,
                    [](absl::StatusOr<Assignment>) {}, "", [](absl::StatusOr<Assignment>) {}));
  CHECK(run->Status().nodes == 1);
  run->Unwatch("a", sink.get());
  CHECK(run->Status().nodes == 0);  // Withdrawn: the round waits for two others.
  // "b" alone does not close the round.
  auto sink_b = std::make_shared<Recorder>();
  REQUIRE(run->Watch("b", sink_b, -1, "").ok());
  REQUIRE(run->Join(Node("b", 1, "b"), Config(2, 2), -1, sink_b->events.at(0).session,
                    [](absl::StatusOr<Assignment>) {}, "", [](absl::StatusOr<Assignment>) {}));
  CHECK(JoinAnsweredCount(*sink_b) == 0);
  CHECK(run->Status().state == "joining");
}

TEST_CASE("a refusal at once still answers the call: only a taken join goes to the stream",
          "[run][join_on_stream]") {
  DeadlineTimer timer;
  auto run = std::make_shared<Run>("job", &timer);
  auto sink = std::make_shared<Recorder>();
  REQUIRE(run->Watch("a", sink, -1, "").ok());
  absl::Status refused;
  CHECK_FALSE(run->Join(Node("a", 1, "a"), Config(1, 1), -1, "not-its-credential",
                        [&](absl::StatusOr<Assignment> r) { refused = r.status(); }, "",
                        [](absl::StatusOr<Assignment>) {}));
  CHECK(absl::IsPermissionDenied(refused));
  CHECK(JoinAnsweredCount(*sink) == 0);
}

TEST_CASE("a refusal on the stream keeps its code and message over the wire", "[run][join_on_stream]") {
  RunEvent e;
  e.kind = RunEvent::Kind::kJoinAnswered;
  e.refusal = absl::AbortedError("finished while this node stood by");
  const RunEvent back = wire::FromProto(wire::ToProto(e));
  CHECK(back.kind == RunEvent::Kind::kJoinAnswered);
  CHECK(absl::IsAborted(back.refusal));
  CHECK(back.refusal.message() == "finished while this node stood by");
  CHECK_FALSE(back.assignment.has_value());
  RunEvent ok;
  ok.kind = RunEvent::Kind::kJoinAnswered;
  ok.assignment = Assignment{};
  ok.assignment->node_rank = 3;
  const RunEvent ok_back = wire::FromProto(wire::ToProto(ok));
  CHECK(ok_back.refusal.ok());
  REQUIRE(ok_back.assignment.has_value());
  CHECK(ok_back.assignment->node_rank == 3);
}

TEST_CASE("over gRPC a join with answer_on_stream ends at once and its answer follows on the stream",
          "[server][join_on_stream]") {
  namespace pb = ::meshrun::v1;
  ServerOptions o;
  o.host = "127.0.0.1";
  auto server = RendezvousServer::Start(o);
  REQUIRE(server.ok());
  auto stub = pb::Rendezvous::NewStub(grpc::CreateChannel((*server)->endpoint(), grpc::InsecureChannelCredentials()));
  auto join = [&](const std::string& id) {
    pb::JoinRequest req;
    req.mutable_run()->set_run_id("job");
    req.mutable_node()->set_node_id(id);
    req.mutable_node()->set_addr("127.0.0.1");
    req.mutable_node()->set_nproc(1);
    req.mutable_node()->set_master_port(1234);
    req.mutable_node()->set_node_rank_hint(-1);
    req.mutable_node()->set_hostname(id);
    req.mutable_config()->set_min_nodes(2);
    req.mutable_config()->set_max_nodes(2);
    req.set_last_round(-1);
    req.set_answer_on_stream(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::JoinResponse resp;
    grpc::Status s = stub->Join(&ctx, req, &resp);
    INFO(s.error_message());
    REQUIRE(s.ok());
    return resp;
  };
  // The first of two: its round is open, yet the call is answered.
  pb::JoinResponse first = join("n1");
  CHECK(first.on_stream());
  CHECK_FALSE(first.has_assignment());
  // Its stream (opened after its join, over the same channel) gets the
  // join's credential, then the answer once the second node joins.
  grpc::ClientContext wctx;
  wctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::WatchRequest wreq;
  wreq.mutable_run()->set_run_id("job");
  wreq.set_node_id("n1");
  wreq.set_known_round(-1);
  auto reader = stub->Watch(&wctx, wreq);
  pb::RunEvent ev;
  REQUIRE(reader->Read(&ev));
  CHECK(ev.kind() == pb::RunEvent::SESSION);
  CHECK(join("n2").on_stream());
  bool answered = false;
  for (int i = 0; i < 8 && !answered && reader->Read(&ev); ++i) {
    if (ev.kind() != pb::RunEvent::JOIN_ANSWERED) continue;
    answered = true;
    CHECK(ev.refusal_code() == 0);
    CHECK(ev.assignment().node_count() == 2);
    CHECK(ev.assignment().world_size() == 2);
    CHECK_FALSE(ev.assignment().session().empty());
  }
  CHECK(answered);
  wctx.TryCancel();
  (void)reader->Finish();
}
