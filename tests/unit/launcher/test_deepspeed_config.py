"""A DeepSpeed config DeepSpeed would reject in every rank is one line naming the file (or deepspeedConfig) and the
field, before any rank starts: check_deepspeed_config, and `trainrun torch ... --deepspeed_config` in the planner."""
from __future__ import annotations

import base64
import json

import pytest

from trainrun.deepspeed_config import DeepSpeedConfigError, check_deepspeed_config, deepspeed_config_in_args

GOOD = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 2}}

BAD = {
    "stage above 3": ({**GOOD, "zero_optimization": {"stage": 4}}, 2,
                      "deepspeedConfig: zero_optimization.stage = 4: is not a ZeRO stage (valid: the integer 0, 1, 2 "
                      "or 3)"),
    "stage as a string": ({**GOOD, "zero_optimization": {"stage": "2"}}, 2,
                          "deepspeedConfig: zero_optimization.stage = '2': is not an integer"),
    "stage as a bool": ({**GOOD, "zero_optimization": {"stage": True}}, 2, "zero_optimization.stage = True"),
    "zero not an object": ({**GOOD, "zero_optimization": 3}, 2, "zero_optimization = 3: is not an object"),
    "batch against the ranks": ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                 "gradient_accumulation_steps": 2}, 2,
                                "train_batch_size = 30: is not train_micro_batch_size_per_gpu (4) x "
                                "gradient_accumulation_steps (2) x 2 ranks (valid: 16)"),
    "batch not divisible by micro x ranks": ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 32}, 4,
                                             "x 4 ranks (valid: a multiple of 128)"),
    "batch below the ranks": ({"train_batch_size": 3}, 4, "train_batch_size = 3: "),
    "no batch size": ({"gradient_accumulation_steps": 2}, None, "train_batch_size = None: is missing"),
    "zero batch": ({"train_batch_size": 0}, None, "train_batch_size = 0: is not a positive integer"),
    "float batch": ({"train_micro_batch_size_per_gpu": 2.5}, None, "train_micro_batch_size_per_gpu = 2.5"),
    "fp16 and bf16": ({**GOOD, "fp16": {"enabled": True}, "bf16": {"enabled": True}}, 2,
                      "fp16.enabled = True: is set together with bf16.enabled"),
    "a removed block": ({**GOOD, "elasticity": {"enabled": True}}, 2, "elasticity = {'enabled': True}: was removed"),
    "a removed zero key": ({**GOOD, "zero_optimization": {"stage": 3, "mics_shard_size": 2}}, 2,
                           "zero_optimization.mics_shard_size = 2: was removed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_is_one_line_naming_the_field(case):
    config, world_size, expected = BAD[case]
    with pytest.raises(DeepSpeedConfigError) as raised:
        check_deepspeed_config(config, world_size=world_size)
    message = str(raised.value)
    assert expected in message and "\n" not in message and "(valid: " in message, message
    assert message.startswith("deepspeedConfig: ")


GOOD_CASES = {
    "all three": ({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 2),
    "batch and micro": (GOOD, 2),
    "batch alone": ({"train_batch_size": 8}, 2),
    "micro alone, any world": ({"train_micro_batch_size_per_gpu": 3}, 7),
    "unknown world": ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}, None),
    "Hugging Face auto": ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                           "zero_optimization": {"stage": 3}}, 2),
    "pipeline: a data-parallel divisor": ({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
                                           "gradient_accumulation_steps": 2, "pipeline": {}}, 2),
    "deprecated zero flag": ({"train_batch_size": 8, "zero_optimization": True}, 2),
    "stage 0 to 3": ({"train_batch_size": 8, "zero_optimization": {"stage": 3}}, 1),
}


@pytest.mark.parametrize("case", sorted(GOOD_CASES))
def test_good_config_comes_back_as_a_dict(case):
    config, world_size = GOOD_CASES[case]
    assert check_deepspeed_config(config, world_size=world_size) == config


