"""The rank entry point: environment mapping, in-process programs, failure records, rank 0's result."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest
from polling import wait_until

from trainrun.machine import detect_mpi_flavor
from trainrun.proctree import alive
from trainrun.program import Program, program_from_command, program_from_script_args
from trainrun.rank import entry
from trainrun.rank.env import SOURCES, launcher_rank_env, rank_argv, shell_rank_argv
from trainrun.rank.status import STATUS_DIR, RankExit, first_failure, read_status


@pytest.mark.parametrize("environ,expected", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "RANK": "stale"},
     {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
     {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}),
    ({"HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4"},
     {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, {}),  # torchrun
])
def test_launcher_rank_env(environ, expected) -> None:
    assert launcher_rank_env(environ) == expected


@pytest.mark.parametrize("command,expected", [
    (["python", "t.py", "-a"], Program("script", "t.py", ("-a",), "python")),
    (["/opt/venv/bin/python3.11", "-m", "pkg.main", "x"], Program("module", "pkg.main", ("x",),
                                                                  "/opt/venv/bin/python3.11")),
    (["python", "-c", "print(1)"], Program("exec", "python", ("-c", "print(1)"))),
    (["./run.sh", "a"], Program("exec", "./run.sh", ("a",))),
    (["hostname"], Program("exec", "hostname")),
])
def test_program_from_command(command, expected) -> None:
    assert program_from_command("command", command) == expected


def test_program_from_script_args() -> None:
    assert program_from_script_args("command", ["-m", "m", "1"]) == Program("module", "m", ("1",))
    assert program_from_script_args("command", ["t.py", "-m"]) == Program("script", "t.py", ("-m",))
    assert rank_argv(Program("payload", "p.pkl", ("r.pkl",)), "py") == [
        "py", "-m", "trainrun.rank", "--payload", "p.pkl", "r.pkl"]


@pytest.fixture
def rank_env(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(STATUS_DIR, str(tmp_path))
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run_entry(args: list[str], status_dir, **environ: str) -> subprocess.CompletedProcess:
    """`python -m trainrun.rank ARGS` as a launcher starts it (the entry forks, so never inside pytest itself)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")}
    return subprocess.run([sys.executable, "-m", "trainrun.rank", *args], capture_output=True, text=True,
                          timeout=60, env={**env, STATUS_DIR: str(status_dir), **environ})


