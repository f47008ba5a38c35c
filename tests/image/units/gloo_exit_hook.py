"""A process of one rank over Gloo: the image's exit hook (site-packages/trainstack_gloo_exit.py) is loaded, finds the
group's worker threads by the name this torch gives them, and lets the process exit once they sleep."""
import tempfile

import torch
import torch.distributed as dist
import trainstack_gloo_exit

with tempfile.TemporaryDirectory() as store:
    dist.init_process_group("gloo", init_method=f"file://{store}/store", rank=0, world_size=1)
    dist.all_reduce(torch.ones(1))
    print("gloo workers", len(trainstack_gloo_exit.gloo_worker_states()), flush=True)
    print(f"waited {trainstack_gloo_exit.wait_for_gloo_workers():.3f} s", flush=True)
    dist.destroy_process_group()
