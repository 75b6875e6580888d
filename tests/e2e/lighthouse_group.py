"""One replica group's side of the lighthouse test (lighthouse_torchft_test.sh), through
torchft 0.2.0's own LighthouseClient (its Rust extension, loaded without PyTorch).

Run as RANK r of 3 (RANK, TORCHFT_LIGHTHOUSE, LH_SYNC: a directory the three share, and
TORCHFT_SO: the extension's path). It prints a transcript of what it saw, one line per
phase, with nothing that differs between two lighthouses that follow the same rules
(no times, no addresses of the lighthouse): the test compares meshrun's transcript with
torchft's own LighthouseServer's. Phases (the groups meet at file barriers between them):
  0. all three heartbeat;
  1. all three ask (step 10 x rank, data {"rank": r}): one quorum of the three;
  2. all three ask again: the same members, so the same quorum id (the fast quorum);
  3. group 2 leaves (no more heartbeats); 0 and 1 ask: a quorum of the two once group 2's
     heartbeat times out, with the next quorum id;
  4. group 0 alone asks with a 1 s timeout: under min_replicas 2, no quorum: an error.
"""
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
sync = os.environ["LH_SYNC"]
lighthouse = os.environ["TORCHFT_LIGHTHOUSE"]
me = f"group{rank}"


def barrier(name, n):
    """Marks this group at `name` and waits (bounded) until n groups are."""
    open(os.path.join(sync, f"{name}.{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while sum(1 for f in os.listdir(sync) if f.startswith(name + ".")) < n:
        if time.monotonic() > deadline:
            sys.exit(f"{me}: barrier {name}: fewer than {n} groups within 60 s")
        time.sleep(0.02)


def show(phase, q, base):
    members = ",".join(f"{p.replica_id}@{p.step}/{p.world_size}/{p.store_address}/{p.data}" for p in q.participants)
    return f"{me} {phase}: quorum {q.quorum_id - base} [{members}]"


client = ft.LighthouseClient(lighthouse, connect_timeout=timedelta(seconds=10))


def ask(step, timeout=30):
    return client.quorum(replica_id=me, timeout=timedelta(seconds=timeout), address=f"http://{me}:1",
                         store_address=f"{me}:29500", step=step, world_size=2, shrink_only=False,
                         data={"rank": rank})


# A group heartbeats every 100 ms while it lives, as torchft's ManagerServer does (a
# group waiting in a Quorum call stays healthy); its own client, on its own thread.
beating = threading.Event()


def heartbeats():
    hb = ft.LighthouseClient(lighthouse, connect_timeout=timedelta(seconds=10))
    while not beating.wait(0.1):
        hb.heartbeat(replica_id=me)


# Every group heartbeats first: the first quorum then waits for all three (join_timeout),
# where two alone would otherwise form one.
client.heartbeat(replica_id=me)
beater = threading.Thread(target=heartbeats, daemon=True)
beater.start()


def leave():
    """Stops this group's heartbeats, and joins their thread: one left inside torchft's
    extension as the interpreter ends aborts the process ("FATAL: exception not rethrown")."""
    beating.set()
    beater.join(timeout=10)
barrier("p0", 3)
q1 = ask(10 * rank)
base = q1.quorum_id - 1  # Ids compared from the first: torchft's starts at 1, a replica's elsewhere.
lines = [show("1", q1, base)]
barrier("p1", 3)
q2 = ask(10 * rank + 1)
lines.append(show("2", q2, base))
barrier("p2", 3)
if rank == 2:
    leave()  # Group 2 leaves: no more heartbeats.
    print("\n".join(lines), flush=True)
    sys.exit(0)
t0 = time.monotonic()
client.heartbeat(replica_id=me)
q3 = ask(10 * rank + 2)
lines.append(show("3", q3, base) + (" (after group 2's heartbeat timed out)" if time.monotonic() - t0 >= 0.9 else
                                     " (before group 2's heartbeat timed out!)"))
barrier("p3", 2)
if rank == 1:
    leave()  # Group 1 leaves: group 0 is alone.
    print("\n".join(lines), flush=True)
    sys.exit(0)
if rank == 0:
    t0 = time.monotonic()
    try:
        ask(3, timeout=1)
        lines.append(f"{me} 4: a quorum under min_replicas!")
    except Exception as e:  # torchft raises its own error for a deadline
        waited = time.monotonic() - t0
        lines.append(f"{me} 4: no quorum alone ({'timed out' if 0.9 <= waited < 5 else f'after {waited:.1f} s'})")
print("\n".join(lines), flush=True)
leave()
