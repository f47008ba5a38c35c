"""Where a `trainrun ray` job's Ray cluster runs and what each node offers: what its plan shows and its process
(trainrun.backends.ray.cluster) is started with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

CLUSTER_MODULE = "trainrun.backends.ray.cluster"
Engine = Literal["local", "slurm", "spark"]


@dataclass(frozen=True)
class RayCluster:
    """Where the job's Ray cluster runs and what each node offers (None: what the engine gives the node)."""

    engine: Engine
    port: int = 0  # the head's port (local, slurm); Ray on Spark picks its own
    nodes: tuple[str, ...] = ()  # slurm: the allocation's nodes, the head on the first
    num_cpus: int | None = None
    num_gpus: int | None = None
    include_dashboard: bool = True
    max_worker_nodes: int | None = None  # spark: setup_ray_cluster's (None: as many as the executors hold)

    @property
    def head_host(self) -> str:
        return self.nodes[0] if self.nodes else "127.0.0.1"

    def argv(self, python: str, command: Sequence[str]) -> list[str]:
        argv = [python, "-m", CLUSTER_MODULE, self.engine]
        if self.engine != "spark":
            argv += ["--port", str(self.port)]
        if self.nodes:
            argv += ["--nodes", ",".join(self.nodes)]
        argv += ["--num-cpus", str(self.num_cpus)] if self.num_cpus is not None else []
        argv += ["--num-gpus", str(self.num_gpus)] if self.num_gpus is not None else []
        argv += ["--max-worker-nodes", str(self.max_worker_nodes)] if self.max_worker_nodes is not None else []
        argv += [] if self.include_dashboard else ["--no-dashboard"]
        return [*argv, "--", *command]

    def note(self, where: str) -> str:
        dashboard = "no dashboard"
        if self.include_dashboard:
            dashboard = "the dashboard behind it" if self.engine == "spark" else "the dashboard on localhost behind it"
        security = f"token authentication with a token made for the job, {dashboard}"
        if self.engine == "spark":
            size = f"up to {self.max_worker_nodes} worker nodes" if self.max_worker_nodes is not None else \
                "a worker node in each executor's slot"
            return (f"{where}: Ray on Spark (setup_ray_cluster), {size}, sized as the executors; the driver runs "
                    f"here with RAY_ADDRESS; {security}")
        sizes = ", ".join(f"{count} {what}{'s' if count != 1 else ''}" for count, what in
                          ((self.num_cpus, "CPU"), (self.num_gpus, "GPU")) if count is not None)
        if self.engine == "local":
            return (f"{where}: a Ray head node with {sizes or 'the CPUs and GPUs of this host'}, port {self.port}; "
                    f"the driver runs here with RAY_ADDRESS; {security}")
        workers = f" and a worker node on each of {', '.join(self.nodes[1:])} through srun" \
            if len(self.nodes) > 1 else ""
        return (f"{where}: a Ray head on {self.nodes[0]}{workers}, each with "
                f"{sizes or 'the CPUs and memory Slurm gave the job on its node'}, port {self.port}; the driver runs "
                f"on {self.nodes[0]} (an srun step) with RAY_ADDRESS; {security}")
