"""How a launcher's cell ends when it does not end well, in a real kernel (jupyter_client): Kernel > Interrupt (SIGINT
to the kernel) shows one line and leaves nothing running; a kernel killed (SIGKILL) mid-cell leaves neither
processes nor the pickled cell (trainrun-api-*/payload.pkl) behind; a rank that raises shows its traceback from the
cell's own line, then trainrun's one line, and none of the launcher's own words for it."""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest
from fault_harness import MARK
from launch_helpers import leftover_processes, requires
from polling import wait_until

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.timeout(600)

SLEEPING_RANK = "import time\nprint('started', flush=True)\ntime.sleep(600)"
SLEEPING_FUNCTION = "def sleeping():\n" + "".join(f"    {line}\n" for line in SLEEPING_RANK.splitlines())
CELLS = {
    "%%trainrun mpi": "%%trainrun mpi -np 2\n" + SLEEPING_RANK,
    "%%trainrun torch": "%%trainrun torch --nproc-per-node 2\n" + SLEEPING_RANK,
    "trainrun.run": "import trainrun\n" + SLEEPING_FUNCTION + "trainrun.run(sleeping, num_processes=2)",
    "HorovodRunner": "from trainrun import HorovodRunner\n" + SLEEPING_FUNCTION + "HorovodRunner(np=2).run(sleeping)",
}
NEEDS = {"%%trainrun mpi": requires(mpirun=True), "%%trainrun torch": requires(torch=True),
         "trainrun.run": requires(torch=True), "HorovodRunner": requires(mpirun=True)}
INTERRUPTED = "trainrun: received SIGINT; job stopped"


