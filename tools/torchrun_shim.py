#!/usr/bin/python3
"""Run PyTorch's torchrun with a fix for its --redirects/--tee parsing.

Usage:
    /usr/bin/python3 tools/torchrun_shim.py <torchrun args...>

Why this exists
---------------
meshrun is compared against torchrun (benchmarks, environment checks).  The
torchrun available on the build machines is Debian's python3-torch 1.13.1,
running on Python 3.11, and it crashes at start-up before any worker runs:

    AttributeError: 'NoneType' object has no attribute 'get'

The cause is ``Std.from_str`` in
torch/distributed/elastic/multiprocessing/api.py, which turns the
``--redirects`` and ``--tee`` values ("0".."3", or maps such as "0:1,1:2")
into ``Std`` flags by iterating over the ``Std`` IntFlag and picking the
member equal to the number.  Since Python 3.11, iterating a Flag yields only
its canonical single-bit members, so ``Std.NONE`` (0) and ``Std.ALL`` (3) are
never found and ``from_str`` returns None for the default "0".  PyTorch later
fixed this upstream by converting with ``Std(int(v))``.

This shim replaces ``Std.from_str`` with a version that does exactly that,
keeping the same input checks, and then hands the command line to
``torch.distributed.run.main()`` unchanged.  It changes nothing else.
"""

import re
import sys

from torch.distributed.elastic.multiprocessing import api as _mp_api
from torch.distributed.elastic.multiprocessing.api import Std


def _std_from_str(cls, vm):
    """'0'..'3' -> Std member; 'i:v,j:w' -> {i: Std(v), j: Std(w)}."""
    if re.match(_mp_api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(_mp_api._MAPPING_REGEX, vm):
        mapping = {}
        for item in vm.split(","):
            index, value = item.split(":")
            mapping[int(index)] = cls(int(value))
        return mapping
    raise ValueError(
        f"{vm} does not match: <{_mp_api._VALUE_REGEX}> or "
        f"<{_mp_api._MAPPING_REGEX}>"
    )


def _needs_patch():
    try:
        return Std.from_str("0") is not Std.NONE or Std.from_str("3") is not Std.ALL
    except Exception:
        return True


if _needs_patch():
    Std.from_str = classmethod(_std_from_str)


def main():
    from torch.distributed import run as _torch_run

    # torchrun's parser reads sys.argv[1:], like the real `torchrun` entry point.
    sys.argv[0] = "torchrun"
    _torch_run.main()


if __name__ == "__main__":
    main()
