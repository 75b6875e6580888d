// The "two replicas serving at once" check over probe records.
//
// A probe file is text, one probe per line, 4 tab-separated fields:
//   replica  send_ns  recv_ns  serving
// serving is 0 or 1; send_ns <= recv_ns, on the clock of the history files.
// Comment, empty and truncated-last-line rules are those of history files.
//
// What a probe proves: one that answered serving=1 proves its replica served
// at some instant within [send_ns, recv_ns] (closed), nothing more; one that
// answered serving=0 proves nothing about serving, and ends a streak.
//
// What a streak proves: a replica's serving probes, sorted by send_ns, that
// follow each other with no serving=0 probe of that replica between them form
// a streak. Its first probe proves an instant t1 <= first.recv_ns and its
// last an instant tk >= last.send_ns; the check ASSUMES the replica served
// without interruption from t1 to tk (an unseen stop and restart between two
// probes is not excluded by the probes: that is the claim being checked), so
// it served over the whole interval [first.recv_ns, last.send_ns], which is
// non-empty when first.recv_ns <= last.send_ns. A single-probe streak (or one
// whose probes' windows overlap so much that first.recv_ns > last.send_ns)
// proves only instants, never an interval (a single probe with send_ns ==
// recv_ns has the one-instant interval its window proves).
//
// A violation is proven overlap of two different replicas' serving, under
// that assumption:
//   (a) the non-empty intervals of two streaks intersect (closed: touching
//       at one instant counts), or
//   (b) a serving probe's whole window [send_ns, recv_ns] lies inside the
//       non-empty interval of another replica's streak.
// Not detected: two replicas whose serving instants are only possibly
// simultaneous (overlapping probe windows, a window that straddles an
// interval's end), and any overlap within a single replica.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshrun::jepsen {

// One probe of one replica.
struct Probe {
  std::string replica;
  int64_t send_ns = 0;
  int64_t recv_ns = 0;
  bool serving = false;
};

// Parses the text of a probe file; `file_name` only names the file in errors.
// Returns the probes in file order. Errors: INVALID_ARGUMENT
// "<file_name>:<line>: <what is wrong>" for the first malformed line (a field
// count other than 4 except on a truncated last line, an empty replica, a
// non-integer time, recv_ns < send_ns, serving not 0 or 1). Thread-safe.
absl::StatusOr<std::vector<Probe>> ParseProbes(absl::string_view text, absl::string_view file_name);

// Reads the file at `path` and parses it with ParseProbes. Errors: those of
// ParseProbes; NOT_FOUND or UNKNOWN naming the path. Thread-safe.
absl::StatusOr<std::vector<Probe>> ReadProbeFile(const std::string& path);

// Consecutive serving probes of one replica (see the file comment).
struct ServingStreak {
  std::string replica;
  int probes = 0;
  int64_t first_send_ns = 0;
  int64_t first_recv_ns = 0;
  int64_t last_send_ns = 0;
  int64_t last_recv_ns = 0;

  // Whether the streak proves serving over [first_recv_ns, last_send_ns].
  bool HasInterval() const { return first_recv_ns <= last_send_ns; }
};

enum class OverlapKind {
  kStreaks,        // (a): `first`'s and `second`'s intervals intersect.
  kProbeInStreak,  // (b): `probe` (of `first`) lies inside `second`'s interval.
};

// Two replicas proven to serve at once.
struct ServingOverlap {
  OverlapKind kind = OverlapKind::kStreaks;
  ServingStreak first;   // kProbeInStreak: the streak that holds `probe`.
  ServingStreak second;  // Another replica's streak with an interval.
  Probe probe;           // kProbeInStreak only.
  // kStreaks: the intersection of the intervals; kProbeInStreak: the probe's
  // window, which holds an instant when both served.
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

struct ServingReport {
  int replicas = 0;
  int probes = 0;
  std::vector<ServingStreak> streaks;    // By replica, then time.
  std::vector<ServingOverlap> overlaps;  // At most one per pair of streaks; (a) first.
};

// Finds the streaks of `probes` and every proven overlap between two
// replicas (see the file comment). Probes may come in any order. O(probes *
// streaks + streaks^2). Pure; thread-safe.
ServingReport CheckServingIntervals(const std::vector<Probe>& probes);

// One line for `overlap`, times in ms relative to `origin_ns`, e.g.
//   r0 and r1 both served over [12.000, 15.500] ms (3.500 ms): r0's streak of
//   10 probes proves [1.000, 20.000] ms, r1's streak of 5 probes proves ...
// Pure.
std::string FormatOverlap(const ServingOverlap& overlap, int64_t origin_ns);

// The earliest send_ns of `probes` (0 when empty): the origin of the times in
// reports. Pure.
int64_t EarliestSend(const std::vector<Probe>& probes);

}  // namespace meshrun::jepsen
