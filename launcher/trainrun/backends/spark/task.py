"""What one barrier task does: agree on the rendezvous with the other tasks, start its rank, report back."""
from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

from ...machine import Machine, interface_for_address
from ...plan import thread_env
from ...proctree import job_temp_prefix
from ...program import Program
from ...rank.env import SHOW_RANKS, rank_argv
from ...rank.status import STATUS_DIR, TASK_DIR, exit_of_returncode, read_status
from .output import OutputClient

PR_SET_PDEATHSIG = 1
DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class TaskConfig:
    num_processes: int
    program: Program
    framework: str  # "torch" or "horovod"
    use_gpu: bool
    output_address: tuple[str, int]
    payload: bytes | None = None  # the cloudpickled function of trainrun.run(fn)
    shown_ranks: str | None = None  # --ranks-filter: only these ranks' output, e.g. "0,1"
    token: str = ""  # proves the task's connection to the driver's output server (trainrun...spark.output)
    job_id: str = ""  # trainrun's job id: names the task's directory, so that trainrun finds it if Spark kills the task
    rank_cwd: str | None = None  # where each rank starts (the job's folder every node sees); None: the executor's
    restart_count: int = 0  # how many times the stage ran before this run (trainrun spark --max-restarts)
    max_restarts: int = 0


@dataclass(frozen=True)
class Rendezvous:
    master_addr: str
    master_port: int
    horovod_port: int | None


def host_of(address: str) -> str:
    """`host:port` of a Spark task (IPv6 in brackets) -> host."""
    return address.rsplit(":", 1)[0].strip("[]")


def horovod_task_env(task_index: int, num_tasks: int, rendezvous: Rendezvous, iface: str | None) -> dict[str, str]:
    """The variables horovodrun --gloo gives a rank; each task is its own one-slot host `task-N`."""
    env = {
        "HOROVOD_HOSTNAME": f"task-{task_index}",
        "HOROVOD_RANK": str(task_index), "HOROVOD_SIZE": str(num_tasks),
        "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1",
        "HOROVOD_CROSS_RANK": str(task_index), "HOROVOD_CROSS_SIZE": str(num_tasks),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous.master_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous.horovod_port),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "PYTHONUNBUFFERED": "1",
    }
    if iface:
        env["HOROVOD_GLOO_IFACE"] = iface
    return env


