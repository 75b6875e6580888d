#!/usr/bin/python3
"""Plots bench/rdzv_scale's CSV: rendezvous time against N, meshrun and
torchrun's c10d, on log-log axes (docs/img/rdzv_scale.png).

For each implementation and N: the median over the complete runs of
"first join -> every agent assigned" (meshrun: the join phase; c10d: first
next_rendezvous() call -> the last returns), with the fastest and slowest
complete run as an error bar. A run that did not complete is drawn as a
cross at the time it was given (its timeout), labelled with how many of
the runs completed. meshrun's connect phase is drawn as a dashed line.

With --before OLD.csv, meshrun's join phase from an earlier build is drawn
too (dotted), with its incomplete runs. With --workers W.csv (a run with
--workers_per_agent), its workers phase is drawn (dash-dot): the first
worker's first store request -> every worker has the unique ids of a 3-D
mesh.

Usage: /usr/bin/python3 bench/rdzv_scale/plot.py rdzv_scale.csv docs/img/rdzv_scale.png
           [--before OLD.csv --before_label TEXT] [--workers W.csv] [--title TEXT]
Needs python3-matplotlib (scripts/install-deps.sh installs it).
"""
import argparse
import csv
import re
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = list(csv.DictReader(open(path, newline="")))
    if not rows:
        sys.exit(f"plot.py: {path}: no rows")
    return rows


def series(rows, impl, column):
    """{n: ([complete times], runs, [timeouts of incomplete runs])}"""
    out = defaultdict(lambda: ([], 0, []))
    for r in rows:
        if r["impl"] != impl:
            continue
        if r["complete"] == "1" and not r.get(column):
            continue  # A complete run that did not measure this phase.
        n = int(r["n"])
        times, runs, timeouts = out[n]
        runs += 1
        if r["complete"] == "1" and r[column]:
            times.append(float(r[column]))
        else:
            m = re.search(r"in ([0-9.]+) s", r.get("failure", ""))
            timeouts.append(float(m.group(1)) if m else None)
        out[n] = (times, runs, timeouts)
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--title", default="Rendezvous time against the number of agents (one server, 2 cores)")
    ap.add_argument("--before", help="CSV of an earlier build (meshrun rows drawn dotted)")
    ap.add_argument("--before_label", default="meshrun before")
    ap.add_argument("--workers", help="CSV of a run with --workers_per_agent (its workers phase is drawn)")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(args.csv)
    if args.before:
        rows += [dict(r, impl="before_" + r["impl"]) for r in load(args.before)]
    if args.workers:
        rows += [dict(r, impl="workers_" + r["impl"]) for r in load(args.workers)]
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = [("before_meshrun", "join_s", f"{args.before_label}: first Join -> every assignment", "tab:gray", ":"),
              ("meshrun", "join_s", "meshrun: first Join -> every assignment", "tab:blue", "-"),
              ("meshrun", "connect_s", "meshrun: connect (agents' streams open)", "tab:blue", "--"),
              ("workers_meshrun", "workers_s", "meshrun: 8 workers per agent get a 3-D mesh's unique ids",
               "tab:green", "-."),
              ("torchrun_c10d", "join_s", "torchrun c10d (PyTorch 1.13): first join -> all complete", "tab:red", "-")]
    incomplete = []
    for impl, col, label, color, ls in styles:
        s = series(rows, impl, col)
        ns = [n for n, (t, _, _) in s.items() if t]
        if ns:
            med = [statistics.median(s[n][0]) for n in ns]
            lo = [m - min(s[n][0]) for n, m in zip(ns, med)]
            hi = [max(s[n][0]) - m for n, m in zip(ns, med)]
            ax.errorbar(ns, med, yerr=[lo, hi], color=color, linestyle=ls, marker="o", capsize=3, label=label)
            for n, m in zip(ns, med):
                t, runs, _ = s[n]
                if col in ("join_s", "workers_s"):
                    ax.annotate(f"{m:.2g} s" + ("" if len(t) == runs else f" ({len(t)}/{runs})"), (n, m),
                                textcoords="offset points", xytext=(4, 6), fontsize=8, color=color)
        for n, (t, runs, timeouts) in s.items():
            if col in ("join_s", "workers_s") and timeouts:
                incomplete.append((n, runs, timeouts, color))
    ax.set_xscale("log")
    ax.set_yscale("log")
    # Incomplete runs: a cross at the timeout they were given, or at the top
    # of the plot when their reason names none.
    top = ax.get_ylim()[1]
    for n, runs, timeouts, color in incomplete:
        y = max([x for x in timeouts if x] or [top])
        ax.plot([n], [y], marker="x", markersize=10, color=color, linestyle="none")
        what = f"did not complete in {y:g} s" if any(timeouts) else "did not complete"
        ax.annotate(f"{len(timeouts)}/{runs} {what}", (n, y), textcoords="offset points",
                    xytext=(-110, -4), fontsize=8, color=color)
    ax.set_xlabel("agents (nodes)")
    ax.set_ylabel("seconds (median of the complete runs; bars: min..max)")
    ax.set_title(args.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"plot.py: wrote {args.png}")


if __name__ == "__main__":
    main()
