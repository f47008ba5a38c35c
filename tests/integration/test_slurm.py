"""Jobs on a real two-node Slurm cluster on this host (loopback_slurm): the rank environment of tasks srun
started, MPI over PMIx, DDP started by srun itself and by trainrun torch, trainrun mpi inside salloc and sbatch, and
each mistake users make there as one line and a non-zero exit within seconds.

The ranks run the tests' programs as users write them. Where a test checks the image's site hooks
(images/site-packages) on the host, they are loaded the way the image's .pth files load them, through a sitecustomize
on PYTHONPATH, since the host's venv has no .pth of theirs. The quickstart's host lines run as pasted, without it
(tests/support/slurm_pages.py reads them from docs/quickstarts/slurm.md); its image lines run in the image tier
(tests/image/test_slurm_pages.py). Both emulated nodes are this host: CROSS_NODE_MPI_ENV sends Open MPI's traffic
between them over TCP.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import slurm_pages
from fault_harness import wait_for_files
from loopback_slurm import (CROSS_NODE_MPI_ENV, PACKAGES, PMIX_LIBRARY, LoopbackSlurm, loopback_slurm,
                            mount_namespace)

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("slurmctld") is None or not PMIX_LIBRARY.exists(),
                       reason=f"needs Debian's {' '.join(PACKAGES)} (./dev installs them)"),
]

REPO = Path(__file__).parents[2]
RANK_REPORT = REPO / "tests" / "support" / "ranks" / "rank_report.py"
EXAMPLES = REPO / "examples"
CPU_POOL = REPO / "tests" / "integration" / "data" / "cpu-pool.yaml"
SITE_HOOKS = ("trainstack_framework_ranks", "trainstack_slurm_ranks")
MPI_HELLO = "from mpi4py import MPI; print(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())"


@pytest.fixture(scope="module")
def cluster():
    with loopback_slurm() as slurm:
        yield slurm
    assert not slurm.root.parent.exists()


@pytest.fixture
def work(cluster: LoopbackSlurm) -> Path:
    """A folder every node sees, with the image's site hooks loaded at every Python start."""
    folder = Path(tempfile.mkdtemp(dir=cluster.root.parent))
    hooks = folder / "site-hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        f"import sys\nsys.path.append({str(REPO / 'images' / 'site-packages')!r})\n"
        + "".join(f"import {hook}\n" for hook in SITE_HOOKS))
    (folder / "reports").mkdir()
    return folder


