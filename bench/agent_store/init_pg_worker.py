"""Times init_process_group("gloo", env://) and one barrier in a worker.
Prints "init_s RANK SECONDS"."""
import os
import time

import torch.distributed as dist

t0 = time.monotonic()
dist.init_process_group("gloo", init_method="env://")
dist.barrier()
print(f"init_s {dist.get_rank()} {time.monotonic() - t0:.3f}", flush=True)
dist.destroy_process_group()
