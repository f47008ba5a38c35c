"""One Ray node of a `trainrun ray` cluster, as its process (on this host) or srun step (on every node of a Slurm
allocation) runs it:

    python -m trainrun.backends.ray.node head --port P [--num-cpus C] [--num-gpus G] [--no-dashboard]
    python -m trainrun.backends.ray.node worker --address HEAD:P [--num-cpus C] [--num-gpus G]

It runs `ray start --block` with what the node has: the CPUs Slurm gave the job on this node (SLURM_CPUS_ON_NODE)
and of the memory Slurm gave it (SLURM_MEM_PER_NODE) Ray's share of a host, split as Ray splits a host's, where the
user gave no size; the address this node reaches the head from as the node's address, and its interface for Gloo
and NCCL (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME: torch picks the loopback interface otherwise) unless the user set
them. The head's dashboard, whose state API Ray Train's controller asks, is bound to localhost, where the driver
runs. Token authentication comes from the cluster's process (trainrun.backends.ray.cluster), in the environment
only.

Once Ray says the node runs, it prints one line, `trainrun-ray-node up: HOST IP` (the node's address as Ray
chose it), which the cluster counts. When the
cluster stops (SIGUSR2, which srun forwards to the step's processes; Ray's ignore it) or Slurm ends the step
(SIGTERM: scancel, the time limit), it stops `ray start` (SIGTERM: Ray ends its processes on the node), then what is
left by pid.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from typing import Mapping, Sequence

from ...engines.ray import ray_cli
from ...machine import interface_for_address
from ...ports import pick_free_port
from ...proctree import descendants, terminate
from ..spark.ray_on_spark import NODE_SHARE_OF_MEMORY, OBJECT_STORE_SHARE

MODULE = "trainrun.backends.ray.node"
UP_LINE = "trainrun-ray-node up: "
RAY_STARTED = "Ray runtime started."
NODE_IP = re.compile(r"Local node IP: (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What the cluster stops its nodes with: srun forwards it to every process of the step, where a SIGTERM would make srun
# kill the step at once ("forcing job termination"); Ray's processes inherit it ignored.
STOP_SIGNAL = signal.SIGUSR2
STOP_SECONDS = 30.0
# Below this, Ray's object store leaves /dev/shm for /tmp (or shrinks to 75 MiB, Ray on Spark's floor).
SMALL_SHM_BYTES = 512 * 1024 * 1024
SHM = "/dev/shm"
DRAIN_TIMEOUT = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"


def head_argv(python: str, port: int, num_cpus: int | None, num_gpus: int | None, include_dashboard: bool) -> list[str]:
    argv = [python, "-m", MODULE, "head", "--port", str(port), *_size_options(num_cpus, num_gpus)]
    return argv if include_dashboard else [*argv, "--no-dashboard"]


def worker_argv(python: str, address: str, num_cpus: int | None, num_gpus: int | None) -> list[str]:
    return [python, "-m", MODULE, "worker", "--address", address, *_size_options(num_cpus, num_gpus)]


def _size_options(num_cpus: int | None, num_gpus: int | None) -> list[str]:
    return [*(["--num-cpus", str(num_cpus)] if num_cpus is not None else []),
            *(["--num-gpus", str(num_gpus)] if num_gpus is not None else [])]


def small_shm_line(host: str, shm: str = SHM) -> str | None:
    """One line naming /dev/shm when it is too small for Ray's object store, else None."""
    try:
        total = shutil.disk_usage(shm).total
    except OSError:
        return None
    if total >= SMALL_SHM_BYTES:
        return None
    return (f"{shm} on {host} is {total // 2**20} MiB: Ray's object store needs more (below 512 MiB Ray moves it to "
            "/tmp, slowly); give the container more: docker run --shm-size=2g (or --ipc=host)")


