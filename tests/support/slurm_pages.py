"""The Slurm quickstart's batch lines, run as pasted on the loopback cluster (loopback_slurm): read from the
page as a reader pastes them (shown.page_commands), submitted with bash from a copy of a checkout's examples/ folder,
waited for, and their output read back.

What this machine needs and a real cluster does not is set here, each with why: CROSS_NODE_MPI_ENV (both emulated
nodes are one host: Open MPI between them over TCP on loopback) and USER, which a login shell has, ch-run requires and
CI's environment lacks (job_env); Podman's default limits, which runc on these VMs cannot raise (podman_limits_env).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import lab_kernels
from loopback_slurm import CROSS_NODE_MPI_ENV, LoopbackSlurm
from trainstack.docsite.shown import page_commands

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = "docs/quickstarts/slurm.md"
SUBMITTED = re.compile(r"Submitted batch job (\d+)")
RUNTIME = re.compile(r"^RUNTIME=(\w+) ")
SCRIPT = re.compile(r"sbatch slurm/([\w-]+)\.sbatch(?: |$)")
LAB_URL = re.compile(r"http://n1:\d+/lab\?token=\w+")
# A notebook on the allocation's pool, cell by cell: the session on the pool, a Synapse %%configure body (both emulated
# nodes are one host whose executors' /tmp differ: shuffle files over the network, as between hosts), a Spark job,
# a body larger than the pool, and %%trainrun spark.
NOTEBOOK_ON_THE_POOL = [
    "%load_ext trainrun.notebook",  # the images' kernels load it; the nodes' own JupyterLab does not
    "print(spark.sparkContext.master)",
    "%%configure -f\n" + json.dumps({"numExecutors": 2, "executorCores": 1, "executorMemory": "1g",
                                      "conf": {"spark.sql.shuffle.partitions": "3",
                                               "spark.shuffle.readHostLocalDisk": "false"}}),
    "print(spark.range(1000).repartition(4).count(), spark.conf.get('spark.sql.shuffle.partitions'))",
    '%%configure -f\n{"numExecutors": 5}',
    "%%trainrun spark -np 2\nimport os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])",
]


@dataclass(frozen=True)
class BatchLine:
    runtime: str
    script: str  # ddp, trainrun-mpi, trainrun-torch
    command: str  # as the page shows it

    @property
    def name(self) -> str:
        return f"{self.runtime}-{self.script}"


def page_lines(page: str = QUICKSTART) -> list[str]:
    return page_commands((REPO / page).read_text(encoding="utf-8"))


def batch_lines(page: str = QUICKSTART) -> list[BatchLine]:
    """The page's `[RUNTIME=...] sbatch slurm/SCRIPT.sbatch ...` lines (without RUNTIME, the nodes' own Python)."""
    found = []
    for command in page_lines(page):
        runtime, script = RUNTIME.match(command), SCRIPT.search(command)
        if script:
            found.append(BatchLine(runtime[1] if runtime else "host", script[1], command))
    return found


def checkout_copy(cluster: LoopbackSlurm) -> Path:
    """A folder every node sees (not /tmp, which each node has of its own) laid out as a checkout: examples/ copied,
    build/ the clone's own (invoke export's files); returns its examples/, where the page's lines run."""
    root = Path(cluster.root.parent) / f"checkout-{os.urandom(4).hex()}"
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "build").symlink_to(REPO / "build")
    return root / "examples"


def job_env(cluster: LoopbackSlurm, **extra: str) -> dict[str, str]:
    """A login shell's environment on the cluster: the venv's trainrun and Python first on PATH, as after
    `pip install ./launcher` in an activated venv, no job of a Slurm allocation around the test itself."""
    env = {name: value for name, value in cluster.env().items()
           if not name.startswith(("SLURM_", "OMPI_", "PMIX_")) or name == "SLURM_CONF"}
    env.setdefault("USER", "root" if os.geteuid() == 0 else str(os.geteuid()))
    return {**env, **CROSS_NODE_MPI_ENV, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}", **extra}


