"""Each rank contributes rank+1; the averaged allreduce must equal the mean over ranks."""
import horovod.torch as hvd
import torch

hvd.init()
result = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), name="sum", op=hvd.Sum)
expected = hvd.size() * (hvd.size() + 1) / 2
assert result.item() == expected, (result.item(), expected)
print(f"torch rank {hvd.rank()}/{hvd.size()} allreduce={result.item()}", flush=True)
