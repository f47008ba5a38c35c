"""The Slurm quickstart's image lines as pasted (docs/quickstarts/slurm.md): `invoke export` and `podman load -i` in the
checkout, then each `RUNTIME=podman|charliecloud sbatch slurm/SCRIPT.sbatch ...` line from its examples/ folder, on
the loopback two-node cluster (loopback_slurm). Every script trains its unchanged example on 2 nodes x 2
ranks to the accuracy `trainrun mpi -np 4` gives in the image on one host. The lines are read from the page
(tests/support/slurm_pages.py, which sets what this machine alone needs, each with why); Pyxis's and Apptainer's cannot
run here (their lines: tests/unit/templates/test_slurm_runtimes.py and the launcher's golden plans).

The same page's pool template rendered for Podman (master, workers and TorchDistributor's driver in the image, each
an srun step) learns as the nodes' own Python does, and leaves no container behind.

Under `invoke test --long`: the export and load take about 3 minutes, each job about a minute.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import slurm_pages

from loopback_slurm import PMIX_LIBRARY, loopback_slurm

pytestmark = [
    pytest.mark.long,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("slurmctld", "podman", "ch-run", "mksquashfs"))
                       or not PMIX_LIBRARY.exists(),
                       reason="needs Slurm, munge, libpmix-dev, podman, charliecloud and squashfs-tools (./dev)"),
]

RUNTIMES = ("podman", "charliecloud")
IMAGE_LINES = [line for line in slurm_pages.batch_lines()
               if line.runtime in RUNTIMES and line.script != "jupyter-pool"]
EXAMPLE = re.compile(r"/opt/trainstack/examples/(\w+\.py)")


@pytest.fixture(scope="module")
def cluster():
    with loopback_slurm() as slurm:
        yield slurm


@pytest.fixture(scope="module")
def exported(image) -> None:
    """The page's lines that put the image on the cluster, run in the checkout as shown."""
    lines = [line for line in slurm_pages.page_lines() if line.startswith(("invoke export", "podman load"))]
    assert [line.split()[:2] for line in lines] == [["invoke", "export"], ["podman", "load"]]
    for line in lines:
        result = subprocess.run(["bash", "-c", line], cwd=slurm_pages.REPO, capture_output=True, text=True,
                                timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
    names = subprocess.run(["podman", "image", "inspect", "--format", "{{.RepoTags}}",
                            image.id.removeprefix("sha256:")], capture_output=True, text=True)
    assert "ghcr.io/trainstack/trainstack:cpu" in names.stdout, names.stdout + names.stderr


@pytest.fixture(scope="module")
def one_host_accuracy(in_image):
    """Each example under `trainrun mpi -np 4` in the image on one host, once."""
    found: dict[str, float] = {}

    def accuracy(example: str) -> float:
        if example not in found:
            output = in_image.run(["trainrun", "mpi", "-np", "4", "python", f"/opt/trainstack/examples/{example}",
                                   "--checkpoint-dir", "/tmp/checkpoints"], timeout=600)
            found[example] = slurm_pages.summary(output)["accuracy"]
        return found[example]

    return accuracy


def test_the_quickstart_shows_each_script_under_podman_and_charliecloud() -> None:
    assert sorted((line.runtime, line.script) for line in IMAGE_LINES) == sorted(
        (runtime, script) for runtime in RUNTIMES for script in ("ddp", "trainrun-mpi", "trainrun-torch"))


@pytest.mark.parametrize("line", IMAGE_LINES, ids=[line.name for line in IMAGE_LINES])
def test_the_quickstarts_image_line_trains_on_two_nodes_as_on_one_host(cluster, exported, one_host_accuracy,
                                                                       line) -> None:
    examples = slurm_pages.checkout_copy(cluster)
    limits = Path(tempfile.mkdtemp(dir=examples))
    env = slurm_pages.job_env(cluster, **slurm_pages.podman_limits_env(limits))
    output = slurm_pages.run_line(line.command, examples, env)
    got = slurm_pages.summary(output)
    assert got["ranks"] == 4, output[-3000:]
    assert abs(got["accuracy"] - one_host_accuracy(EXAMPLE.search(line.command)[1])) < 0.02, output[-3000:]
    assert (examples / "checkpoints").is_dir()


def test_the_quickstarts_pool_template_under_podman_learns_and_leaves_no_container(cluster, exported) -> None:
    (line,) = [line for line in slurm_pages.page_lines()
               if line.startswith("pooltemplates render local-pool") and "--runtime podman" in line]
    examples = slurm_pages.checkout_copy(cluster)
    limits = Path(tempfile.mkdtemp(dir=examples))
    env = slurm_pages.job_env(cluster, **slurm_pages.podman_limits_env(limits))
    output = slurm_pages.run_line(line, examples, env)
    got = slurm_pages.summary(output)
    assert got["workflow"] == "torch-distributor" and got["ranks"] == 2 and got["accuracy"] > 0.9, output[-3000:]
    stopped = next(line for line in output.splitlines() if "Spark pool stopped" in line)
    assert all(f"executors on {node}: app-" in stopped for node in ("n1", "n2")), output[-3000:]
    left = subprocess.run(["podman", "ps", "-a", "--format", "{{.ID}} {{.Command}}"], capture_output=True, text=True)
    assert "pool_daemon" not in left.stdout and "torch_distributor" not in left.stdout, left.stdout


def test_a_horovod_spark_estimator_learns_as_the_job_of_a_pool_template_under_podman(cluster, exported) -> None:
    """`job.kind=horovod` renders the horovod.spark estimator example (TorchEstimator, Gloo) as the pool's job, its
    store in the job's folder, which both nodes see: the fit runs a rank on each node's executor and learns. Both
    emulated nodes are one host, so an executor takes the other's shuffle files for its own host's and reads them from
    disk (NoSuchFileException: its /tmp is another container's): spark.shuffle.readHostLocalDisk=false fetches them
    over the network, as between two real hosts."""
    examples = slurm_pages.checkout_copy(cluster)
    limits = Path(tempfile.mkdtemp(dir=examples))
    env = slurm_pages.job_env(cluster, **slurm_pages.podman_limits_env(limits))
    render = ("pooltemplates render local-pool --target slurm --runtime podman --image "
              "ghcr.io/trainstack/trainstack:cpu --set job.kind=horovod --set conf.spark.shuffle.readHostLocalDisk=false "
              "--out pool.sbatch && sbatch pool.sbatch")
    output = slurm_pages.run_line(render, examples, env)
    got = slurm_pages.summary(output)
    assert got["workflow"] == "horovod-spark-estimator" and got["ranks"] == 2, output[-3000:]
    assert got["accuracy"] > 0.8, output[-3000:]
    stopped = next(line for line in output.splitlines() if "Spark pool stopped" in line)
    assert all(f"executors on {node}: app-" in stopped for node in ("n1", "n2")), output[-3000:]


def test_the_quickstarts_jupyterlab_under_podman_runs_its_notebooks_on_the_pool(cluster, exported) -> None:
    """The page's JupyterLab line under Podman: pool and JupyterLab in the image, whose kernels load trainrun's
    magics themselves; the notebook runs on the pool as on the nodes' own Python (tests/integration/test_slurm.py),
    and after scancel no container is left. (Under Podman the workers' report of their executors did not reach the
    job's output after scancel, as it does on the nodes' own Python; what is left is checked instead.)"""
    (line,) = [line.command for line in slurm_pages.batch_lines()
               if line.script == "jupyter-pool" and line.runtime == "podman"]
    examples = slurm_pages.checkout_copy(cluster)
    limits = Path(tempfile.mkdtemp(dir=examples))
    env = slurm_pages.job_env(cluster, **slurm_pages.podman_limits_env(limits))
    slurm_pages.notebook_on_the_pool(line, examples, env)
    left = subprocess.run(["podman", "ps", "-a", "--format", "{{.ID}} {{.Command}}"], capture_output=True, text=True)
    assert "pool_daemon" not in left.stdout and "jupyter" not in left.stdout, left.stdout