def job_env(cluster: LoopbackSlurm, work: Path, **extra: str) -> dict[str, str]:
    env = cluster.env()
    for name in [name for name in env if name.startswith(("SLURM_", "OMPI_", "PMIX_", "RANK", "WORLD_SIZE"))]:
        if name != "SLURM_CONF":
            del env[name]
    return {**env, **CROSS_NODE_MPI_ENV, "PYTHONPATH": str(work / "site-hooks"), "REPORT_DIR": str(work / "reports"),
            "PATH": f"{Path(sys.executable).parent}:{env['PATH']}", **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    started = time.monotonic()
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    result.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return result


def reports(work: Path) -> dict[int, dict]:
    return {int(path.stem.split("-")[1]): json.loads(path.read_text()) for path in (work / "reports").glob("*.json")}


def test_tasks_srun_started_get_the_uniform_rank_environment(cluster, work) -> None:
    result = run(["srun", "-N2", "-n4", sys.executable, str(RANK_REPORT)], job_env(cluster, work), work)
    assert result.returncode == 0, result.stderr
    got = reports(work)
    assert sorted(got) == [0, 1, 2, 3]
    for rank, report in got.items():
        env = report["env"]
        assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["LOCAL_RANK"] == str(rank % 2)
        assert env["MASTER_ADDR"] == "n1"
        assert int(env["MASTER_PORT"]) >= 15000


def test_the_batch_scripts_own_python_is_no_rank(cluster, work) -> None:
    """A single python in the batch script (no step) would otherwise wait for 3 ranks that never come."""
    out = work / "batch.out"
    probe = "import os; print(os.environ.get('RANK'), os.environ.get('WORLD_SIZE'))"
    result = run(["sbatch", "--wait", "-N2", "-n4", "-o", str(out), "--wrap", f"{sys.executable} -c \"{probe}\""],
                 job_env(cluster, work), work)
    assert result.returncode == 0, result.stderr + out.read_text()
    assert out.read_text().strip() == "None None"


def test_mpi4py_over_pmix_across_two_nodes(cluster, work) -> None:
    env = job_env(cluster, work, COLLECTIVE="mpi4py")
    result = run(["srun", "--mpi=pmix", "-N2", "-n4", sys.executable, str(RANK_REPORT)], env, work)
    assert result.returncode == 0, result.stderr
    assert [report["allreduce"] for report in reports(work).values()] == [10.0] * 4  # 1 + 2 + 3 + 4


def test_ddp_started_by_srun_itself_with_env_init(cluster, work) -> None:
    """torch.distributed.init_process_group("gloo") reads env://, which only Slurm's variables fill here."""
    env = job_env(cluster, work, COLLECTIVE="gloo")
    result = run(["srun", "-N2", "-n4", sys.executable, str(RANK_REPORT)], env, work)
    assert result.returncode == 0, result.stderr
    assert [report["allreduce"] for report in reports(work).values()] == [10.0] * 4


def test_trainrun_mpi_inside_salloc_starts_the_ranks_through_srun(cluster, work) -> None:
    env = job_env(cluster, work, COLLECTIVE="mpi4py")
    result = run(["salloc", "-N2", "-n4", "trainrun", "mpi", "-np", "4", sys.executable, str(RANK_REPORT)], env, work)
    assert result.returncode == 0, result.stderr
    assert "4 ranks start through srun --mpi=pmix" in result.stderr
    got = reports(work)
    assert [got[rank]["allreduce"] for rank in range(4)] == [10.0] * 4
    assert {got[rank]["env"]["RANK"] for rank in range(4)} == {"0", "1", "2", "3"}


@pytest.fixture(scope="module")
def one_host_accuracy():
    """The DDP example under `trainrun mpi -np N [ARGS]` on this host, outside Slurm, once for each N and ARGS: what
    the pages' lines of N ranks must reach."""
    found: dict[tuple, float] = {}

    def accuracy(ranks: int, *args: str) -> float:
        if (ranks, *args) not in found:
            out = Path(tempfile.mkdtemp(dir="/var/tmp"))
            try:
                env = {name: value for name, value in os.environ.items()
                       if not name.startswith(("SLURM_", "OMPI_", "PMIX_"))}
                env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
                result = run(["trainrun", "mpi", "-np", str(ranks), sys.executable, "ddp_torch_mnist.py",
                              "--checkpoint-dir", str(out), *args], env, EXAMPLES, timeout=600)
                assert result.returncode == 0, result.stderr
                found[(ranks, *args)] = slurm_pages.summary(result.stdout)["accuracy"]
            finally:
                shutil.rmtree(out, ignore_errors=True)
        return found[(ranks, *args)]

    return accuracy


HOST_LINES = [line for line in slurm_pages.batch_lines()
              if line.runtime == "host" and line.script.startswith("trainrun-") and line.script != "trainrun-ray"]


def test_the_quickstart_shows_the_host_route_of_the_trainrun_scripts() -> None:
    assert sorted(line.script for line in HOST_LINES) == ["trainrun-mpi", "trainrun-spark", "trainrun-torch"]
    assert [line.script for line in slurm_pages.batch_lines() if line.script == "trainrun-ray"] == ["trainrun-ray"]


def test_the_quickstarts_ray_line_trains_across_both_nodes_and_leaves_no_ray_process(cluster) -> None:
    """The Ray line as pasted, from a checkout's examples/ folder on the nodes' own Python: trainrun ray starts a head
    on n1 and a worker node on n2, Ray Train's two workers run one on each node and learn, and once the job has left
    the queue no Ray process is left on either node."""
    (line,) = [line.command for line in slurm_pages.batch_lines() if line.script == "trainrun-ray"]
    examples = slurm_pages.checkout_copy(cluster)
    output = slurm_pages.run_line(line, examples, slurm_pages.job_env(cluster), timeout=300)
    got = slurm_pages.summary(output)
    assert got["ranks"] == 2 and len(set(got["rank_nodes"])) == 2 and got["accuracy"] > 0.9, output
    assert [node["cpus"] for node in got["ray_nodes"]] == [1.0, 1.0], output
    assert "2 nodes up (n1, n2)" in output and "exit code 0" in output, output
    assert not ray_processes_after(10, cluster), "Ray processes left"


def ray_processes_after(seconds: float, cluster: LoopbackSlurm) -> list[str]:
    """The cluster's Ray processes still running after up to `seconds` (a stopped node's last processes are reaped
    shortly): those in a node's mount namespace or this host's, not a container's of the image tier, which
    `./dev test` runs beside this one."""
    ours = {*cluster.node_namespaces, mount_namespace("self")}
    deadline = time.monotonic() + seconds
    while True:
        left = [line for line in subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray.util.client.server|ray start"],
                                                capture_output=True, text=True).stdout.splitlines()
                if mount_namespace(line.split()[0]) in ours]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.parametrize("line", HOST_LINES, ids=[line.name for line in HOST_LINES])
