"""The rank side of `trainrun selftest`, started by trainrun's own launchers:

    python -m trainrun.selftest.worker probe
    python -m trainrun.selftest.worker allreduce torch|horovod-torch|horovod-tensorflow|mpi4py cpu|cuda SIZE,...
    python -m trainrun.selftest.worker ray-train cpu|cuda      (a Ray driver, under trainrun ray)

`probe` (one rank per host) reports the GPUs nvidia-smi lists and each installed framework sees, and runs one
training step of a small model under torch.compile and in eager mode. `allreduce` sums a float32 buffer of
each size across the job's ranks: once to check the sum element by element, then timed (`mpi4py`, MPI's own
Allreduce on the same torch buffers, is benchmarks/allreduce_cpu.py's floor for Horovod over MPI). Every result is one
short line on stdout, `trainrun-selftest {json}`, which the driver reads from the job's output (short lines:
launchers relay and tag the output line by line). `ray-train` is a Ray driver: Ray Train's TorchTrainer with
RAY_TRAIN_WORKERS workers, each summing the same pattern across the workers, the sum checked on every worker.
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import socket
import sys
import time
from typing import Any

from ..engines.slurm import home_cache
from ..machine import gpu_count
from .report import MARKER

# Timed allreduces per size: nccl-tests' default 20 (-n 20) for small sizes, fewer as the buffer grows, so that
# a sweep to 1 GiB takes seconds (at least 2 for the largest).
MAX_ITERATIONS = 20
MIN_ITERATIONS = 2
ITERATION_BYTES = 256 << 20
# The same pattern on every rank, offset by its rank: rank r holds PATTERN[i % 3] + r + 1, so each element of
# the sum over n ranks is n * PATTERN[i % 3] + n(n+1)/2, exact in float32 for any rank count trainrun starts.
PATTERN = (0.0, 1.0, 2.0)
RAY_TRAIN_WORKERS = 2
RAY_TRAIN_ELEMENTS = 1024


def emit(record: dict[str, Any]) -> None:
    # One write of the whole line: under torchrun's `python -u` a print() is two (the text, then the newline), and
    # two ranks' records on their shared pipe came out as one line that no longer parses.
    sys.stdout.write(MARKER + json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def iterations(size: int) -> int:
    return max(MIN_ITERATIONS, min(MAX_ITERATIONS, ITERATION_BYTES // size))


def expected_offset(ranks: int) -> int:
    return ranks * (ranks + 1) // 2


def _import(name: str) -> tuple[Any, str | None]:
    """The module, or None and why not ("not installed" when its package is absent)."""
    if importlib.util.find_spec(name.split(".")[0]) is None:
        return None, "not installed"
    try:
        return importlib.import_module(name), None
    except Exception as err:  # an installed framework that fails to import is a finding, whatever it raises
        return None, f"{type(err).__name__}: {err}".splitlines()[0]


def probe() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    host = socket.gethostname()
    gpus: dict[str, int] = {"nvidia-smi": gpu_count()}
    frameworks: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    torch, why = _import("torch")
    if torch is not None:
        frameworks["torch"] = torch.__version__
        gpus["torch"] = torch.cuda.device_count()
    elif why != "not installed":
        errors["torch"] = why
    tf, why = _import("tensorflow")
    if tf is not None:
        frameworks["tensorflow"] = tf.__version__
        gpus["tensorflow"] = len(tf.config.list_physical_devices("GPU"))
    elif why != "not installed":
        errors["tensorflow"] = why
    for name, needs in (("horovod.torch", torch), ("horovod.tensorflow", tf)):
        if needs is None:
            continue
        module, why = _import(name)
        if module is not None:
            frameworks[name] = importlib.import_module("horovod").__version__
        elif why != "not installed":
            errors[name] = why
    if importlib.util.find_spec("ray") is not None:
        from importlib import metadata

        frameworks["ray"] = metadata.version("ray")
    emit({"kind": "probe", "host": host, "gpus": gpus, "frameworks": frameworks, "errors": errors})
    if torch is not None:
        emit({"kind": "compile", "host": host, **compile_step(torch, "cuda" if gpus["torch"] else "cpu")})


def compile_step(torch: Any, device: str) -> dict[str, Any]:
    """One SGD step of the same small model in eager mode and under torch.compile(fullgraph=True): the losses
    and the updated weights must agree."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    twin = copy.deepcopy(eager)
    inputs, target = torch.randn(16, 32, device=device), torch.randn(16, 8, device=device)

    def step(model: Any) -> tuple[Any, float]:
        started = time.perf_counter()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = torch.nn.functional.mse_loss(model(inputs), target)
        loss.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        return loss.detach(), time.perf_counter() - started

    eager_loss, eager_seconds = step(eager)
    try:
        compiled_loss, compiled_seconds = step(torch.compile(twin, fullgraph=True))
    except Exception as err:  # Inductor's errors (a missing compiler, a Triton failure) are what this finds
        return {"device": device, "ok": False, "error": f"{type(err).__name__}: {err}".splitlines()[0]}
    pairs = [(eager_loss, compiled_loss), *zip(eager.parameters(), twin.parameters())]
    difference = max(float((a.detach() - b.detach()).abs().max()) for a, b in pairs)
    same = all(torch.allclose(a.detach(), b.detach(), rtol=1e-4, atol=1e-5) for a, b in pairs)
    return {"device": device, "ok": same, "max_abs_diff": difference, "eager_seconds": round(eager_seconds, 4),
            "compiled_seconds": round(compiled_seconds, 4)}


