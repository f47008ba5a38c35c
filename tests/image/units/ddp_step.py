"""One DistributedDataParallel step over gloo: after it, every rank holds identical weights."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.randn(8, 4)).pow(2).mean()
loss.backward()
optimizer.step()
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
gathered = [torch.zeros_like(weights) for _ in range(world)]
dist.all_gather(gathered, weights)
assert all(torch.equal(gathered[0], w) for w in gathered), "ranks diverged"
print(f"ddp rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} in sync", flush=True)
dist.destroy_process_group()
