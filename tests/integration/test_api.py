"""trainrun.run: functions and scripts on real ranks, rank 0's value returned, failures raised."""
from __future__ import annotations

import io
import os
import sys

import pytest
from fault_harness import MARK
from launch_helpers import SCRIPTS, leftover_processes, read_reports, requires

import trainrun

pytestmark = pytest.mark.timeout(300)


def allreduce_then_report(delay_other_ranks: float) -> dict:
    """Every rank sums rank+1 over gloo; ranks other than 0 finish later, so the last finisher is not rank 0."""
    import os
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(tensor)
    rank = dist.get_rank()
    dist.destroy_process_group()
    if rank != 0:
        time.sleep(delay_other_ranks)
    return {"rank": rank, "sum": tensor.item(), "world": int(os.environ["WORLD_SIZE"])}


@pytest.fixture
def job_env(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REPORT_DIR", str(tmp_path))
    monkeypatch.setenv(MARK, os.urandom(8).hex())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("SPARK_WORKER_DIR", str(tmp_path / "spark-work"))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return tmp_path


@requires(torch=True)
def test_run_returns_rank_0_result_not_the_last_finisher(job_env) -> None:
    result = trainrun.run(allreduce_then_report, 1.5, backend="torch", num_processes=2, timeout=120)
    assert result == {"rank": 0, "sum": 3.0, "world": 2}


@requires(mpirun=True)
def test_run_horovod_backend_runs_under_mpi(job_env) -> None:
    def mpi_sum() -> tuple[int, float]:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        return comm.Get_rank(), comm.allreduce(float(comm.Get_rank() + 1))

    pytest.importorskip("mpi4py")
    assert trainrun.run(mpi_sum, backend="horovod", num_processes=2, timeout=120) == (0, 3.0)


@requires(mpirun=True)
@pytest.mark.parametrize("np", [2, -2])
def test_horovod_runner_passes_kwargs_and_returns_rank_0s_value(job_env, np: int) -> None:
    def mpi_sum(offset: float) -> tuple[int, float]:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        return comm.Get_rank(), comm.allreduce(float(comm.Get_rank() + offset))

    pytest.importorskip("mpi4py")
    assert trainrun.HorovodRunner(np=np).run(mpi_sum, offset=10) == (0, 21.0)


@requires(torch=True)
def test_run_script_with_args(job_env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLECTIVE", "gloo")
    assert trainrun.run(str(SCRIPTS / "rank_report.py"), backend="torch", num_processes=2, timeout=120) is None
    assert [r["allreduce"] for r in read_reports(job_env).values()] == [3.0, 3.0]


@requires(torch=True)
def test_run_raises_job_failed_naming_the_rank(job_env) -> None:
    def second_rank_fails() -> None:
        import os
        import sys
        import time

        if os.environ["RANK"] == "1":
            sys.exit(5)
        time.sleep(300)

    with pytest.raises(trainrun.JobFailed) as failed:
        trainrun.run(second_rank_fails, backend="torch", num_processes=2, timeout=120)
    assert (failed.value.rank, failed.value.exit_code) == (1, 5)
    assert leftover_processes(os.environ[MARK]) == []


def test_run_rejects_unknown_backend() -> None:
    with pytest.raises(trainrun.UsageError, match=r"backend = 'tf': is invalid \(valid: 'torch' or 'horovod'\)"):
        trainrun.run(print, backend="tf")


@requires(torch=True, spark=True)
def test_run_on_spark_returns_rank_0_result(job_env) -> None:
    result = trainrun.run(allreduce_then_report, 1.5, backend="torch", num_processes=2, spark="local[2]",
                          timeout=200)
    assert result == {"rank": 0, "sum": 3.0, "world": 2}


@requires(torch=True, spark=True)
def test_run_in_a_given_spark_session(job_env, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import pyspark
    from pyspark.sql import SparkSession

    monkeypatch.setenv("SPARK_HOME", os.path.dirname(pyspark.__file__))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    try:
        def rank_env(x: int) -> tuple[str, str, int]:
            import os

            return os.environ["RANK"], os.environ["WORLD_SIZE"], x

        assert trainrun.run(rank_env, 42, num_processes=2, spark=session) == ("0", "2", 42)
    finally:
        session.stop()


@requires(torch=True)
def test_ranks_output_reaches_a_python_stdout_that_is_no_descriptor(job_env, monkeypatch, capsys) -> None:
    # As in a Jupyter kernel, whose sys.stdout is the cell: every rank's lines arrive there, whole and tagged.
    def say_hello() -> None:
        import os

        print(f"hello from rank {os.environ['RANK']}", flush=True)

    with capsys.disabled():
        cell = io.StringIO()
        monkeypatch.setattr(sys, "stdout", cell)
        trainrun.run(say_hello, backend="torch", num_processes=2, timeout=120)
        monkeypatch.undo()
    lines = cell.getvalue().splitlines()
    assert sorted(line for line in lines if "hello from rank" in line) == [
        "[default0]:hello from rank 0", "[default1]:hello from rank 1"], lines
