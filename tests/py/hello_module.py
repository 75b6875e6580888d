# Run with `meshrun -m hello_module`: proves -m works like python -u -m.
import os
import sys

print(f"module rank={os.environ['RANK']} args={sys.argv[1:]}", flush=True)
