"""Every test tier in two pytest runs at once: the image tier beside the integration and unit tiers, which also take
a few image modules so that both runs end at about the same time.

On 2 cores the tiers leave each other room: the integration tier spends much of its time waiting (Slurm's scheduler,
timeouts, a JVM's start), and the image tier in containers. Run one after another they took 46 minutes here; at once,
34 (docs/contributing/testing.md). Each run's lines are marked with its name (`[image]`, `[others]`); the exit code
is the first failing run's, else 0. A `[tiers]` line before the exit codes gives the runs' minutes and how busy they
kept the host's CPUs.

    python -m trainstack.test_tiers [PYTEST ARGS]

Arguments that name tests (a path under tests/) run in one pytest, as `pytest ARGS` would."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

from trainstack.image.build_timing import host_cpu_seconds

# Image modules that start their own containers, run with the others so that both runs end together: under .ci/run
# the image tier took 39.5 minutes beside the others' 27.7 before the first three moved (4.2 of its 27.3 minutes
# alone), and 36.1 beside 32.5 before the last (47 s alone, 75 s beside the others).
IMAGE_MODULES_WITH_THE_OTHERS = ("tests/image/test_lifecycle_in_image.py", "tests/image/test_ray_on_spark_in_image.py",
                                 "tests/image/test_selftest_in_image.py", "tests/image/test_notebook_output.py")
TOGETHER = (("image", ["tests/image", *(f"--ignore={module}" for module in IMAGE_MODULES_WITH_THE_OTHERS)]),
            ("others", ["tests/integration", "tests/unit", *IMAGE_MODULES_WITH_THE_OTHERS]))


def names_tests(args: Sequence[str]) -> bool:
    return any(arg == "tests" or arg.startswith(("tests/", "./tests")) for arg in args)


def run_tiers(args: Sequence[str], out: IO[str] = sys.stdout) -> int:
    """The runs of TOGETHER at once, each line marked with its run's name, then a `[tiers]` line of their minutes and
    CPU; the first failing run's exit code, else 0."""
    if names_tests(args):
        return subprocess.run([sys.executable, "-m", "pytest", *args]).returncode
    lock = threading.Lock()
    started, started_cpu = time.monotonic(), host_cpu_seconds()
    # In this process group, so that Ctrl-C or a stop of the group reaches both runs as it reaches pytest alone.
    runs = [(name, subprocess.Popen([sys.executable, "-m", "pytest", *paths, *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"}))
            for name, paths in TOGETHER]

    def relay(name: str, process: subprocess.Popen) -> None:
        for line in process.stdout:
            with lock:
                out.write(f"[{name}] {line}")
                out.flush()

    relays = [threading.Thread(target=relay, args=run, daemon=True) for run in runs]
    for thread in relays:
        thread.start()
    codes = []
    for _, process in runs:
        while True:
            try:
                codes.append(process.wait())
                break
            except KeyboardInterrupt:  # the runs got the same SIGINT: wait for their summaries
                continue
    for thread in relays:
        thread.join(timeout=10)
    # How much of the machine the runs left idle: room for a third run, or none.
    elapsed, cores = time.monotonic() - started, os.cpu_count() or 1
    busy = (host_cpu_seconds() - started_cpu) / (elapsed * cores)
    out.write(f"[tiers] {elapsed / 60:.1f} minutes, the host's {cores} cores busy {busy:.0%} of it\n")
    for (name, _), code in zip(runs, codes):
        out.write(f"[{name}] pytest exited {code}\n")
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(run_tiers(sys.argv[1:]))
