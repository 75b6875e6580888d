# Prints the worker's environment as sorted KEY=VALUE lines, each prefixed
# with "ENV <rank> ", for comparing meshrun with torchrun. Each line is one
# write(2), so lines of concurrent workers never interleave.
import os

rank = os.environ.get("RANK", "?")
for key in sorted(os.environ):
    os.write(1, f"ENV {rank} {key}={os.environ[key]}\n".encode())
