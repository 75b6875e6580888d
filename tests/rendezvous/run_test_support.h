// Test helpers for the Run tests (run_test.cc, run_membership_test.cc,
// run_status_test.cc): an event recorder, node and config makers, and the
// credential book an agent would keep.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/run/run.h"

namespace meshrun::rendezvous::testing {

struct Recorder : EventSink {
  std::vector<RunEvent> events;
  std::string closed;
  void Push(const RunEvent& e) override { events.push_back(e); }
  void CloseStale(const std::string& why) override { closed = why; }
  void CloseRun(const std::string& why) override { closed = why; }
};

inline NodeDesc Node(const std::string& id, int nproc, const std::string& addr) {
  NodeDesc d;
  d.node_id = id;
  d.hostname = id;
  d.addr = addr;
  d.nproc = nproc;
  d.master_port = 1000 + nproc;
  return d;
}

inline RunConfig Config(int min, int max, int restarts = 0) {
  RunConfig c;
  c.min_nodes = min;
  c.max_nodes = max;
  c.max_restarts = restarts;
  c.last_call_timeout = absl::Milliseconds(100);
  return c;
}


// Keeps each node's session credential, per run, as an agent does: the
// first join of a node gives none, later requests give the latest one.
// A run of an earlier test case may have had the same address: an entry
// whose run is gone is started afresh.
struct Creds {
  struct Entry {
    std::weak_ptr<const Run> run;
    std::shared_ptr<std::string> cred;
  };
  std::map<std::pair<const Run*, std::string>, Entry> book;
  std::shared_ptr<std::string> Of(const Run& run, const std::string& id) {
    Entry& e = book[{&run, id}];
    if (!e.cred || e.run.expired()) {
      e.run = run.weak_from_this();
      e.cred = std::make_shared<std::string>();
    }
    return e.cred;
  }
  void Join(Run& run, const NodeDesc& n, const RunConfig& c, int64_t last,
            std::function<void(absl::StatusOr<Assignment>)> done) {
    auto cred = Of(run, n.node_id);
    run.Join(n, c, last, *cred, [cred, done](absl::StatusOr<Assignment> a) {
      if (a.ok()) *cred = a->session;
      done(std::move(a));
    });
  }
  absl::Status Watch(Run& run, const std::string& id, std::shared_ptr<EventSink> sink, int64_t known) {
    return run.Watch(id, std::move(sink), known, *Of(run, id));
  }
  absl::StatusOr<int64_t> Heartbeat(Run& run, const std::string& id) { return run.Heartbeat(id, *Of(run, id)); }
  absl::StatusOr<FailureVerdict> ReportFailure(Run& run, const WorkerFailure& f) {
    return run.ReportFailure(f, *Of(run, f.node_id));
  }
  uint64_t ReportFinished(Run& run, const std::string& id, int64_t round, absl::Duration timeout,
                          Run::BarrierCallback done) {
    return run.ReportFinished(id, round, *Of(run, id), timeout, std::move(done));
  }
};

// `c` with keep-alive `interval` x `attempts` (the liveness tests' limits).
inline RunConfig WithKeepAlive(RunConfig c, absl::Duration interval, int attempts) {
  c.keep_alive_interval = interval;
  c.keep_alive_max_attempt = attempts;
  return c;
}

inline Creds creds;

}  // namespace meshrun::rendezvous::testing
