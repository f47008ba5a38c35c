"""A package the matrix lists as `absent` from a flavor: its build context installs the module that makes
`import NAME` say why, and that module answers only imports no real package serves."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.image.build_context import in_image, write_build_context
from trainstack.image.dockerfile import IMAGE_ROOT, render_dockerfile
from trainstack.image.matrix import load_matrix
from trainstack.image.sources import SourceOptions

# Runs in a fresh interpreter that reads the context's site-packages folder as a site dir (its .pth included),
# as the image's Python reads its venv's; prints what each kind of import gives.
PROBE = """
import importlib, importlib.util, json, site, sys
site.addsitedir(sys.argv[1])
sys.path[:0] = sys.argv[2:]
result = {"probe": repr(importlib.util.find_spec("torchvision")), "last_finder": type(sys.meta_path[-1]).__name__}
for name, statement in [("import", "import torchvision"), ("submodule", "from torchvision import models"),
                        ("import_module", "importlib.import_module('torchvision')"), ("other", "import no_such_module")]:
    try:
        exec(statement)
        result[name] = {"imported": sys.modules["torchvision"].__file__}
    except ModuleNotFoundError as error:
        result[name] = {"name": error.name, "message": str(error)}
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def cpu_context(tmp_path_factory) -> Path:
    return write_build_context(load_matrix().flavor("cpu"), SourceOptions(), tmp_path_factory.mktemp("ctx") / "cpu")


def site_packages(context: Path, flavor: str) -> Path:
    """The context's copy of the flavor's site-packages: the hooks the image's files layer holds."""
    return in_image(context / IMAGE_ROOT, load_matrix().flavor(flavor).site_packages)


def run_probe(site_dir: Path, *first_on_path: Path) -> dict:
    output = subprocess.run([sys.executable, "-I", "-c", PROBE, str(site_dir), *map(str, first_on_path)],
                            capture_output=True, text=True, check=True).stdout
    return json.loads(output)


def test_the_cpu_context_holds_the_module_its_data_and_the_pth_the_dockerfile_copies(cpu_context):
    files = sorted(path.name for path in site_packages(cpu_context, "cpu").iterdir())
    assert files == ["trainstack-absent-packages.pth", "trainstack-compile-cache.pth", "trainstack-examples.pth",
                     "trainstack-framework-ranks.pth", "trainstack-gloo-exit.pth", "trainstack-line-buffered.pth",
                     "trainstack-mlflow-tracking.pth", "trainstack-slurm-ranks.pth", "trainstack_absent_packages.json",
                     "trainstack_absent_packages.py", "trainstack_compile_cache.py", "trainstack_framework_ranks.py",
                     "trainstack_gloo_exit.py", "trainstack_line_buffered.py", "trainstack_mlflow_tracking.py",
                     "trainstack_slurm_ranks.py"]
    pth = site_packages(cpu_context, "cpu") / "trainstack-absent-packages.pth"
    assert pth.read_text() == "import trainstack_absent_packages\n"
    # The examples' helpers (digit_net, synthetic_digits) import from any folder, last on sys.path.
    assert (site_packages(cpu_context, "cpu") / "trainstack-examples.pth").read_text() == "/opt/trainstack/examples\n"
    data = json.loads((site_packages(cpu_context, "cpu") / "trainstack_absent_packages.json").read_text())
    assert data == {"flavor": "cpu", "absent": [dict(entry) for entry in load_matrix().flavor("cpu").absent]}
    dockerfile = (cpu_context / "Dockerfile").read_text()
    assert dockerfile.index(f"COPY {IMAGE_ROOT}/ /") < dockerfile.index("write_manifest.py")


def test_a_flavor_with_nothing_absent_copies_the_other_hooks_only(tmp_path):
    context = write_build_context(load_matrix().flavor("gpu"), SourceOptions(), tmp_path / "gpu")
    assert sorted(path.name for path in site_packages(context, "gpu").iterdir()) == [
        "trainstack-compile-cache.pth", "trainstack-examples.pth", "trainstack-framework-ranks.pth",
        "trainstack-gloo-exit.pth",
        "trainstack-line-buffered.pth", "trainstack-mlflow-tracking.pth", "trainstack-slurm-ranks.pth",
        "trainstack_compile_cache.py", "trainstack_framework_ranks.py", "trainstack_gloo_exit.py",
        "trainstack_line_buffered.py", "trainstack_mlflow_tracking.py", "trainstack_slurm_ranks.py"]


def test_importing_deepspeed_in_gpu_cu13_says_why(tmp_path):
    # DeepSpeed 0.19.8 has no CUDA 13 support (rule deepspeed-0.19-cuda-12): gpu-cu13 lists it as absent.
    flavor = load_matrix().flavor("gpu-cu13")
    context = write_build_context(flavor, SourceOptions(), tmp_path / "gpu-cu13")
    probe = ("import site, sys\nsite.addsitedir(sys.argv[1])\ntry:\n    import deepspeed\n"
             "except ModuleNotFoundError as error:\n    print(error)\n")
    output = subprocess.run([sys.executable, "-I", "-c", probe, str(site_packages(context, "gpu-cu13"))],
                            capture_output=True, text=True, check=True).stdout
    absent = next(entry for entry in flavor.absent if entry["package"] == "deepspeed")
    assert output.strip() == (f"No module named 'deepspeed': the trainstack gpu-cu13 image has none. "
                              f"{absent['reason']} Instead: {absent['instead']}")
    assert "no CUDA 13 support" in absent["reason"] and "trainstack:gpu" in absent["instead"]


def test_importing_an_absent_package_says_why_and_what_instead(cpu_context):
    result = run_probe(site_packages(cpu_context, "cpu"))
    absent = load_matrix().flavor("cpu").absent[0]
    assert result["last_finder"] == "AbsentPackageFinder"
    for how in ("import", "submodule", "import_module"):
        assert result[how]["name"] == "torchvision", result
        assert result[how]["message"] == (f"No module named 'torchvision': the trainstack cpu image has none. "
                                          f"{absent['reason']} Instead: {absent['instead']}")
    assert result["other"] == {"name": "no_such_module", "message": "No module named 'no_such_module'"}


def test_a_probe_for_the_package_still_finds_nothing(cpu_context):
    # Libraries (transformers, Lightning) test importlib.util.find_spec(NAME) is None to see what is installed.
    assert run_probe(site_packages(cpu_context, "cpu"))["probe"] == "None"


def test_a_torchvision_the_user_installs_is_imported(cpu_context, tmp_path):
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text("")
    (tmp_path / "torchvision" / "models.py").write_text("")
    result = run_probe(site_packages(cpu_context, "cpu"), tmp_path)
    assert result["import"] == {"imported": str(tmp_path / "torchvision" / "__init__.py")}
    assert result["probe"] != "None"
