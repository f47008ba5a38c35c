"""A real Slurm cluster of two nodes on 127.0.0.1, from Debian's packages (slurmctld, slurmd, munge, libpmix-dev): what
the tests and benchmarks run `srun`, `salloc` and `sbatch` against.

Both nodes are this host. Each slurmd runs in its own mount namespace with a private /tmp and /dev/shm: shared, two
nodes' PMIx step folders collide (`/tmp/spmix_appdir_...: File exists`) and Open MPI's shared-memory transport between
ranks of different nodes segfaults. Since both nodes have one hostname, Open MPI takes ranks on n1 and n2 for ranks of
one host and would reach across by shared memory, which the private /dev/shm splits: CROSS_NODE_MPI_ENV sends their
traffic over TCP on loopback, as between two real hosts. Slurm 22.05 refuses `CgroupPlugin=disabled`, so there is no
cgroup.conf: processes are tracked by /proc (proctrack/linuxproc) and tasks are not confined (task/none).

Everything lives in one folder outside /tmp, which each node hides (config, munge key and socket, state, spool, logs);
so must the files the jobs write, as on a real cluster's shared file system. A checkout or venv under /tmp, whose
programs the jobs run, is mounted at its path in each node's /tmp. Every daemon is
stopped by its pid, and the /etc/hosts lines naming the nodes are removed again.
"""
from __future__ import annotations

import contextlib
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainstack.errors import TrainstackError
from trainstack.image.matrix import REPO_ROOT

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
PARTITION = "debug"
HOSTS_FILE = Path("/etc/hosts")
HOSTS_MARKER = "# trainstack loopback slurm"
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "libpmix-dev")
# What slurmd's mpi/pmix plugin dlopens; only libpmix-dev ships it, and without it `srun --mpi=pmix` times out.
PMIX_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so")
# Open MPI between ranks on the two emulated nodes of one host: TCP on loopback, not shared memory (see above).
CROSS_NODE_MPI_ENV = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl_tcp_if_include": "lo",
                      "OMPI_MCA_oob_tcp_if_include": "lo"}
START_SECONDS = 30.0