def test_the_quickstarts_host_line_trains_on_two_nodes_as_on_one_host(cluster, line, one_host_accuracy) -> None:
    """The line as pasted, from a checkout's examples/ folder: trainrun (pip install ./launcher, the venv's here) and
    the nodes' own Python, with no start-up hook of the images' (docs/quickstarts/slurm.md). The Spark script's
    pool is gone afterwards."""
    examples, before = slurm_pages.checkout_copy(cluster), pool_folders()
    output = slurm_pages.run_line(line.command, examples, slurm_pages.job_env(cluster), timeout=300)
    got = slurm_pages.summary(output)
    assert abs(got["accuracy"] - one_host_accuracy(got["ranks"])) < 0.02, output
    assert got["ranks"] == (2 if line.script == "trainrun-spark" else 4), output
    assert (examples / "checkpoints" / "model.pt").exists()
    if line.script == "trainrun-spark":
        assert "2 workers registered" in output
        assert pool_folders() <= before


def rendered_cpu_pool(script: Path, program: str, time_limit: str = "10:00") -> str:
    """`pooltemplates render --target slurm --launch srun` of a CPU pool on 2 nodes x 2 tasks running `program` (a
    script of the user's own, so the script asks for a requeue); the script's text."""
    render = subprocess.run(
        [sys.executable, "-m", "pooltemplates", "render", str(CPU_POOL), "--target", "slurm", "--launch", "srun",
         "--set", "nodes=2", "--set", "executor.cores=2", "--set", "job.processes=4", "--time", time_limit,
         "--out", str(script), "--script", program], capture_output=True, text=True, timeout=60)
    assert render.returncode == 0, render.stderr
    return script.read_text()


def test_the_rendered_batch_script_of_a_pool_template_trains(cluster, work) -> None:
    """`pooltemplates render --target slurm` of a CPU pool on 2 nodes x 2 tasks, submitted as it is: trainrun mpi
    starts the unchanged DDP example on every task through srun."""
    script = work / "pool.sbatch"
    assert "#SBATCH --ntasks-per-node=2" in rendered_cpu_pool(
        script, f"ddp_torch_mnist.py --checkpoint-dir {work / 'checkpoints'}")
    out = work / "pool.out"
    result = run(["sbatch", "--wait", "-o", str(out), str(script)], job_env(cluster, work), EXAMPLES, timeout=240)
    log = out.read_text()
    assert result.returncode == 0, result.stderr + log
    summary = json.loads(next(line for line in log.splitlines() if line.startswith("0: {")).removeprefix("0: "))
    assert summary["ranks"] == 4 and summary["accuracy"] > 0.8, log


