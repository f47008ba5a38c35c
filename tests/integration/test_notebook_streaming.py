"""Each rank's line reaches the notebook cell within a second of the rank printing it, under every launcher runnable
on this host, timed by the arrival of the kernel's stream messages (tests/image/units/stream_delays.py, the same
measurement the image test runs for HorovodRunner and DeepSpeed)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from notebook_streaming import check_streamed, result_of
from fault_harness import MARK
from launch_helpers import leftover_processes

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

# Long (a minute): CI times the same ways, and HorovodRunner's and DeepSpeed's, in the image's own kernel
# (tests/image/test_notebook_streaming_in_image.py), and a kernel's job ending with nothing left in
# test_notebook_magics and test_notebook_job_ends.
pytestmark = [pytest.mark.timeout(900), pytest.mark.long]

MEASURE = Path(__file__).parents[1] / "image" / "units" / "stream_delays.py"


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


def host_ways() -> list[str]:
    ways = []
    if shutil.which("mpirun") and _has("mpi4py"):
        ways.append("mpi")
    if _has("torch"):
        ways += ["torch", "trainrun.run"]
    if _has("pyspark") and shutil.which("java"):
        ways.append("spark")
        if _has("torch"):
            ways.append("trainrun.run(spark=session)")
            ways.append("TorchDistributor-local")
            if _has("pandas", "pyarrow"):  # PySpark's barrier stage of a distributor needs them
                ways.append("TorchDistributor")
            if _has("deepspeed"):
                ways.append("DeepspeedTorchDistributor")
    return ways


WAYS = host_ways()
DISTRIBUTORS = ("TorchDistributor-local", "TorchDistributor", "DeepspeedTorchDistributor")


def pyspark_unbuffers_its_ranks() -> bool:
    """Whether PySpark's TorchDistributor starts its ranks unbuffered (images/patches/
    pyspark-4.3.0-unbuffered-ranks.patch); without it their lines come in 8 KiB blocks, at the end of a short job."""
    import inspect

    from pyspark.ml.torch.distributor import TorchDistributor

    return "PYTHONUNBUFFERED" in inspect.getsource(TorchDistributor._execute_command)


def way_param(way: str):
    """Without the patch a distributor's ranks are expected late. Local mode always is; outside it (a barrier stage
    on local[2], where the host has pandas and pyarrow) a short rank's first line sometimes still comes in time, so
    only local mode's expectation is strict. The images' patched PySpark is held to the second in the image tier."""
    if way in DISTRIBUTORS and not pyspark_unbuffers_its_ranks():
        return pytest.param(way, marks=pytest.mark.xfail(
            reason="this PySpark lacks images/patches/pyspark-4.3.0-unbuffered-ranks.patch",
            strict=way == "TorchDistributor-local"))
    return way


@pytest.fixture(scope="module")
def delays(tmp_path_factory) -> dict:
    if not WAYS:
        pytest.skip("no launcher runs on this host")
    mark = os.urandom(8).hex()
    env = {**os.environ, MARK: mark, "SPARK_WORKER_DIR": str(tmp_path_factory.mktemp("spark-work")),
           "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.pop("PYTHONUNBUFFERED", None)  # as in a Jupyter server's kernel: the ranks' buffering is trainrun's to set
    done = subprocess.run([sys.executable, str(MEASURE), *WAYS], env=env, capture_output=True, text=True,
                          timeout=850)
    assert done.returncode == 0, done.stderr[-4000:]
    measured = result_of(done.stdout)
    print(json.dumps({way: result["firsts"] for way, result in measured.items()}, indent=1))
    # The kernel's Spark (its JVM and PySpark's Python daemon) ends a moment after the kernel is shut down.
    deadline = time.monotonic() + 15
    while leftover_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftover_processes(mark) == []
    return measured


@pytest.mark.parametrize("way", [way_param(way) for way in WAYS] or ["none"])
def test_each_ranks_first_line_reaches_the_cell_within_a_second(delays, way) -> None:
    check_streamed(way, delays[way])
