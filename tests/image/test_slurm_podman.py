"""The image on a real Slurm cluster without docker: Podman runs it on every task srun starts (the loopback two-node
cluster of tests/support/loopback_slurm.py), wired as Enroot's PMI hook wires a container: srun's SLURM_* and PMIX_*
variables passed in, its PMIx folder mounted at the same path, the host's network, IPC and PID namespaces. The image
is loaded into Podman from `docker save`, once.

The Python of the image maps the ranks' variables (a DDP probe with env://), and a container without srun's PMIx
folder, or of another user than the task's, ends every task in one line. The quickstart's Podman lines, which train,
run as pasted in test_slurm_pages.py.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import slurm_pages

from loopback_slurm import CROSS_NODE_MPI_ENV, PMIX_LIBRARY, LoopbackSlurm, loopback_slurm

# Under `invoke test --long` (about 2 minutes, a minute of it `podman load`), to keep a fresh machine's CI under the
# hour; the integration tier runs the Slurm cluster, srun's ranks and trainrun in CI.
pytestmark = [
    pytest.mark.long,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("slurmctld") is None or shutil.which("podman") is None
                       or not PMIX_LIBRARY.exists(), reason="needs Slurm, munge, libpmix-dev and podman (./dev)"),
]

EXAMPLES = "/opt/trainstack/examples"
# What every task's podman gets: srun's variables and the cross-node transport, the PMIx folder (unless told not
# to), the shared folder; the limits these VMs allow come from slurm_pages.podman_limits_env.
# The container runs as the task's user, as Enroot and Apptainer run it (here root, whom the cluster runs jobs as:
# rootless Podman's --userns=keep-id does the same for a user), whose PMIx folder it can use; TINI_SUBREAPER since
# with the host's PID namespace the image's tini is not PID 1.
PODMAN = ('exec podman run --rm --network=host --ipc=host --pid=host {user} --no-healthcheck '
          '--env TINI_SUBREAPER=1 --env "SLURM_*" --env "PMIX_*" '
          '--env "OMPI_MCA_*" {pmix} --volume "$WORK:$WORK" --workdir "$WORK" "$IMAGE" "$@"')
PMIX_MOUNT = '--volume "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR"'
TASK_USER = '--user "$(id -u):$(id -g)"'


@pytest.fixture(scope="module")
def podman_image(image) -> str:
    """The image under test in Podman's store (loaded once: its ID is docker's)."""
    present = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", image.id.removeprefix("sha256:")],
                             capture_output=True, text=True)
    if present.returncode != 0:
        load = subprocess.Popen(["podman", "load", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert load.stdin is not None
        for chunk in image.save():
            load.stdin.write(chunk)
        load.stdin.close()
        assert load.wait(timeout=600) == 0, load.stderr.read().decode()
    return image.id.removeprefix("sha256:")


@pytest.fixture(scope="module")
def cluster():
    with loopback_slurm() as slurm:
        yield slurm


@pytest.fixture
def work(cluster) -> Path:
    return Path(tempfile.mkdtemp(dir=cluster.root.parent))


def srun_in_podman(cluster: LoopbackSlurm, work: Path, image: str, command: list[str], mpi: str = "pmix",
                   pmix_mounted: bool = True, as_task_user: bool = True,
                   timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**cluster.env(), **CROSS_NODE_MPI_ENV, **slurm_pages.podman_limits_env(work), "WORK": str(work),
           "IMAGE": image}
    script = PODMAN.format(pmix=PMIX_MOUNT if pmix_mounted else "", user=TASK_USER if as_task_user else "")
    started = time.monotonic()
    result = subprocess.run(["srun", f"--mpi={mpi}", "-N2", "-n4", "--kill-on-bad-exit=1", "sh", "-c", script,
                             "podman", *command], env=env, cwd=work, capture_output=True, text=True, timeout=timeout)
    result.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return result


def test_the_images_python_maps_the_ranks_for_ddp_with_env_init(cluster, work, podman_image) -> None:
    probe = ("import os, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
             "t = torch.ones(1); dist.all_reduce(t); "
             "print(os.environ['RANK'], os.environ['LOCAL_WORLD_SIZE'], os.environ['MASTER_ADDR'], int(t.item()))")
    # Without MPI, srun sets up no PMIx and there is no folder to mount.
    result = srun_in_podman(cluster, work, podman_image, ["python", "-c", probe], mpi="none", pmix_mounted=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = sorted(result.stdout.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["0", "1", "2", "3"]
    assert {tuple(line.split()[1:]) for line in lines} == {("2", "n1", "4")}


def test_a_container_without_the_pmix_folder_ends_in_one_line(cluster, work, podman_image) -> None:
    result = srun_in_podman(cluster, work, podman_image, ["python", f"{EXAMPLES}/horovod_torch_mnist.py"],
                            pmix_mounted=False, timeout=120)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("trainstack:")]
    assert lines and all("is not in this container: MPI_Init would fail" in line for line in lines), result.stderr
    assert "Traceback" not in result.stderr


def test_a_container_of_another_user_than_the_tasks_ends_in_one_line(cluster, work, podman_image) -> None:
    """The image's own user (uid 1000) cannot use the PMIx folder of a job that runs as root."""
    probe = "from mpi4py import MPI"
    result = srun_in_podman(cluster, work, podman_image, ["python", "-c", probe], as_task_user=False, timeout=120)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("trainstack:")]
    assert lines and all("belongs to uid 0, and this process runs as uid 1000" in line for line in lines), \
        result.stderr
