"""A worker that checks torchrun's address contract on real hosts.

Prints its rank, host name and MASTER_ADDR; rank 0 listens on
MASTER_ADDR:MASTER_PORT and every other rank connects to it (bounded), so
the job passes only if every host reaches node rank 0's advertised address.
Standard library only.
"""
import os
import socket
import sys
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print(f"rank={rank} host={socket.gethostname()} master={addr} node_addr={os.environ.get('MESHRUN_NODE_ADDR')} "
      f"gloo_ifname={os.environ.get('GLOO_SOCKET_IFNAME')}", flush=True)
family = socket.AF_INET6 if ":" in addr else socket.AF_INET
if rank == 0:
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, port))
    srv.listen(world)
    srv.settimeout(30)
    for _ in range(world - 1):
        conn, _ = srv.accept()
        conn.recv(16)
        conn.close()
    print("rank=0 accepted every rank", flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2) as c:
                c.sendall(b"hello")
            break
        except OSError as e:
            if time.time() > deadline:
                print(f"rank={rank} cannot reach {addr}:{port}: {e}", flush=True)
                sys.exit(3)
            time.sleep(0.1)
    print(f"rank={rank} reached master", flush=True)
