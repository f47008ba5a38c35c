"""`python -m trainrun.torchrun ARGS`: torch.distributed.run (torchrun) as trainrun starts it. A rank that fails, and
a stop by trainrun (--timeout, Ctrl-C), end torchrun with an exception whose 20 to 30 lines of traceback would follow
the rank's own; trainrun names the rank and the cause in its summary line, so the exception ends torchrun with its
exit code and no traceback (all of it with trainrun --verbose). Its log lines saying the same ("E... failed
(exitcode: 1) local_rank: 1 ...", "W... Sending process N closing signal SIGTERM") go too, unless --verbose.

torchrun's temporary files (its log directory, /tmp/torchelastic_*, unless --log-dir names one) go into a directory
of the job's, removed when torchrun ends, or by trainrun's runner or watchdog when it is killed."""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile

from .proctree import JOB_ID, job_temp_prefix
from .rank.env import VERBOSE


# torchrun's log records about a rank's end and the others' stop, which trainrun's summary line says.
ELASTIC_PROCESS_LOGGER = "torch.distributed.elastic.multiprocessing.api"
RANK_END_RECORDS = ("failed (exitcode: ", "Sending process %s closing signal", "Closing process %s via signal")


def shown_record(record: logging.LogRecord) -> bool:
    """False for torchrun's records about a rank's end and the others' stop."""
    return not str(record.msg).startswith(RANK_END_RECORDS)


def main(args: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    sys.argv = ["torchrun", *args]
    if not os.environ.get(VERBOSE):
        logging.getLogger(ELASTIC_PROCESS_LOGGER).addFilter(shown_record)
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
