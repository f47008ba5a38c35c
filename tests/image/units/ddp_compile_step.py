"""DistributedDataParallel over gloo with torch.compile: one compiled step per rank, checked against eager."""
import torch
import torch.distributed as dist

from compile_reference import LEARNING_RATE, check_distributed_step, compiled_ddp, make_model

dist.init_process_group("gloo")
model = compiled_ddp(make_model())
optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
print("ddp", check_distributed_step(model, model, optimizer, dist.get_rank(), dist.get_world_size()), flush=True)
dist.barrier()  # the ranks tear the process group down together (see examples/ddp_torch_mnist.py)
dist.destroy_process_group()
