"""A replica group's training loop, reduced to its quorums (lighthouse_failover_test.sh,
lighthouse_groups_test.sh): at every step it asks the lighthouse at TORCHFT_LIGHTHOUSE for a
quorum through torchft 0.2.0's own client, as torchft's Manager does, retrying a failed call
(the Manager's quorum_retries) while it heartbeats every 100 ms. Its replica id is GROUP
(default group<RANK>). It appends one line per step to OUT/<id>.steps: "step quorum_id
members retries restart_count unix_time", and stops at the first step after OUT/release
exists; a quorum call that fails once OUT/release exists also ends it (the other group may
have stopped first: with lighthouse_min_replicas 2 no quorum would come). FAIL_AT_STEP=N: at step N of its first start (TORCHELASTIC_RESTART_COUNT 0) it dies
(exit 1), as a crashed worker would; RESTART_DELAY=S: a restarted one waits S seconds before
its first call, as loading a model would. Bounded: 120 s in all. Exit 0, or 1 with one line on
stderr."""
import importlib.util
import os
import sys
import threading
import time
from datetime import timedelta

spec = importlib.util.spec_from_file_location("_torchft", os.environ["TORCHFT_SO"])
ft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ft)
rank = int(os.environ["RANK"])
out = os.environ["OUT"]
me = os.environ.get("GROUP", f"group{rank}")
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
fail_at = int(os.environ.get("FAIL_AT_STEP", "-1"))
if restart != "0":
    # A restarted group loads its model before it rejoins (RESTART_DELAY seconds).
    time.sleep(float(os.environ.get("RESTART_DELAY", "0")))
lighthouse = os.environ["TORCHFT_LIGHTHOUSE"]
stop = threading.Event()


def heartbeats():
    hb = ft.LighthouseClient(lighthouse, connect_timeout=timedelta(seconds=10))
    while not stop.wait(0.1):
        try:
            hb.heartbeat(replica_id=me, timeout=timedelta(seconds=1))
        except Exception:  # The leader is changing: the next beat goes to the next one.
            pass


beater = threading.Thread(target=heartbeats, daemon=True)
beater.start()
client = ft.LighthouseClient(lighthouse, connect_timeout=timedelta(seconds=10))
deadline = time.monotonic() + 120
released = lambda: os.path.exists(os.path.join(out, "release"))
with open(os.path.join(out, f"{me}.steps"), "a", buffering=1) as log:
    step = 0
    while not released():
        if step == fail_at and restart == "0":
            os._exit(1)
        retries = 0
        q = None
        while q is None:
            if time.monotonic() > deadline:
                sys.exit(f"{me}: step {step} not done within 120 s ({retries} retries)")
            try:
                q = client.quorum(replica_id=me, timeout=timedelta(seconds=5), address=f"http://{me}:1",
                                  store_address=f"{me}:29500", step=step, world_size=1)
            except Exception:
                if released():  # The other group saw the release at its step's start, this one just after.
                    break
                retries += 1
                time.sleep(0.1)
        if q is None:
            break
        log.write(f"{step} {q.quorum_id} {','.join(p.replica_id for p in q.participants)} {retries} {restart} "
                  f"{time.time():.3f}\n")
        step += 1
        time.sleep(0.05)
stop.set()
# Joined before the interpreter ends: a thread left inside torchft's extension then aborts
# the process ("FATAL: exception not rethrown").
beater.join(timeout=10)
