"""Jobs on a running cluster: `run` starts a launcher container on the cluster's network for one command
(trainrun mpi -H reaches the workers over ssh from there), `run_on_workers` runs a command in every worker at
once (trainrun torch, one node per worker), output streamed here."""
from __future__ import annotations

import codecs
import sys
import threading
import uuid
from typing import Sequence, TextIO

import docker
import docker.errors

from trainstack.clusters.containers import ClusterError
from trainstack.docker_client import connect, run_container

from .lookup import RunningNodes, find_nodes
from .plan import DEFAULT_NODES, launcher_spec
from .specs import launcher_kwargs

EXAMPLE = "-- trainrun mpi -np 2 -H trainstack-nodes-worker-1:1,trainstack-nodes-worker-2:1 python train.py"
# Words of a run_on_workers command filled in for each worker.
NODE_RANK, NNODES, MASTER_ADDR = "{node_rank}", "{nnodes}", "{master_addr}"


def run(command: Sequence[str], name: str = DEFAULT_NODES, client: docker.DockerClient | None = None,
        out: TextIO = sys.stdout) -> int:
    """Run `command` in a launcher container on the cluster's network; returns its exit code. The launcher has
    the cluster's private key and the workers' host keys, and TRAINRUN_SSH_PORT, TRAINRUN_SSH_IDENTITY_FILE and
    TRAINRUN_SSH_KNOWN_HOSTS point trainrun at them. It is removed when the command ends (or on Ctrl-C, which
    ends the job's ranks on the workers: their daemons lose mpirun)."""
    if not command:
        raise ClusterError.bad_option("command", "", "is missing", f"a command after `--`, e.g. {EXAMPLE}")
    client = client or connect()
    nodes = find_nodes(client, name)
    _check_keys(nodes)
    container_name = f"{name}-launcher-{uuid.uuid4().hex[:8]}"
    create = launcher_kwargs(launcher_spec(name), nodes.image, nodes.network, list(command), container_name,
                             nodes.keys, nodes.share)
    try:
        return run_container(client, create, out=out)[0]
    except docker.errors.NotFound:
        raise ClusterError(f"nodes {name!r}: the launcher container {container_name} was removed while the job ran "
                         "(`nodes.down`?)") from None


def worker_command(command: Sequence[str], node_rank: int, nnodes: int, master_addr: str) -> list[str]:
    """The command for one worker: {node_rank}, {nnodes} and {master_addr} filled in, in every word."""
    values = {NODE_RANK: str(node_rank), NNODES: str(nnodes), MASTER_ADDR: master_addr}
    words = []
    for word in command:
        for key, value in values.items():
            word = word.replace(key, value)
        words.append(word)
    return words


def run_on_workers(command: Sequence[str], name: str = DEFAULT_NODES, client: docker.DockerClient | None = None,
                   out: TextIO = sys.stdout) -> int:
    """Run `command` in every worker at once (as the image's user), e.g. `trainrun torch --nnodes {nnodes}
    --node-rank {node_rank} --master-addr {master_addr} ...`; each line of output prefixed with the worker's
    name. Returns the first non-zero exit code of a worker, else 0."""
    if not command:
        raise ClusterError.bad_option("command", "", "is missing", "a command after `--`, e.g. -- trainrun torch "
                                    "--nnodes {nnodes} --node-rank {node_rank} --master-addr {master_addr} train.py")
    client = client or connect()
    nodes = find_nodes(client, name)
    stopped = [worker.name for worker in nodes.workers if worker.status != "running"]
    if stopped:
        raise ClusterError(f"nodes {name!r}: not running: {', '.join(stopped)}; `invoke nodes.down --name {name}` "
                         "and up again")
    codes: dict[str, int] = {}
    lock = threading.Lock()
    master = nodes.workers[0].name
    threads = [threading.Thread(target=_exec, daemon=True, args=(
        client, worker.id, worker.name, worker_command(command, rank, len(nodes.workers), master), out, lock, codes))
        for rank, worker in enumerate(nodes.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [codes.get(worker.name, 1) for worker in nodes.workers if codes.get(worker.name, 1) != 0]
    return failed[0] if failed else 0


def _exec(client: docker.DockerClient, container_id: str, worker: str, command: list[str], out: TextIO,
          lock: threading.Lock, codes: dict[str, int]) -> None:
    exec_id = client.api.exec_create(container_id, command, stdout=True, stderr=True)["Id"]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in client.api.exec_start(exec_id, stream=True):
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        with lock:
            for line in lines:
                out.write(f"[{worker}] {line}\n")
            out.flush()
    if pending:
        with lock:
            out.write(f"[{worker}] {pending}\n")
    codes[worker] = client.api.exec_inspect(exec_id)["ExitCode"] or 0


def _check_keys(nodes: RunningNodes) -> None:
    if nodes.keys is None or not (nodes.keys / "known_hosts").is_file():
        raise ClusterError(f"nodes {nodes.name!r}: its keys are gone from this machine ({nodes.keys}); "
                         f"`invoke nodes.down --name {nodes.name}` and up again")
