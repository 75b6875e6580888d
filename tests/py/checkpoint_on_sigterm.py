# A trainer that catches SIGTERM to finish its step and save a checkpoint,
# while its DataLoader's 2 worker processes still feed it
# (KempnerInstitute/KempnerForge#177). Usage: checkpoint_on_sigterm.py DIR.
# Prints "READY rank=<r> loader_pids=<p1>,<p2>" once training runs, then
# "SAVED rank=<r>" after writing DIR/ckpt_rank<r>.pt. A stop signal that also
# hits the DataLoader workers makes the next batch raise, and nothing is saved.
import os
import signal
import sys

import torch
from torch.utils.data import DataLoader, Dataset

out_dir = sys.argv[1]
rank = int(os.environ["RANK"])
stop = False


def on_term(signo, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


class Numbers(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        return torch.tensor([float(i)])


loader = DataLoader(Numbers(), batch_size=4, num_workers=2, persistent_workers=True)
model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
it = iter(loader)
step = 0
announced = False
while True:
    batch = next(it)
    loss = model(batch).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if not announced and step >= 3:
        pids = ",".join(str(w.pid) for w in it._workers)
        os.write(1, f"READY rank={rank} loader_pids={pids}\n".encode())
        announced = True
    if stop:
        # Finish the step: a few more batches from the DataLoader workers,
        # which must still be alive, then save.
        for _ in range(8):
            next(it)
        torch.save({"step": step, "model": model.state_dict()}, os.path.join(out_dir, f"ckpt_rank{rank}.pt"))
        os.write(1, f"SAVED rank={rank} step={step}\n".encode())
        sys.exit(0)
