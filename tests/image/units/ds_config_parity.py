"""check_deepspeed_config against DeepSpeed's own DeepSpeedConfig, on one process (world size 1): for each case,
whether each rejects it, printed as one JSON line `parity {...}`; and the removed blocks trainrun knows against the
installed DeepSpeed's."""
import json

from deepspeed.runtime import config as ds_config

from trainrun.deepspeed_config import (REMOVED_FIELDS, REMOVED_ZERO_FIELDS, DeepSpeedConfigError,
                                       check_deepspeed_config)

BASE = {"train_batch_size": 8}
CASES = {
    "good": BASE,
    "stage 3": {**BASE, "zero_optimization": {"stage": 3}},
    "stage 4": {**BASE, "zero_optimization": {"stage": 4}},
    "stage -1": {**BASE, "zero_optimization": {"stage": -1}},
    "stage 2.5": {**BASE, "zero_optimization": {"stage": 2.5}},
    "stage as a word": {**BASE, "zero_optimization": {"stage": "two"}},
    # Stricter than DeepSpeed, which reads these as stages 2, 2 and 1 (pydantic's lax mode): refused on purpose.
    "stage as a string": {**BASE, "zero_optimization": {"stage": "2"}},
    "stage as a float": {**BASE, "zero_optimization": {"stage": 2.0}},
    "stage as a bool": {**BASE, "zero_optimization": {"stage": True}},
    "no batch size": {"gradient_accumulation_steps": 1},
    "batch 0": {"train_batch_size": 0},
    "batch != micro x steps": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 3,
                               "gradient_accumulation_steps": 2},
    "fp16 and bf16": {**BASE, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    "removed amp": {**BASE, "amp": {"enabled": True}},
    "removed mics": {**BASE, "zero_optimization": {"stage": 3, "mics_shard_size": 2}},
    "auto batch (Hugging Face)": {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1},
}


def rejects(check, errors: tuple[type[BaseException], ...]) -> bool:
    try:
        check()
    except errors:
        return True
    return False


# trainrun raises its one error only; DeepSpeed an AssertionError, ValueError, pydantic's ValidationError or its own.
report = {name: {"trainrun": rejects(lambda: check_deepspeed_config(case, world_size=1), (DeepSpeedConfigError,)),
                 "deepspeed": rejects(lambda: ds_config.DeepSpeedConfig(dict(case)), (Exception,))}
          for name, case in CASES.items()}
print("parity " + json.dumps(report), flush=True)
print("removed " + json.dumps({
    "top_level": sorted(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS) == sorted(REMOVED_FIELDS),
    "zero": sorted(ds_config._REMOVED_ZERO_CONFIG_KEYS) == sorted(REMOVED_ZERO_FIELDS)}), flush=True)
