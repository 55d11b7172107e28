"""``python -m dqnlab``: the command line (see :mod:`dqnlab.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
