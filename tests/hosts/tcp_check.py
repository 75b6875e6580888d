"""A worker that checks torchrun's address contract on real hosts.

Prints its rank, host name and MASTER_ADDR; then every rank connects to
MASTER_ADDR:MASTER_PORT, where node rank 0's agent serves torchrun's agent
store (PyTorch's TCPStore protocol), and pings it: VALIDATE with its magic
number, then PING with a nonce that must come back. So the job passes only
if every host reaches node rank 0's advertised address and the agent store
answers there. Standard library only.
"""
import os
import socket
import struct
import sys
import time

rank = int(os.environ["RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print(f"rank={rank} host={socket.gethostname()} master={addr} node_addr={os.environ.get('MESHRUN_NODE_ADDR')} "
      f"gloo_ifname={os.environ.get('GLOO_SOCKET_IFNAME')}", flush=True)
VALIDATE, PING, MAGIC = 0, 13, 0x3C85F7CE
nonce = 1000 + rank
deadline = time.time() + 30
while True:
    try:
        with socket.create_connection((addr, port), timeout=5) as c:
            c.sendall(struct.pack("<BI", VALIDATE, MAGIC) + struct.pack("<BI", PING, nonce))
            got = b""
            while len(got) < 4:
                chunk = c.recv(4 - len(got))
                if not chunk:
                    raise OSError("the agent store closed the connection")
                got += chunk
            if struct.unpack("<I", got)[0] != nonce:
                print(f"rank={rank} PING answered {got!r}, expected {nonce}", flush=True)
                sys.exit(4)
        break
    except OSError as e:
        if time.time() > deadline:
            print(f"rank={rank} cannot reach {addr}:{port}: {e}", flush=True)
            sys.exit(3)
        time.sleep(0.1)
print(f"rank={rank} reached master", flush=True)