@pytest.mark.long
def test_scontrol_requeue_of_a_rendered_scripts_job_resumes_from_its_checkpoint(cluster, work,
                                                                                one_host_accuracy) -> None:
    """A rendered batch script (it asks for --requeue) running the DDP example, requeued once the first checkpoint is
    written: Slurm stops the step (SIGTERM: every rank saves at its next checkpoint step and ends), the job goes back
    to pending and starts again, and the example resumes from the checkpoint, not from step 0, to the accuracy of an
    unbroken run. Long: Slurm makes a requeued job eligible 2 minutes after the requeue (EligibleTime), and its
    scheduler starts it up to half a minute later."""
    script, checkpoints, out = work / "requeued.sbatch", work / "checkpoints", work / "requeued.out"
    assert "#SBATCH --requeue" in rendered_cpu_pool(
        script, f"ddp_torch_mnist.py --checkpoint-dir {checkpoints} --checkpoint-every 5")
    env = job_env(cluster, work)
    submitted = run(["sbatch", "--parsable", "--open-mode=append", "-o", str(out), str(script)], env, EXAMPLES)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    wait_for_files(checkpoints, "step-*", 1, 180)
    requeued_at = time.monotonic()
    assert run(["scontrol", "requeue", job_id], env, work).returncode == 0
    wait_until_gone(cluster, job_id, 240)
    log = out.read_text()
    resumed = re.search(r"resumed from step (\d+) \(", log)
    assert resumed and int(resumed[1]) >= 5, log
    summary = slurm_pages.summary(log)
    assert summary["ranks"] == 4 and abs(summary["accuracy"] - one_host_accuracy(4)) < 0.02, log
    print(f"requeued, restarted and resumed from step {resumed[1]}: done {time.monotonic() - requeued_at:.1f} s "
          "after scontrol requeue")


# About 100 s of training on 4 ranks here, past the signal 30 to 90 s in.
PAST_THE_LIMIT = ("--train-size", "24000", "--epochs", "25")


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_rendered_scripts_job_reaching_its_time_limit_is_requeued_and_resumes(cluster, work,
                                                                                 one_host_accuracy) -> None:
    """The rendered script's own path at a time limit: --signal=B:USR1@90 reaches the batch shell, whose trap
    requeues the job; Slurm then stops the step (the ranks save at their next checkpoint step and end) and the job
    is pending again; started again, the example resumes from the checkpoint, and, the time limit reached once more
    if need be, ends with the accuracy of an unbroken run. --time=3: Slurm sends the signal up to a minute early, so
    30 to 90 s in; the training takes longer than that."""
    script, checkpoints, out = work / "limited.sbatch", work / "checkpoints", work / "limited.out"
    assert "#SBATCH --signal=B:USR1@90" in rendered_cpu_pool(
        script, f"ddp_torch_mnist.py --checkpoint-dir {checkpoints} {' '.join(PAST_THE_LIMIT)}", "3")
    env = job_env(cluster, work)
    submitted = run(["sbatch", "--parsable", "--open-mode=append", "-o", str(out), str(script)], env, EXAMPLES)
    assert submitted.returncode == 0, submitted.stderr
    wait_until_gone(cluster, submitted.stdout.strip(), 900)
    log = out.read_text()
    assert "DUE TO JOB REQUEUE" in log, log[-3000:]
    resumed = [int(step) for step in re.findall(r"resumed from step (\d+) \(", log)]
    assert resumed and resumed[0] > 0, log[-3000:]
    summary = slurm_pages.summary(log)
    assert summary["ranks"] == 4 and len(summary["losses"]) == int(PAST_THE_LIMIT[-1]), log[-3000:]
    assert abs(summary["accuracy"] - one_host_accuracy(4, *PAST_THE_LIMIT)) < 0.02, log
    print(f"requeued at the time limit {len(resumed)} time(s), resumed from steps {resumed}")


def test_the_quickstarts_pool_template_runs_torch_distributor_on_a_pool_across_both_nodes(cluster) -> None:
    """`pooltemplates render local-pool --target slurm` with TorchDistributor as its job, then sbatch, as the quickstart
    pastes them: trainrun spark-pool starts a worker on each node, the unchanged example (local_mode=False, 2
    processes) learns as on the local pool of containers, both workers run an executor, and nothing is left."""
    (line,) = [line for line in slurm_pages.page_lines()
               if line.startswith("pooltemplates render local-pool") and "--runtime" not in line]
    examples, before = slurm_pages.checkout_copy(cluster), pool_folders()
    output = slurm_pages.run_line(line, examples, slurm_pages.job_env(cluster), timeout=400)
    got = slurm_pages.summary(output)
    assert got["workflow"] == "torch-distributor" and got["ranks"] == 2 and not got["local_mode"], output
    assert got["accuracy"] > 0.9, output
    stopped = next(line for line in output.splitlines() if "Spark pool stopped" in line)
    assert all(f"executors on {node}: app-" in stopped for node in ("n1", "n2")), output
    job_id = next(line for line in output.splitlines() if "inside Slurm job" in line).split()[4].rstrip(":")
    no_pool_left(job_id, before)


