import dataclasses

import pytest
import yaml

from pooltemplates import TemplateError
from trainstack.image.dockerfile import render_dockerfile
from trainstack.image.matrix import MATRIX_PATH, PATCHES_DIR, MatrixError, load_matrix, parse_overrides

# horovod.patch takes Horovod's patches only.
PATCHES = ", ".join(sorted(path.name for path in PATCHES_DIR.glob("horovod-*.patch")))


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_every_flavor_satisfies_the_rules(matrix):
    for name in matrix.flavors:
        assert matrix.flavor(name).name == name


def test_gpu_flavor_holds_the_cuda_stack(matrix):
    gpu = matrix.flavor("gpu")
    assert gpu.gpu
    assert (gpu.version("cuda"), gpu.version("cudnn"), gpu.version("nccl")) == ("12.8", "9.10.2.21", "2.27.5")
    assert not matrix.flavor("cpu").gpu


@pytest.mark.parametrize(
    ("flavor", "overrides", "rule"),
    [
        ("gpu", {"torch": "2.10.0", "tensorflow": "2.21.0"}, "tensorflow-2.21-cuda-stack"),
        ("gpu", {"torch": "2.13.0"}, "torch-pypi-cuda-13"),
        ("gpu", {"cuda": "13.0"}, "tensorflow-cuda-12-only"),
        ("gpu", {"nccl": "2.28.9"}, "torch-2.10-nccl"),
        ("gpu-cu13", {"torch": "2.10.0"}, "torch-pypi-cuda-12.8"),
        ("gpu-cu13", {"nccl": "2.27.5"}, "torch-2.15-nccl"),
        ("gpu-cu13", {"cuda.toolkit": "13.0.3"}, "torch-2.15-nccl"),
        ("gpu", {"cudnn": "8.9.7.29"}, "tensorflow-2.20-cuda-stack"),
        ("cpu", {"java": "11"}, "pyspark-4-java"),
        ("cpu", {"python": "3.12"}, "horovod-0.28-python"),
        ("cpu", {"python": "3.10"}, "pyspark-4.3-python"),
        ("cpu", {"python": "3.9", "pyspark": "4.0.0"}, "torch-python"),
        ("cpu", {"python": "3.9", "pyspark": "4.0.0", "torch": "2.8.0"}, "tensorflow-2.21-python"),
        ("cpu", {"tensorflow": "2.20.0", "python": "3.14", "horovod": "0.29.0"}, "tensorflow-2.20-python"),
        ("cpu", {"horovod.patch": ""}, "horovod-0.28-patch-torch"),
        ("gpu", {"torchvision": "0.28.0"}, "torchvision-torch-2.10"),
        ("gpu-cu13", {"torchvision": "0.28.0"}, "torchvision-torch-stable-abi"),
        ("gpu-cu13", {"torch": "2.13.0", "nccl": "2.29.7", "cudnn": "9.20.0.48"}, "torchvision-torch-2.13"),
        ("gpu-cu13", {"torch": "2.12.0", "nccl": "2.28.9"}, "torchvision-torch-2.12"),
        ("gpu-cu13", {"torch": "2.11.0", "torchvision": "0.26.0", "nccl": "2.28.9"}, None),
        ("gpu-cu13", {"torch": "2.14.1", "torchvision": "0.29.1"}, None),
        ("gpu-cu13", {"torch": "2.16.0"}, "torchvision-torch-paired"),
        ("gpu-cu13", {"python": "3.10"}, "torch-2.15-python"),
        ("cpu", {"debian": "13", "python": "3.12", "horovod": "0.29.0"}, None),
        ("cpu", {"debian": "12", "python": "3.12", "horovod": "0.29.0"}, "debian-12-python"),
    ],
)
def test_an_override_that_breaks_a_rule_is_refused_naming_it(matrix, flavor, overrides, rule):
    if rule is None:
        matrix.flavor(flavor, overrides)
        return
    with pytest.raises(MatrixError, match=f"rule {rule}:"):
        matrix.flavor(flavor, overrides)


def test_rule_message_names_values_and_reason(matrix):
    with pytest.raises(MatrixError) as error:
        matrix.flavor("gpu", {"torch": "2.10.0", "tensorflow": "2.21.0"})
    message = str(error.value)
    assert "tensorflow 2.21.0" in message
    assert "nccl >=2.27.7,<3 (has 2.27.5)" in message
    assert "torch 2.10 pins 2.27.5" in message


def test_unknown_flavor_lists_the_valid_ones(matrix):
    with pytest.raises(MatrixError, match=r"^--flavor = 'tpu': is not a flavor \(valid: cpu, gpu, gpu-cu13\)$"):
        matrix.flavor("tpu")


