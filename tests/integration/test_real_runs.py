"""Real 2-process jobs under each backend: a collective that crosses ranks, and one rank environment."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from fault_harness import trainrun_env
from launch_helpers import CPU_POOL_TEMPLATE, has_pooltemplates, requires, run_trainrun

pytestmark = pytest.mark.timeout(400)

UNIFORM = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
BACKEND_NEEDS = {"mpi": requires(mpirun=True), "torch": requires(torch=True),
                 "spark": requires(torch=True, spark=True)}


def assert_allreduce(backend_reports, backend: str) -> dict[int, dict]:
    launch, reports = backend_reports(backend)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert sorted(reports) == [0, 1], launch.stdout + launch.stderr[-3000:]
    assert [reports[r]["allreduce"] for r in (0, 1)] == [3.0, 3.0]  # (0+1) + (1+1) summed across both ranks
    return reports


@requires(mpirun=True)
def test_mpi_two_ranks_allreduce(backend_reports) -> None:
    assert_allreduce(backend_reports, "mpi")


@requires(torch=True)
def test_torch_two_ranks_gloo_allreduce(backend_reports) -> None:
    assert_allreduce(backend_reports, "torch")


@requires(torch=True, spark=True)
def test_spark_local_cluster_gloo_allreduce_across_two_executors(backend_reports) -> None:
    reports = assert_allreduce(backend_reports, "spark")
    executors = {reports[r]["java_ancestor"] for r in (0, 1)}
    assert None not in executors and len(executors) == 2, "both ranks ran under one executor"
    launch, _ = backend_reports("spark")
    assert "[rank 0] rank 0 done" in launch.stdout and "[rank 1] rank 1 done" in launch.stdout


@requires(mpirun=True)
def test_mpi_plain_command_gets_the_rank_environment_tagged_by_rank(tmp_path) -> None:
    launch = run_trainrun(["mpi", "-np", "2", "sh", "-c", 'echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK"'],
                          trainrun_env(tmp_path))
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert [re.sub(r"^\[\d+,(\d)\]<stdout>:", r"\1 ", line) for line in sorted(launch.stdout.splitlines())] == [
        "0 rank 0/2 local 0", "1 rank 1/2 local 1"]
    assert re.search(r"^trainrun: 2 ranks of mpi \(openmpi\), [\d.]+ s, exit code 0$", launch.stderr, re.M)
    untagged = run_trainrun(["mpi", "-np", "2", "--no-tag-output", "--", "sh", "-c", 'echo "rank $RANK"'],
                            trainrun_env(tmp_path))
    assert sorted(untagged.stdout.splitlines()) == ["rank 0", "rank 1"]
    filtered = run_trainrun(["mpi", "-np", "2", "--ranks-filter", "1", "--no-tag-output", "sh", "-c",
                             'echo "rank $RANK"; echo "rank $RANK err" >&2'], trainrun_env(tmp_path))
    assert filtered.stdout.splitlines() == ["rank 1"] and "rank 1 err" in filtered.stderr
    assert "rank 0" not in filtered.stderr
    stamped = run_trainrun(["mpi", "-np", "2", "--timestamp-output", "sh", "-c", 'echo "rank $RANK"'],
                           trainrun_env(tmp_path))
    assert sorted(re.sub(r"^\d\d:\d\d:\d\d\.\d{3} ", "", line) for line in stamped.stdout.splitlines()) == [
        "[1,0]<stdout>:rank 0", "[1,1]<stdout>:rank 1"], stamped.stdout


@requires(torch=True, spark=True)
def test_spark_output_is_tagged_and_filtered_by_rank(tmp_path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
    launch = run_trainrun(["spark", "--num-processes", "2", "--ranks-filter", "1", "python", str(script)],
                          trainrun_env(tmp_path))
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert [line for line in launch.stdout.splitlines() if "hello" in line] == ["[rank 1] hello from 1 of 2"]
    assert "Error" not in launch.stderr, launch.stderr[-3000:]


@requires(torch=True)
def test_torch_output_is_tagged_by_local_rank(tmp_path) -> None:
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from', os.environ['RANK'])\n")
    launch = run_trainrun(["torch", "--nproc_per_node", "2", "python", str(script)], trainrun_env(tmp_path))
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert sorted(line for line in launch.stdout.splitlines() if "hello" in line) == [
        "[default0]:hello from 0", "[default1]:hello from 1"]


@pytest.mark.parametrize("backend", [pytest.param(b, marks=m) for b, m in BACKEND_NEEDS.items()])
def test_same_rank_environment_under_every_backend(backend_reports, backend: str) -> None:
    _, reports = backend_reports(backend)
    envs = [reports[r]["env"] for r in (0, 1)]
    for rank, env in enumerate(envs):
        assert all(env[name] for name in UNIFORM), env
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert 0 <= int(env["LOCAL_RANK"]) < int(env["LOCAL_WORLD_SIZE"]) <= 2
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"]
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]


def test_console_script_installed() -> None:
    trainrun = shutil.which("trainrun")
    assert trainrun, "pip install ./launcher should put `trainrun` on PATH"
    out = subprocess.run([trainrun, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "{mpi,torch,spark,spark-pool,ray,doctor,selftest}" in out.stdout


@pytest.mark.skipif(not has_pooltemplates(), reason="needs the templates package (pip install -e ./templates)")
def test_spark_plan_applies_cluster_template_conf(tmp_path) -> None:
    launch = run_trainrun(["spark", "--dry-run", "--json", "--template", str(CPU_POOL_TEMPLATE),
                           "--set", "executor.memory=2g", "--num-processes", "2", "--", "train.py"],
                          trainrun_env(tmp_path))
    assert launch.returncode == 0, launch.stderr
    plan = json.loads(launch.stdout)
    assert plan["spark_conf"]["spark.executor.instances"] == "2"
    assert plan["spark_conf"]["spark.executor.memory"] == "2g"
    assert "--conf" in plan["argv"] and "spark.executor.memory=2g" in plan["argv"]


@pytest.mark.skipif(not has_pooltemplates(), reason="needs the templates package (pip install -e ./templates)")
def test_spark_template_rejects_more_processes_than_slots(tmp_path) -> None:
    launch = run_trainrun(["spark", "--template", str(CPU_POOL_TEMPLATE), "--num-processes", "3", "--", "t.py"],
                          trainrun_env(tmp_path))
    assert launch.returncode == 2
    assert launch.stderr.startswith("trainrun: --template") and "at most 2" in launch.stderr