def test_script_exit_code_recorded_for_its_rank(tmp_path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nassert __name__ == '__main__'\nsys.exit(int(sys.argv[1]))\n")
    out = run_entry([str(script), "7"], tmp_path, OMPI_COMM_WORLD_RANK="1")
    assert out.returncode == 7, out.stderr
    assert json.loads((tmp_path / "rank-1.json").read_text())["exit_code"] == 7
    assert first_failure(str(tmp_path)).rank == 1
    assert (tmp_path / "start-1").read_text().strip().isdigit()


def test_exception_is_exit_1_and_success_is_recorded_as_0(tmp_path) -> None:
    ok = tmp_path / "ok.py"
    ok.write_text("x = 1\n")
    assert run_entry([str(ok)], tmp_path, RANK="0").returncode == 0
    status = read_status(str(tmp_path))
    assert status.exits[0] == RankExit(0, 0, None, status.exits[0].time) and status.first_failure() is None
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    out = run_entry([str(bad)], tmp_path, RANK="0")
    assert out.returncode == 1 and "RuntimeError: boom" in out.stderr
    assert first_failure(str(tmp_path)) == RankExit(0, 1, None, first_failure(str(tmp_path)).time)


def test_rank_killed_by_a_signal_is_recorded_with_the_signal(tmp_path) -> None:
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = run_entry([str(script)], tmp_path, RANK="1")
    assert out.returncode == 137
    failure = first_failure(str(tmp_path))
    assert (failure.rank, failure.exit_code, failure.signal) == (1, 137, "SIGKILL")
    assert failure.describe() == "rank 1 was killed by SIGKILL"


def test_rank_leftovers_end_with_the_rank_even_holding_its_stdout(tmp_path) -> None:
    """A child and an orphaned grandchild, both holding the rank's stdout: the entry ends them, so whoever reads
    the rank's output (here subprocess.run) sees it close when the rank exits."""
    script = tmp_path / "leaves.py"
    script.write_text("import subprocess\n"
                      "child = subprocess.Popen(['sleep', '600'])\n"
                      "subprocess.run(['sh', '-c', 'sleep 600 & echo $! > orphan.pid'], cwd=%r)\n"
                      "open(%r, 'w').write(str(child.pid))\n" % (str(tmp_path), str(tmp_path / "child.pid")))
    started = time.monotonic()
    out = run_entry([str(script)], tmp_path, RANK="0")
    assert out.returncode == 0 and time.monotonic() - started < 10
    for name in ("child.pid", "orphan.pid"):
        assert not alive(int((tmp_path / name).read_text())), name


def test_sigterm_to_the_entry_reaches_the_program_and_it_dies_with_the_entry(tmp_path) -> None:
    script = tmp_path / "waits.py"
    script.write_text("import os, signal, sys, time\n"
                      "signal.signal(signal.SIGTERM, lambda *a: sys.exit(5))\n"
                      "open(%r, 'w').write(str(os.getpid()))\n"
                      "time.sleep(60)\n" % str(tmp_path / "program.pid"))
    env = {**os.environ, STATUS_DIR: str(tmp_path), "RANK": "0"}
    entry_proc = subprocess.Popen([sys.executable, "-m", "trainrun.rank", str(script)], env=env)
    assert wait_until(lambda: (tmp_path / "program.pid").exists(), 30)
    entry_proc.send_signal(signal.SIGTERM)
    assert entry_proc.wait(timeout=30) == 5
    assert first_failure(str(tmp_path)).exit_code == 5
    (tmp_path / "program.pid").unlink()
    entry_proc = subprocess.Popen([sys.executable, "-m", "trainrun.rank", str(script)], env=env)
    assert wait_until(lambda: (tmp_path / "program.pid").exists(), 30)
    program = int((tmp_path / "program.pid").read_text())
    entry_proc.kill()
    entry_proc.wait(timeout=30)
    assert wait_until(lambda: not alive(program), 30)


@pytest.mark.parametrize("rank_id,writes", [("0", True), ("1", False)])
def test_payload_result_written_by_rank_0_only(rank_env, monkeypatch, rank_id, writes) -> None:
    monkeypatch.setenv("RANK", rank_id)
    payload, result = rank_env / "payload.pkl", rank_env / "result.pkl"
    payload.write_bytes(cloudpickle.dumps((lambda a, b, c: {"sum": a + b + c, "rank": os.environ["RANK"]},
                                           (2, 3), {"c": 4})))
    assert entry.run_rank(Program("payload", str(payload), (str(result),))) == 0
    assert result.exists() == writes
    if writes:
        assert cloudpickle.loads(result.read_bytes()) == {"sum": 9, "rank": "0"}


def test_first_failure_is_the_earliest(tmp_path) -> None:
    (tmp_path / "rank-2.json").write_text(json.dumps({"rank": 2, "exit_code": 143, "time": 20.0}))
    (tmp_path / "rank-1.json").write_text(json.dumps({"rank": 1, "exit_code": 3, "time": 10.0}))
    failure = first_failure(str(tmp_path))
    assert (failure.rank, failure.exit_code) == (1, 3)
    assert first_failure(str(tmp_path / "none")) is None


@pytest.mark.parametrize("target,flavor", [("orterun", "openmpi"), ("prterun", "openmpi"),
                                           ("mpiexec.hydra", "mpich")])
def test_mpi_flavor_from_what_mpirun_links_to(tmp_path, monkeypatch: pytest.MonkeyPatch, target, flavor) -> None:
    real = tmp_path / target
    real.write_text("")
    real.chmod(0o755)
    (tmp_path / "mpirun").symlink_to(real)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_mpi_flavor() == flavor


def test_no_mpirun_means_no_flavor(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_mpi_flavor() is None


def run_shell_rank(command: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(shell_rank_argv(command, sys.executable), env={"PATH": os.environ["PATH"], **environ},
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("environ,expected", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMI_RANK": "9", "RANK": "stale"},
     {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}),
    ({"HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4"},
     {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}),
    ({"PMI_RANK": "", "PMI_SIZE": "2", "RANK": "kept"}, {"RANK": "", "WORLD_SIZE": "2"}),  # set but empty wins
    ({"RANK": "1", "WORLD_SIZE": "2"}, {"RANK": "1", "WORLD_SIZE": "2"}),  # no launcher variables: unchanged
])
def test_shell_rank_maps_like_launcher_rank_env(environ, expected) -> None:
    out = run_shell_rank([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], environ)
    env = json.loads(out.stdout)
    assert {name: env[name] for name in expected} == expected
    assert {name: env[name] for name in launcher_rank_env(environ)} == launcher_rank_env(environ)
    assert (set(SOURCES) - set(expected)).isdisjoint(env)


def test_shell_rank_passes_arguments_and_records_success_without_python(tmp_path) -> None:
    out = run_shell_rank(["sh", "-c", 'echo "$@"', "name", "a b", "c"], {STATUS_DIR: str(tmp_path), "RANK": "2"})
    assert (out.returncode, out.stdout) == (0, "a b c\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-2.json", "start-2"]
    status = read_status(str(tmp_path))
    assert status.exits[2].exit_code == 0 and status.exits[2].time > 0 and status.running() == []


@pytest.mark.parametrize("command,code", [(["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -TERM $$"], 143),
                                          (["no-such-command-x"], 127), (["./no-such-file"], 127)])
def test_shell_rank_records_a_failing_exit_code_for_its_rank(tmp_path, command, code) -> None:
    out = run_shell_rank(command, {"OMPI_COMM_WORLD_RANK": "1", STATUS_DIR: str(tmp_path)})
    assert out.returncode == code
    failure = first_failure(str(tmp_path))
    assert (failure.rank, failure.exit_code, failure.signal) == (1, code, "SIGTERM" if code == 143 else None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-1.json", "start-1"]


def test_shell_rank_ends_its_leftovers_holding_its_stdout(tmp_path) -> None:
    started = time.monotonic()
    out = run_shell_rank(["sh", "-c", f"sleep 600 & echo $! > {tmp_path}/child.pid; exit 0"],
                         {STATUS_DIR: str(tmp_path), "RANK": "0"})
    assert out.returncode == 0 and time.monotonic() - started < 10
    assert not alive(int((tmp_path / "child.pid").read_text()))
    assert read_status(str(tmp_path)).exits[0].exit_code == 0


def test_programs_other_than_payloads_run_as_commands_under_sh() -> None:
    assert rank_argv(Program("script", "t.py", ("-a",), "python3"), "py")[-3:] == ["python3", "t.py", "-a"]
    assert rank_argv(Program("module", "pkg.main", ("x",)), "py")[-4:] == ["py", "-m", "pkg.main", "x"]
    assert rank_argv(Program("exec", "./run.sh", ("a",)), "py")[:2] == ["sh", "-c"]
