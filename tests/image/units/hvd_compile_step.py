"""Horovod's DistributedOptimizer around a torch.compile'd model: one compiled step per rank, checked against eager."""
import horovod.torch as hvd
import torch

from compile_reference import LEARNING_RATE, check_distributed_step, make_model

hvd.init()
model = make_model()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LEARNING_RATE),
                                     named_parameters=model.named_parameters())
print("horovod", check_distributed_step(torch.compile(model, fullgraph=True), model, optimizer, hvd.rank(), hvd.size()),
      flush=True)
