"""A job stopped mid-training resumes where it was, in the image, for the examples whose frameworks the host lacks:
Horovod's, Lightning's, DeepSpeed's and the Trainer's, and the train functions of HorovodRunner, trainrun.run,
TorchDistributor and spark-tensorflow-distributor (tests/image/units/resume_after_stop.py). The DDP example's restarts
are the integration tier's (tests/integration/test_resume.py)."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]


def test_the_horovod_example_stopped_by_sigterm_resumes_from_its_checkpoint(in_image, tmp_path) -> None:
    tmp_path.chmod(0o777)  # the image's user writes the checkpoints
    output = in_image.run(["python", "/units/resume_after_stop.py", "horovod-torch", "/work"], timeout=800,
                          volumes={str(tmp_path): {"bind": "/work", "mode": "rw"}})
    got = json.loads(next(line for line in reversed(output.splitlines()) if line.startswith('{"final_step"')))
    runs = ("unbroken", "stopped", "again")
    print(json.dumps({key: {k: v for k, v in got[key].items() if k != "tail"} for key in runs}))
    assert got["unbroken"]["code"] == 0
    assert got["stopped"]["code"] != 0 and got["stopped"]["saved"], got["stopped"]
    assert got["again"]["code"] == 0 and got["again"]["resumed_from"] == got["stopped"]["saved"][-1], got["again"]
    assert 10 <= got["again"]["resumed_from"] < got["final_step"], "the stop landed mid-training"
    assert abs(got["again"]["summary"]["accuracy"] - got["unbroken"]["summary"]["accuracy"]) <= 0.02, got


@pytest.mark.long  # about 45 s each: three fits; CI keeps the Horovod example's resume
@pytest.mark.parametrize("example", ["lightning", "deepspeed", "hf", "horovod-keras", "accelerate", "peft"])
def test_an_example_checkpointing_at_epochs_stopped_by_sigterm_resumes_from_its_last_epoch(in_image, tmp_path,
                                                                                         example) -> None:
    """Lightning's ModelCheckpoint, DeepSpeed's ZeRO checkpoints, the Trainer's checkpoint folders (the PEFT
    example's too), accelerate's saved state and the Horovod Keras example's: resumed at an epoch's end, the run sees
    every batch once, so it ends with the unbroken run's losses. For the Trainer, whose
    saves are not atomic, the stopped run's folder also gets a newer checkpoint cut off mid-save, which the example
    must pass over."""
    tmp_path.chmod(0o777)
    output = in_image.run(["python", "/units/resume_after_stop.py", example, "/work"], timeout=800,
                          volumes={str(tmp_path): {"bind": "/work", "mode": "rw"}})
    got = json.loads(next(line for line in reversed(output.splitlines()) if line.startswith('{"final_step"')))
    runs = ("unbroken", "stopped", "again")
    print(json.dumps({key: {k: v for k, v in got[key].items() if k != "tail"} for key in runs}))
    assert got["unbroken"]["code"] == 0, got["unbroken"]["tail"]
    assert got["stopped"]["code"] != 0 and got["stopped"]["saved"], got["stopped"]
    assert got["again"]["code"] == 0 and got["again"]["resumed_from"] == got["stopped"]["saved"][-1], got["again"]
    assert got["again"]["resumed_from"] % got["steps_per_epoch"] == 0
    assert got["again"]["resumed_from"] < got["final_step"], "the stop landed mid-training"
    unbroken, again = got["unbroken"]["summary"], got["again"]["summary"]
    if example == "horovod-keras":  # TensorFlow's CPU kernels and Horovod's fusion make no two runs equal
        assert len(again["losses"]) == len(unbroken["losses"]) and again["same_weights_on_every_rank"], again
    else:
        assert again["losses"] == pytest.approx(unbroken["losses"], rel=1e-4), (again["losses"], unbroken["losses"])
    assert abs(again["accuracy"] - unbroken["accuracy"]) <= 0.02, got


@pytest.mark.long  # three runs of a distributor's function each; about a minute each, two for TensorFlow's
@pytest.mark.parametrize("example", ["horovod-runner", "trainrun-run", "torch-distributor", "tf-distributor"])
def test_a_train_function_started_again_resumes_from_its_last_epoch(in_image, tmp_path, example) -> None:
    """The function forms, as Databricks and trainrun.run users write them: a run that ended an epoch early, started
    again with every epoch, resumes from its last checkpoint and ends with the unbroken run's losses and accuracy."""
    tmp_path.chmod(0o777)
    output = in_image.run(["python", "/units/resume_after_stop.py", example, "/work"], timeout=800,
                          volumes={str(tmp_path): {"bind": "/work", "mode": "rw"}})
    got = json.loads(next(line for line in reversed(output.splitlines()) if line.startswith('{"epochs"')))
    print(json.dumps({key: value for key, value in got.items() if key not in ("unbroken", "stopped", "again")}))
    for run in ("unbroken", "stopped", "again"):
        assert got[run]["code"] == 0, got[run]["tail"]
    unbroken, stopped, again = (got[run]["summary"] for run in ("unbroken", "stopped", "again"))
    assert len(stopped["losses"]) == got["epochs"] - 1 and len(again["losses"]) == got["epochs"], got["again"]["tail"]
    assert got["resumed_from"], got["again"]["tail"]  # the step at the end of the stopped run's last epoch
    assert again["losses"][:-1] == stopped["losses"], (again["losses"], stopped["losses"])
    if example == "tf-distributor":  # the resumed fit starts its dataset's shuffle again
        assert again["losses"][-1] < again["losses"][0]
    else:
        assert again["losses"] == pytest.approx(unbroken["losses"], rel=1e-4), (again["losses"], unbroken["losses"])
    assert abs(again["accuracy"] - unbroken["accuracy"]) <= 0.02, (again, unbroken)
