import copy

import pytest

from trainstack.image.manifest import cuda_stack_mismatches, manifest_mismatches, nccl_version_code, parse_constraints
from trainstack.image.matrix import load_matrix

SITE = "/opt/venv/lib/python3.11/site-packages"
NCCL = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"
CUDART_13 = f"{SITE}/nvidia/cu13/lib/libcudart.so.13"
CUDNN_9 = f"{SITE}/nvidia/cudnn/lib/libcudnn.so.9"
CUBLAS_13 = f"{SITE}/nvidia/cu13/lib/libcublas.so.13"
TORCH_EXTENSION = "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so"

CU13_MANIFEST = {
    "flavor": "gpu-cu13",
    "python": "3.11.2",
    "packages": {"torch": "2.15.0", "horovod": "0.28.1", "pyspark": "4.3.0"},
    "libraries": {"openmpi": "4.1.4", "java": "17.0.17", "cuda": "13.2.86", "cudnn": "9.26.0.51", "nccl": "2.30.7"},
    "horovod": {
        "frameworks": ["PyTorch"],
        "controllers": ["MPI", "Gloo"],
        "tensor_operations": ["NCCL", "MPI", "Gloo"],
    },
    "cuda_stack": {
        "torch": {"cuda": "13.2", "nccl": "2.30.7", "cudnn": "9.26.0"},
        "horovod": {"nccl_built": {"horovod.torch": 23007}},
        "nccl_files": [NCCL],
        "duplicate_libraries": {},
        "loaded": {"libnccl": [NCCL], "libcudart": [CUDART_13], "libcudnn": [CUDNN_9], "libcublas": [CUBLAS_13]},
        "horovod_links": {TORCH_EXTENSION: {"libnccl.so.2": NCCL, "libcudart.so.13": CUDART_13}},
    },
}
# The matrix's pins of Lightning, Hugging Face's libraries, MLflow, scikit-learn and matplotlib.
TRAINING_LIBRARY_PINS = ["accelerate==1.15.0", "datasets==5.2.0", "lightning==2.6.6", "matplotlib==3.11.2",
                         "mlflow==3.17.2", "peft==0.21.2", "pytorch-lightning==2.6.6", "safetensors==0.8.0",
                         "scikit-learn==1.9.1", "tokenizers==0.23.3", "torchmetrics==1.9.0", "transformers==5.23.0"]
CU13_CONSTRAINTS = parse_constraints(
    "cloudpickle==3.1.2\nhorovod==0.28.1\nipykernel==7.4.0\nipywidgets==8.1.9\njupyterlab==4.6.6\nmpi4py==4.1.2\n"
    "nbclient==0.11.0\nnbconvert==7.17.2\npandas==2.3.3\npsutil==7.2.2\npyarrow==25.0.1\n"
    "pyspark==4.3.0\ntensorboard==2.20.0\ntorch==2.15.0\ntorchvision==0.29.2\n"
    + "".join(f"{pin}\n" for pin in TRAINING_LIBRARY_PINS)
)


@pytest.fixture(scope="module")
def cu13():
    return load_matrix().flavor("gpu-cu13")


def with_stack(**changes) -> dict:
    manifest = copy.deepcopy(CU13_MANIFEST)
    manifest["cuda_stack"].update(changes)
    return manifest


def test_matching_gpu_image_has_no_mismatches(cu13):
    assert manifest_mismatches(cu13, CU13_MANIFEST, CU13_CONSTRAINTS) == []


def test_torchvision_must_be_the_matrixs_pairing(cu13):
    constraints = {**CU13_CONSTRAINTS, "torchvision": "0.27.0"}
    assert manifest_mismatches(cu13, CU13_MANIFEST, constraints) == ["torchvision is 0.27.0, matrix says 0.29.2"]


def test_torch_built_for_another_cuda_nccl_or_cudnn_is_named(cu13):
    manifest = with_stack(torch={"cuda": "12.8", "nccl": "2.27.5", "cudnn": "9.10.2"})
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        "torch.version.cuda is 12.8, matrix says cuda 13.2",
        "torch.cuda.nccl.version() is 2.27.5, matrix says nccl 2.30.7",
        "torch.backends.cudnn.version() is 9.10.2, matrix says cudnn 9.26.0.51",
    ]


def test_horovod_without_nccl_is_named(cu13):
    manifest = with_stack(horovod={"nccl_built": {"horovod.torch": 0}})
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        "horovod.torch.nccl_built() is 0, expected 23007 (NCCL 2.30.7)"
    ]


def test_every_horovod_extension_must_be_built_with_nccl():
    gpu = load_matrix().flavor("gpu")
    stack = {"torch": {"cuda": "12.8", "nccl": "2.27.5", "cudnn": "9.10.2"},
             "tensorflow": {"cuda": "12.5.1", "cudnn": "9"}, "horovod": {"nccl_built": {"horovod.torch": 22705}}}
    assert "horovod.tensorflow.nccl_built() is None, expected 22705 (NCCL 2.27.5)" in cuda_stack_mismatches(gpu, stack)


