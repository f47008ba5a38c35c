"""torch.compile(fullgraph=True) with Inductor on CPU, against eager mode: a function, and a model's forward, backward
and optimizer step. Prints one JSON line: where Inductor kept its cache and how many compiled modules it holds."""
import json
import pathlib

import torch
import torch.nn.functional as F
from torch._inductor.runtime.cache_dir_utils import cache_dir

from compile_reference import LEARNING_RATE, TOLERANCE, make_model, rank_batch, weights


def function(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * torch.cos(y) + (x * y).sum(dim=-1, keepdim=True).relu()


x, y = torch.randn(64, 16), torch.randn(64, 16)
torch.testing.assert_close(torch.compile(function, fullgraph=True)(x, y), function(x, y), **TOLERANCE)

eager, compiled_model = make_model(), make_model()
compiled = torch.compile(compiled_model, fullgraph=True)
eager_optimizer = torch.optim.SGD(eager.parameters(), lr=LEARNING_RATE)
compiled_optimizer = torch.optim.SGD(compiled_model.parameters(), lr=LEARNING_RATE)
inputs, targets = rank_batch(0)
outputs = []
for model, optimizer in ((eager, eager_optimizer), (compiled, compiled_optimizer)):
    optimizer.zero_grad()
    outputs.append(model(inputs))
    F.mse_loss(outputs[-1], targets).backward()
torch.testing.assert_close(outputs[1].detach(), outputs[0].detach(), **TOLERANCE)
for compiled_parameter, eager_parameter in zip(compiled_model.parameters(), eager.parameters()):
    torch.testing.assert_close(compiled_parameter.grad, eager_parameter.grad, **TOLERANCE)
eager_optimizer.step()
compiled_optimizer.step()
torch.testing.assert_close(weights(compiled_model), weights(eager), **TOLERANCE)

# Inductor's C++ kernels, built by g++ and loaded from its cache: none there would mean nothing was compiled.
shared_objects = [str(path) for path in pathlib.Path(cache_dir()).rglob("*.so")]
assert shared_objects, f"Inductor's cache {cache_dir()} holds no compiled module"
print(json.dumps({"compiled_matches_eager": True, "inductor_cache": cache_dir(), "shared_objects": len(shared_objects)}))
