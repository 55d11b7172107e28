"""``python -m dqnlab``: the command line (see :mod:`dqnlab.cli`)."""

import gc
import sys

from .cli import main

if __name__ == "__main__":
    code = main()
    # Python's last garbage collection, as it exits, would walk every object of PyTorch, numba and the run (seconds,
    # after Ctrl-C too): they are left to the exit instead, the files written and closed already.
    gc.freeze()
    sys.exit(code)
