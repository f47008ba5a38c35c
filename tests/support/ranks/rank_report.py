"""Writes this rank's uniform environment and the result of a sum-allreduce to $REPORT_DIR/rank-N.json.

COLLECTIVE picks the communication: "gloo" (torch.distributed), "horovod", "mpi4py", or "none".
"""
import json
import os

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def allreduce(kind: str, rank: int) -> float | None:
    if kind == "gloo":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        tensor = torch.tensor([float(rank + 1)])
        dist.all_reduce(tensor)
        dist.destroy_process_group()
        return tensor.item()
    if kind == "horovod":
        import horovod.torch as hvd
        import torch

        hvd.init()
        return hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum).item()
    if kind == "mpi4py":
        from mpi4py import MPI

        return MPI.COMM_WORLD.allreduce(float(rank + 1))
    return None


def nearest_java_ancestor() -> int | None:
    """The JVM this rank descends from: a Spark executor (or the driver in local mode); None elsewhere."""
    import psutil

    for parent in psutil.Process().parents():
        if parent.name() == "java":
            return parent.pid
    return None


def main() -> None:
    env = {name: os.environ.get(name) for name in NAMES}
    rank = int(env["RANK"])
    report = {"env": env, "allreduce": allreduce(os.environ.get("COLLECTIVE", "none"), rank), "pid": os.getpid(),
              "java_ancestor": nearest_java_ancestor(), "slurm_node": os.environ.get("SLURMD_NODENAME")}
    with open(os.path.join(os.environ["REPORT_DIR"], f"rank-{rank}.json"), "w") as f:
        json.dump(report, f)
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
