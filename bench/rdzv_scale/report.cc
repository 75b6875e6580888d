#include "bench/rdzv_scale/report.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace meshrun::bench {
namespace {

std::string Csv(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string Num(double v, const char* fmt = "%.3f") { return v < 0 ? "" : absl::StrFormat(fmt, v); }

double PhaseSeconds(const RunResult& r, const std::string& phase) {
  auto it = r.phases.find(phase);
  return it == r.phases.end() ? -1 : it->second.seconds;
}

// A figure of one phase, or -1 (shown "-") when the run had no such phase
// (a --connect_only run has no join, barrier or workers phase).
template <typename F>
double OfPhase(const RunResult& r, const std::string& phase, F figure) {
  auto it = r.phases.find(phase);
  return it == r.phases.end() ? -1 : static_cast<double>(figure(it->second));
}

std::string Cell(double v, const char* fmt = "%.2f") { return v < 0 ? "-" : absl::StrFormat(fmt, v); }

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

WorkersStats WorkersOf(const RunResult& r) {
  WorkersStats w;
  auto it = r.phases.find("workers");
  if (it == r.phases.end()) return w;
  w.ran = true;
  double sum = 0;
  std::vector<double> all;
  for (const auto& [node, v] : it->second.store_by_node) {
    if (node == "(direct)") continue;
    ++w.nodes;
    sum += v;
    all.push_back(v);
    w.max = std::max(w.max, v);
  }
  w.mean = w.nodes > 0 ? sum / w.nodes : 0;
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    w.p90 = all[std::min(all.size() - 1, static_cast<size_t>(0.9 * static_cast<double>(all.size())))];
  }
  return w;
}

bool WriteCsv(const std::string& path, const std::vector<RunResult>& runs, const std::vector<C10dResult>& c10d) {
  std::ofstream f(path);
  std::vector<std::string> head = {"impl", "n", "run", "complete", "processes"};
  for (const auto& p : PhaseNames()) head.push_back(p + "_s");
  for (const auto& p : PhaseNames()) head.push_back("cpu_" + p + "_s");
  for (const auto& p : PhaseNames()) head.push_back("requests_" + p);
  for (const auto& p : PhaseNames()) head.push_back("peak_fds_" + p);
  for (const auto& p : PhaseNames()) head.push_back("rss_kib_after_" + p);
  for (const char* c : {"sockets_idle", "sockets_joined", "sockets_after", "rss_idle_kib", "rss_joined_kib",
                        "rss_steady_kib", "rss_peak_kib", "rss_after_kib", "kib_per_agent", "heartbeats_ok", "heartbeats_failed",
                        "streams_lost", "load_1m", "workers_per_agent", "workers_store_nodes",
                        "workers_store_requests_per_node_max", "workers_store_requests_per_node_mean",
                        "workers_store_requests_per_node_p90",
                        "workers_store_requests_per_node_per_dim_max", "workers_sockets_end"}) {
    head.push_back(c);
  }
  for (const auto& p : PhaseNames()) head.push_back("accepted_" + p);
  head.push_back("failure");
  f << absl::StrJoin(head, ",") << "\n";
  for (const RunResult& r : runs) {
    std::vector<std::string> row = {r.state == "etcd" ? "meshrun_etcd" : "meshrun", absl::StrCat(r.n), absl::StrCat(r.run), r.complete ? "1" : "0",
                                    absl::StrCat(r.processes)};
    auto ph = [&](const std::string& p) { auto it = r.phases.find(p); return it == r.phases.end() ? PhaseStats() : it->second; };
    for (const auto& p : PhaseNames()) row.push_back(Num(ph(p).seconds, "%.4f"));
    for (const auto& p : PhaseNames()) row.push_back(r.phases.count(p) ? Num(ph(p).server_cpu_s, "%.2f") : "");
    for (const auto& p : PhaseNames()) row.push_back(r.phases.count(p) ? absl::StrCat(ph(p).requests) : "");
    for (const auto& p : PhaseNames()) row.push_back(r.phases.count(p) ? absl::StrCat(ph(p).peak_fds) : "");
    for (const auto& p : PhaseNames()) row.push_back(r.phases.count(p) ? absl::StrCat(ph(p).rss_end_kib) : "");
    const double per_agent = r.rss_steady_kib > 0 ? static_cast<double>(r.rss_steady_kib - r.rss_idle_kib) / r.n : -1;
    row.push_back(absl::StrCat(r.sockets_idle));
    row.push_back(r.phases.count("join") ? absl::StrCat(ph("join").sockets_end) : "");
    row.push_back(absl::StrCat(r.sockets_after));
    for (int64_t v : {r.rss_idle_kib, r.rss_joined_kib, r.rss_steady_kib, r.rss_peak_kib, r.rss_after_kib}) {
      row.push_back(absl::StrCat(v));
    }
    row.push_back(Num(per_agent, "%.1f"));
    row.push_back(absl::StrCat(r.heartbeats_ok));
    row.push_back(absl::StrCat(r.heartbeats_failed));
    row.push_back(absl::StrCat(r.streams_lost));
    row.push_back(Num(r.load_avg_1m, "%.2f"));
    const WorkersStats ws = WorkersOf(r);
    row.push_back(ws.ran ? absl::StrCat(r.workers_per_agent) : "");
    row.push_back(ws.ran ? absl::StrCat(ws.nodes) : "");
    row.push_back(ws.ran ? Num(ws.max, "%.0f") : "");
    row.push_back(ws.ran ? Num(ws.mean, "%.2f") : "");
    row.push_back(ws.ran ? Num(ws.p90, "%.0f") : "");
    row.push_back(ws.ran ? Num(ws.max / 3, "%.2f") : "");
    row.push_back(ws.ran ? absl::StrCat(ph("workers").sockets_end) : "");
    for (const auto& p : PhaseNames()) row.push_back(r.phases.count(p) ? Num(ph(p).accepted, "%.0f") : "");
    row.push_back(Csv(r.failure));
    f << absl::StrJoin(row, ",") << "\n";
  }
  for (const C10dResult& c : c10d) {
    std::vector<std::string> row(head.size());
    row[0] = "torchrun_c10d";
    row[1] = absl::StrCat(c.n);
    row[2] = absl::StrCat(c.run);
    row[3] = c.complete ? "1" : "0";
    row[6] = Num(c.seconds, "%.4f");  // join_s: first join -> all complete.
    row.back() = Csv(c.note);
    f << absl::StrJoin(row, ",") << "\n";
  }
  return static_cast<bool>(f);
}

std::string Table(const std::vector<RunResult>& runs, const std::vector<C10dResult>& c10d) {
  // By N, then the state's place (in memory first, then etcd).
  std::map<std::pair<int, std::string>, std::vector<const RunResult*>> by_n;
  for (const RunResult& r : runs) by_n[{r.n, r.state == "etcd" ? "~etcd" : r.state}].push_back(&r);
  std::string out =
      "| N | state | complete | connect s | first Join -> all assignments s | ROUND_CLOSED delivered s | "
      "failover s (leader's replica and etcd member killed -> every agent on the next leader) | exit barrier s | "
      "KvSet ms p50 / p99 | etcd alone ms: Put p50 / fenced Txn p50 / p99 | "
      "server CPU s (connect / join / barrier) | server requests (join phase) | server RSS MiB idle / steady / peak / "
      "after leave | KiB per agent (steady) | peak server fds |\n"
      "|---:|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|---:|\n";
  std::vector<std::string> notes;
  for (const auto& [key, rs] : by_n) {
    const int n = key.first;
    const std::string state = rs.front()->state;
    std::vector<const RunResult*> ok;
    for (const RunResult* r : rs) {
      if (r->complete) {
        ok.push_back(r);
      } else {
        notes.push_back(absl::StrCat("meshrun N=", n, " (", state, ") run ", r->run, ": ", r->failure));
      }
    }
    auto med = [&](auto f) {
      std::vector<double> v;
      for (const RunResult* r : ok) v.push_back(f(*r));
      return Median(v);
    };
    auto phase = [&](const char* p) { return med([&](const RunResult& r) { return PhaseSeconds(r, p); }); };
    auto cpu = [&](const char* p) {
      return med([&](const RunResult& r) { return OfPhase(r, p, [](const auto& s) { return s.server_cpu_s; }); });
    };
    auto mib = [&](int64_t RunResult::*f) { return med([&](const RunResult& r) { return (r.*f) / 1024.0; }); };
    const double per_agent = med([&](const RunResult& r) { return static_cast<double>(r.rss_steady_kib - r.rss_idle_kib) / r.n; });
    absl::StrAppend(&out, "| ", n, " | ", state, " | ", ok.size(), " of ", rs.size(), " | ", Cell(phase("connect")),
                    " | ", Cell(phase("join")), " | ", Cell(phase("round_closed"), "%.3f"), " | ",
                    state == "etcd" ? Cell(phase("failover")) : std::string("-"), " | ", Cell(phase("exit_barrier")), " | ",
                    Cell(med([](const RunResult& r) { return r.kvset_count > 0 ? r.kvset_p50_ms : -1; }), "%.2f"), " / ",
                    Cell(med([](const RunResult& r) { return r.kvset_count > 0 ? r.kvset_p99_ms : -1; }), "%.2f"), " | ",
                    state == "etcd"
                        ? absl::StrCat(Cell(med([](const RunResult& r) { return r.etcd_write_count > 0 ? r.etcd_put_p50_ms : -1; }), "%.2f"),
                                       " / ", Cell(med([](const RunResult& r) { return r.etcd_write_count > 0 ? r.etcd_fenced_p50_ms : -1; }), "%.2f"),
                                       " / ", Cell(med([](const RunResult& r) { return r.etcd_write_count > 0 ? r.etcd_fenced_p99_ms : -1; }), "%.2f"))
                        : std::string("-"),
                    " | ",
                    Cell(cpu("connect")), " / ", Cell(cpu("join")), " / ",
                    Cell(cpu("exit_barrier")), " | ",
                    Cell(med([](const RunResult& r) { return OfPhase(r, "join", [](const auto& s) { return s.requests; }); }), "%.0f"), " | ",
                    Cell(mib(&RunResult::rss_idle_kib), "%.1f"), " / ", Cell(mib(&RunResult::rss_steady_kib), "%.1f"),
                    " / ", Cell(mib(&RunResult::rss_peak_kib), "%.1f"), " / ", Cell(mib(&RunResult::rss_after_kib), "%.1f"),
                    " | ", Cell(per_agent, "%.1f"), " | ",
                    Cell(med([](const RunResult& r) {
                           int m = 0;
                           for (const auto& [p, s] : r.phases) m = std::max(m, s.peak_fds);
                           return static_cast<double>(m);
                         }), "%.0f"),
                    " |\n");
  }
  bool any_workers = false;
  for (const RunResult& r : runs) any_workers |= r.complete && WorkersOf(r).ran;
  if (any_workers) {
    absl::StrAppend(&out, "\n| N | workers | mesh | unique ids: first request -> all workers s | server store requests "
                          "per node (max / p90 / mean) | per node per dimension (max) | server CPU s | server sockets |\n"
                          "|---:|---:|---|---:|---|---:|---:|---:|\n");
    for (const auto& [key, rs] : by_n) {
      const int n = key.first;
      std::vector<const RunResult*> ok;
      for (const RunResult* r : rs) {
        if (r->complete && WorkersOf(*r).ran) ok.push_back(r);
      }
      if (ok.empty()) continue;
      auto med = [&](auto f) {
        std::vector<double> v;
        for (const RunResult* r : ok) v.push_back(f(*r));
        return Median(v);
      };
      const int w = ok[0]->workers_per_agent;
      absl::StrAppend(&out, "| ", n, " | ", n * w, " | (", n, ", ", w % 2 == 0 ? 2 : 1, ", ", w % 2 == 0 ? w / 2 : w,
                      ") | ", Cell(med([](const RunResult& r) { return PhaseSeconds(r, "workers"); })), " | ",
                      Cell(med([](const RunResult& r) { return WorkersOf(r).max; }), "%.0f"), " / ",
                      Cell(med([](const RunResult& r) { return WorkersOf(r).p90; }), "%.0f"), " / ",
                      Cell(med([](const RunResult& r) { return WorkersOf(r).mean; }), "%.2f"), " | ",
                      Cell(med([](const RunResult& r) { return WorkersOf(r).max / 3; }), "%.2f"), " | ",
                      Cell(med([](const RunResult& r) { return r.phases.at("workers").server_cpu_s; }), "%.2f"), " | ",
                      Cell(med([](const RunResult& r) { return static_cast<double>(r.phases.at("workers").sockets_end); }),
                           "%.0f"),
                      " |\n");
    }
  }
  if (!c10d.empty()) {
    absl::StrAppend(&out, "\n| N | torchrun c10d: complete | first next_rendezvous() -> all complete s (median) | runs |\n"
                          "|---:|---|---:|---|\n");
    std::map<int, std::vector<const C10dResult*>> cn;
    for (const C10dResult& c : c10d) cn[c.n].push_back(&c);
    for (const auto& [n, cs] : cn) {
      std::vector<double> v;
      std::vector<std::string> each;
      for (const C10dResult* c : cs) {
        if (c->complete) v.push_back(c->seconds);
        each.push_back(c->complete ? absl::StrFormat("%.2f", c->seconds) : c->note);
        if (!c->complete) notes.push_back(absl::StrCat("torchrun c10d N=", n, " run ", c->run, ": ", c->note));
      }
      absl::StrAppend(&out, "| ", n, " | ", v.size(), " of ", cs.size(), " | ", Cell(Median(v)), " | ",
                      absl::StrJoin(each, "; "), " |\n");
    }
  }
  if (!notes.empty()) absl::StrAppend(&out, "\nIncomplete runs:\n\n- ", absl::StrJoin(notes, "\n- "), "\n");
  return out;
}

}  // namespace meshrun::bench