def test_a_second_cudnn_loaded_next_to_torchs_is_named(cu13):
    other = "/usr/lib/x86_64-linux-gnu/libcudnn.so.9"
    manifest = with_stack(loaded={**CU13_MANIFEST["cuda_stack"]["loaded"], "libcudnn": [CUDNN_9, other]})
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        f"the frameworks and Horovod load 2 libcudnn files, expected 1: ['{CUDNN_9}', '{other}']"
    ]


def test_a_second_libnccl_file_is_named(cu13):
    manifest = with_stack(nccl_files=[NCCL, "/opt/cuda-build/nccl/libnccl.so"])
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        f"the image holds 2 libnccl files, expected 1: ['{NCCL}', '/opt/cuda-build/nccl/libnccl.so']"
    ]


def test_duplicate_cuda_library_is_named(cu13):
    copies = [CUDART_13, "/usr/local/cuda/lib64/libcudart.so.13"]
    manifest = with_stack(duplicate_libraries={"libcudart.so.13": copies})
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        f"libcudart.so.13 is in the image 2 times: {', '.join(copies)}"
    ]


def test_horovod_resolving_another_nccl_than_torch_is_named(cu13):
    other = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    manifest = with_stack(
        loaded={**CU13_MANIFEST["cuda_stack"]["loaded"], "libnccl": [NCCL, other]},
        horovod_links={TORCH_EXTENSION: {"libnccl.so.2": other, "libcudart.so.13": CUDART_13}},
    )
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        f"the frameworks and Horovod load 2 libnccl files, expected 1: ['{NCCL}', '{other}']",
        f"{TORCH_EXTENSION} resolves libnccl to ['{other}'], torch loads ['{NCCL}', '{other}']",
    ]


def test_horovod_with_a_static_cudart_is_named(cu13):
    manifest = with_stack(horovod_links={TORCH_EXTENSION: {"libnccl.so.2": NCCL}})
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        f"{TORCH_EXTENSION} resolves libcudart to nothing (linked statically?), torch loads ['{CUDART_13}']"
    ]


def test_horovods_tensorflow_extension_may_reach_cudart_through_tensorflows_stubs(cu13):
    tf_extension = "horovod/tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so"
    links = {**CU13_MANIFEST["cuda_stack"]["horovod_links"], tf_extension: {"libnccl.so.2": NCCL}}
    assert manifest_mismatches(cu13, with_stack(horovod_links=links), CU13_CONSTRAINTS) == []
    other = "/usr/lib/x86_64-linux-gnu/libcudart.so.13"
    links[tf_extension] = {"libnccl.so.2": NCCL, "libcudart.so.13": other}
    assert manifest_mismatches(cu13, with_stack(horovod_links=links), CU13_CONSTRAINTS) == [
        f"{tf_extension} resolves libcudart to ['{other}'], torch loads ['{CUDART_13}']"
    ]


def test_gpu_manifest_without_cuda_stack_is_named(cu13):
    manifest = copy.deepcopy(CU13_MANIFEST)
    del manifest["cuda_stack"]
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        "the manifest has no cuda_stack: write_manifest.py found no NCCL wheel"
    ]


def test_missing_nccl_tensor_operation_is_named(cu13):
    manifest = copy.deepcopy(CU13_MANIFEST)
    manifest["horovod"]["tensor_operations"] = ["MPI", "Gloo"]
    assert manifest_mismatches(cu13, manifest, CU13_CONSTRAINTS) == [
        "horovodrun --check-build does not show NCCL under tensor_operations"
    ]


def test_tensorflow_needs_only_the_same_cuda_and_cudnn_majors():
    gpu = load_matrix().flavor("gpu")
    stack = {"torch": {"cuda": "12.8", "nccl": "2.27.5", "cudnn": "9.10.2"}}
    built_on_older_12 = {**stack, "tensorflow": {"cuda": "12.5.1", "cudnn": "9"}, "horovod": {"nccl_built": {"horovod.torch": 22705, "horovod.tensorflow": 22705}}}
    assert [p for p in cuda_stack_mismatches(gpu, built_on_older_12) if "TensorFlow" in p] == []
    built_on_11 = {**built_on_older_12, "tensorflow": {"cuda": "11.8", "cudnn": "8"}}
    assert [p for p in cuda_stack_mismatches(gpu, built_on_11) if "TensorFlow" in p] == [
        "TensorFlow is built for CUDA 11.8, matrix says cuda 12.8",
        "TensorFlow is built for cuDNN 8, matrix says cudnn 9.10.2.21",
    ]


@pytest.mark.parametrize(("version", "code"), [("2.29.7", 22907), ("2.30.7", 23007), ("2.27.5", 22705)])
def test_nccl_version_code(version, code):
    assert nccl_version_code(version) == code