def test_jupyterlab_on_the_allocations_first_node_runs_its_notebooks_on_the_pool(cluster) -> None:
    """The quickstart's JupyterLab line as pasted (the nodes' own Python): JupyterLab on n1 as the job of a pool across
    both nodes, its notebook run as slurm_pages.notebook_on_the_pool says. scancel leaves nothing."""
    (line,) = [line.command for line in slurm_pages.batch_lines()
               if line.script == "jupyter-pool" and line.runtime == "host"]
    examples, before = slurm_pages.checkout_copy(cluster), pool_folders()
    job_id, output = slurm_pages.notebook_on_the_pool(line, examples, slurm_pages.job_env(cluster))
    stopped = next(line for line in output.splitlines() if "Spark pool stopped" in line)
    assert all(f"executors on {node}: app-" in stopped for node in ("n1", "n2")), stopped
    no_pool_left(job_id, before)


def test_an_exported_squashfs_runs_on_every_task_under_charliecloud(cluster, work) -> None:
    """`invoke export` of the base image (the small image ./dev makes; the training images' own runs under srun are
    the image tier's), then `ch-run` of its squashfs on 2 nodes: the file system and the environment file work."""
    base = os.environ.get("TRAINSTACK_BASE_IMAGE", "trainstack/debian-base:bookworm")
    if shutil.which("ch-run") is None or shutil.which("mksquashfs") is None:
        pytest.skip("needs Debian's charliecloud and squashfs-tools (./dev installs them)")
    exported = run([sys.executable, "-m", "invoke", "export", "--image", base, "--out", str(work / "export")],
                   os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}, REPO, timeout=240)
    if "is not an image of this docker engine" in exported.stderr:
        pytest.skip(f"no {base} here (./dev makes it)")
    assert exported.returncode == 0, exported.stderr
    squashfs = next((work / "export").glob("*.sqsh"))
    assert (work / "export" / f"{squashfs.stem}.tar").exists()
    result = run(["srun", "-N2", "-n2", "ch-run", str(squashfs), "--", "sh", "-c",
                  'echo "$SLURM_PROCID $(cat /etc/debian_version)"'], job_env(cluster, work, USER="root"), work)
    assert result.returncode == 0, result.stderr
    assert sorted(line.split()[0] for line in result.stdout.splitlines()) == ["0", "1"]
    assert all(line.split()[1].startswith("12.") for line in result.stdout.splitlines())


def processes_of_job(job_id: str, node: str | None = None) -> dict[int, str]:
    """{pid: command line} of the processes still running for a Slurm job (its id in their environment), on `node`
    alone where given (SLURMD_NODENAME in their environment)."""
    wanted = [f"SLURM_JOB_ID={job_id}".encode(), *([f"SLURMD_NODENAME={node}".encode()] if node else [])]
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            if all(variable in environ for variable in wanted):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found