def memory_options(environ: Mapping[str, str]) -> list[str]:
    """--memory and --object-store-memory from the memory Slurm gave the job on this node, as Ray sizes a host."""
    megabytes = environ.get("SLURM_MEM_PER_NODE", "")
    if not megabytes.isdigit() or int(megabytes) == 0:
        return []
    node = int(int(megabytes) * 2**20 * NODE_SHARE_OF_MEMORY)
    object_store = int(node * OBJECT_STORE_SHARE)
    return ["--memory", str(node - object_store), "--object-store-memory", str(object_store)]


def node_address(head_host: str) -> str | None:
    """This node's address toward the head (the source address of a route to it); None on loopback, where Ray picks
    the host's own."""
    try:
        head_ip = socket.gethostbyname(head_host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((head_ip, 9))
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def interface_variables(interface: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME naming `interface`, each where the user did not set it."""
    if interface is None:
        return {}
    return {name: interface for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if name not in environ}


def interface_env(address: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    """interface_variables for the interface of `address`."""
    return interface_variables(interface_for_address(address) if address else None, environ)


def start_argv(args: argparse.Namespace, address: str | None, environ: Mapping[str, str]) -> list[str]:
    """`ray start --block` for this node."""
    argv = [ray_cli() or "ray", "start", "--block", "--disable-usage-stats"]
    # Free ports where Ray's are fixed (10001, 8265, 52365), so that two jobs' nodes share a host.
    if args.role == "head":
        argv += ["--head", "--port", str(args.port), "--ray-client-server-port", str(pick_free_port())]
        argv += ["--include-dashboard", "false"] if args.no_dashboard else \
            ["--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(pick_free_port())]
    else:
        argv += ["--address", args.address]
    argv += ["--dashboard-agent-listen-port", str(pick_free_port())]
    if address is not None:
        argv += ["--node-ip-address", address]
    cpus = args.num_cpus if args.num_cpus is not None else environ.get("SLURM_CPUS_ON_NODE")
    if cpus:
        argv += ["--num-cpus", str(cpus)]
    if args.num_gpus is not None:
        argv += ["--num-gpus", str(args.num_gpus)]
    return [*argv, *memory_options(environ)]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("role", choices=("head", "worker"))
    parser.add_argument("--port", type=int)
    parser.add_argument("--address")
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--num-gpus", type=int)
    parser.add_argument("--no-dashboard", action="store_true")
    args = parser.parse_args(argv)
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    head_host = args.address.rpartition(":")[0] if args.address else host
    address = node_address(head_host)
    shm_line = small_shm_line(host)
    if shm_line:
        print(f"trainrun: warning: {shm_line}", file=sys.stderr, flush=True)
    # The cluster stops once its driver has ended: nothing is left to drain (Ray waits up to 30 s for Serve's).
    env = {DRAIN_TIMEOUT: "0", **os.environ, **interface_env(address, os.environ)}
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)
    ray = subprocess.Popen(start_argv(args, address, os.environ), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)

    stopping: list[int] = []

    def stop(signum: int, frame) -> None:
        stopping.append(signum)
        terminate([ray.pid], STOP_SECONDS, find_more=lambda: descendants(ray.pid))

    signal.signal(STOP_SIGNAL, stop)
    signal.signal(signal.SIGTERM, stop)
    said: list[str] = []
    node_ip = address or ""
    for line in ray.stdout or ():
        line = ANSI.sub("", line)
        said = [*said[-19:], line.rstrip()]
        found = NODE_IP.search(line)
        node_ip = found.group(1) if found else node_ip
        if RAY_STARTED in line:
            print(f"{UP_LINE}{host} {node_ip}", flush=True)
    code = ray.wait()
    if code != 0 and not stopping:
        last = next((line for line in reversed(said) if line.strip()), "")
        print(f"trainrun: ray start on {host} exited with code {code}: {last}", file=sys.stderr, flush=True)
    return 0 if stopping else (code if code > 0 else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