def test_unknown_override_key_lists_valid_keys(matrix):
    with pytest.raises(MatrixError, match=r"^--set = 'cuda': is not a key of flavor 'cpu' \(valid: base_image"):
        matrix.flavor("cpu", {"cuda": "12.8"})


def test_override_version_must_parse(matrix):
    with pytest.raises(MatrixError, match="--set torch.version = 'latest': is not a version"):
        matrix.flavor("cpu", {"torch": "latest"})


def test_overrides_change_versions_packages_and_base_image(matrix):
    flavor = matrix.flavor("cpu", {"base_image": "ubuntu:24.04", "pyspark": "4.2.1", "tf_keras": "2.20.1"})
    assert flavor.base_image == "ubuntu:24.04"
    assert flavor.version("pyspark") == "4.2.1"
    assert flavor.python_packages["tf_keras"] == "2.20.1"
    assert matrix.flavor("cpu").version("pyspark") == "4.3.0"


@pytest.mark.parametrize("pair", ["torch", "=2.1"])
def test_malformed_set_pairs_are_refused(pair):
    with pytest.raises(TemplateError, match=r"--set = '.*': must look like key=value \(valid: e.g. torch=2.10.0\)"):
        parse_overrides([pair])


@pytest.mark.parametrize(("overrides", "message"), [
    ({"torch": ""}, "--set torch.version = '': is not a version"),
    ({"horovod.frameworks": "pytroch"}, "--set horovod.frameworks.0 = 'pytroch': is not an allowed value (valid: pytorch, tensorflow)"),
    ({"base_image": "debian:12\nRUN echo injected"}, "--set base_image = 'debian:12\\nRUN echo injected': is not a docker image"),
    ({"java.apt_package": "x; echo INJ"}, "--set java.apt_package = 'x; echo INJ': is not an image, flavor, component or package name"),
    ({"horovod.patch": "/etc/passwd"}, f"--set horovod.patch.0 = '/etc/passwd': is not a file in images/patches/ "
                                       f"(valid: {PATCHES})"),
    ({"horovod.patch": "../patches/x.patch"}, "--set horovod.patch.0 = '../patches/x.patch': is not a file in "
                                              f"images/patches/ (valid: {PATCHES})"),
    ({"horovod.patch": "missing.patch"}, "--set horovod.patch.0 = 'missing.patch': is not a file in images/patches/"),
    ({"torch.index_url": "http://example.org/simple"}, "--set torch.index_url = 'http://example.org/simple': is not an https URL"),
    ({"torch.version": "1.0-foo-bar"}, "--set torch.version = '1.0-foo-bar': is not a version (PEP 440) (valid: a version, e.g. 2.10.0"),
    ({"torch": "2.10.0; echo INJ"}, "--set torch.version = '2.10.0; echo INJ': is not a version (PEP 440)"),
    ({"pandas": "latest"}, "--set pandas = 'latest': is not a version (PEP 440) (valid: a version, e.g. 2.10.0 or 2.13.0+cpu)"),
    ({"torch.foo": "1"}, "--set torch.foo = '1': torch has no field 'foo' (valid: torch.version, torch.index_url)"),
    ({"horovod.cuda_architectures": "80,x"}, "--set horovod.cuda_architectures.1 = 'x': is not of type integer"),
    ({"base_image": "a" * 300}, f"--set base_image = '{'a' * 37}...{'a' * 38}': is longer than 255 characters"),
])
def test_set_values_are_checked_against_the_schema_naming_the_key(matrix, overrides, message):
    with pytest.raises(MatrixError) as error:
        matrix.flavor("cpu", overrides)
    assert message in str(error.value)
    assert "\n" not in str(error.value), "one problem, one line"


def test_a_gpu_toolkit_version_must_be_pep_440(matrix):
    with pytest.raises(MatrixError, match=r"^--set cuda.toolkit = '13.0-x-y': is not a version \(PEP 440\)"):
        matrix.flavor("gpu-cu13", {"cuda.toolkit": "13.0-x-y"})


def test_list_fields_are_typed_by_the_schema(matrix):
    assert matrix.flavor("gpu", {"horovod.cuda_architectures": "80,90"}).field("horovod", "cuda_architectures") == [80, 90]


def test_well_formed_unknown_versions_pass_until_pip_resolves_them(matrix):
    # No offline list of releases exists: trainstack/image/resolver.py asks PyPI, and only for GPU stacks.
    assert matrix.flavor("cpu", {"torch": "99.0.0"}).version("torch") == "99.0.0"


def test_list_fields_take_comma_separated_values(matrix):
    flavor = matrix.flavor("cpu", {"horovod.frameworks": "pytorch", "horovod.controllers": "mpi,gloo"})
    assert flavor.field("horovod", "frameworks") == ["pytorch"]
    assert flavor.field("horovod", "controllers") == ["mpi", "gloo"]