class TorchDistributed:
    """torch.distributed over NCCL (cuda) or Gloo (cpu), in the env:// rendezvous every launcher gives."""

    def __init__(self, device: str) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        if device == "cuda":
            self.device = torch.device("cuda", _local_gpu(torch.cuda.device_count()))
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", device_id=self.device)
            self.transport = "nccl"
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo")
            self.transport = "gloo"
        self.rank, self.ranks = dist.get_rank(), dist.get_world_size()

    def allreduce(self, buffer: Any) -> Any:
        self.dist.all_reduce(buffer)
        return buffer

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self.dist.destroy_process_group()


class HorovodTorch:
    def __init__(self, device: str) -> None:
        import horovod.torch as hvd
        import torch

        self.torch, self.hvd = torch, hvd
        hvd.init()
        if device == "cuda":
            self.device = torch.device("cuda", _local_gpu(torch.cuda.device_count(), hvd.local_rank()))
            torch.cuda.set_device(self.device)
            self.transport = "nccl" if hvd.nccl_built() else "mpi" if hvd.mpi_enabled() else "gloo"
        else:
            self.device = torch.device("cpu")
            self.transport = "mpi" if hvd.mpi_enabled() else "gloo"
        self.rank, self.ranks = hvd.rank(), hvd.size()

    def allreduce(self, buffer: Any) -> Any:
        return self.hvd.allreduce_(buffer, op=self.hvd.Sum)

    def barrier(self) -> None:
        self.hvd.allreduce(self.torch.zeros(1, device=self.device), op=self.hvd.Sum)

    def close(self) -> None:
        self.hvd.shutdown()


class Mpi4py:
    """MPI_Allreduce in place on the memory of CPU torch tensors."""

    def __init__(self, device: str) -> None:
        import torch
        from mpi4py import MPI

        if device != "cpu":
            raise SystemExit("trainrun selftest: the mpi4py suite sums CPU buffers only")
        self.torch, self.mpi = torch, MPI
        self.device, self.transport = torch.device("cpu"), "mpi"
        self.rank, self.ranks = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()

    def allreduce(self, buffer: Any) -> Any:
        self.mpi.COMM_WORLD.Allreduce(self.mpi.IN_PLACE, buffer.numpy(), op=self.mpi.SUM)
        return buffer

    def barrier(self) -> None:
        self.mpi.COMM_WORLD.Barrier()

    def close(self) -> None:
        pass  # mpi4py finalizes MPI at exit


def _local_gpu(count: int, local_rank: int | None = None) -> int:
    local = int(os.environ.get("LOCAL_RANK", "0")) if local_rank is None else local_rank
    if local >= count:
        raise SystemExit(f"trainrun selftest: local rank {local} has no GPU (this host's torch sees {count}); "
                         "give each host as many slots as it has GPUs")
    return local


def torch_sweep(collective: TorchDistributed | HorovodTorch | Mpi4py, suite: str, sizes: list[int]) -> None:
    torch, host = collective.torch, socket.gethostname()
    for size in sizes:
        count = size // 4
        pattern = torch.tensor(PATTERN, device=collective.device).repeat((count + 2) // 3)[:count]
        summed = collective.allreduce(pattern + (collective.rank + 1))
        correct = bool(torch.equal(summed, pattern.mul_(collective.ranks).add_(expected_offset(collective.ranks))))
        del pattern, summed
        buffer = torch.zeros(count, device=collective.device)
        collective.allreduce(buffer)  # warm-up
        collective.barrier()
        if collective.device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(iterations(size)):
            collective.allreduce(buffer)
        if collective.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - started) / iterations(size)
        del buffer
        emit({"kind": "allreduce", "suite": suite, "transport": collective.transport, "host": host,
              "rank": collective.rank, "ranks": collective.ranks, "bytes": size, "seconds": seconds,
              "correct": correct})
    collective.close()