class Kernel:
    """A kernel of its own temp dir and test mark, with trainrun's extension loaded."""

    def __init__(self, tmp_path: Path, mark: str) -> None:
        self.tmp = tmp_path / "kernel-tmp"
        self.tmp.mkdir()
        env = {**os.environ, MARK: mark, "TMPDIR": str(self.tmp), "OMP_NUM_THREADS": "1",
               "SPARK_WORKER_DIR": str(tmp_path / "spark-work"),
               "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        self.manager = jupyter_client.KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.pid = self.manager.provisioner.process.pid
        self.execute("%load_ext trainrun.notebook")

    def start(self, code: str, until: str = "started", timeout: float = 240) -> str:
        """Starts the cell and returns its msg_id once a stream message of the cell holds `until`."""
        msg_id = self.client.execute(code)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream" and \
                    until in msg["content"]["text"]:
                return msg_id
        raise AssertionError(f"no {until!r} from the cell within {timeout} s")

    def outcome(self, msg_id: str, timeout: float = 60) -> dict | None:
        """The cell's error message content (None if it ended without one), once the cell has ended."""
        error = None
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "error":
                error = msg["content"]
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return error

    def execute(self, code: str) -> dict | None:
        return self.outcome(self.client.execute(code), timeout=240)

    def payloads(self) -> list[str]:
        return [str(path) for path in self.tmp.glob("trainrun-api-*")]

    def defunct_children(self) -> list[str]:
        return [f"{child.pid} {child.name()}" for child in psutil.Process(self.pid).children()
                if child.status() == psutil.STATUS_ZOMBIE]

    def shutdown(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)


@pytest.fixture
def mark() -> str:
    return os.urandom(8).hex()


@pytest.fixture
def kernel(tmp_path, mark):
    started = Kernel(tmp_path, mark)
    yield started
    started.shutdown()


def job_processes(mark: str, kernel: Kernel) -> list[str]:
    return [line for line in leftover_processes(mark) if int(line.split()[0]) != kernel.pid]


@pytest.mark.parametrize("way", [pytest.param(way, marks=NEEDS[way]) for way in CELLS])
def test_interrupting_a_launchers_cell_shows_one_line_and_stops_the_job(kernel, mark, way) -> None:
    msg_id = kernel.start(CELLS[way])
    assert kernel.payloads(), "the pickled cell was not where this test looks"
    kernel.manager.interrupt_kernel()
    error = kernel.outcome(msg_id)
    assert error is not None and error["traceback"] == [INTERRUPTED], error
    assert job_processes(mark, kernel) == []
    assert kernel.payloads() == []
    assert kernel.defunct_children() == []


@pytest.mark.parametrize("way", [pytest.param(way, marks=NEEDS[way]) for way in ("%%trainrun mpi", "HorovodRunner")])
def test_a_kernel_killed_mid_cell_leaves_no_process_and_no_payload(kernel, mark, way) -> None:
    kernel.start(CELLS[way])
    assert kernel.payloads(), "the pickled cell was not where this test looks"
    os.kill(kernel.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert wait_until(lambda: not leftover_processes(mark) and not kernel.payloads(), 10), \
        (leftover_processes(mark), kernel.payloads())
    # The watchdog takes the job down within about a second; 10 s above leaves room for a loaded machine.
    print(f"{way}: nothing left {time.monotonic() - killed:.2f} s after the kill")


def pyspark_reaps_its_wrapper() -> bool:
    """Whether PySpark's TorchDistributor waits for the wrapper it kills (images/patches/
    pyspark-4.3.0-reap-stopped-wrapper.patch)."""
    import inspect

    from pyspark.ml.torch.distributor import TorchDistributor

    return "task.wait()  # reaped" in inspect.getsource(TorchDistributor._execute_command)


@requires(spark=True, torch=True)
def test_interrupting_torch_distributor_local_mode_leaves_no_defunct_child(kernel, mark) -> None:
    if not pyspark_reaps_its_wrapper():
        pytest.xfail("this PySpark lacks images/patches/pyspark-4.3.0-reap-stopped-wrapper.patch")
    msg_id = kernel.start("from pyspark.sql import SparkSession\n"
                          "spark = SparkSession.builder.master('local[2]').getOrCreate()\n"
                          "from pyspark.ml.torch.distributor import TorchDistributor\n" + SLEEPING_FUNCTION +
                          "TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(sleeping)")
    kernel.manager.interrupt_kernel()
    assert kernel.outcome(msg_id)["ename"] == "KeyboardInterrupt"
    assert wait_until(lambda: not kernel.defunct_children(), 3), kernel.defunct_children()


RAISING_RANK = "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('boom on 1')"
# trainrun's frames, torchrun's log lines and Open MPI's banners about a rank's end.
NOT_THE_USERS = re.compile(r"run_cell|trainrun/|<dynamic-code>|failed \(exitcode|closing signal|Primary job|"
                           r"mpirun (detected|noticed)|-{20,}")


@pytest.mark.parametrize("way", [pytest.param("%%trainrun mpi", marks=requires(mpirun=True)),
                                 pytest.param("%%trainrun torch", marks=requires(torch=True))])
def test_a_rank_that_raises_shows_its_traceback_from_the_cells_line_then_one_line(kernel, way) -> None:
    line = {"%%trainrun mpi": "%%trainrun mpi -np 2", "%%trainrun torch": "%%trainrun torch --nproc-per-node 2"}[way]
    msg_id = kernel.client.execute(f"{line}\n{RAISING_RANK}")
    shown, error = [], None
    while True:
        msg = kernel.client.get_iopub_msg(timeout=240)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            shown.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            error = msg["content"]
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    text = "".join(shown)
    lines = [re.sub(r"^(\[1,1\]<stderr>:|\[default1\]:)", "", line) for line in text.splitlines()]
    assert lines == ["Traceback (most recent call last):", '  File "<trainrun cell>", line 3, in <module>',
                     "    raise ValueError('boom on 1')", "ValueError: boom on 1"], text
    assert not NOT_THE_USERS.search(text), text
    assert error["traceback"] == ["trainrun: rank 1 exited with code 1; job stopped"], error
