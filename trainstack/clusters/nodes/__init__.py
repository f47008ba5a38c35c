"""Multi-node jobs on one machine: worker containers of an image running trainstack-sshd on a docker network,
launchers that reach them over ssh (trainrun mpi -H), made from the plan through the docker SDK."""
from .plan import DEFAULT_NODES, nodes_plan
from .run import run, run_on_workers
from .runner import down, status, up

__all__ = ["DEFAULT_NODES", "down", "nodes_plan", "run", "run_on_workers", "status", "up"]