def test_a_file_not_json_names_the_file_line_and_column(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__",  # as on a host without DeepSpeed's hjson
                        lambda name, *args, **kw: (_ for _ in ()).throw(ImportError(name)) if name == "hjson"
                        else real_import(name, *args, **kw))
    path = tmp_path / "ds.json"
    path.write_text('{\n  "train_batch_size": 16,\n  "zero_optimization": {"stage": 2}\n  "fp16": {}\n}\n')
    with pytest.raises(DeepSpeedConfigError) as raised:
        check_deepspeed_config(path)
    assert str(raised.value) == (f"{path}: line 4 column 3 = '\"fp16\": {{}}': is not valid JSON (Expecting ',' "
                                 "delimiter) (valid: a JSON object)")


def test_a_file_names_itself_and_a_key_set_twice(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 16, "zero_optimization": {"stage": 2, "stage": 5}}')
    with pytest.raises(DeepSpeedConfigError, match=rf"^{path}: stage = 5: is set twice"):
        check_deepspeed_config(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(DeepSpeedConfigError, match="the top level = \\[1, 2\\]: is not an object"):
        check_deepspeed_config(path)
    with pytest.raises(DeepSpeedConfigError, match=r"missing.json: is not a file \(valid: the path of a DeepSpeed"):
        check_deepspeed_config(tmp_path / "missing.json")


def test_a_good_file_and_deepspeeds_base64_form(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(GOOD))
    assert check_deepspeed_config(path, world_size=2) == GOOD
    assert check_deepspeed_config(base64.urlsafe_b64encode(json.dumps(GOOD).encode()).decode()) == GOOD


@pytest.mark.parametrize("args,found", [
    (["--deepspeed", "--deepspeed_config", "ds.json"], "ds.json"),
    (["--deepspeed_config=a.json", "--lr", "1"], "a.json"),
    (["--deepspeed-config", "b.json"], "b.json"),
    (["--deepspeed-config=b.json", "--deepspeed_config", "c.json"], "c.json"),
    (["--deepspeed"], None),
    (["--deepspeed_config"], None),
])
def test_the_config_is_found_in_the_scripts_arguments(args, found):
    assert deepspeed_config_in_args(args) == found


def test_trainrun_torch_checks_the_config_against_its_ranks_in_the_plan(plan_for, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(GOOD))
    plan = plan_for(["torch", "--nproc-per-node", "2", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"])
    assert plan.notes == ("DeepSpeed config ds.json checked: ZeRO stage 2, train_batch_size 64, "
                          "train_micro_batch_size_per_gpu 32",)
    assert "note: DeepSpeed config ds.json checked: ZeRO stage 2" in plan.to_text()
    with pytest.raises(DeepSpeedConfigError, match=r"^ds.json: train_batch_size = 64: .* x 4 ranks"):
        plan_for(["torch", "--dry-run", "--nproc-per-node", "2", "--nnodes", "2", "--master-addr", "n0", "train.py",
                  "--deepspeed_config=ds.json"])
    elastic = plan_for(["torch", "--dry-run", "--nproc-per-node", "2", "--nnodes", "1:3", "--rdzv-endpoint", "n0:29400",
                        "train.py", "--deepspeed_config=ds.json"])
    assert elastic.notes  # the world size varies: the batch sizes are not checked against it
    assert plan_for(["torch", "--nproc-per-node", "2", "train.py"]).notes == ()


def test_trainrun_torch_dry_run_says_the_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    from trainrun import cli
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    (tmp_path / "ds.json").write_text(json.dumps({**GOOD, "zero_optimization": {"stage": 4}}))
    code = cli.main(["torch", "--nproc-per-node", "2", "--dry-run", "train.py", "--deepspeed_config", "ds.json"])
    assert (code, capsys.readouterr().err) == (2, "trainrun: ds.json: zero_optimization.stage = 4: is not a ZeRO "
                                                  "stage (valid: the integer 0, 1, 2 or 3)\n")
