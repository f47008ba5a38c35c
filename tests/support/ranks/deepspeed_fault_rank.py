"""A DeepSpeed ZeRO-2 rank that trains until it is stopped, for the fault matrix's `deepspeed` backend
(tests/support/fault_harness.py): every rank reports to $REPORT_DIR as fault_rank.py does (`job-id`, `dirs-N`, and
`pid-N` once its first step is done), then steps on, so that the harness's SIGKILL of rank 1 lands mid-step while rank
0 waits in a collective. The config (ds_fault.json next to this file) is given as --deepspeed_config."""
import argparse
import os

import deepspeed
import torch

rank = int(os.environ["RANK"])
report_dir = os.environ["REPORT_DIR"]


def report(name: str, text: str) -> None:
    temporary = os.path.join(report_dir, f".{name}.{rank}.tmp")
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, os.path.join(report_dir, name))


report("job-id", os.environ.get("TRAINRUN_JOB_ID", ""))
report(f"dirs-{rank}", "\n".join(filter(None, (os.environ.get("TRAINRUN_STATUS_DIR"),
                                              os.environ.get("TRAINRUN_TASK_DIR")))))
args, _ = deepspeed.add_config_arguments(argparse.ArgumentParser()).parse_known_args()
deepspeed.init_distributed()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
inputs = torch.randn(engine.train_micro_batch_size_per_gpu(), 64)
step = 0
while True:
    engine.backward(engine(inputs).pow(2).mean())
    engine.step()
    step += 1
    if step == 1:
        report(f"pid-{rank}", str(os.getpid()))
        print(f"deepspeed rank {rank} stepping", flush=True)