@dataclass
class LoopbackSlurm:
    """The cluster in `root`: start() it, run clients with env(), stop() it."""

    root: Path
    controller_port: int = 0
    node_ports: dict[str, int] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)
    node_namespaces: set[str] = field(default_factory=set)  # each slurmd's private mount namespace

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for srun, salloc, sbatch and sinfo that reaches this cluster."""
        environ = dict(os.environ if base is None else base)
        environ["SLURM_CONF"] = str(self.conf)
        return environ

    def start(self) -> None:
        missing = [name for name in ("slurmctld", "slurmd", "srun", "munged") if shutil.which(name) is None]
        if missing or not PMIX_LIBRARY.exists():
            raise TrainstackError(f"the loopback Slurm cluster needs Debian's {' '.join(PACKAGES)} "
                                  f"(missing: {', '.join(missing) or PMIX_LIBRARY}): apt-get install them")
        if self.root.resolve().is_relative_to("/tmp"):
            raise TrainstackError(f"the loopback Slurm cluster's folder {self.root} is under /tmp, which each node "
                                  "replaces with its own: choose one elsewhere, e.g. under /var/tmp")
        self.root.mkdir(parents=True, exist_ok=True)
        for folder in ("state", "munge", *(f"{node}/tmp" for node in NODES), *(f"{node}/spool" for node in NODES)):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        shared = shared_under_tmp([REPO_ROOT, Path(sys.prefix)])
        (self.root / "munge").chmod(0o700)
        self.controller_port, *ports = free_ports(1 + len(NODES))
        self.node_ports = dict(zip(NODES, ports))
        self._write_munge_key()
        self.conf.write_text(self.config())
        add_host_names(NODES)
        try:
            self._spawn(["munged", "--foreground", "--force", f"--key-file={self.root / 'munge/munge.key'}",
                         f"--socket={self.munge_socket}", f"--pid-file={self.root / 'munge/munged.pid'}",
                         f"--seed-file={self.root / 'munge/munged.seed'}",
                         f"--log-file={self.root / 'munge/munged.log'}"], "munged")
            wait_for(lambda: self.munge_socket.exists(), "munged's socket", self.root / "munge/munged.log")
            self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
            for node in NODES:
                private = " && ".join([*self._keep_shared(node, shared),
                                       f"mount --rbind {shlex.quote(str(self.root / node / 'tmp'))} /tmp",
                                       "mount -t tmpfs -o size=1g tmpfs /dev/shm",
                                       f"exec slurmd -D -N {node} -f {shlex.quote(str(self.conf))}"])
                self._spawn(["unshare", "-m", "--propagation", "private", "sh", "-c", private], f"slurmd-{node}")
            wait_for(self.nodes_idle, "both nodes idle in sinfo", self.root / "slurmctld.log")
            self.node_namespaces = {os.readlink(f"/proc/{process.pid}/ns/mnt") for process in self.processes[-2:]}
        except BaseException:
            self.stop()
            raise

    def _keep_shared(self, node: str, shared: list[Path]) -> list[str]:
        """Mounts that keep each of `shared` (under /tmp) at its path in the node's own /tmp, as a cluster's shared file
        system would (--rbind of the node's /tmp carries them)."""
        mounts = []
        for path in shared:
            inside = self.root / node / "tmp" / path.relative_to("/tmp")
            inside.mkdir(parents=True, exist_ok=True)
            mounts.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(inside))}")
        return mounts

    def machine_facts(self) -> dict[str, object]:
        """What a measurement on this cluster ran on: cores, Python, Slurm's version."""
        version = subprocess.run(["srun", "--version"], env=self.env(), capture_output=True, text=True)
        return {"cpus": os.cpu_count(), "python": platform.python_version(), "slurm": version.stdout.strip()}

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge/munge.socket"

    def nodes_idle(self) -> bool:
        result = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(), capture_output=True, text=True)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return result.returncode == 0 and all(states.get(node) == "idle" for node in NODES)

    def stop(self) -> None:
        """Cancels what still runs, stops every daemon by its pid (slurmd before slurmctld before munged), and leaves
        no PMIx folders or host names behind."""
        if any(process.poll() is None for process in self.processes) and self.conf.exists():
            subprocess.run(["scancel", "--full", "--partition", PARTITION], env=self.env(), capture_output=True,
                           timeout=10)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        self._end_node_processes()
        for node in NODES:
            for leftover in (self.root / node / "tmp").glob("spmix_appdir_*"):
                shutil.rmtree(leftover, ignore_errors=True)
        remove_host_names()

    def _end_node_processes(self) -> None:
        """What outlived its slurmd in a node's mount namespace (a slurmstepd of a step whose tasks hung in PMIx):
        every such process is killed, so that nothing of the cluster is left running."""
        for proc in Path("/proc").glob("[0-9]*"):
            if mount_namespace(proc.name) in self.node_namespaces:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)

    def config(self) -> str:
        lines = [
            "ClusterName=trainstack",
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
            f"SlurmctldPort={self.controller_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root}/%n/spool",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root}/%n/slurmd.pid",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root}/%n/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=10",
            "SlurmdTimeout=60",
            "Waittime=0",
        ]
        for node, port in self.node_ports.items():
            lines.append(f"NodeName={node} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={CPUS_PER_NODE} Sockets=1 CoresPerSocket={CPUS_PER_NODE} ThreadsPerCore=1 "
                         "RealMemory=4000 State=UNKNOWN")
        lines.append(f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP "
                     "OverSubscribe=YES")
        return "\n".join(lines) + "\n"

    def _write_munge_key(self) -> None:
        key = self.root / "munge/munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

    def _spawn(self, argv: list[str], name: str) -> None:
        log = open(self.root / f"{name}.out", "ab")
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True))
        log.close()


@contextlib.contextmanager
def loopback_slurm() -> Iterator[LoopbackSlurm]:
    """A cluster started in a new folder under /var/tmp (outside /tmp, which each node replaces with its own, as a
    real cluster's node-local /tmp): stopped and its folder removed at the end. Jobs' files go in cluster.root.parent,
    which every node sees."""
    root = Path(tempfile.mkdtemp(prefix="trainstack-slurm-", dir="/var/tmp"))
    cluster = LoopbackSlurm(root / "cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def mount_namespace(pid: int | str) -> str | None:
    """The process's mount namespace (`mnt:[N]`), or None once it has ended."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def shared_under_tmp(paths: list[Path]) -> list[Path]:
    """Which of `paths` (the checkout, the jobs' Python) lie under /tmp, each once, none inside another."""
    under = sorted({path.resolve() for path in paths if path.resolve().is_relative_to("/tmp")})
    return [path for path in under if not any(path != other and path.is_relative_to(other) for other in under)]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for(ready, what: str, log: Path, seconds: float = START_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise TrainstackError(f"the loopback Slurm cluster did not start: no {what} after {seconds:g} s; {log}:\n{tail}")


def add_host_names(names: tuple[str, ...]) -> None:
    """Each node's name resolves to 127.0.0.1, as MASTER_ADDR (the first node of a step) must."""
    text = HOSTS_FILE.read_text()
    if HOSTS_MARKER not in text:
        HOSTS_FILE.write_text(text.rstrip("\n") + f"\n127.0.0.1 {' '.join(names)} {HOSTS_MARKER}\n")


def remove_host_names() -> None:
    lines = HOSTS_FILE.read_text().splitlines(keepends=True)
    kept = [line for line in lines if HOSTS_MARKER not in line]
    if kept != lines:
        HOSTS_FILE.write_text("".join(kept))