# Long: CI runs `trainrun spark` on an allocation's pool in the quickstart's line and the failed rank's test.
@pytest.mark.long
def test_trainrun_spark_inside_salloc_runs_its_barrier_job_on_a_pool_across_both_nodes(cluster, work) -> None:
    """No --master inside an allocation: trainrun starts a Spark pool for the job (master here, a worker on each
    node through srun, a secret of the job's own), runs the barrier stage on it and stops it."""
    env, before = job_env(cluster, work, COLLECTIVE="gloo"), pool_folders()
    result = run(["salloc", "-N2", "trainrun", "spark", "-np", "2", str(RANK_REPORT)], env, work, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "a Spark pool for this job, master spark://n1:" in result.stderr
    assert "2 workers registered" in result.stderr
    got = reports(work)
    assert [got[rank]["allreduce"] for rank in range(2)] == [3.0, 3.0]
    assert {report["slurm_node"] for report in got.values()} == {"n1", "n2"}
    assert all(report["java_ancestor"] for report in got.values())  # an executor's task, not local mode
    no_pool_left(next(line.split()[-1] for line in result.stderr.splitlines() if "Granted job allocation" in line),
                 before)


# Long: CI runs the pool of `trainrun spark-pool` with a notebook's Spark code (JupyterLab's test below) and the
# quickstart's `trainrun spark` line.
@pytest.mark.long
def test_users_spark_code_runs_unchanged_on_the_pool_of_trainrun_spark_pool(cluster, work) -> None:
    """`trainrun spark-pool -- spark-submit app.py` inside salloc, where app.py is a user's code as written for any
    cluster (SparkSession.builder.getOrCreate(), no master): it runs on the pool, whose executors ran on both nodes."""
    (work / "app.py").write_text("from pyspark.sql import SparkSession\n"
                                 "spark = SparkSession.builder.getOrCreate()\n"
                                 "print('master', spark.sparkContext.master)\n"
                                 "print('sum', spark.sparkContext.parallelize(range(100), 4).sum())\n"
                                 "spark.stop()\n")
    before = pool_folders()
    result = run(["salloc", "-N2", "trainrun", "spark-pool", "--", "spark-submit", "app.py"], job_env(cluster, work),
                 work, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "master spark://n1:" in result.stdout and "sum 4950" in result.stdout, result.stdout
    stopped = next(line for line in result.stderr.splitlines() if "Spark pool stopped" in line)
    assert all(f"executors on {node}: app-" in stopped for node in ("n1", "n2")), result.stderr
    no_pool_left(next(line.split()[-1] for line in result.stderr.splitlines() if "Granted job allocation" in line),
                 before)


@pytest.mark.long
def test_the_quickstarts_ray_on_spark_line_sizes_a_ray_node_per_executor_of_the_pool(cluster) -> None:
    """`salloc -N2 trainrun spark-pool -- trainrun ray python ray_train_mnist.py ...` as the quickstart shows it: Ray on
    Spark on the allocation's pool, a worker node in each executor (1 core, at most its 1g), Ray Train's workers one on
    each node, learning; the pool and Ray gone afterwards."""
    (line,) = [line for line in slurm_pages.page_lines() if line.startswith("salloc -N2 trainrun spark-pool -- "
                                                                          "trainrun ray ")]
    examples, before = slurm_pages.checkout_copy(cluster), pool_folders()
    result = run(["bash", "-c", line], slurm_pages.job_env(cluster), examples, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    got = slurm_pages.summary(result.stdout)
    assert got["accuracy"] > 0.9 and len(set(got["rank_nodes"])) == 2, result.stdout[-3000:]
    workers = [node for node in got["ray_nodes"] if node["cpus"]]
    assert [node["cpus"] for node in workers] == [1.0, 1.0] and all(node["memory"] < 2**30 for node in workers), got
    no_pool_left(next(line.split()[-1] for line in result.stderr.splitlines() if "Granted job allocation" in line),
                 before)
    assert not ray_processes_after(10, cluster), "Ray processes left"


def pool_folders() -> set[Path]:
    """The pools' folders (each with its secret) in the home folder."""
    return set((Path.home() / ".cache" / "trainrun").glob("spark-pool-*"))


def no_pool_left(job_id: str, before: set[Path], seconds: float = 15) -> None:
    """Within `seconds`, no process of the job on either node (master, srun, workers, executors) and no pool folder
    (its secret) beyond those there `before` it."""
    deadline = time.monotonic() + seconds
    while processes_of_job(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_of_job(job_id) == {}
    assert pool_folders() <= before


def test_a_failed_rank_on_the_allocations_pool_is_named_and_leaves_nothing(cluster, work) -> None:
    before = pool_folders()
    (work / "fails.py").write_text("import os, sys, time\ntime.sleep(1)\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    result = run(["salloc", "-N2", "trainrun", "spark", "-np", "2", "fails.py"], job_env(cluster, work), work,
                 timeout=300)
    assert result.returncode == 3, result.stderr
    assert "trainrun: rank 1 exited with code 3" in result.stderr
    no_pool_left(next(line.split()[-1] for line in result.stderr.splitlines() if "Granted job allocation" in line),
                 before)


def pool_job_running(cluster: LoopbackSlurm, work: Path, out: Path, command: str, **sbatch: str) -> str:
    """The id of a batch job of `command` (whose program is sleeps.py, 5 minutes of sleep) once its pool's workers
    have registered."""
    (work / "sleeps.py").write_text("import time\ntime.sleep(300)\n")
    options = [f"--{name}={value}" for name, value in sbatch.items()]
    submitted = run(["sbatch", "-N2", *options, "-o", str(out), "--wrap", command], job_env(cluster, work), work)
    job_id = submitted.stdout.split()[-1]
    deadline = time.monotonic() + 180
    while "workers registered" not in (out.read_text() if out.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "workers registered" in out.read_text(), out.read_text()
    return job_id


def wait_until_gone(cluster: LoopbackSlurm, job_id: str, seconds: float) -> None:
    slurm_pages.left_the_queue(job_id, cluster.env(), seconds)


def test_scancel_of_a_job_on_the_allocations_pool_leaves_nothing(cluster, work) -> None:
    """The batch shell's trainrun and the pool get scancel's SIGTERM, then SIGKILL after KillWait (5 s here)."""
    out, before = work / "cancelled.out", pool_folders()
    job_id = pool_job_running(cluster, work, out, "exec trainrun spark -np 2 sleeps.py")
    time.sleep(3)  # the stage's tasks running
    subprocess.run(["scancel", job_id], env=cluster.env(), check=True)
    no_pool_left(job_id, before, seconds=20)


@pytest.mark.long
def test_the_time_limit_of_a_job_on_the_allocations_pool_leaves_nothing(cluster, work) -> None:
    """Slurm's minute granularity: --time=1 ends the job a minute or so in, as scancel would (SIGTERM, KillWait)."""
    out, before = work / "limited.out", pool_folders()
    job_id = pool_job_running(cluster, work, out, "exec trainrun spark -np 2 sleeps.py", time="1")
    wait_until_gone(cluster, job_id, 240)
    assert "DUE TO TIME LIMIT" in out.read_text(), out.read_text()
    no_pool_left(job_id, before, seconds=20)


@pytest.mark.long
def test_a_node_lost_under_the_allocations_pool_ends_the_job_in_one_line_and_leaves_nothing(cluster, work) -> None:
    """Every process of the job on n2 killed at once, as when the node goes: the workers' srun ends (its
    --kill-on-bad-exit), the pool says so and stops the job rather than leave it waiting on executors that never come
    back, and nothing of the job is left on n1."""
    out, before = work / "lost.out", pool_folders()
    job_id = pool_job_running(cluster, work, out, "exec trainrun spark-pool -- python sleeps.py")
    for pid in processes_of_job(job_id, node="n2"):
        os.kill(pid, 9)
    wait_until_gone(cluster, job_id, 60)
    assert "the Spark pool's workers ended while the job ran" in out.read_text(), out.read_text()
    no_pool_left(job_id, before, seconds=20)


OTHER_USER = "trainstack-other"
IMAGE = os.environ.get("TRAINSTACK_TEST_IMAGE", "trainstack:cpu")


@pytest.fixture
def other_user():
    """A second Unix user of the nodes, removed afterwards."""
    if subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", OTHER_USER], check=True)
    yield OTHER_USER
    subprocess.run(["userdel", OTHER_USER], capture_output=True)


@pytest.mark.long
def test_another_user_of_the_nodes_cannot_submit_to_the_allocations_pool(cluster, work, other_user) -> None:
    """While a job's pool runs, another user cannot read its secret, and a driver of theirs is refused by the master:
    its application never registers, so no executor ever runs their code (Spark gives up after its 3 tries of 20 s).
    Their driver is the built image's PySpark, run as another uid on the nodes' network."""
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"no {IMAGE} here (invoke build)")
    out, before = work / "pool.out", pool_folders()
    job_id = pool_job_running(cluster, work, out, "exec trainrun spark -np 2 sleeps.py")
    try:
        master = next(word.rstrip(",") for word in out.read_text().split() if word.startswith("spark://"))
        secret = next(iter(pool_folders() - before)) / "spark-defaults.conf"
        peek = subprocess.run(["runuser", "-u", other_user, "--", "cat", str(secret)], capture_output=True, text=True)
        assert peek.returncode != 0 and "Permission denied" in peek.stderr
        # Their driver: the image's PySpark and Java, as the image's user (uid 1000, not the job's) on the nodes'
        # network, with no secret.
        driver = ("from pyspark.sql import SparkSession\n"
                  f"spark = SparkSession.builder.master({master.replace('n1', '127.0.0.1')!r}).getOrCreate()\n"
                  "print('counted', spark.sparkContext.parallelize(range(4), 2).count())\n")
        intruder = run(["docker", "run", "--rm", "--network", "host", IMAGE, "python", "-c", driver], dict(os.environ),
                       work, timeout=240)
        assert intruder.returncode != 0 and "counted" not in intruder.stdout, intruder.stdout + intruder.stderr
        assert "All masters are unresponsive" in intruder.stderr, intruder.stderr[-3000:]
    finally:
        subprocess.run(["scancel", job_id], env=cluster.env())
    no_pool_left(job_id, before, seconds=20)


def test_the_selftest_passes_inside_an_allocation(cluster, work) -> None:
    """Its Ray Train check is left out: Ray in an allocation is the quickstart's Ray line's test."""
    result = run(["salloc", "-N2", "-n4", "trainrun", "selftest", "--sizes", "8B:1KiB", "--skip", "ray-train"],
                 job_env(cluster, work), work, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "selftest passed" in result.stdout


def test_the_doctor_names_the_mpi_plugins_srun_offers(cluster, work) -> None:
    result = run(["salloc", "-N1", "-n1", "trainrun", "doctor", "--json"], job_env(cluster, work), work)
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["slurm"]["detail"].startswith("inside job ")
    assert checks["srun-mpi"]["status"] == "ok" and "pmix" in checks["srun-mpi"]["detail"]


def test_a_failed_rank_on_another_node_is_named_and_ends_the_step(cluster, work) -> None:
    """--kill-on-bad-exit=1 ends the other ranks at once; the status records, in the home folder every node sees,
    name the rank whose node has a /tmp of its own."""
    program = ("import os, sys, time; rank = int(os.environ['RANK']); time.sleep(0.5); "
               "sys.exit(3) if rank == 3 else time.sleep(120)")
    result = run(["salloc", "-N2", "-n4", "trainrun", "mpi", "-np", "4", sys.executable, "-c", program],
                 job_env(cluster, work), work)
    assert result.returncode == 3, result.stderr
    assert "trainrun: rank 3 exited with code 3" in result.stderr
    assert result.seconds < 30  # type: ignore[attr-defined]


def one_line_failure(result: subprocess.CompletedProcess, text: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.startswith(("trainstack:", "trainrun:"))]
    assert result.returncode != 0
    assert result.seconds < 20  # type: ignore[attr-defined]
    assert lines and all(text in line for line in lines), result.stderr
    assert "Traceback" not in result.stderr and "MPI_Init" not in result.stderr.replace(lines[0], "")


def test_mpi_under_srun_without_pmix_is_one_line(cluster, work) -> None:
    result = run(["srun", "--mpi=none", "-N2", "-n4", sys.executable, "-c", MPI_HELLO], job_env(cluster, work), work)
    one_line_failure(result, "srun started these 4 tasks with --mpi=none")
    assert "(valid: srun --mpi=pmix" in result.stderr


def test_mpi_without_the_pmix_server_folder_is_one_line(cluster, work) -> None:
    """As in a container that does not mount srun's PMIx folder: an empty file system over the spool hides it."""
    hidden = ('mount -t tmpfs none "$(dirname "$PMIX_SERVER_TMPDIR")" && exec "$@"')
    argv = ["srun", "--mpi=pmix", "-N1", "-n2", "unshare", "-m", "--propagation", "private", "sh", "-c", hidden,
            "hide", sys.executable, "-c", MPI_HELLO]
    result = run(argv, job_env(cluster, work), work)
    one_line_failure(result, "is not in this container: MPI_Init would fail")


def test_more_ranks_than_the_allocation_is_one_line(cluster, work) -> None:
    result = run(["salloc", "-N2", "-n4", "trainrun", "mpi", "-np", "5", sys.executable, "-c", MPI_HELLO],
                 job_env(cluster, work), work)
    one_line_failure(result, "-np = 5: is more than the 4 tasks Slurm job")


def test_nothing_is_left_running(cluster, work) -> None:
    queue = subprocess.run(["squeue", "-h"], env=cluster.env(), capture_output=True, text=True)
    assert queue.stdout.strip() == ""
    assert os.environ.get("SLURM_JOB_ID") is None