def tensorflow_sweep(device: str, suite: str, sizes: list[int]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    if device == "cuda":
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.set_visible_devices(gpus[_local_gpu(len(gpus), hvd.local_rank())], "GPU")
        transport, placement = ("nccl" if hvd.nccl_built() else "mpi"), "/GPU:0"
    else:
        transport, placement = ("mpi" if hvd.mpi_enabled() else "gloo"), "/CPU:0"
    rank, ranks, host = hvd.rank(), hvd.size(), socket.gethostname()
    with tf.device(placement):
        for size in sizes:
            count = size // 4
            pattern = tf.tile(tf.constant(PATTERN, tf.float32), [(count + 2) // 3])[:count]
            summed = hvd.allreduce(pattern + float(rank + 1), op=hvd.Sum)
            expected = pattern * float(ranks) + float(expected_offset(ranks))
            correct = bool(tf.reduce_all(tf.equal(summed, expected)).numpy())
            del pattern, summed, expected
            buffer = tf.zeros([count], tf.float32)
            hvd.allreduce(buffer, op=hvd.Sum)[:1].numpy()  # warm-up, waited for
            started = time.perf_counter()
            for _ in range(iterations(size)):
                summed = hvd.allreduce(buffer, op=hvd.Sum)
            summed[:1].numpy()  # the device's queue runs in order: the last allreduce done, all are
            seconds = (time.perf_counter() - started) / iterations(size)
            emit({"kind": "allreduce", "suite": suite, "transport": transport, "host": host, "rank": rank,
                  "ranks": ranks, "bytes": size, "seconds": seconds, "correct": correct})
    hvd.shutdown()


def ray_train_allreduce(config: dict[str, Any]) -> None:
    """A Ray Train worker: PATTERN offset by its rank, summed across the workers, checked on every one."""
    import tempfile

    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist

    context = ray.train.get_context()
    rank, ranks = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    values = torch.tensor([PATTERN[i % 3] + rank + 1 for i in range(RAY_TRAIN_ELEMENTS)], device=device)
    dist.all_reduce(values)
    expected = torch.tensor([ranks * PATTERN[i % 3] + expected_offset(ranks) for i in range(RAY_TRAIN_ELEMENTS)])
    every_rank_correct = torch.tensor([int(torch.equal(values.cpu(), expected))], device=device)
    dist.all_reduce(every_rank_correct, op=dist.ReduceOp.MIN)
    metrics = {"correct": bool(every_rank_correct.item()), "backend": dist.get_backend(), "ranks": ranks}
    # Ray Train keeps the metrics of a report that carries a checkpoint (Result.metrics is None without one).
    with tempfile.TemporaryDirectory() as folder:
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder) if rank == 0 else None)


def ray_train(device: str) -> None:
    """The driver of the Ray Train check: the TorchTrainer's fit against the cluster of RAY_ADDRESS, timed."""
    import shutil
    import tempfile

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ray.init()
    # Ray Train's storage must be a folder every node sees: the home folder's cache, which a cluster's nodes share.
    os.makedirs(home_cache(os.environ), exist_ok=True)
    storage = tempfile.mkdtemp(prefix="selftest-ray-", dir=home_cache(os.environ))
    record: dict[str, Any] = {"kind": "ray-train", "host": socket.gethostname(), "workers": RAY_TRAIN_WORKERS}
    started = time.perf_counter()
    try:
        result = TorchTrainer(ray_train_allreduce,
                              scaling_config=ScalingConfig(num_workers=RAY_TRAIN_WORKERS, use_gpu=device == "cuda"),
                              run_config=RunConfig(storage_path=storage)).fit()
        record |= {**result.metrics, "seconds": time.perf_counter() - started}
    except Exception as err:  # the check's finding, whatever Ray raises
        record["error"] = f"{type(err).__name__}: {err}".splitlines()[0]
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    emit(record)


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        probe()
        return 0
    if argv[:1] == ["ray-train"]:
        ray_train(argv[1])
        return 0
    _, suite, device, sizes_text = argv
    sizes = [int(size) for size in sizes_text.split(",")]
    if suite == "torch":
        torch_sweep(TorchDistributed(device), suite, sizes)
    elif suite == "horovod-torch":
        torch_sweep(HorovodTorch(device), suite, sizes)
    elif suite == "mpi4py":
        torch_sweep(Mpi4py(device), suite, sizes)
    else:
        tensorflow_sweep(device, suite, sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
