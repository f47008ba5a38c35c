"""The builder stage's components (trainstack/image/components.py): which flavor gets which, in what order, and that
each one's fragment, files, patches and venv layers agree with images/, the matrix, the rendered Dockerfile and the
build context."""
import dataclasses
import json
import re

import pytest
from file_modules import load_file_module

from trainstack.image.build_context import in_image, write_build_context
from trainstack.image.components import (
    BUILDER_STAGE,
    FRAGMENTS_DIR,
    FRAMEWORKS_STAGE,
    INSTALL_FRAGMENT_SUFFIX,
    build_components,
    builder_stages,
)
from trainstack.image.dockerfile import BUILD_RECORD_PATH, IMAGE_ROOT, IMAGES_DIR, render_dockerfile
from trainstack.image.matrix import PATCHED_COMPONENTS, PATCHES_DIR, load_matrix
from trainstack.image.sources import SourceOptions

BUILD_ORDER = {
    "cpu": ["venv", "frameworks", "libraries", "pyspark", "ray", "horovod", "deepspeed"],
    "gpu": ["cuda-toolkit", "venv", "frameworks", "cuda-links", "libraries", "pyspark", "ray", "horovod", "deepspeed"],
    "gpu-cu13": ["cuda-toolkit", "venv", "cuda-toolkit-wheels", "frameworks", "cuda-links", "libraries", "pyspark",
                 "ray", "horovod"],
}
# Every flavor, and the GPU flavors with their other sources of nvcc.
VARIANTS = [("cpu", {}), ("gpu", {}), ("gpu", {"cuda.build_tools": "apt"}), ("gpu-cu13", {}),
            ("gpu-cu13", {"cuda.build_tools": "apt"})]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module", params=VARIANTS, ids=lambda variant: "-".join([variant[0], *variant[1].values()]))
def flavor(request, matrix):
    name, overrides = request.param
    return matrix.flavor(name, overrides)


def builder_stage(dockerfile: str) -> str:
    """Every stage of the builder's, from frameworks to builder."""
    return dockerfile.split("# --- frameworks:")[1].split("# --- the image ---")[0]


@pytest.mark.parametrize("name", sorted(BUILD_ORDER))
def test_each_flavor_gets_its_components_in_build_order(matrix, name):
    assert [component.name for component in build_components(matrix.flavor(name))] == BUILD_ORDER[name]


def test_nvcc_from_apt_packages_comes_before_the_venv_and_from_wheels_after_it(matrix):
    cu13_from_apt = build_components(matrix.flavor("gpu-cu13", {"cuda.build_tools": "apt"}))
    assert [component.name for component in cu13_from_apt] == [
        name for name in BUILD_ORDER["gpu-cu13"] if name != "cuda-toolkit-wheels"]
    assert cu13_from_apt[0].values["apt_packages"] and "scripts/nvidia_apt_keyring.py" in cu13_from_apt[0].files
    cu13 = build_components(matrix.flavor("gpu-cu13"))
    assert not cu13[0].values["apt_packages"] and not cu13[0].values["debian_toolkit_command"]
    assert cu13[0].files == ("scripts/nvidia_ld_conf.py",)  # for cuda-links; nvcc comes with cuda-toolkit-wheels


def test_every_fragment_and_file_of_a_component_is_in_images(matrix):
    names = set()
    for name, overrides in VARIANTS:
        for component in build_components(matrix.flavor(name, overrides)):
            names.add(component.name)
            assert (IMAGES_DIR / component.template).is_file(), component.template
            for path in component.files:
                assert (IMAGES_DIR / path).is_file(), f"{component.name}: {path}"
            for patch in component.patches:
                assert (PATCHES_DIR / patch).is_file(), f"{component.name}: {patch}"
    fragments = names | {f"{name}{INSTALL_FRAGMENT_SUFFIX}" for name in ("horovod", "deepspeed")}
    assert {path.stem for path in (IMAGES_DIR / FRAGMENTS_DIR).glob("*.j2")} == fragments  # none left unused


def test_patches_agree_with_the_matrix(flavor):
    components = {component.name: component for component in build_components(flavor)}
    for name in PATCHED_COMPONENTS:
        listed = tuple(flavor.field(name, "patch") or ())
        if name in components:
            assert components[name].patches == listed, name
        else:
            assert not listed, f"{name} lists patches the builder would not apply"
    assert not [component.name for component in components.values()
                if component.patches and component.name not in PATCHED_COMPONENTS]


def test_pyspark_without_patches_has_no_step(matrix):
    cpu = matrix.flavor("cpu")
    unpatched = dataclasses.replace(cpu, components={**cpu.components, "pyspark": {"version": cpu.version("pyspark")}})
    assert "pyspark" not in [component.name for component in build_components(unpatched)]
    assert "pyspark-" not in render_dockerfile(unpatched)


def test_the_steps_copy_each_components_files_and_apply_its_patches_in_order(flavor):
    builder = builder_stage(render_dockerfile(flavor))
    copied = [line.split()[1:-1] for line in builder.splitlines() if line.startswith("COPY ")]
    copied = {path for paths in copied for path in paths}
    for component in build_components(flavor):
        assert set(component.files) | set(component.written_files) <= copied, component.name
        applied = re.findall(r"patch -p1 .*< /tmp/build/patches/(\S+) \\", builder)
        assert [patch for patch in applied if patch in component.patches] == list(component.patches)
        if component.patches:
            assert f"COPY patches/{component.name}-*.patch /tmp/build/patches/" in builder


