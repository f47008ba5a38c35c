"""The frameworks load and run together inside the image, as its user would run them."""
import pytest
from notebook_checks import no_traceback
from packaging.version import Version


def skip_without_tensorflow(flavor) -> None:
    if "tensorflow" not in flavor.components:
        pytest.skip(f"the {flavor.name} flavor has no TensorFlow (images/matrix.yaml)")


def test_frameworks_import_together(in_image, image_flavor):
    frameworks = ["torch", "pyspark", "horovod.torch"]
    if "tensorflow" in image_flavor.components:
        frameworks += ["tensorflow", "horovod.tensorflow"]
    output = in_image.run(["python", "-c",
        f"import {', '.join(frameworks)}; print(torch.__version__, pyspark.__version__,"
        " tensorflow.__version__ if 'tensorflow' in globals() else '-')"])
    torch, pyspark, tensorflow = output.splitlines()[-1].split()
    # A CUDA torch reports its local label (2.10.0+cu128), which the matrix leaves to the flavor's CUDA.
    assert Version(torch).public == Version(image_flavor.version("torch")).public, output
    assert (pyspark, tensorflow) == (image_flavor.version("pyspark"), image_flavor.version("tensorflow") or "-"), output


def test_torchvision_runs_where_the_flavor_holds_it_and_says_why_where_absent(in_image, image_flavor):
    absent = {entry["package"]: entry for entry in image_flavor.absent}
    if "torchvision" in absent:
        output = in_image.run(["python", "-c", "import torchvision"], expect=1)
        entry = absent["torchvision"]
        assert (f"ModuleNotFoundError: No module named 'torchvision': the trainstack {image_flavor.name} image has "
                f"none. {entry['reason']} Instead: {entry['instead']}") in output, output
        return
    # nms is the compiled operator that a torchvision built for another torch lacks.
    output = in_image.run(["python", "-c",
        "import torch, torchvision; boxes = torch.tensor([[0., 0., 2., 2.], [0., 0., 2., 1.9]]);"
        "print(torchvision.__version__, torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist())"])
    version, kept = output.splitlines()[-1].split(" ", 1)
    assert (Version(version).public, kept) == (image_flavor.version("torchvision"), "[0]"), output


@pytest.mark.parametrize(
    ("launcher", "unit", "framework"),
    [
        (["mpirun", "-np", "2"], "hvd_allreduce_torch.py", "torch"),
        (["mpirun", "-np", "2"], "hvd_allreduce_tf.py", "tf"),
        (["horovodrun", "-np", "2", "--gloo"], "hvd_allreduce_torch.py", "torch"),
    ],
    ids=["torch-mpirun", "tensorflow-mpirun", "torch-horovod-gloo"],
)
def test_horovod_two_rank_allreduce(in_image, image_flavor, launcher, unit, framework):
    if framework == "tf":
        skip_without_tensorflow(image_flavor)
    output = in_image.run([*launcher, "python", f"/units/{unit}"])
    assert f"{framework} rank 0/2 allreduce=3.0" in output
    assert f"{framework} rank 1/2 allreduce=3.0" in output


def test_torchrun_ddp_step_over_gloo(in_image):
    output = in_image.run(["torchrun", "--nproc-per-node", "2", "/units/ddp_step.py"])
    assert "ddp rank 0/2 local_rank 0 in sync" in output
    assert "ddp rank 1/2 local_rank 1 in sync" in output


def test_pyspark_local_job(in_image):
    assert "spark 4.3.0 ok" in in_image.run(["python", "/units/spark_job.py"])


def test_a_python_worker_whose_reader_stopped_ends_without_a_traceback(in_image):
    """first(), take() and show() stop reading a Python worker's output; unpatched, PySpark's daemon printed a
    BrokenPipeError traceback for each (three here), in a run that succeeded."""
    output = in_image.run(["python", "/units/spark_closed_reader.py"], timeout=300)
    assert "closed reader ok: 3000 rows" in output, output[-3000:]
    assert no_traceback(output) == [], output[-3000:]


def test_java_17(in_image):
    assert 'version "17.' in in_image.run(["java", "-version"])


@pytest.mark.parametrize("keras", ["3", "2"])
def test_horovod_keras_apis(in_image, image_flavor, keras):
    """SyncBatchNormalization, PartialDistributedGradientTape, broadcast_variables, DistributedOptimizer
    options, the LR warm-up callback, checkpoints and elastic KerasState under Keras 3 and Keras 2."""
    skip_without_tensorflow(image_flavor)
    output = in_image.run(["mpirun", "-np", "2", "-x", "TF_USE_LEGACY_KERAS", "python", "/units/hvd_keras_apis.py"],
                          env={"TF_USE_LEGACY_KERAS": "1" if keras == "2" else "0"})
    assert f"keras{keras} rank 0 all ok" in output
    assert f"keras{keras} rank 1 all ok" in output


@pytest.mark.long  # about a minute; the patch's unit test and the estimators in CI stay (test_estimator_predictions)
def test_estimator_script_without_main_guard_trains(in_image):
    """A notebook's TorchEstimator cell pasted into a script, with no __main__ guard, over MPI: Horovod's
    spawned helper processes re-ran the script and its MPI probe failed ("horovod does not find an
    installed MPI") before horovod-0.28.1-script-without-main-guard.patch."""
    output = in_image.run(["python", "/units/unguarded_estimator.py"], timeout=300)
    assert "unguarded estimator trained: 1 epoch" in output
    assert "does not find an installed MPI" not in output