def start_horovod_rendezvous(num_tasks: int):
    """Horovod's own rendezvous server, hosted by task 0 as horovodrun hosts it on the launching host."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousServer

    server = RendezvousServer(verbose=0)
    port = server.start()
    hosts = parse_hosts(",".join(f"task-{i}:1" for i in range(num_tasks)))
    server.init(get_host_assignments(hosts, num_tasks))
    return server, port


def _die_with_parent() -> None:
    # Spark kills a cancelled task's Python worker; its rank launcher must not outlive it.
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def rank_command(config: TaskConfig, task_index: int, task_hosts: list[str], rendezvous: Rendezvous,
                 program: Program, workdir: str) -> tuple[list[str], dict[str, str]]:
    """The task's one rank and its environment. A torch rank gets torchrun's variables directly, each task a
    node of one process as TorchDistributor makes it, but without a torchrun agent per task: the agents'
    exit barrier, hosted by task 0's agent, printed connection errors from the others when task 0 ended
    first, and each agent cost a second Python start."""
    env = {STATUS_DIR: workdir, "PYTHONUNBUFFERED": "1"}
    if config.shown_ranks is not None:
        env[SHOW_RANKS] = config.shown_ranks
    own_host = task_hosts[task_index]
    if config.framework == "horovod":
        env.update(horovod_task_env(task_index, config.num_processes, rendezvous, interface_for_address(own_host)))
        env.update(MASTER_ADDR=rendezvous.master_addr, MASTER_PORT=str(rendezvous.master_port))
        return rank_argv(program, sys.executable), env
    machine = Machine(is_root=os.geteuid() == 0, cpu_count=os.cpu_count() or 1, environ=os.environ,
                      python=sys.executable, free_port=rendezvous.master_port)
    env.update(RANK=str(task_index), WORLD_SIZE=str(config.num_processes), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               GROUP_RANK=str(task_index), MASTER_ADDR=rendezvous.master_addr,
               MASTER_PORT=str(rendezvous.master_port), TORCHELASTIC_RESTART_COUNT=str(config.restart_count),
               TORCHELASTIC_MAX_RESTARTS=str(config.max_restarts), **thread_env(machine, task_hosts.count(own_host)))
    return [sys.executable, "-m", "trainrun.rank", *program.rank_args()], env


def task_gpus(ctx) -> str:
    gpus = ctx.resources().get("gpu")
    if gpus is None or not gpus.addresses:
        raise RuntimeError("trainrun: --use-gpu but this Spark task was given no GPU: "
                           "set spark.task.resource.gpu.amount (and the executors' GPU discovery)")
    return ",".join(gpus.addresses)


def run_barrier_task(config: TaskConfig, _partition: Iterator) -> Iterator[bytes | None]:
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    task_index = ctx.partitionId()
    cuda_devices = task_gpus(ctx) if config.use_gpu else None
    task_hosts = [host_of(info.address) for info in ctx.getTaskInfos()]
    port_holder = horovod_server = None
    offer = "{}"
    if task_index == 0:
        # Bound until just before the rank starts, so nothing else on the host takes the port meanwhile.
        port_holder = socket.create_server(("", 0))
        offer_dict = {"master_port": port_holder.getsockname()[1]}
        if config.framework == "horovod":
            horovod_server, offer_dict["horovod_port"] = start_horovod_rendezvous(config.num_processes)
        offer = json.dumps(offer_dict)
    agreed = json.loads(ctx.allGather(offer)[0])
    rendezvous = Rendezvous(task_hosts[0], agreed["master_port"], agreed.get("horovod_port"))

    prefix = job_temp_prefix(config.job_id) if config.job_id else "trainrun-task-"
    workdir = tempfile.mkdtemp(prefix=f"{prefix}{task_index}-")
    client = None
    try:
        client = OutputClient(config.output_address, config.token)
        program = config.program
        result_path = os.path.join(workdir, "result.pkl")
        if config.payload is not None:
            payload_path = os.path.join(workdir, "payload.pkl")
            with open(payload_path, "wb") as f:
                f.write(config.payload)
            program = Program("payload", payload_path, (result_path,))
        argv, env = rank_command(config, task_index, task_hosts, rendezvous, program, workdir)
        env[TASK_DIR] = workdir
        if cuda_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_devices
        if port_holder is not None:
            port_holder.close()
        client.send_start(task_index)
        proc = subprocess.Popen(argv, env={**os.environ, **env}, cwd=config.rank_cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        code = pump_output(proc, lambda line: client.send_line(f"[rank {task_index}] {line}"))
        ended = read_status(workdir).exits.get(task_index)
        exit_code, signal_text = (ended.exit_code, ended.signal) if ended else exit_of_returncode(code)
        client.send_exit(task_index, exit_code, signal_text)
        if exit_code != 0 or signal_text:
            how = f"was killed by {signal_text}" if signal_text else f"exited with code {exit_code}"
            raise RuntimeError(f"trainrun: rank {task_index} {how}")
        result = None
        if task_index == 0 and config.payload is not None and os.path.exists(result_path):
            with open(result_path, "rb") as f:
                result = f.read()
    finally:
        if client is not None:
            client.close()
        if horovod_server is not None:
            horovod_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    yield result


def pump_output(proc: subprocess.Popen, send, drain_seconds: float = DRAIN_SECONDS) -> int:
    """Send the rank's output line by line until it exits; then what is left in the pipe, for at most
    `drain_seconds` (a process the rank left behind may hold the pipe open; it must not hold the task)."""
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    pending = b""
    deadline = None
    code = None
    try:
        while True:
            if code is None:
                code = proc.poll()
                if code is not None:
                    deadline = time.monotonic() + drain_seconds
            wait = 0.2 if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            chunk = b""
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    chunk = None
                if chunk == b"":
                    break  # every writer has closed the pipe
            if chunk:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    send(line.decode("utf-8", errors="replace") + "\n")
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        if pending:
            send(pending.decode("utf-8", errors="replace") + "\n")
        proc.stdout.close()
    return proc.wait() if code is None else code