def test_the_build_context_holds_each_components_files_and_the_record_its_patches(matrix, tmp_path):
    gpu = matrix.flavor("gpu")
    components = build_components(gpu)
    context = write_build_context(gpu, SourceOptions(), tmp_path / "ctx")
    for component in components:
        for path in component.files:
            assert (context / path).read_bytes() == (IMAGES_DIR / path).read_bytes()
        for name, text in component.written_files.items():
            assert (context / name).read_text() == text
    assert sorted(path.name for path in (context / "patches").iterdir()) == sorted(
        patch for component in components for patch in component.patches)
    record = json.loads(in_image(context / IMAGE_ROOT, BUILD_RECORD_PATH).read_text())["patches"]
    assert {name: [entry["file"] for entry in entries] for name, entries in record.items()} == {
        component.name: list(component.patches) for component in components if component.patches}


def test_each_component_names_the_venv_layers_its_distributions_end_up_in(flavor):
    components = {component.name: component for component in build_components(flavor)}
    assert components["horovod"].layers == ("horovod-deepspeed",)
    assert components["pyspark"].layers == ("spark",)
    assert "torch" in components["frameworks"].layers
    # The CUDA wheels the matrix pins (gpu; gpu-cu13 leaves them to torch's dependencies).
    assert ("nvidia" in components["frameworks"].layers) == any(name.startswith("nvidia-")
                                                                for name in flavor.python_packages)
    for name in ("cuda-toolkit", "cuda-toolkit-wheels", "cuda-links"):
        assert name not in components or components[name].layers == ()
    layer_names = [layer.name for layer in flavor.venv_layers]
    for component in components.values():
        assert set(component.layers) <= set(layer_names), component.name


def test_the_layers_named_here_are_those_the_builders_split_gives(matrix):
    """Flavor.venv_layer_of and images/scripts/venv_layers.py (which runs in the builder, apart from trainstack)
    put every component's distributions in the same layer."""
    script = load_file_module(IMAGES_DIR / "scripts" / "venv_layers.py")
    for name, overrides in VARIANTS:
        flavor = matrix.flavor(name, overrides)
        layers = [script.parse_layer(layer.argument) for layer in flavor.venv_layers]
        for component in build_components(flavor):
            for distribution in component.distributions:
                assert (flavor.venv_layer_of(distribution).name
                        == script.layer_of(script.canonical(distribution), layers)), distribution


@pytest.mark.parametrize("name", sorted(BUILD_ORDER))
def test_the_compiled_components_build_in_stages_of_their_own_from_the_frameworks(matrix, name):
    """Horovod and DeepSpeed compile in stages of their own, which BuildKit runs at once beside the builder's library
    installs; the builder copies each in after those, and a library pin recompiles neither."""
    stages = builder_stages(build_components(matrix.flavor(name)))
    compiled = [component for component in ("horovod", "deepspeed") if component in BUILD_ORDER[name]]
    assert [stage.name for stage in stages] == [FRAMEWORKS_STAGE, *compiled, BUILDER_STAGE]
    assert {stage.base for stage in stages[1:]} == {FRAMEWORKS_STAGE}
    builder = [template for _, template in stages[-1].steps]
    assert builder == [f"{FRAGMENTS_DIR}/{component}.j2" for component in BUILD_ORDER[name]
                       if component in ("libraries", "pyspark", "ray")] + [
        f"{FRAGMENTS_DIR}/{component}-install.j2" for component in compiled]
    dockerfile = render_dockerfile(matrix.flavor(name))
    for component in compiled:
        assert f"COPY --from={component} /tmp/build/{component}-root/ /" in dockerfile


@pytest.mark.parametrize("name", sorted(BUILD_ORDER))
def test_horovod_compiles_without_the_debug_info_its_stage_strips(matrix, name, tmp_path):
    """Horovod's setup.py asks CMake for RelWithDebInfo; the toolchain file its stage copies in (CMake reads
    CMAKE_TOOLCHAIN_FILE from the environment) gives that build type its flags without -g, for C, C++ and CUDA."""
    [horovod] = [component for component in build_components(matrix.flavor(name)) if component.name == "horovod"]
    [(file_name, toolchain)] = horovod.written_files.items()
    assert horovod.values["toolchain_file"] == f"/tmp/build/{file_name}"
    flags = dict(re.findall(r'set\(CMAKE_(\w+)_FLAGS_RELWITHDEBINFO "([^"]*)" CACHE STRING', toolchain))
    assert flags == {"C": "-O2 -DNDEBUG", "CXX": "-O2 -DNDEBUG", "CUDA": "-O2 -DNDEBUG"}
    dockerfile = render_dockerfile(matrix.flavor(name))
    stage = dockerfile[dockerfile.index("FROM frameworks AS horovod"):]
    assert stage.index(f"COPY {file_name} /tmp/build/") < stage.index(f"CMAKE_TOOLCHAIN_FILE=/tmp/build/{file_name} ")
    write_build_context(matrix.flavor(name), SourceOptions(), tmp_path)
    assert (tmp_path / file_name).read_text() == toolchain
