"""When trainrun stops a running job and what the job's end is reported as (trainrun.lifecycle), the rank records
it decides on, the exit barrier option, and finding a job's processes by tag."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from trainrun import cli
from trainrun.backends.spark.driver import STAGE, StageWatch
from trainrun.backends.spark.output import OutputClient, OutputServer
from trainrun.backends.spark.task import pump_output
from trainrun.errors import JobFailed
from trainrun.job import MpiJob, SparkJob, TorchJob
from trainrun.lifecycle import LAUNCHER_GRACE, Lifecycle
from trainrun.plan import Plan, RunOptions
from trainrun.proctree import JOB_ID, alive, descendants, end_job_processes, job_processes
from trainrun.program import Program
from trainrun.rank.status import (
    JobStatus,
    RankExit,
    exit_of_returncode,
    exit_of_shell_status,
    exit_of_wait_status,
    read_status,
    write_record,
    write_start,
)
from trainrun.runner import run_plan

T0 = 1_000_000.0  # wall-clock time of the records below


def status(started: dict, exits: list[RankExit]) -> JobStatus:
    return JobStatus(dict(started), {e.rank: e for e in exits})


def lifecycle(**changes) -> Lifecycle:
    options = {"ranks": 2, "launcher": "mpirun", "timeout": None, "exit_barrier_timeout": 5.0, "started": 0.0}
    return Lifecycle(**{**options, **changes})


NOTHING = status({0: 10, 1: 11}, [])


def test_signal_to_trainrun_stops_with_128_plus_n() -> None:
    stop = lifecycle().check(1.0, T0, NOTHING, signal.SIGTERM)
    assert (stop.error.exit_code, str(stop.error)) == (143, "received SIGTERM; job stopped")


def test_timeout_stops_with_124() -> None:
    assert lifecycle(timeout=4).check(3.9, T0, NOTHING) is None
    stop = lifecycle(timeout=4).check(4.1, T0, NOTHING)
    assert (stop.error.exit_code, str(stop.error)) == (124, "job exceeded --timeout 4s; job stopped")


def test_a_rank_failure_recorded_before_the_timeout_wins() -> None:
    failed = status({0: 10, 1: 11}, [RankExit(1, 3, None, T0 - 2)])
    life = lifecycle(timeout=4)
    stop = life.check(4.1, T0, failed)
    assert stop.error.exit_code == 124
    outcome = life.outcome(-15, failed, stop)
    assert (outcome.exit_code, outcome.rank, str(outcome)) == (3, 1, "rank 1 exited with code 3; job stopped")


def test_ranks_killed_by_trainrun_stopping_the_job_do_not_count_as_failures() -> None:
    life = lifecycle(timeout=4)
    stop = life.check(4.1, T0, NOTHING)
    after = status({0: 10, 1: 11}, [RankExit(0, 143, "SIGTERM", T0 + 0.5), RankExit(1, 143, "SIGTERM", T0 + 0.6)])
    assert life.outcome(-15, after, stop).exit_code == 124


def test_a_rank_killed_by_a_signal_is_named_with_it() -> None:
    killed = status({0: 10, 1: 11}, [RankExit(1, 137, "SIGKILL", T0), RankExit(0, 143, "SIGTERM", T0 + 1)])
    outcome = lifecycle().outcome(1, killed, None)
    assert (outcome.exit_code, outcome.rank, outcome.signal) == (137, 1, "SIGKILL")
    assert str(outcome) == "rank 1 was killed by SIGKILL; job stopped"


def test_the_launcher_gets_a_grace_period_after_a_failure_then_is_stopped() -> None:
    failed = status({0: 10, 1: 11}, [RankExit(1, 3, None, T0)])
    life = lifecycle()
    assert life.check(1.0, T0, failed) is None
    assert life.check(1.0 + LAUNCHER_GRACE - 0.1, T0, failed) is None
    stop = life.check(1.0 + LAUNCHER_GRACE + 0.1, T0 + LAUNCHER_GRACE, failed)
    assert str(stop.error) == "rank 1 exited with code 3; job stopped"


def test_a_restarted_rank_clears_its_failure() -> None:
    life = lifecycle()
    assert life.check(1.0, T0, status({0: 10, 1: 11}, [RankExit(1, 3, None, T0)])) is None
    assert life.check(2.0, T0, status({0: 10, 1: 12}, [])) is None  # torchrun --max-restarts started it again
    assert life.check(2.0 + LAUNCHER_GRACE, T0, status({0: 10, 1: 12}, [RankExit(1, 3, None, T0 + 5)])) is None


def test_exit_barrier_names_the_ranks_that_hung() -> None:
    hung = status({0: 10, 1: 11, 2: 12}, [RankExit(0, 0, None, T0)])
    life = lifecycle(ranks=3)
    assert life.check(9.0, T0 + 4.9, hung) is None
    stop = life.check(9.0, T0 + 5.1, hung)
    assert stop.error.exit_code == 124
    assert str(stop.error) == ("ranks 1, 2 did not exit within --exit-barrier-timeout 5s of rank 0 exiting 0 "
                               "(exit barrier); job stopped")
    assert life.outcome(-15, hung, stop) is stop.error


def test_exit_barrier_is_300_seconds_by_default_as_torchrun() -> None:
    hung = status({0: 10, 1: 11}, [RankExit(0, 0, None, T0)])
    life = Lifecycle(2, "mpirun")
    assert life.check(9.0, T0 + 299, hung) is None
    assert life.check(9.0, T0 + 301, hung).error.exit_code == 124


def test_launcher_that_outlives_every_successful_rank_is_stopped_and_the_job_succeeds() -> None:
    done = status({0: 10, 1: 11}, [RankExit(0, 0, None, T0), RankExit(1, 0, None, T0 + 1)])
    life = lifecycle()
    stop = life.check(9.0, T0 + 5.1, done)
    assert stop.error is None and "every rank exited 0 but mpirun did not end" in stop.note
    assert life.outcome(-15, done, stop) is None


def test_ranks_not_on_this_host_are_not_called_hung() -> None:
    local = status({2: 10, 3: 11}, [RankExit(2, 0, None, T0), RankExit(3, 0, None, T0)])
    stop = lifecycle(ranks=4, launcher="torch.distributed.run").check(9.0, T0 + 6, local)
    assert str(stop.error) == ("torch.distributed.run did not end within --exit-barrier-timeout 5s of rank 2 exiting 0, "
                               "with 2 of 4 ranks not seen exiting on this host; job stopped")


def test_a_failure_wins_over_the_exit_barrier() -> None:
    mixed = status({0: 10, 1: 11}, [RankExit(0, 0, None, T0), RankExit(1, 3, None, T0 + 6)])
    life = lifecycle()
    assert life.check(9.0, T0 + 7, mixed) is None
    assert life.outcome(1, mixed, None).exit_code == 3


def test_launcher_failure_without_a_rank_record() -> None:
    life = lifecycle(launcher="torch.distributed.run")
    assert str(life.outcome(1, NOTHING, None)) == "torch.distributed.run exited with code 1"
    killed = life.outcome(-9, NOTHING, None)
    assert (killed.exit_code, str(killed)) == (137, "torch.distributed.run was killed by SIGKILL")
    assert life.outcome(0, NOTHING, None) is None


def test_exit_statuses() -> None:
    assert exit_of_returncode(-9) == (137, "SIGKILL") and exit_of_returncode(3) == (3, None)
    assert exit_of_shell_status(143) == (143, "SIGTERM") and exit_of_shell_status(127) == (127, None)
    assert exit_of_shell_status(255) == (255, None)
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    _, wait_status = os.waitpid(pid, 0)
    assert exit_of_wait_status(wait_status) == (137, "SIGKILL")


def test_records_round_trip_and_running_ranks(tmp_path) -> None:
    write_start(str(tmp_path), 0, 100)
    write_start(str(tmp_path), 1, 101)
    write_record(str(tmp_path), 0, 0, pid=100, at=T0)
    # The sh entry's success record: written with printf, no time (the file's mtime stands in), rank as text.
    (tmp_path / "rank-5.json").write_text('{"rank": "5", "exit_code": 0, "signal": null, "pid": 7}\n')
    (tmp_path / "rank-6.json").write_text('{"rank": "6", "exit')  # being written: skipped until whole
    found = read_status(str(tmp_path))
    assert found.started == {0: 100, 1: 101}
    assert found.exits[0] == RankExit(0, 0, None, T0)
    assert found.exits[5].time == pytest.approx(os.stat(tmp_path / "rank-5.json").st_mtime)
    assert 6 not in found.exits and found.running() == [1] and found.first_success().rank == 0
    write_start(str(tmp_path), 0, 102)  # a restart: the earlier end record goes
    assert 0 not in read_status(str(tmp_path)).exits
    assert json.loads((tmp_path / "start-0").read_text()) == 102


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "later"])
def test_exit_barrier_timeout_must_be_finite_and_positive(value, capsys, monkeypatch, machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    assert cli.main(["torch", f"--exit-barrier-timeout={value}", "--dry-run", "t.py"]) == 2
    assert capsys.readouterr().err == (f"trainrun: --exit-barrier-timeout = {value!r}: is invalid "
                                       "(valid: a finite number of seconds > 0, e.g. 3600)\n")


def test_exit_barrier_timeout_is_in_every_plan(plan_for) -> None:
    assert plan_for(["mpi", "-np", "2", "python", "t.py"]).run.exit_barrier_timeout == 300
    plan = plan_for(["spark", "--local-mode", "--exit_barrier_timeout", "7.5", "--num-processes", "2", "t.py"])
    assert plan.to_dict()["exit_barrier_timeout"] == 7.5 and "exit barrier timeout: 7.5s" in plan.to_text()


@pytest.mark.parametrize("argv", [["mpi", "-np", "2", "python", "t.py"], ["mpi", "--gloo", "-np", "2", "python", "t.py"],
                                  ["torch", "--nproc-per-node", "2", "t.py"], ["spark", "--num-processes", "2", "t.py"],
                                  ["spark", "--local-mode", "--num-processes", "2", "t.py"]])
def test_the_plan_holds_the_timeouts_and_the_output_options(plan_for, argv) -> None:
    plan = plan_for([argv[0], "--timeout", "90", "--exit-barrier-timeout", "12", "--timestamp-output", *argv[1:]])
    assert plan.run == RunOptions(timeout=90, exit_barrier_timeout=12, timestamp_output=True)
    shown = plan.to_dict()
    assert (shown["timeout"], shown["exit_barrier_timeout"], shown["timestamp_output"]) == (90, 12, True)
    assert {"timeout: 90s", "exit barrier timeout: 12s", "timestamp output: yes"} <= set(plan.to_text().splitlines())
    untimed = plan_for(argv)
    assert untimed.to_dict()["timeout"] is None and "timeout: none" in untimed.to_text().splitlines()


def test_the_runner_needs_nothing_beside_the_plan(capfd) -> None:
    # The plan's own timeout stops the job; its timestamp option prefixes the output.
    plan = Plan(backend="test", argv=[sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(60)"],
                run=RunOptions(timeout=1.0, timestamp_output=True))
    started = time.monotonic()
    with pytest.raises(JobFailed) as failed:
        run_plan(plan)
    assert failed.value.exit_code == 124 and time.monotonic() - started < 20
    out = capfd.readouterr().out
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} hi\n", out), out


@pytest.mark.parametrize("job", [MpiJob, TorchJob, SparkJob])
def test_jobs_are_built_with_keywords(job) -> None:
    with pytest.raises(TypeError):
        job(2, Program("script", "t.py"))


def stage_watch(exit_barrier_timeout: float, timeout: float | None = None) -> tuple[StageWatch, OutputServer, list]:
    """The Spark driver's watch over a real output server, as in a caller's own SparkSession."""
    cancelled: list[bool] = []
    server = OutputServer("127.0.0.1", lambda failure: None)
    life = Lifecycle(2, STAGE, timeout, exit_barrier_timeout, time.monotonic())
    return StageWatch(server, life, lambda: cancelled.append(True)), server, cancelled


def report(server: OutputServer, *events: tuple) -> None:
    client = OutputClient(server.address, server.token)
    for event in events:
        client.send_start(event[1]) if event[0] == "start" else client.send_exit(*event[1:])
    client.close()


def test_spark_driver_applies_the_exit_barrier_through_the_lifecycle_in_a_callers_session() -> None:
    watch, server, cancelled = stage_watch(exit_barrier_timeout=0.5)
    try:
        report(server, ("start", 0), ("start", 1), ("exit", 0, 0))
        deadline = time.monotonic() + 10
        while not cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watch.close()
        server.close()
    assert cancelled == [True] and watch.stop.error.exit_code == 124
    assert str(watch.stop.error) == ("rank 1 did not exit within --exit-barrier-timeout 0.5s of rank 0 exiting 0 "
                                     "(exit barrier); job stopped")


def test_spark_driver_timeout_and_failure_through_the_lifecycle() -> None:
    watch, server, cancelled = stage_watch(exit_barrier_timeout=60, timeout=0.5)
    try:
        report(server, ("start", 0), ("start", 1), ("exit", 1, 3))
        time.sleep(1.0)
    finally:
        watch.close()
        server.close()
    # The timeout stops the stage; the rank failure reported before it is what the job ends as.
    assert cancelled == [True] and str(watch.stop.error) == "job exceeded --timeout 0.5s; job stopped"
    failed = watch._lifecycle.reported_end(server.status(), watch.stop)
    assert (failed.exit_code, failed.rank, str(failed)) == (3, 1, "rank 1 exited with code 3; job stopped")


def test_task_output_pump_does_not_wait_for_a_leftover_holding_the_pipe() -> None:
    proc = subprocess.Popen(["sh", "-c", "echo one; sleep 30 & echo $!"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    lines: list[str] = []
    started = time.monotonic()
    try:
        assert pump_output(proc, lines.append, drain_seconds=0.5) == 0
    finally:
        if len(lines) == 2:
            os.kill(int(lines[1]), signal.SIGKILL)
    assert lines[0] == "one\n" and lines[1].strip().isdigit() and time.monotonic() - started < 5


def test_job_processes_are_found_by_tag_and_ended() -> None:
    job_id = os.urandom(8).hex()
    tagged = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '60']).wait()"],
                              env={**os.environ, JOB_ID: job_id})
    untagged = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while len(job_processes(job_id)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = job_processes(job_id)
        assert tagged.pid in found and len(found) == 2 and untagged.pid not in found
        assert set(descendants(tagged.pid)) == set(found) - {tagged.pid}
        assert end_job_processes(job_id, grace=2) == 2
        assert job_processes(job_id) == [] and alive(untagged.pid)
    finally:
        untagged.kill()
        untagged.wait()
        tagged.wait()
