"""A job stopped mid-training resumes where it was, in the image, for the examples whose frameworks the host lacks:
Horovod's, Lightning's, DeepSpeed's and the Trainer's (tests/image/units/resume_after_stop.py). The DDP example's
restarts are the integration tier's (tests/integration/test_resume.py)."""
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
@pytest.mark.parametrize("example", ["lightning", "deepspeed", "hf", "horovod-keras"])
def test_an_example_checkpointing_at_epochs_stopped_by_sigterm_resumes_from_its_last_epoch(in_image, tmp_path,
                                                                                         example) -> None:
    """Lightning's ModelCheckpoint, DeepSpeed's ZeRO checkpoints, the Trainer's checkpoint folders and the Horovod
    Keras example's: resumed at an epoch's end, the run sees every batch once, so it ends with the unbroken run's
    losses. For the Trainer, whose
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
