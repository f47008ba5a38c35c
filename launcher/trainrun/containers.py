"""The image on every task srun starts, under the container runtime a cluster has (`--container-runtime`,
`--container-image`): what srun is given before the rank's command, wired as Enroot's PMI hook wires a container.

- Pyxis takes srun options and mounts srun's PMIx folder itself.
- Apptainer, Podman and Charliecloud run in a shell of the task, where srun has set PMIX_SERVER_TMPDIR (the batch
  script's shell has none), and mount that folder at the same path.
- Podman shares the host's network, IPC and PID namespaces and is given srun's variables (Apptainer and Charliecloud
  pass the environment through); it runs as the task's user: `--userns=keep-id` where Podman is rootless, the
  job's uid where it runs as root (keep-id is rootless only).
- Charliecloud runs a squashfs or a folder (`invoke export`'s .sqsh), whose file system is read-only: a bind's
  destination must already be there, so each folder is bound through the image folder that holds it
  (MOUNT_POINTS), at the same path.

Every container also mounts the working folder (and enters it) and the folder of the ranks' status records.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Iterable

from .errors import UsageError
from .image_contract import MOUNT_POINTS

RUNTIMES = ("host", "pyxis", "apptainer", "podman", "charliecloud")
# Where the task's own shell finds srun's PMIx folder.
PMIX_DIR = "$PMIX_SERVER_TMPDIR"
# The variables each Podman container is given by name: srun's and PMIx's, the MPI settings a cluster or user makes
# (OMPI_MCA_*), trainrun's own.
PODMAN_ENV_PATTERNS = ("SLURM_*", "PMIX_*", "OMPI_*", "TRAINRUN_*")
# The image files the runtimes run: Apptainer's SIF, Enroot's and Charliecloud's squashfs.
FILE_SUFFIXES = (".sif", ".sqsh", ".sqfs", ".squashfs")


@dataclass(frozen=True)
class ContainerRoute:
    """The runtime and image the ranks run in, and what the container needs from the task; runtime "host" (no
    image): the nodes' own Python, no container."""

    runtime: str
    image: str | None
    workdir: str  # the job's working folder, mounted and entered
    folders: tuple[str, ...] = ()  # other folders mounted at the same path (the status records')
    env: tuple[str, ...] = ()  # variables the ranks need beyond PODMAN_ENV_PATTERNS (Podman only)
    pmix: bool = False  # srun --mpi=pmix: its PMIx folder mounted
    as_root: bool = False  # the job runs as root (Podman: --user 0:0, not --userns=keep-id)
    gpus: bool = False  # the task has GPUs (Apptainer --nv, Podman's CDI devices)

    def srun_options(self) -> list[str]:
        """srun's own options for the container (Pyxis's); none for the others."""
        if self.runtime != "pyxis":
            return []
        mounts = ",".join(f"{folder}:{folder}" for folder in self._mounted())
        return [f"--container-image={enroot_uri(self.image)}", f"--container-mounts={mounts}",
                f"--container-workdir={self.workdir}"]

    def python(self, host_python: str) -> str:
        """The Python each task runs: the image's, on its PATH, or this host's."""
        return host_python if self.runtime == "host" else "python"

    def note(self) -> str:
        """What trainrun says of the route, after where the ranks start."""
        return "" if self.runtime == "host" else f", each in {self.image} under {self.runtime}"

    def prefix(self) -> list[str]:
        """The words before the rank's command: `sh -c 'exec RUNTIME ... IMAGE "$@"' RUNTIME`."""
        if self.runtime in ("host", "pyxis"):
            return []
        if self.runtime == "charliecloud":
            return ["sh", "-c", self._charliecloud(), self.runtime]
        container = {"apptainer": self._apptainer, "podman": self._podman}[self.runtime]()
        return ["sh", "-c", container + ' "$@"', self.runtime]

    def _mounted(self) -> list[str]:
        return list(dict.fromkeys([self.workdir, *self.folders]))

    def _apptainer(self) -> str:
        image = self.image if is_image_file(self.image) else f"docker://{self.image}"
        words = ["apptainer", "exec", *(["--nv"] if self.gpus else [])]
        if self.pmix:
            words += ["--bind", _shell_pair(PMIX_DIR)]
        for folder in self._mounted():
            words += ["--bind", shlex.quote(f"{folder}:{folder}")]
        return "exec " + " ".join([*words, "--pwd", shlex.quote(self.workdir), shlex.quote(image)])

    def _podman(self) -> str:
        words = ["podman", "run", "--rm", "--network=host", "--ipc=host", "--pid=host",
                 "--user 0:0" if self.as_root else "--userns=keep-id", "--no-healthcheck"]
        if self.gpus:
            words += ["--device", "nvidia.com/gpu=all", "--env", "CUDA_VISIBLE_DEVICES"]
        # With the host's PID namespace the image's tini is not PID 1; it reaps the rank's children as a subreaper.
        words += ["--env", "TINI_SUBREAPER=1"]
        for name in [*PODMAN_ENV_PATTERNS, *self.env]:
            words += ["--env", shlex.quote(name)]
        if self.pmix:
            words += ["--volume", _shell_pair(PMIX_DIR)]
        for folder in self._mounted():
            words += ["--volume", shlex.quote(f"{folder}:{folder}")]
        return "exec " + " ".join([*words, "--workdir", shlex.quote(self.workdir), shlex.quote(self.image)])

    def _charliecloud(self) -> str:
        # The tasks of a node join one container: one SquashFS mount per node and step (a mount point of each task's
        # own races: `can't mkdir ...: File exists`), on the node's /tmp, removed by the last task to leave.
        lines = ['dir="/tmp/$USER.ch.$SLURM_JOB_ID.$SLURM_STEP_ID"', 'mkdir -p "$dir"']
        words = ["ch-run", "--join", "--join-tag", '"$SLURM_JOB_ID.$SLURM_STEP_ID"', "-m", '"$dir"', "--set-env"]
        if self.pmix:
            # The PMIx folder is known in the task only: its image folder is picked there.
            lines.append(f'pmix_mount=$(case "{PMIX_DIR}/" in '
                         + " ".join(f"{shlex.quote(point)}/*) echo {shlex.quote(point)};;" for point in MOUNT_POINTS)
                         + " esac)")
            words.append('${pmix_mount:+-b "$pmix_mount"}')
        for point in dict.fromkeys(mount_point("--container-runtime charliecloud", folder)
                                   for folder in self._mounted()):
            words += ["-b", shlex.quote(point)]
        words += ["-c", shlex.quote(self.workdir), shlex.quote(self.image), "--", '"$@"']
        return "; ".join([*lines, " ".join(words), "code=$?", 'rmdir "$dir" 2>/dev/null', 'exit "$code"'])


