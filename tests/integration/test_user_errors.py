"""A user's mistake in the program, on real launches: the user's own traceback once and trainrun's summary line
once, no frames of trainrun or torchrun (unless --verbose); a missing program, interpreter or interface refused
before anything starts; Open MPI's tagged output in whole lines whatever the rank's buffering; nothing left in the
temp dir."""
from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
from fault_harness import trainrun_argv, trainrun_env, wait_for_files
from launch_helpers import requires, run_trainrun

pytestmark = pytest.mark.timeout(300)

RAISE_ON_RANK_1 = """import os
if os.environ["RANK"] == "1":
    raise ValueError("boom on rank 1")
"""
# A frame of trainrun, runpy or torchrun in a traceback, or torchrun's exception (its log lines name their source
# file, e.g. `torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)`: one line each, no frames).
LAUNCHER_FRAMES = re.compile(r'File "[^"]*(torch/distributed|trainrun/|<frozen runpy>)|ChildFailedError')
# The launchers' own words for a rank's failure, which trainrun's summary line says: torchrun's log lines, Open MPI's
# banners.
LAUNCHER_FAILURE_NOISE = re.compile(r"failed \(exitcode|closing signal|Primary job +terminated|"
                                    r"mpirun (detected|noticed)|-{20,}")


@requires(torch=True)
def test_torch_exception_on_one_rank_shows_the_users_traceback_only(tmp_path) -> None:
    (tmp_path / "train.py").write_text(RAISE_ON_RANK_1)
    launch = run_trainrun(["torch", "--nproc-per-node", "2", str(tmp_path / "train.py")], trainrun_env(tmp_path))
    output = launch.stdout + launch.stderr
    assert launch.returncode == 1, output[-3000:]
    assert output.count("Traceback (most recent call last)") == 1 and output.count("ValueError: boom on rank 1") == 1
    assert f'File "{tmp_path / "train.py"}", line 3, in <module>' in output
    assert not LAUNCHER_FRAMES.search(output), output[-3000:]
    assert not LAUNCHER_FAILURE_NOISE.search(output), output[-3000:]
    assert launch.stderr.splitlines()[-1].startswith("trainrun: rank 1 exited with code 1; job stopped")


@requires(mpirun=True)
def test_mpi_exception_on_one_rank_shows_the_users_traceback_and_no_open_mpi_banner(tmp_path) -> None:
    (tmp_path / "train.py").write_text(RAISE_ON_RANK_1)
    launch = run_trainrun(["mpi", "-np", "2", "--", sys.executable, str(tmp_path / "train.py")],
                          trainrun_env(tmp_path))
    output = launch.stdout + launch.stderr
    assert launch.returncode == 1 and output.count("ValueError: boom on rank 1") == 1, output[-3000:]
    assert not LAUNCHER_FRAMES.search(output) and not LAUNCHER_FAILURE_NOISE.search(output), output[-3000:]
    assert launch.stderr.splitlines()[-1].startswith("trainrun: rank 1 exited with code 1; job stopped")
    verbose = run_trainrun(["mpi", "--verbose", "-np", "2", "--", sys.executable, str(tmp_path / "train.py")],
                           trainrun_env(tmp_path))
    assert "Primary job  terminated normally" in verbose.stderr  # --verbose shows mpirun's own words


@requires(torch=True)
def test_verbose_shows_the_launchers_frames_too(tmp_path) -> None:
    (tmp_path / "train.py").write_text(RAISE_ON_RANK_1)
    launch = run_trainrun(["torch", "--verbose", "--nproc-per-node", "2", str(tmp_path / "train.py")],
                          trainrun_env(tmp_path))
    assert launch.returncode == 1
    assert "trainrun/rank/entry.py" in launch.stdout + launch.stderr and "ChildFailedError" in launch.stderr


@requires(torch=True)
def test_torch_syntax_error_is_pythons_own_message(tmp_path) -> None:
    (tmp_path / "train.py").write_text("def broken(:\n")
    launch = run_trainrun(["torch", "--nproc-per-node", "2", str(tmp_path / "train.py")], trainrun_env(tmp_path))
    output = launch.stdout + launch.stderr
    assert launch.returncode == 1 and "SyntaxError: invalid syntax" in output
    assert not LAUNCHER_FRAMES.search(output), output[-3000:]


