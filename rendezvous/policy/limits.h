// Every resource the rendezvous server gives a client is bounded
// (docs/design.md section 4c). Each limit has a documented default
// (docs/user-guide.md, "Server limits") and can be changed on the server:
// `meshrun server --limit NAME=VALUE` or `--rdzv_conf NAME=VALUE` for an
// embedded server. A request past a limit is refused with INVALID_ARGUMENT
// (a malformed value) or RESOURCE_EXHAUSTED (a quota), naming the limit and
// the value; the server never crashes or grows without bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/types.h"

namespace meshrun::rendezvous {

struct ServerLimits {
  // Lengths, in bytes.
  int64_t max_run_id_bytes = 256;
  int64_t max_node_id_bytes = 256;
  int64_t max_hostname_bytes = 256;
  int64_t max_key_bytes = 1024;
  int64_t max_value_bytes = 1 << 20;  // 1 MiB: a unique id is 128 bytes.
  // A worker failure's message (the error file's text), bytes; longer ones
  // are cut, not refused.
  int64_t max_message_bytes = 64 << 10;
  // Entries of a run's timeline kept (rendezvous/run/run_timeline.h); the
  // oldest are dropped past it. Each run is charged for this many.
  int64_t max_run_events = 32;
  // Per run's store. libmesh keeps 2 keys per worker for a mesh (its
  // description and payload): 262,144 holds the mesh of the design's
  // 100,000 workers with room to spare.
  int64_t max_keys_per_run = 262144;
  int64_t max_store_bytes_per_run = 64 << 20;
  // Parked store reads (waits) per run: one per worker during a mesh's
  // exchange (100,000 workers: 100,000).
  int64_t max_waiters_per_run = 262144;
  // Request records per run's store (KvAdd and KvCompareSet sent with a
  // request_id, kv_store.h): the newest are kept, and none longer than
  // request_record_ttl after its write; each is charged as a key of the run.
  // A repeat of a request whose record is gone applies again.
  int64_t max_request_records_per_run = 65536;
  absl::Duration request_record_ttl = absl::Minutes(10);
  // Items of one KvBatch call (a node's store proxy sends its workers'
  // concurrent requests as one call).
  int64_t max_batch_items = 1024;
  // All runs' stores together.
  int64_t max_store_bytes = 1LL << 30;
  // Runs held at once (joining or running, and ended ones until removed).
  int64_t max_runs = 1024;
  // Open event streams (Watch) of a run's members (joined, or joining) per
  // run, and of everyone else (nodes not joined yet, status watchers): past
  // the second, the oldest non-member stream is ended to make room
  // (Run::Watch), so that non-members never lock members out.
  int64_t max_watchers_per_run = 16384;
  int64_t max_nonmember_watchers_per_run = 256;
  // The server's memory budget, bytes (memory_budget.h): every object a
  // client makes the server hold is charged at its measured cost; past it,
  // new ones are refused (RESOURCE_EXHAUSTED naming the budget and what
  // holds it). An eighth of it is kept for members of running jobs. 0: the
  // default, DefaultServerMemory() (a quarter of the machine's or cgroup's
  // memory, at most 2 GiB).
  int64_t max_server_memory = 0;
  // Per client connection: concurrent calls (HTTP/2 streams; the client
  // queues further ones), and runs it may create (Join or a store call
  // naming a new run id).
  int64_t max_streams_per_connection = 1024;
  int64_t max_runs_per_connection = 256;
  // A watcher that falls this far behind (events queued, or bytes) is cut
  // off; its agent re-opens the stream and catches up from its round.
  int64_t max_watch_queue_events = 256;
  int64_t max_watch_queue_bytes = 256 << 10;
  // gRPC health Watch streams open at once (health_service.h); Check is
  // unbounded (it answers at once).
  int64_t max_health_watchers = 64;
  // Replica groups one run's lighthouse knows at once (torchft's replicas:
  // rendezvous/lighthouse/lighthouse.h); also min_replicas' bound.
  int64_t max_replica_groups = 4096;
  // One group's quorum request (its QuorumMember, encoded: ids, addresses
  // and torchft's user data), bytes.
  int64_t max_quorum_member_bytes = 64 << 10;
  // The members one quorum may hold, bytes (every answer carries them all;
  // torchft's client decodes at most 4 MiB).
  int64_t max_quorum_bytes = 1 << 20;
  // Replica group placement (rendezvous/run/replica_group_placer.h): the
  // places held for nodes that have not joined their group's run yet,
  // server-wide, and how long one is held for its node.
  int64_t max_replica_group_places = 65536;
  absl::Duration replica_group_place_hold = absl::Seconds(30);
  // Jobs whose replica groups' ends the server remembers (States: a group
  // whose run was removed, ended_run_ttl after it ended, still counts as it
  // ended); past it the least recently asked about is forgotten.
  int64_t max_replica_group_jobs = 4096;
  // Job shape.
  int64_t max_nproc = 65536;             // Workers of one node.
  int64_t max_world_size = 1 << 24;      // Workers of one round, all nodes.
  int64_t max_nodes = 1 << 20;           // --nnodes MAX.
  int64_t max_restarts = 1 << 20;        // --max_restarts.
  // A run's keep_alive_interval (torchrun's rdzv_conf key): a silent node is
  // lost after keep_alive_interval x keep_alive_max_attempt, so an interval
  // past the maximum would let a run keep a silent member for good.
  absl::Duration min_keep_alive_interval = absl::Milliseconds(100);
  absl::Duration max_keep_alive_interval = absl::Hours(1);
  // The server's own traffic counts (traffic_counters.h): client addresses
  // remembered at once to count connections, and distinct nodes (of the
  // runs held: a removed run's are forgotten) whose store requests are
  // counted apart (further ones count as "(other)").
  int64_t max_counted_peers = 65536;
  int64_t max_counted_nodes = 16384;
  // Longest store wait (a KvGet's wait_ms) and exit-barrier timeout a
  // client may ask for.
  absl::Duration max_wait = absl::Hours(24);
  // A connection with no call for this long is closed (a client reconnects
  // by itself); a connection that has not finished its handshake (HTTP/2
  // preface, or TLS) within handshake_timeout is closed.
  absl::Duration connection_idle_timeout = absl::Minutes(5);
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A scrape of the metrics port must send its request within this time
  // (civetweb's request_timeout_ms).
  absl::Duration metrics_request_timeout = absl::Seconds(10);
  // A finished or failed run is removed this long after it ended (its
  // store and memory freed); `meshrun status` shows it until then.
  absl::Duration ended_run_ttl = absl::Minutes(10);
  // At max_runs, an ended run makes room for a new one once its agents have
  // left (no event stream of it open) or it ended this long ago: agents
  // still finishing (their exit barrier answered, their streams not yet
  // closed) are not cut off by the removal.
  absl::Duration ended_run_room_grace = absl::Seconds(10);
  // A store-only run (store calls, no node ever joined: a worker started by
  // hand, another launcher) is removed once no store call has reached it
  // for this long and no read is parked in it; its store is freed. (Else
  // such runs would fill max_runs for good.)
  // At max_runs, a job's Join removes the least recently used store-only
  // run rather than being refused.
  absl::Duration store_only_run_ttl = absl::Minutes(5);
  // A run that had a node but has none now (no join in progress, no
  // member, no member being re-formed, no event stream open; not ended) is
  // removed once it has had no node and no call (join, stream, store call)
  // for this long and no read is parked in it: joins cancelled before their
  // round closed would else hold their runs, and fill max_runs, for good.
  absl::Duration nodeless_run_ttl = absl::Minutes(1);
  // How often the server checks that its listener still accepts
  // connections (after running out of file descriptors gRPC's listener
  // stops; the server then rebuilds it once descriptors are free).
  absl::Duration listener_check_interval = absl::Seconds(1);
  // gRPC servers the process keeps at once: each listener rebuild adds one,
  // and an older one serves the connections it had until none has a call
  // open. Past this, a rebuild shuts the oldest down (its clients
  // reconnect): repeated shortages cannot pile servers up.
  int64_t max_server_generations = 4;
  // After a burst (a round closed: its parked joins were answered; the last
  // agent's event stream closed), the heap's free memory is given back to
  // the system this long after (memory_release.h): one trim per delay.
  absl::Duration memory_release_delay = absl::Seconds(2);
};

// Sets the limit `name` (a field name above, e.g. "max_runs") from `value`
// (an integer; durations in seconds, fractions allowed). NOT_FOUND when
// `name` is not a limit; INVALID_ARGUMENT naming the limit and the value
// when it is not a number > 0. Pure function.
absl::Status SetLimit(absl::string_view name, absl::string_view value, ServerLimits* limits);

// The names SetLimit accepts, comma-separated, for messages.
std::string LimitNames();
// The same names, one per element.
std::vector<std::string> LimitNameList();

// Checks a Join's node and config against `limits` and the protocol's own
// rules (nproc > 0, 0 < min_nodes <= max_nodes, master_port in 1..65535,
// max_restarts >= 0, keep-alive interval >= the minimum, lengths).
// INVALID_ARGUMENT naming the field, the value and what is allowed. Pure.
absl::Status CheckJoin(const std::string& run_id, const NodeDesc& node, const RunConfig& config,
                       const ServerLimits& limits);

// INVALID_ARGUMENT when `what` ("run id", "node id", "key", ...) is longer
// than `max` bytes (or empty when `allow_empty` is false). The message
// shows at most the first 64 bytes of the value. Pure.
absl::Status CheckLength(absl::string_view what, absl::string_view value, int64_t max, absl::string_view limit,
                         bool allow_empty = false);

}  // namespace meshrun::rendezvous
