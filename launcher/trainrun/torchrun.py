"""`python -m trainrun.torchrun ARGS`: torch.distributed.run (torchrun) as trainrun starts it. A rank that fails, and
a stop by trainrun (--timeout, Ctrl-C), end torchrun with an exception whose 20 to 30 lines of traceback would follow
the rank's own; trainrun names the rank and the cause in its summary line, so the exception ends torchrun with its
exit code and no traceback (all of it with trainrun --verbose)."""
from __future__ import annotations

import os
import sys

from .rank.env import VERBOSE


def main(args: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    sys.argv = ["torchrun", *args]
    try:
        torchrun(args)
    except (ChildFailedError, SignalException) as err:
        if os.environ.get(VERBOSE):
            raise
        return 128 + err.sigval if isinstance(err, SignalException) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