@requires(torch=True)
def test_torch_timeout_and_ctrl_c_print_no_torchrun_traceback(tmp_path) -> None:
    (tmp_path / "train.py").write_text("import os, time\nopen(os.environ['REPORT_DIR'] + '/pid-' + os.environ['RANK'], "
                                       "'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    launch = run_trainrun(["torch", "--timeout", "8", "--nproc-per-node", "2", str(tmp_path / "train.py")],
                          trainrun_env(tmp_path), timeout=120)
    assert launch.returncode == 124 and "Traceback" not in launch.stdout + launch.stderr, launch.stderr[-3000:]
    for pid in tmp_path.glob("pid-*"):
        pid.unlink()
    proc = subprocess.Popen(trainrun_argv("torch", "--nproc-per-node", "2", str(tmp_path / "train.py")),
                            env=trainrun_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_files(tmp_path, "pid-*", 2, timeout=120)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stdout + stderr, stderr[-3000:]
    assert stderr.splitlines()[-1].startswith("trainrun: received SIGINT; job stopped")


@pytest.mark.parametrize("args,line", [
    pytest.param(["torch", "--nproc-per-node", "2", "missing.py"],
                 "trainrun: command = 'missing.py': is not a file on this host", marks=requires(torch=True)),
    pytest.param(["torch", "--nproc-per-node", "2", "-m", "nosuchmodule"],
                 f"trainrun: command = 'nosuchmodule': is not a module {sys.executable} finds",
                 marks=requires(torch=True)),
    pytest.param(["spark", "--num-processes", "2", "missing.py"],
                 "trainrun: command = 'missing.py': is not a file on this host", marks=requires(spark=True)),
    pytest.param(["mpi", "-np", "2", sys.executable, "missing.py"],
                 "trainrun: command = 'missing.py': is not a file on this host", marks=requires(mpirun=True)),
    pytest.param(["mpi", "-np", "2", "python3.99", "ok.py"],
                 "trainrun: command = 'python3.99': is not a command on this host (valid: a Python on PATH",
                 marks=requires(mpirun=True)),
    pytest.param(["mpi", "--num-proc", "2", "-H", "localhost:2", "--network-interface", "nosuch0", "python", "ok.py"],
                 "trainrun: --network-interface = 'nosuch0': is not a network interface of this host (valid: lo",
                 marks=requires(mpirun=True)),
    pytest.param(["mpi", "-np", "2", "-H", "localhost;2", "python", "ok.py"],
                 "trainrun: -H = 'localhost;2': 'localhost;2' is not a host name (valid: host:slots"),
    pytest.param(["mpi", "-np", "2", "-H", "localhost:2", "--hostfile", "/etc/hostname", "python", "ok.py"],
                 "trainrun: --hostfile = '/etc/hostname': is not allowed with -H (valid: either -H or --hostfile, "
                 "not both)"),
    pytest.param(["selftest", "--ranks", "0"], "trainrun: option = '--ranks': is not an option of trainrun selftest "
                 "(valid: the options `trainrun selftest --help` lists)"),
])
def test_a_missing_program_is_one_line_before_anything_starts(args, line, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.py").write_text("print('ok')\n")
    launch = run_trainrun(args, trainrun_env(tmp_path), timeout=60)
    assert launch.returncode == 2 and launch.stdout == ""
    assert launch.stderr.startswith(line) and launch.stderr.count("\n") == 1, launch.stderr
    assert launch.seconds < 15


@requires(mpirun=True)
def test_tagged_mpi_output_stays_whole_lines_when_python_is_unbuffered(tmp_path) -> None:
    (tmp_path / "words.py").write_text("import os\nfor i in range(50):\n"
                                       "    print('rank', os.environ['RANK'], 'line', i, 'of', 'words')\n")
    launch = run_trainrun(["mpi", "-np", "2", sys.executable, str(tmp_path / "words.py")],
                          trainrun_env(tmp_path, PYTHONUNBUFFERED="1"), timeout=120)
    assert launch.returncode == 0, launch.stderr[-3000:]
    lines = launch.stdout.splitlines()
    assert len(lines) == 100
    assert all(re.fullmatch(r"\[1,([01])\]<stdout>:rank \1 line \d+ of words", line) for line in lines), lines


@requires(torch=True, spark=True)
def test_spark_exception_on_one_rank_shows_no_java_or_pyspark_stack(tmp_path) -> None:
    (tmp_path / "train.py").write_text(RAISE_ON_RANK_1)
    launch = run_trainrun(["spark", "--master", "local[2]", "--num-processes", "2", str(tmp_path / "train.py")],
                          trainrun_env(tmp_path))
    output = launch.stdout + launch.stderr
    assert launch.returncode == 1, output[-3000:]
    assert output.count("Traceback (most recent call last)") == 1 and output.count("ValueError: boom on rank 1") == 1
    assert "\tat org.apache.spark" not in output and "pyspark/worker.py" not in output, output[-3000:]
    assert not LAUNCHER_FRAMES.search(output), output[-3000:]
    # The driver leaves the rank's end to trainrun's one summary line.
    assert [line for line in launch.stderr.splitlines() if "exited with code" in line] == [
        launch.stderr.splitlines()[-1]], launch.stderr[-3000:]
    assert re.fullmatch(r"trainrun: rank 1 exited with code 1; job stopped \(2 ranks of spark, [0-9.]+ s\)",
                        launch.stderr.splitlines()[-1])


@requires(torch=True, spark=True)
def test_spark_syntax_error_ends_in_one_summary_line(tmp_path) -> None:
    (tmp_path / "train.py").write_text("def broken(:\n")
    launch = run_trainrun(["spark", "--master", "local[2]", "--num-processes", "2", str(tmp_path / "train.py")],
                          trainrun_env(tmp_path))
    assert launch.returncode == 1 and "SyntaxError: invalid syntax" in launch.stdout, launch.stderr[-3000:]
    assert len([line for line in launch.stderr.splitlines() if "exited with code" in line]) == 1, launch.stderr


@requires(torch=True)
def test_a_torch_job_leaves_nothing_in_the_temp_dir_and_says_nothing_of_numpy(tmp_path) -> None:
    (tmp_path / "train.py").write_text("import torch\nprint(torch.ones(2).numpy().sum())\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    launch = run_trainrun(["torch", "--nproc-per-node", "2", str(tmp_path / "train.py")],
                          trainrun_env(tmp_path, TMPDIR=str(temp)))
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "NumPy" not in launch.stdout + launch.stderr and launch.stdout.count("2.0") == 2, launch.stdout
    assert list(temp.iterdir()) == []  # torchrun's log folder (torchelastic_*) went with the job