def _shell_pair(variable: str) -> str:
    return f'"{variable}:{variable}"'


def mount_point(option: str, folder: str) -> str:
    """The image folder (MOUNT_POINTS) that holds `folder`, which Charliecloud binds at the same path."""
    for point in sorted(MOUNT_POINTS, key=len, reverse=True):
        if folder == point or folder.startswith(point.rstrip("/") + "/"):
            return point
    raise UsageError(option, folder, "is a folder the job needs in the container, and Charliecloud binds only onto "
                     "folders its read-only image has", valid="work under one of " + ", ".join(MOUNT_POINTS) +
                     ", or --container-runtime podman or apptainer")


def enroot_uri(reference: str) -> str:
    """A docker reference as Enroot (and so Pyxis) reads one, `[REGISTRY#]IMAGE[:TAG]`: without the `#`, Enroot
    pulls from Docker Hub. A file (a squashfs Enroot made) stays a path."""
    if is_image_file(reference):
        return reference
    first, slash, rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return reference


def is_image_file(image: str) -> bool:
    """A path (absolute, relative with ./, or an image file's suffix), not a registry reference such as
    ghcr.io/trainstack/trainstack:cpu."""
    return image.startswith(("/", "./", "../")) or image.endswith(FILE_SUFFIXES)


def container_route(runtime: str | None, image: str | None, *, workdir: str, folders: Iterable[str] = (),
                    env: Iterable[str] = (), pmix: bool, as_root: bool, gpus: bool) -> ContainerRoute:
    """The route `--container-runtime` and `--container-image` name, checked (none: the host's own Python)."""
    if runtime in (None, "host"):
        return ContainerRoute("host", None, workdir)
    if runtime not in RUNTIMES:
        raise UsageError("--container-runtime", runtime, "is not a container runtime trainrun starts under srun",
                         valid=", ".join(RUNTIMES))
    if not image:
        raise UsageError("--container-image", image or "", f"is needed with --container-runtime {runtime}",
                         valid="the image's name (ghcr.io/trainstack/trainstack:cpu) or file (a .sqsh or .sif)")
    if runtime == "charliecloud" and not is_image_file(image):
        raise UsageError("--container-image", image, "is not a file: Charliecloud runs an image file or folder, not "
                         "a registry name", valid="invoke export's squashfs, e.g. /shared/trainstack+cpu.sqsh")
    return ContainerRoute(runtime, image, workdir, tuple(folders), tuple(env), pmix, as_root, gpus)
