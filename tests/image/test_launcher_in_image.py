"""trainrun inside the image, as its user runs it: every backend for real, a failing rank, doctor, plans."""
from __future__ import annotations

import json
import re

import pytest

TIMEOUT = ["--timeout", "240"]
# Two cores run two ranks (and a JVM): one thread per rank, and test JVMs that start fast.
JOB_ENV = {"OMP_NUM_THREADS": "1", "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
UNIFORM = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
JOBS = {
    "mpi": ["mpi", *TIMEOUT, "-np", "2", "--", "python"],
    "torch": ["torch", *TIMEOUT, "--nproc-per-node", "2", "--"],
    "spark": ["spark", *TIMEOUT, "--num-processes", "2", "--"],
}


def trainrun(backend: str, script: str, *args: str) -> list[str]:
    """`script` is a path in the container, or the name of a unit under /units."""
    return ["trainrun", *JOBS[backend], script if script.startswith("/") else f"/units/{script}", *args]


@pytest.fixture(scope="module")
def rank_env_reports(in_image):
    """backend -> (output, {rank: report}) of units/rank_env.py on two ranks, run once per backend."""
    cache: dict[str, tuple[str, dict[int, dict]]] = {}

    def run(backend: str) -> tuple[str, dict[int, dict]]:
        if backend not in cache:
            output = in_image.run(trainrun(backend, "rank_env.py"), env=JOB_ENV)
            decoder = json.JSONDecoder()
            reports = [decoder.raw_decode(output, found.end())[0] for found in re.finditer("rank-env ", output)]
            cache[backend] = output, {report["rank"]: report for report in reports}
        return cache[backend]

    return run


def test_mpi_runs_a_horovod_torch_allreduce(in_image):
    output = in_image.run(trainrun("mpi", "hvd_allreduce_torch.py"), env=JOB_ENV)
    assert "torch rank 0/2 allreduce=3.0" in output and "torch rank 1/2 allreduce=3.0" in output


def test_mpi_gloo_runs_a_horovod_allreduce_under_horovods_gloo_controller(in_image):
    output = in_image.run(["trainrun", "mpi", "--gloo", *JOBS["mpi"][1:], "/units/hvd_allreduce_torch.py"],
                          env=JOB_ENV)
    assert "torch rank 0/2 allreduce=3.0" in output and "torch rank 1/2 allreduce=3.0" in output


def test_torch_runs_a_ddp_step(in_image):
    output = in_image.run(trainrun("torch", "ddp_step.py"), env=JOB_ENV)
    assert "ddp rank 0/2 local_rank 0 in sync" in output and "ddp rank 1/2 local_rank 1 in sync" in output


def test_exit_hook_finds_the_gloo_workers_of_the_images_torch(in_image):
    # The hook (images/site-packages/trainstack_gloo_exit.py) knows Gloo's worker threads by name; a torch that
    # renamed them would leave every rank exposed to the exit abort again, silently.
    output = in_image.run(["python", "/units/gloo_exit_hook.py"], env=JOB_ENV)
    workers = int(re.search(r"gloo workers (\d+)", output).group(1))
    waited = float(re.search(r"waited ([0-9.]+) s", output).group(1))
    assert workers >= 1 and waited < 1.0, output


def test_spark_runs_horovod_ranks_on_a_local_spark(in_image):
    output = in_image.run(["trainrun", *JOBS["spark"][:-1], "--framework", "horovod", "--",
                           "/units/hvd_allreduce_torch.py"], env=JOB_ENV)
    assert "[rank 0] torch rank 0/2 allreduce=3.0" in output, output[-3000:]
    assert "[rank 1] torch rank 1/2 allreduce=3.0" in output, output[-3000:]


@pytest.mark.parametrize("backend", list(JOBS))
def test_same_rank_env_script_and_gloo_allreduce_under_every_backend(rank_env_reports, backend):
    output, reports = rank_env_reports(backend)
    assert sorted(reports) == [0, 1], output[-3000:]
    envs = [reports[rank]["env"] for rank in (0, 1)]
    for rank, env in enumerate(envs):
        assert all(env[name] for name in UNIFORM), env
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(rank), "2")
        assert 0 <= int(env["LOCAL_RANK"]) < int(env["LOCAL_WORLD_SIZE"]) <= 2
        assert reports[rank]["allreduce"] == 3.0  # (0+1) + (1+1), summed across both ranks
    assert (envs[0]["MASTER_ADDR"], envs[0]["MASTER_PORT"]) == (envs[1]["MASTER_ADDR"], envs[1]["MASTER_PORT"])
    if backend == "spark":
        assert "[rank 1] rank-env " in output  # rank output streamed back to the driver


# Spark's failing rank (a minute of image time) is covered on the host by tests/integration/test_failures.py.
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_failing_rank_stops_the_job_and_leaves_no_process(in_image, backend):
    output = in_image.run(["sh", "/units/trainrun_then_ps.sh", *trainrun(backend, "/ranks/fail_rank.py")[1:]],
                          expect=3, env=JOB_ENV)
    assert "trainrun: rank 1 exited with code 3" in output, output[-3000:]
    script_pid, listing = re.search(r"processes after trainrun \(script (\d+)\):\n(.*)", output, re.DOTALL).groups()
    processes = [line.split(maxsplit=2) for line in listing.splitlines()]
    left = [args for pid, stat, args in processes
            if pid not in ("1", script_pid) and not stat.startswith("Z") and not args.startswith("ps ")]
    assert left == [], listing  # pid 1 is the image's init


def test_doctor_reads_the_image_manifest(in_image, image_flavor):
    output = in_image.run(["trainrun", "doctor"])
    assert f"/etc/trainstack/manifest.json: flavor {image_flavor.name}" in output
    for name in ("torch", "horovod", "pyspark"):
        version = image_flavor.version(name)
        assert re.search(rf"^ok +{name} +{re.escape(version)}$", output, re.MULTILINE), output
    assert output.rstrip().endswith("ready to train")


@pytest.mark.parametrize("user,allowed", [(None, False), ("root", True)])
def test_mpi_plan_allows_root_only_when_run_as_root(in_image, user, allowed):
    plan = json.loads(in_image.run(["trainrun", "mpi", "--dry-run", "--json", "-np", "2", "--", "python", "t.py"],
                                   user=user))
    assert plan["argv"][0] == "mpirun"
    assert ("--allow-run-as-root" in plan["argv"]) == allowed


def test_unpicklable_function_is_one_clear_error_before_any_rank_starts(in_image):
    output = in_image.run(["python", "/units/unpicklable_function.py"], expect=1)
    assert output.rstrip().endswith(
        "trainrun.errors.UnpicklableFunction: trainrun.run cannot pickle train() for the ranks: it uses `lock` "
        "(a _thread.lock), which cannot be pickled (TypeError: cannot pickle '_thread.lock' object); move the "
        "import or creation of `lock` inside train(), so that each rank makes its own"), output[-3000:]
    assert "above exception" not in output  # one error, not a chain


def test_spark_job_prints_ranks_not_spark_start_up_noise(rank_env_reports):
    output, reports = rank_env_reports("spark")
    assert sorted(reports) == [0, 1]
    # The JVM itself still prints "WARNING: Using incubator modules" (Spark 4 loads jdk.incubator.vector).
    for noise in ("log4j", "Setting default log level", "NativeCodeLoader", " WARN "):
        assert noise not in output, output[-3000:]
    assert re.search(r"^trainrun: 2 ranks of spark, [\d.]+ s, exit code 0$", output, re.M), output[-3000:]