def podman_limits_env(folder: Path) -> dict[str, str]:
    """A containers.conf of limits these VMs allow: runc here cannot raise a container's open files to Podman's
    default (`error setting rlimit type 7: operation not permitted`), the guide's table gives the same fix to users
    whose hosts need it; CONTAINERS_CONF makes it Podman's for the job's tasks."""
    conf = folder / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n')
    return {"CONTAINERS_CONF": str(conf)}


def submit(command: str, cwd: Path, env: dict[str, str]) -> str:
    """Runs the page's line with bash in `cwd`; the id of the job it submitted."""
    submitted = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    found = SUBMITTED.search(submitted.stdout)
    assert submitted.returncode == 0 and found, submitted.stdout + submitted.stderr
    return found[1]


def output_file(cwd: Path, job: str) -> Path | None:
    """The job's output file: sbatch's default, slurm-JOBID.out in the submitting folder, or NAME-JOBID.out (a script's
    --output=%x-%j.out); None before it is made."""
    return next((path for path in (cwd / f"slurm-{job}.out", *cwd.glob(f"*-{job}.out")) if path.exists()), None)


def left_the_queue(job: str, env: dict[str, str], seconds: float) -> bool:
    """Whether the job left Slurm's queue within `seconds`."""
    deadline = time.monotonic() + seconds
    while subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def run_line(command: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Runs the page's line with bash in `cwd`, waits for the job it submitted to leave the queue and returns its
    output."""
    job = submit(command, cwd, env)
    if not left_the_queue(job, env, timeout):
        subprocess.run(["scancel", job], env=env)
        raise AssertionError(f"job {job} of `{command}` still ran after {timeout:g} s")
    output = output_file(cwd, job)
    assert output is not None, f"job {job} of `{command}` wrote no output file in {cwd}"
    return output.read_text(errors="replace")


def summary(output: str) -> dict:
    """Rank 0's JSON summary line, after whatever tag a launcher put before it."""
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index('{"workflow"'):])


def notebook_on_the_pool(command: str, cwd: Path, env: dict[str, str]) -> tuple[str, str]:
    """Submits the page's JupyterLab line, then, at the URL its ssh tunnel gives, runs NOTEBOOK_ON_THE_POOL in a
    kernel started as a notebook page starts one, and asserts what each cell shows: `spark` on the pool's master, the
    %%configure body restarting it there, the job's result, the larger body refused in one line naming the pool, and
    the ranks of %%trainrun spark. scancel then ends the job; returns the job's id and its output."""
    job = submit(command, cwd, env)
    output = None
    try:
        deadline, url = time.monotonic() + 300, None
        while url is None and time.monotonic() < deadline:
            output = output_file(cwd, job)
            found = LAB_URL.search(output.read_text(errors="replace")) if output else None
            url = found[0] if found else time.sleep(1)
        assert url, output.read_text(errors="replace") if output else f"job {job} wrote no output"
        assert "ssh -N -L 8888:n1:8888 LOGIN_NODE" in output.read_text()
        # As through the tunnel, which forwards 127.0.0.1:8888 to n1:8888 (n1 is 127.0.0.1 here).
        url = url.replace("http://n1:", "http://127.0.0.1:")
        started = lab_kernels.with_token(url).post(f"{lab_kernels.base(url)}/api/kernels", json={"name": "python3"})
        assert started.status_code == 201, started.text
        loaded, master, configured, counted, too_large, ranks = [
            lab_kernels.execute(url, started.json()["id"], cell, timeout=300) for cell in NOTEBOOK_ON_THE_POOL]
        assert master.split()[-1].startswith("spark://n1:"), loaded + master
        assert "Spark session configured (restarted)" in configured, configured
        assert counted.split() == ["1000", "3"], counted
        assert "numExecutors = 5: the pool 'allocation-pool' has 2 (valid: at most 2)" in too_large, too_large
        assert "rank 0 of 2" in ranks and "rank 1 of 2" in ranks, ranks
    finally:
        subprocess.run(["scancel", job], env=env, check=True)
    left_the_queue(job, env, 60)
    return job, output.read_text(errors="replace")
