"""DeepSpeed's CPU optimizers (ZeRO-Offload's) take steps that match torch's, from the image's prebuilt ops; prints a
JSON line with the accelerator, each op's file, the largest difference to torch's optimizer, and whether anything
was JIT-built into TORCH_EXTENSIONS_DIR."""
import json
import os

import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
from deepspeed.ops.adam import DeepSpeedCPUAdam


def steps(optimizer_class, parameter, **options):
    optimizer = optimizer_class([parameter], **options)
    for _ in range(3):
        optimizer.zero_grad()
        (parameter ** 2).sum().backward()
        optimizer.step()
    return optimizer


torch.manual_seed(0)
start = torch.randn(256, 64)
result = {"accelerator": get_accelerator()._name}
for name, ours, theirs, options, op_attribute in [
    ("cpu_adam", DeepSpeedCPUAdam, torch.optim.Adam, {"lr": 1e-2, "adamw_mode": False}, "ds_opt_adam"),
    ("cpu_adagrad", DeepSpeedCPUAdagrad, torch.optim.Adagrad, {"lr": 1e-2}, "ds_opt_adagrad"),
]:
    parameter, reference = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    optimizer = steps(ours, parameter, **options)
    steps(theirs, reference, **{key: value for key, value in options.items() if key != "adamw_mode"})
    parameter, reference = parameter.detach(), reference.detach()
    result[name] = {"op_file": getattr(optimizer, op_attribute).__file__,
                    "moved": float((parameter - start).abs().max()),
                    "max_difference": float((parameter - reference).abs().max())}
extensions = os.environ.get("TORCH_EXTENSIONS_DIR", "")
result["jit_built"] = sorted(os.listdir(extensions)) if extensions and os.path.isdir(extensions) else []
print(json.dumps(result))
