"""A rank of a pool job: one DDP step over gloo, then the worker it ran on and the GPU address Spark gave it.

`--hold SECONDS` keeps the rank alive afterwards, for a worker to be killed mid-job.
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--hold", type=float, default=0)
hold = parser.parse_args().hold

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.randn(8, 4)).pow(2).mean().backward()
grads = torch.cat([p.grad.flatten() for p in model.parameters()])
gathered = [torch.zeros_like(grads) for _ in range(world)]
dist.all_gather(gathered, grads)
assert all(torch.equal(gathered[0], g) for g in gathered), "gradients were not averaged"
gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "none")
print(f"pool rank {rank}/{world} on {socket.gethostname()} gpu {gpu} in sync", flush=True)
dist.destroy_process_group()
if hold:
    print(f"pool rank {rank} holding", flush=True)
    time.sleep(hold)
