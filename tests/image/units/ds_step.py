"""A few DeepSpeed ZeRO steps on a tiny model, however launched: torchrun, the deepspeed launcher on one node, or
the deepspeed launcher across hosts (mpirun, DeepSpeed's MPI discovery through mpi4py). Every rank prints its rank,
the world, its host, the ZeRO stage, DeepSpeed's accelerator, the torch.distributed backend and its loss falling."""
import argparse
import os
import socket

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator

parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
# The deepspeed launcher passes it; torchrun sets LOCAL_RANK, which DeepSpeed checks the argument against.
parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()
deepspeed.init_distributed()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
inputs = torch.randn(engine.train_micro_batch_size_per_gpu(), 8, generator=torch.Generator().manual_seed(rank))
targets = inputs.sum(dim=1, keepdim=True)
losses = []
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(engine(inputs), targets)
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())
print(f"ds rank {rank}/{world} on {socket.gethostname()} stage {engine.zero_optimization_stage()} "
      f"accelerator {get_accelerator().device_name()} backend {dist.get_backend()} "
      f"loss {losses[0]:.4f} -> {losses[-1]:.4f} falls {losses[-1] < losses[0] / 2}", flush=True)
dist.barrier()
dist.destroy_process_group()
