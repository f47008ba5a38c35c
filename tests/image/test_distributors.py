"""PySpark's TorchDistributor and DeepspeedTorchDistributor in the image, as the image patches them
(images/patches/pyspark-4.3.0-*): `run(fn)` returns rank 0's value, as PySpark documents (unpatched, in local mode
every torchrun process wrote the output file and the last writer won: rank 1), and GPUs a distributor cannot have
are refused in one line naming the setting."""
import json
import re

import pytest

SUMMARY = "distributors "


def run_case(in_image, case: str) -> dict:
    output = in_image.run(["python", "/units/distributors.py", case], timeout=600)
    lines = [line for line in output.splitlines() if line.startswith(SUMMARY)]
    assert lines, output[-3000:]
    return {**json.loads(lines[-1][len(SUMMARY):]), "output": output}


def has_deepspeed(in_image) -> bool:
    status, _ = in_image.run_status(["python", "-c", "import deepspeed"], timeout=120)
    return status == 0


def test_torch_distributor_in_local_mode_returns_rank_0s_value(in_image):
    result = run_case(in_image, "torch-local")
    assert result["returned"] == [0, 0], result["output"][-3000:]
    assert "rank 1 of 2 returns 1" in result["output"], result["output"][-3000:]


def test_ranks_printing_at_once_keep_their_lines_whole(in_image):
    """In local mode the ranks share the distributor's pipe; unbuffered (pyspark-4.3.0-unbuffered-ranks.patch), each
    piece of a print was a write of its own, and two ranks' lines tore (images/site-packages/
    trainstack_line_buffered.py joins them)."""
    result = run_case(in_image, "torch-local-lines")
    probes = [line for line in result["output"].splitlines() if "lines-probe" in line]
    torn = [line for line in probes if not re.fullmatch(r"lines-probe rank [01] step \d+ loss 0\.25", line)]
    assert (len(probes), torn[:5]) == (2 * result["lines_per_rank"], []), result["output"][-3000:]


def test_torch_distributor_on_barrier_tasks_returns_rank_0s_value(in_image):
    """Its rendezvous port is below the ephemeral range, where no connection's source port can take it before
    torchrun binds it (pyspark-4.3.0-rendezvous-port-below-ephemeral.patch)."""
    result = run_case(in_image, "torch-barrier")
    assert result["returned"] == [0], result["output"][-3000:]
    ports = {int(port) for port in re.findall(r"returns \d \(rendezvous port (\d+)\)", result["output"])}
    (port,) = ports
    assert port < result["ephemeral_range"][0], (port, result["ephemeral_range"])


def test_a_training_script_that_fails_raises_as_a_function_does(in_image):
    """Unpatched, the torchrun wrapper ended 0 whatever torchrun did, so run("train.py") returned None when every
    rank exited 3."""
    result = run_case(in_image, "torch-failing-script")
    assert result["raised"] is not None and "failed with return code" in result["raised"], result


def test_deepspeed_distributor_returns_rank_0s_value(in_image):
    if not has_deepspeed(in_image):
        pytest.skip("DeepSpeed is not in this image")
    result = run_case(in_image, "deepspeed-local")
    assert result["returned"] == [0, 0], result["output"][-3000:]
    assert "deepspeed rank 1 returns 1" in result["output"], result["output"][-3000:]


def test_gpus_a_distributor_cannot_have_are_refused_in_one_line(in_image):
    result = run_case(in_image, "deepspeed-gpu-refusals")
    local = result["local_without_gpus"]
    assert local.startswith("RuntimeError: DeepspeedTorchDistributor(useGpu=True, localMode=True): the driver has "
                            "no GPUs (spark.driver.resource.gpu.amount is unset); valid: useGpu=False"), local
    for case, call in [("fractional_task_gpus", "DeepspeedTorchDistributor(useGpu=True, localMode=False)"),
                       ("torch_fractional_task_gpus", "TorchDistributor(use_gpu=True, local_mode=False)")]:
        message = result[case]
        assert message.startswith(f"RuntimeError: {call}: spark.task.resource.gpu.amount is 0.5; "), message
        assert "needs whole GPUs per task; valid: a whole number >= 1" in message, message
    assert all("\n" not in result[case] for case in ("local_without_gpus", "fractional_task_gpus")), result


def test_deepspeed_distributor_refuses_a_bad_config_before_any_rank_starts(in_image):
    """The distributor calls trainrun.deepspeed_config.check_deepspeed_config in its constructor: a TrainrunError of
    one line, and no torchrun started."""
    status, _ = in_image.run_status(["python", "-c", "import trainrun.deepspeed_config"], timeout=120)
    if status != 0:
        pytest.skip("trainrun.deepspeed_config is not in this image")
    result = run_case(in_image, "deepspeed-bad-config")
    assert result["refused"] != "not refused" and "\n" not in result["refused"], result["refused"]
    assert "stage" in result["refused"] and "4" in result["refused"], result["refused"]
    assert "torch.distributed.run" not in result["output"], result["output"][-3000:]
