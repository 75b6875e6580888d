"""A worker: the agent store's keys are apart from meshrun's other keys.
argv[1]: the store_keys tool (tests/etcd/store_keys.cc), a client of
meshrun's own store through this worker's agent. A key libmesh would set
("mesh/...") is invisible through the TCPStore protocol, and a key set
through it is "torch/<key>" in meshrun's store (PyTorch's client sends
key K as "/K", so "visible" is "torch//visible"). Prints "isolated" on success."""
import datetime
import os
import subprocess
import sys

import torch.distributed as dist

tool = sys.argv[1]
subprocess.run([tool, "set", "mesh/secret", "nccl-id"], check=True)
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                  timeout=datetime.timedelta(seconds=30), wait_for_workers=False)
try:
    s.wait(["mesh/secret"], datetime.timedelta(milliseconds=500))
    sys.exit("the agent store shows libmesh's key mesh/secret")
except RuntimeError:  # Timed out (DistStoreError, a RuntimeError): not there.
    pass
s.set("visible", "from-torch")
got = subprocess.run([tool, "get", "torch//visible"], check=True, capture_output=True, text=True).stdout.strip()
if got != "from-torch":
    sys.exit(f"meshrun's store has {got!r} for torch//visible, expected 'from-torch'")
print("isolated", flush=True)
