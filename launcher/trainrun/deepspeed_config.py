"""The DeepSpeed config a job names, checked before any rank starts: what DeepSpeed 0.19.8 would only reject in
every rank, after the launch (deepspeed.runtime.config.DeepSpeedConfig, in deepspeed.initialize), and that is cheap
to check here without DeepSpeed or torch. `trainrun torch ... --deepspeed_config ds.json` checks it in the planner;
the image's patched PySpark DeepspeedTorchDistributor calls check_deepspeed_config before its ranks start.

What is checked: the file is JSON (DeepSpeed reads it with hjson, a superset: where hjson is installed, a file it
reads passes) with no key twice; the top level is an object; no block DeepSpeed 0.19.8 has removed (it raises on
them); zero_optimization.stage is an int from 0 to 3; fp16 and bf16 are not both enabled; the batch sizes are
positive ints and, with the world size known, train_batch_size = train_micro_batch_size_per_gpu x
gradient_accumulation_steps x the data-parallel ranks (all ranks, unless the config names pipeline, tensor or
sequence parallelism: then any divisor of the world size). HF Trainer's "auto" values are left to the Trainer."""
from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from typing import Any

from .errors import TrainrunError, shown

DICT_SOURCE = "deepspeedConfig"
AUTO = "auto"  # Hugging Face's Trainer fills these in before DeepSpeed reads the config
MAX_ZERO_STAGE = 3
BATCH_FIELDS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
# Blocks whose data-parallel size is not the world size (DeepSpeed then divides by the mpu's data-parallel size).
MODEL_PARALLEL_FIELDS = ("pipeline", "tensor_parallel", "sequence_parallel_size")
# deepspeed.runtime.config._REMOVED_TOP_LEVEL_CONFIG_KEYS and _REMOVED_ZERO_CONFIG_KEYS of 0.19.8: DeepSpeedConfig
# raises on them in every rank (tests/image/test_deepspeed_launch.py pins these to the installed DeepSpeed's).
REMOVED_FIELDS = ("nebula", "compression_training", "amp", "quantize_training", "sparse_gradients", "eigenvalue",
                  "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning",
                  "progressive_layer_drop")
REMOVED_ZERO_FIELDS = ("mics_shard_size", "mics_hierarchical_params_gather", "zeropp_loco_param")


class DeepSpeedConfigError(TrainrunError):
    """A DeepSpeed config that DeepSpeed would reject in every rank: one line naming the file (or deepspeedConfig
    for a dict), the field, its value and what is valid."""

    def __init__(self, source: str, field: str | None, value: object, rule: str, *, valid: str) -> None:
        problem = f"{rule} (valid: {valid})" if field is None else f"{field} = {shown(value)}: {rule} (valid: {valid})"
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.field = field
        self.value = value


def check_deepspeed_config(config: str | os.PathLike | Mapping, *, world_size: int | None = None) -> dict:
    """The config as a dict (a path is read; a dict is copied), or DeepSpeedConfigError naming the field.
    `world_size`: the ranks of the job, when known (the batch sizes are checked against it)."""
    if isinstance(config, Mapping):
        source, settings = DICT_SOURCE, dict(config)
    else:
        source, settings = _read(config)
    _check_settings(source, settings, world_size)
    return settings


def describe(settings: dict) -> str:
    """The facts of a checked config a plan shows: its ZeRO stage and batch sizes."""
    zero = settings.get("zero_optimization")
    stage = zero.get("stage", 0) if isinstance(zero, dict) else int(bool(zero))
    batch = ", ".join(f"{field} {settings[field]}" for field in BATCH_FIELDS if field in settings)
    return f"ZeRO stage {stage}" + (f", {batch}" if batch else "")


def deepspeed_config_in_args(args: list[str] | tuple[str, ...]) -> str | None:
    """The path a training script's arguments give DeepSpeed (deepspeed.add_config_arguments): --deepspeed_config
    PATH, --deepspeed_config=PATH or --deepspeed-config; the last one wins, as with argparse. None without one."""
    found = None
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name in ("--deepspeed_config", "--deepspeed-config"):
            if equals:
                found = value
            elif index + 1 < len(args):
                found = args[index + 1]
    return found


def _read(path: str | os.PathLike) -> tuple[str, dict]:
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        decoded = _base64_config(source)  # DeepSpeed also takes a config as base64 where no such file is
        if decoded is not None:
            return "deepspeed_config (base64)", decoded
        raise DeepSpeedConfigError(source, None, source, "is not a file",
                                   valid="the path of a DeepSpeed JSON config, absolute or relative to "
                                         f"{os.getcwd()}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DeepSpeedConfigError(source, None, source, f"cannot be read ({err.__class__.__name__})",
                                   valid="a readable UTF-8 JSON file") from None
    return source, _parse(source, text)


