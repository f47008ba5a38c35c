"""`python -m trainrun.torchrun ARGS`: torch.distributed.run (torchrun) as trainrun starts it. A rank that fails, and
a stop by trainrun (--timeout, Ctrl-C), end torchrun with an exception whose 20 to 30 lines of traceback would follow
the rank's own; trainrun names the rank and the cause in its summary line, so the exception ends torchrun with its
exit code and no traceback (all of it with trainrun --verbose).

torchrun's temporary files (its log directory, /tmp/torchelastic_*, unless --log-dir names one) go into a directory
of the job's, removed when torchrun ends, or by trainrun's runner or watchdog when it is killed."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from .proctree import JOB_ID, job_temp_prefix
from .rank.env import VERBOSE


def main(args: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    sys.argv = ["torchrun", *args]
    # This process's temporary files only: the ranks, started with the environment, keep the usual TMPDIR.
    tempfile.tempdir = tempfile.mkdtemp(prefix=job_temp_prefix(os.environ.get(JOB_ID, "torchrun")))
    try:
        torchrun(args)
    except (ChildFailedError, SignalException) as err:
        if os.environ.get(VERBOSE):
            raise
        return 128 + err.sigval if isinstance(err, SignalException) else 1
    finally:
        shutil.rmtree(tempfile.tempdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
