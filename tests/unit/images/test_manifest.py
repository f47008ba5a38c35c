import copy

import pytest

from trainstack.image.build_context import build_record
from trainstack.image.manifest import manifest_mismatches, parse_constraints, pip_check_problems
from trainstack.image.matrix import load_matrix
from trainstack.image.naming import content_tag

CPU_MANIFEST = {
    "flavor": "cpu",
    "python": "3.11.2",
    "os": {"id": "debian", "version_id": "12", "codename": "bookworm"},
    "packages": {"torch": "2.13.0+cpu", "tensorflow-cpu": "2.21.0", "horovod": "0.28.1", "pyspark": "4.3.0"},
    "libraries": {"openmpi": "4.1.4", "java": "17.0.17", "cuda": None, "cudnn": None, "nccl": None},
    "horovod": {
        "frameworks": ["TensorFlow", "PyTorch"],
        "controllers": ["MPI", "Gloo"],
        "tensor_operations": ["MPI", "Gloo"],
    },
}
CPU_CONSTRAINTS = """accelerate==1.15.0
cloudpickle==3.1.2
datasets==5.2.0
deepspeed==0.19.8
horovod==0.28.1
ipykernel==7.4.0
ipywidgets==8.1.9
jupyterlab==4.6.6
lightning==2.6.6
matplotlib==3.11.2
mlflow==3.17.2
mpi4py==4.1.2
nbclient==0.11.0
nbconvert==7.17.2
pandas==2.3.3
peft==0.21.2
psutil==7.2.2
pyarrow==25.0.1
pyspark==4.3.0
pytorch-lightning==2.6.6
safetensors==0.8.0
scikit-learn==1.9.1
spark-tensorflow-distributor==1.0.0
tensorboard==2.20.0
tensorflow-cpu==2.21.0
tf_keras==2.21.0
tokenizers==0.23.3
torch==2.13.0+cpu
torchmetrics==1.9.0
transformers==5.23.0
"""


@pytest.fixture(scope="module")
def cpu():
    return load_matrix().flavor("cpu")


def test_matching_image_has_no_mismatches(cpu):
    assert manifest_mismatches(cpu, CPU_MANIFEST, parse_constraints(CPU_CONSTRAINTS)) == []


def test_a_manifest_with_its_build_record_still_matches(cpu):
    """The patches and rules write_manifest.py adds for release notes are fields the verification does not read."""
    manifest = {**CPU_MANIFEST, **build_record(cpu, load_matrix().rules)}
    assert manifest_mismatches(cpu, manifest, parse_constraints(CPU_CONSTRAINTS)) == []


def test_wrong_package_version_is_named(cpu):
    installed = parse_constraints(CPU_CONSTRAINTS.replace("torch==2.13.0+cpu", "torch==2.13.0"))
    assert manifest_mismatches(cpu, CPU_MANIFEST, installed) == ["torch is 2.13.0, matrix says 2.13.0+cpu"]


def test_missing_package_is_named(cpu):
    installed = parse_constraints(CPU_CONSTRAINTS.replace("tf_keras==2.21.0\n", ""))
    assert manifest_mismatches(cpu, CPU_MANIFEST, installed) == ["tf_keras is not installed, matrix says 2.21.0"]


def test_missing_deepspeed_is_named(cpu):
    installed = parse_constraints(CPU_CONSTRAINTS.replace("deepspeed==0.19.8\n", ""))
    assert manifest_mismatches(cpu, CPU_MANIFEST, installed) == ["deepspeed is not installed, matrix says 0.19.8"]


def test_a_package_the_matrix_lists_as_absent_is_named_when_installed(cpu):
    installed = parse_constraints(CPU_CONSTRAINTS + "torchvision==0.28.0\n")
    assert manifest_mismatches(cpu, CPU_MANIFEST, installed) == [
        "torchvision 0.28.0 is installed, but the matrix lists it as absent from cpu"]


def test_unbuilt_horovod_extension_is_named(cpu):
    manifest = copy.deepcopy(CPU_MANIFEST)
    manifest["horovod"]["frameworks"] = ["TensorFlow"]
    assert manifest_mismatches(cpu, manifest, parse_constraints(CPU_CONSTRAINTS)) == [
        "horovodrun --check-build does not show PyTorch under frameworks"
    ]


def test_wrong_java_and_python_are_named(cpu):
    manifest = copy.deepcopy(CPU_MANIFEST)
    manifest["python"] = "3.12.1"
    manifest["libraries"]["java"] = "21.0.2"
    assert manifest_mismatches(cpu, manifest, parse_constraints(CPU_CONSTRAINTS)) == [
        "python is 3.12.1, matrix says 3.11",
        "java is 21.0.2, matrix says 17",
    ]


def test_cuda_library_in_a_cpu_flavor_is_named(cpu):
    manifest = copy.deepcopy(CPU_MANIFEST)
    manifest["libraries"]["nccl"] = "2.27.5"
    assert manifest_mismatches(cpu, manifest, parse_constraints(CPU_CONSTRAINTS)) == [
        "nccl 2.27.5 is installed in a flavor without nccl"
    ]


def test_content_tag_says_what_is_inside():
    assert content_tag(CPU_MANIFEST) == "cpu-py3.11-torch2.13-tf2.21-hvd0.28.1"
    gpu = copy.deepcopy(CPU_MANIFEST)
    gpu.update(flavor="gpu-cu13", packages={"torch": "2.13.0", "horovod": "0.28.1"})
    gpu["libraries"]["cuda"] = "13.0.96"
    assert content_tag(gpu) == "gpu-cu13-cuda13.0-py3.11-torch2.13-hvd0.28.1"


def test_pip_check_tolerates_only_no_deps_packages(cpu):
    output = (
        "tf-keras 2.21.0 requires tensorflow, which is not installed.\n"
        "horovod 0.28.1 requires cloudpickle, which is not installed.\n"
    )
    assert pip_check_problems(cpu, output) == ["pip check: horovod 0.28.1 requires cloudpickle, which is not installed."]
    assert pip_check_problems(cpu, "No broken requirements found.\n") == []