def _base64_config(text: str) -> dict | None:
    try:
        settings = json.loads(base64.urlsafe_b64decode(text.encode()).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    return settings if isinstance(settings, dict) else None


def _no_duplicates(source: str):
    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict:
        settings: dict = {}
        for key, value in pairs:
            if key in settings:
                raise DeepSpeedConfigError(source, key, value, "is set twice (DeepSpeed rejects duplicate keys)",
                                           valid="each key once per object")
            settings[key] = value
        return settings
    return pairs_to_dict


def _parse(source: str, text: str) -> dict:
    try:
        settings = json.loads(text, object_pairs_hook=_no_duplicates(source))
    except json.JSONDecodeError as err:
        settings = _hjson(source, text)
        if settings is None:
            lines = text.splitlines()
            where = lines[err.lineno - 1].strip() if err.lineno <= len(lines) else "(the end of the file)"
            raise DeepSpeedConfigError(source, f"line {err.lineno} column {err.colno}", where,
                                       f"is not valid JSON ({err.msg})", valid="a JSON object") from None
    if not isinstance(settings, dict):
        raise DeepSpeedConfigError(source, "the top level", settings, "is not an object",
                                   valid='a JSON object, e.g. {"train_batch_size": 32}')
    return settings


def _hjson(source: str, text: str) -> dict | None:
    """What DeepSpeed's own reader (hjson, with its comments and unquoted keys) makes of text that is not JSON;
    None where hjson is not installed or rejects it too."""
    try:
        import hjson
    except ImportError:
        return None
    try:
        settings = hjson.loads(text, object_pairs_hook=_no_duplicates(source))
    except hjson.HjsonDecodeError:
        return None
    return settings if isinstance(settings, dict) else None


def _check_settings(source: str, settings: dict, world_size: int | None) -> None:
    for field in REMOVED_FIELDS:
        if field in settings:
            raise DeepSpeedConfigError(source, field, settings[field], "was removed from DeepSpeed (it raises on it)",
                                       valid="a config without it; see https://github.com/deepspeedai/DeepSpeed/"
                                             "issues/8489")
    _check_zero(source, settings.get("zero_optimization"))
    _check_precision(source, settings)
    _check_batch(source, settings, world_size)


def _check_zero(source: str, zero: object) -> None:
    if zero is None or isinstance(zero, bool):  # absent, or the deprecated `"zero_optimization": true`
        return
    if not isinstance(zero, dict):
        raise DeepSpeedConfigError(source, "zero_optimization", zero, "is not an object",
                                   valid='an object such as {"stage": 2}')
    for field in REMOVED_ZERO_FIELDS:
        if field in zero:
            raise DeepSpeedConfigError(source, f"zero_optimization.{field}", zero[field],
                                       "was removed from DeepSpeed (it raises on it)", valid="a config without it")
    stage = zero.get("stage", 0)
    if not _is_int(stage) or not 0 <= stage <= MAX_ZERO_STAGE:
        raise DeepSpeedConfigError(source, "zero_optimization.stage", stage,
                                   "is not a ZeRO stage" if _is_int(stage) else "is not an integer",
                                   valid="the integer 0, 1, 2 or 3")


def _enabled(settings: dict, *names: str) -> bool:
    return any(isinstance(settings.get(name), dict) and settings[name].get("enabled") is True for name in names)


def _check_precision(source: str, settings: dict) -> None:
    if _enabled(settings, "fp16") and _enabled(settings, "bf16", "bfloat16"):
        raise DeepSpeedConfigError(source, "fp16.enabled", True, "is set together with bf16.enabled",
                                   valid="at most one of fp16 and bf16 enabled")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_batch(source: str, settings: dict, world_size: int | None) -> None:
    given = {}
    for field in BATCH_FIELDS:
        value = settings.get(field)
        if value is None or value == AUTO:
            continue
        if not _is_int(value) or value < 1:
            raise DeepSpeedConfigError(source, field, value, "is not a positive integer",
                                       valid=f"an integer >= 1{' or auto (Hugging Face Trainer)' if value else ''}")
        given[field] = value
    if all(settings.get(field) is None for field in BATCH_FIELDS[:2]):
        raise DeepSpeedConfigError(source, "train_batch_size", None, "is missing, and so is "
                                   "train_micro_batch_size_per_gpu", valid="either or both of them set")
    if world_size is None or "train_batch_size" not in given or any(settings.get(f) == AUTO for f in BATCH_FIELDS):
        return  # a micro batch alone (with its accumulation steps) fits any world size
    model_parallel = any(field in settings for field in MODEL_PARALLEL_FIELDS)
    data_parallel = [size for size in range(1, world_size + 1) if world_size % size == 0] if model_parallel \
        else [world_size]
    if not any(_consistent(given, size) for size in data_parallel):
        raise _batch_problem(source, given, world_size, data_parallel)


def _derived(given: dict, data_parallel: int) -> tuple[int, int, int]:
    """train_batch_size, micro batch and accumulation steps as DeepSpeedConfig._set_batch_related_parameters
    fills in the missing ones (with integer division), train_batch_size given."""
    train, micro, steps = (given.get(field) for field in BATCH_FIELDS)
    if micro is None:
        steps = steps or 1
        micro = train // data_parallel // steps
    elif steps is None:
        steps = train // micro // data_parallel
    return train, micro, steps


def _consistent(given: dict, data_parallel: int) -> bool:
    train, micro, steps = _derived(given, data_parallel)
    return micro > 0 and steps > 0 and train == micro * steps * data_parallel


def _batch_problem(source: str, given: dict, world_size: int, data_parallel: list[int]) -> DeepSpeedConfigError:
    ranks = f"{world_size} rank{'s' if world_size != 1 else ''}"
    parallel = f"the data-parallel ranks (a divisor of {ranks})" if len(data_parallel) > 1 else ranks
    train, micro, steps = (given.get(field) for field in BATCH_FIELDS)
    micro_text = f"train_micro_batch_size_per_gpu ({micro})" if micro else "train_micro_batch_size_per_gpu"
    steps_text = f"gradient_accumulation_steps ({steps})" if steps else "gradient_accumulation_steps"
    if micro and steps:
        valid = " or ".join(str(micro * steps * size) for size in data_parallel)
    else:
        known = (micro or 1) * (steps or 1)
        valid = f"a multiple of {known * data_parallel[-1] if len(data_parallel) == 1 else known}"
    return DeepSpeedConfigError(source, "train_batch_size", train,
                                f"is not {micro_text} x {steps_text} x {parallel}", valid=valid)