def test_a_malformed_matrix_file_names_every_problem(tmp_path):
    broken = tmp_path / "matrix.yaml"
    broken.write_text("image_name: trainstack\nflavors:\n  cpu: {description: x, components: {}}\nrules: []\n")
    with pytest.raises(MatrixError) as error:
        load_matrix(broken)
    assert "flavors.cpu = " in str(error.value) and "'base_image' is a required property" in str(error.value)


def test_pyspark_patch_takes_pysparks_patches_only(matrix):
    assert matrix.flavor("cpu", {"pyspark.patch": ""}).field("pyspark", "patch") == []
    with pytest.raises(MatrixError) as error:
        matrix.flavor("cpu", {"pyspark.patch": "horovod-0.28.1-keras3.patch"})
    assert str(error.value).startswith("--set pyspark.patch.0 = 'horovod-0.28.1-keras3.patch': is not a file in "
                                       "images/patches/ (valid: pyspark-4.3.0-"), str(error.value)


def test_a_patch_a_flavor_applies_needs_an_upstream_reference(tmp_path):
    text = MATRIX_PATH.read_text()
    entry = "  pyspark-4.3.0-distributor-rank0-output.patch:\n    upstream:"
    assert entry in text
    broken = tmp_path / "matrix.yaml"
    broken.write_text(text.replace(entry, "  elsewhere.patch:\n    upstream:"))
    with pytest.raises(MatrixError) as error:
        load_matrix(broken)
    message = str(error.value)
    assert "patches.pyspark-4.3.0-distributor-rank0-output.patch = 'pyspark-4.3.0-distributor-rank0-output.patch': " \
           "is applied by a flavor but has no upstream reference" in message, message
    assert "patches.elsewhere.patch = 'elsewhere.patch': is not a file in images/patches/" in message, message


def test_matrix_words_in_run_lines_are_quoted_by_construction(matrix):
    # The schema refuses these values in --set; a flavor built past it must still not inject a command.
    cpu = matrix.flavor("cpu")
    hostile = dataclasses.replace(cpu, components={
        **cpu.components,
        "java": {**cpu.components["java"], "apt_package": "x; echo INJ"},
        "horovod": {**cpu.components["horovod"], "version": "0.28.1 && echo INJ", "patch": ["$(echo INJ).patch"]},
    })
    dockerfile = render_dockerfile(hostile)
    assert "'x; echo INJ'" in dockerfile
    assert "horovod=='0.28.1 && echo INJ'" in dockerfile
    assert "/tmp/build/patches/'$(echo INJ).patch'" in dockerfile
    shell_lines = [line for line in dockerfile.splitlines() if not line.startswith("LABEL ")]
    assert all("INJ" not in line for line in shell_lines if "'" not in line)


@pytest.mark.parametrize("glob", ["../../etc/passwd", "/opt/venv/lib", "nvidia/../../x", "a b", "x;rm -rf /"])
def test_a_prune_glob_must_stay_inside_site_packages(tmp_path, glob):
    text = MATRIX_PATH.read_text().replace('glob: "cuda/**/*.cpp"', f"glob: {glob!r}", 1)
    assert text != MATRIX_PATH.read_text()
    broken = tmp_path / "matrix.yaml"
    broken.write_text(text)
    with pytest.raises(MatrixError, match=r"flavors\.gpu\.prune\.2\.glob"):
        load_matrix(broken)


def test_every_prune_entry_says_why(matrix):
    for flavor in matrix.flavors.values():
        for entry in flavor.prune:
            assert len(entry["reason"]) > 20, entry


def test_torchvision_is_paired_with_each_gpu_flavors_torch_and_absent_from_cpu(matrix):
    assert {name: flavor.version("torchvision") for name, flavor in matrix.flavors.items()} == {
        "cpu": None, "gpu": "0.25.0", "gpu-cu13": "0.29.2"}
    [absent] = matrix.flavor("cpu").absent
    assert absent["package"] == "torchvision"
    assert "operator torchvision::nms does not exist" in absent["reason"]
    assert "--index-url https://download.pytorch.org/whl/cpu" in absent["instead"]


@pytest.mark.parametrize(("entry", "message"), [
    ({"package": "torchvision", "reason": "r"}, "flavors.cpu.absent.0 = {'package': 'torchvision', 'reason': 'r'}: "
                                                "'instead' is a required property"),
    ({"package": "torch-vision", "reason": "r", "instead": "i"},
     "flavors.cpu.absent.0.package = 'torch-vision': is not a top-level Python module name"),
])
def test_an_absent_entry_names_a_module_and_says_why_and_what_instead(tmp_path, entry, message):
    data = yaml.safe_load(MATRIX_PATH.read_text())
    data["flavors"]["cpu"]["absent"] = [entry]
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(MatrixError) as error:
        load_matrix(path)
    assert message in str(error.value)
