"""pip's real resolver against PyPI (network needed): the matrix's GPU claims hold, a broken override fails."""

import pytest

from trainstack.image.matrix import apply_overrides, load_matrix
from trainstack.image.resolver import create_resolver_pip, resolve

# One resolution takes 20 to 45 s with a cold cache on a busy 2-core machine.
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def pip(tmp_path_factory) -> list[str]:
    return create_resolver_pip(tmp_path_factory.mktemp("resolver") / "venv")


@pytest.mark.parametrize("flavor_name", ["gpu", "gpu-cu13"])
def test_gpu_flavor_resolves_to_its_cuda_cudnn_and_nccl(matrix, pip, flavor_name):
    resolution = resolve(matrix.flavor(flavor_name), pip)
    assert resolution.mismatches == []
    assert resolution.resolved["torch"] == matrix.flavor(flavor_name).version("torch")


def test_tensorflow_2_21_with_torch_2_10_fails_on_nccl(matrix, pip):
    flavor = apply_overrides(matrix.flavors["gpu"], {"torch": "2.10.0", "tensorflow": "2.21.0"})
    resolution = resolve(flavor, pip)
    assert resolution.resolved == {}
    [message] = resolution.mismatches
    assert "pip cannot resolve flavor 'gpu'" in message
    assert "conflict on nvidia-nccl-cu12" in message
