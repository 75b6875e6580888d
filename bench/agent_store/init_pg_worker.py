"""Times init_process_group("gloo", env://) and one barrier in a worker.
Prints "init_at RANK ENTRY EXIT" (wall-clock seconds), so that the bench can
take the time from the last rank's entry to the last rank's exit: the
store's part, without the ranks' different start-up times."""
import time

import torch.distributed as dist

entry = time.time()
dist.init_process_group("gloo", init_method="env://")
dist.barrier()
print(f"init_at {dist.get_rank()} {entry:.6f} {time.time():.6f}", flush=True)
dist.destroy_process_group()
