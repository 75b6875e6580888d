"""One replica group of bench/lighthouse/quorum_latency.sh: ROUNDS quorum calls through
torchft 0.2.0's own LighthouseClient at TORCHFT_LIGHTHOUSE, each after a file barrier with
the other groups, so that all groups ask at about the same time. Appends
"round t_call t_answer quorum_id members" (Unix seconds) per call to OUT/lat.<RANK>."""
import importlib.util
import os
import sys
import time
from datetime import timedelta

spec = importlib.util.spec_from_file_location("_torchft", os.environ["TORCHFT_SO"])
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)
rank, n, rounds = int(os.environ["RANK"]), int(os.environ["LH_GROUPS"]), int(os.environ["ROUNDS"])
out, me = os.environ["OUT"], f"group{int(os.environ['RANK']):03d}"
client = ft.LighthouseClient(os.environ["TORCHFT_LIGHTHOUSE"], connect_timeout=timedelta(seconds=30))


def barrier(name):
    open(os.path.join(out, f"{name}.{rank}"), "w").close()
    deadline = time.monotonic() + 120
    while sum(1 for f in os.listdir(out) if f.startswith(name + ".")) < n:
        if time.monotonic() > deadline:
            sys.exit(f"{me}: barrier {name} not reached by {n} groups in 120 s")
        time.sleep(0.002)


client.heartbeat(replica_id=me)
lines = []
for r in range(rounds):
    barrier(f"r{r}")
    t0 = time.time()
    q = client.quorum(replica_id=me, timeout=timedelta(seconds=60), step=r, world_size=1)
    lines.append(f"{r} {t0:.6f} {time.time():.6f} {q.quorum_id} {len(q.participants)}")
with open(os.path.join(out, f"lat.{rank}"), "w") as f:
    f.write("\n".join(lines) + "\n")
