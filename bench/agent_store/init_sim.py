"""Simulated ranks: the TCPStore traffic of init_process_group("gloo") at
scales whose processes do not fit on this machine. N ranks are N threads of
one process, each with a PyTorch TCPStore client of its own (its own
connection, as each rank has), doing what Gloo's full-mesh rendezvous asks
of the store - each rank sets its address (64 bytes) and gets every other
rank's (PyTorch's client sends a WAIT, then a GET) - and then a barrier (an
ADD; the last arrival sets a key every rank waits for). PyTorch's client
calls leave Python's lock while they wait on the socket.

Prints "sim N CONNECT_S TRAFFIC_S CONNECTIONS BYTES [UP_CONNECTIONS
UP_BYTES]": the seconds to connect every client, the seconds of the traffic
(from the moment all are connected to the last rank's end), and, from `ss`
before the clients close, the TCP connections and bytes the store's port
received; under meshrun also those of the rendezvous server's port at
UPSTREAM_PORT (its connections from this host, and the bytes it acknowledged).

usage: init_sim.py N own                    # PyTorch's own TCPStore server, in this process
       init_sim.py N agent [UPSTREAM_PORT]  # a worker under meshrun: MASTER_ADDR:MASTER_PORT
"""
import datetime
import os
import re
import subprocess
import sys
import threading
import time

import torch.distributed as dist

n, mode = int(sys.argv[1]), sys.argv[2]
timeout = datetime.timedelta(seconds=600)
if mode == "own":
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout, wait_for_workers=False)
    host, port = "127.0.0.1", server.port
else:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])

t0 = time.monotonic()
clients = [dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False) for _ in range(n)]
connected = time.monotonic()
start = threading.Barrier(n + 1)
errors = []


def rank(r):
    store = dist.PrefixStore("sim", clients[r])
    start.wait()
    try:
        store.set(f"rank_{r}", os.urandom(32).hex().encode())
        for j in range(n):
            if j != r:
                store.get(f"rank_{j}")
        if store.add("arrived", 1) == n:
            store.set("done", b"1")
        store.wait(["done"])
    except Exception as e:  # Reported below; the run then fails.
        errors.append(f"rank {r}: {e}")


threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
for t in threads:
    t.start()
start.wait()
t1 = time.monotonic()
for t in threads:
    t.join()
t2 = time.monotonic()
if errors:
    sys.exit(f"{len(errors)} ranks failed: {errors[0]}")


def sockets(side, p, field):
    """Connections on `side` (sport/dport) port `p`, and the sum of `field` over them."""
    text = subprocess.run(["ss", "-tinH", "state", "established", f"( {side} = :{p} )"], capture_output=True,
                          text=True, check=True).stdout
    values = [int(b) for b in re.findall(field + r":(\d+)", text)]
    return len(values), sum(values)


line = f"sim {n} {connected - t0:.3f} {t2 - t1:.3f} %d %d" % sockets("sport", port, "bytes_received")
if len(sys.argv) > 3:
    line += " %d %d" % sockets("dport", int(sys.argv[3]), "bytes_acked")
print(line, flush=True)
