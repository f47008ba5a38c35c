"""This rank's uniform environment and a gloo allreduce over torch.distributed, printed as `rank-env {json}`.

The same script runs under `trainrun mpi`, `trainrun torch` and `trainrun spark`.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

env = {name: os.environ.get(name) for name in NAMES}
dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
dist.destroy_process_group()
# One write, so that the two ranks' lines cannot interleave on the shared stdout.
sys.stdout.write(f"rank-env {json.dumps({'rank': rank, 'env': env, 'allreduce': total.item()})}\n")
sys.stdout.flush()
