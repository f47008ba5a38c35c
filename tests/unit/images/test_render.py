from pathlib import Path

import pytest

from trainstack.errors import TrainstackError
from trainstack.image.build_context import write_build_context
from trainstack.image.dockerfile import (
    IMAGE_ROOT,
    LAYER_MTIME,
    PIP_CACHE_MOUNT,
    RUNTIME_OS_ROOT,
    STEP_END,
    STEP_START,
    render_dockerfile,
)
from trainstack.image.matrix import load_matrix
from trainstack.image.requirements import framework_requirements, library_requirements, no_deps_requirements
from trainstack.image.sources import SourceOptions, sources_for

PROXY_SOURCES = SourceOptions(ca_bundle=Path("/ca.pem"), wheelhouse=Path("/wheels"))


@pytest.fixture(scope="module")
def cpu():
    return load_matrix().flavor("cpu")


def final_stage(dockerfile: str) -> str:
    return dockerfile.split("# --- the image ---")[1]


def image_os_stage(dockerfile: str) -> str:
    """The stage of the image's system layers, from its FROM to the next stage's heading."""
    start = "FROM runtime-os AS image-os"
    return start + dockerfile.split(start)[1].split("\n# --- ")[0]


def test_cpu_dockerfile_matches_golden(cpu, golden):
    golden("Dockerfile.cpu", render_dockerfile(cpu))


def test_cpu_dockerfile_behind_a_proxy_matches_golden(cpu, golden):
    golden("Dockerfile.cpu-proxy", render_dockerfile(cpu, PROXY_SOURCES))


def test_cpu_dockerfile_for_buildkit_matches_golden(cpu, golden):
    golden("Dockerfile.cpu-buildkit", render_dockerfile(cpu, PROXY_SOURCES, buildkit=True))


def test_the_image_stages_apart_are_the_dockerfiles_own_from_the_builders_image(cpu):
    """A BuildKit build makes the image's own stages with the classic builder from this Dockerfile: the same stages,
    the builder's stages replaced by its image."""
    whole = render_dockerfile(cpu, PROXY_SOURCES)
    image_stages = render_dockerfile(cpu, PROXY_SOURCES, builder_image="trainstack-builder:cpu")
    assert image_stages.split("# --- builder:")[0] == whole.split("# --- frameworks:")[0]
    assert final_stage(image_stages) == final_stage(whole)
    between = image_stages.split("# --- builder:")[1].split("---\n", 1)[1].split("# --- the image ---")[0]
    assert instructions(between) == ["FROM trainstack-builder:cpu AS builder"]


def test_buildkit_keeps_pips_cache_in_a_cache_mount_and_the_image_stages_as_they_are(cpu):
    """The same Dockerfile but for the builder's pip steps: each keeps pip's cache in a cache mount rather than
    turning it off, so a rebuild's downloads come from there; the image's own stages do not change."""
    classic, buildkit = render_dockerfile(cpu, PROXY_SOURCES), render_dockerfile(cpu, PROXY_SOURCES, buildkit=True)
    assert 'ENV PIP_NO_CACHE_DIR="1"' in classic.split("# --- the image ---")[0]
    assert 'ENV PIP_NO_CACHE_DIR="1"' not in buildkit.split("# --- the image ---")[0]
    pip_steps = [line for line in instructions(buildkit.split("# --- the image ---")[0])
                 if line.startswith("RUN ") and " pip " in f" {line} "]
    assert pip_steps and all(line.startswith(f"RUN {PIP_CACHE_MOUNT}") for line in pip_steps)
    # And a last builder stage of what the image copies from the builder, which BuildKit exports as the builder image.
    output_stage = buildkit[buildkit.index("\n# --- builder-output:"):buildkit.index("\n# --- the image ---")]
    assert instructions(output_stage) == ["FROM scratch AS builder-output",
                                          "COPY --from=builder /tmp/build/venv-layers/ /tmp/build/venv-layers/",
                                          "COPY --from=builder /tmp/build/venv-layers-report/ /tmp/build/venv-layers-report/"]
    assert buildkit.replace(PIP_CACHE_MOUNT, "").replace(output_stage, "") == classic.replace(
        'ENV PIP_NO_CACHE_DIR="1"\n', "", 1)


def test_ca_bundle_and_wheelhouse_stay_in_the_builder_stage(cpu):
    dockerfile = render_dockerfile(cpu, PROXY_SOURCES)
    assert "COPY build-ca/ca-bundle.crt" in dockerfile
    image = final_stage(dockerfile)
    for leftover in ("build-ca", "PIP_CERT", "wheelhouse", "PIP_EXTRA_INDEX_URL"):
        assert leftover not in image


def test_final_image_gets_only_torch_compiles_toolchain(cpu):
    dockerfile = render_dockerfile(cpu)
    runtime_os = dockerfile.split("# --- image-os:")[0]
    assert "apt-get install" in runtime_os and "gcc" not in runtime_os  # the builder never rebuilds for the toolchain
    image = image_os_stage(dockerfile) + final_stage(dockerfile)
    assert instructions(image_os_stage(dockerfile))[0] == "FROM runtime-os AS image-os"
    assert instructions(final_stage(dockerfile))[0] == "FROM image-os"
    installs = [line for line in image.splitlines() if "apt-get install" in line]
    assert installs == [" && apt-get install -y --no-install-recommends gcc g++ libc6-dev libpython3-dev \\"]
    for excluded in ("lto1", "lib*san.so*", "libpython3*.a"):
        assert excluded in image
    assert image.index("apt-get install") < image.index("COPY --from=builder /tmp/build/venv-layers/")


def test_torch_headers_stay_and_tensorflows_go(cpu):
    builder = render_dockerfile(cpu).split("# --- frameworks:")[1].split("# --- the image ---")[0]
    assert " && rm -rf tensorflow/include \\\n" in builder


def test_every_horovod_extension_is_required(cpu):
    dockerfile = render_dockerfile(cpu)
    for flag in ("HOROVOD_WITH_PYTORCH=1", "HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1"):
        assert flag in dockerfile


def test_requirements_pin_the_matrix_versions(cpu):
    assert framework_requirements(cpu)[-2:] == ["torch==2.13.0+cpu", "tensorflow-cpu==2.21.0"]
    assert not any(line.startswith("torchvision") for line in framework_requirements(cpu) + library_requirements(cpu))
    for pin in ("pyspark==4.3.0", "tensorboard==2.20.0", "pandas==2.3.3"):
        assert pin in library_requirements(cpu)


def test_no_deps_packages_are_installed_apart(cpu):
    assert no_deps_requirements(cpu) == ["tf_keras==2.21.0"]
    assert not any(line.startswith("tf_keras") for line in library_requirements(cpu))


def test_overridden_versions_reach_the_requirements():
    flavor = load_matrix().flavor("cpu", {"pyspark": "4.2.1"})
    assert "pyspark==4.2.1" in library_requirements(flavor)


def test_build_context_holds_what_the_dockerfile_copies(cpu, tmp_path):
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    context = write_build_context(cpu, SourceOptions(ca_bundle=ca, wheelhouse=wheelhouse), tmp_path / "ctx")
    for path in ("Dockerfile", "requirements-frameworks.txt", "requirements-libraries.txt", "patches", "scripts/write_manifest.py", "image-root/opt/trainstack/src/launcher",
                 "build-ca/ca-bundle.crt", "wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"):
        assert (context / path).exists(), path


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ca_bundle": "/nonexistent/ca.pem"}, "--ca-bundle = '/nonexistent/ca.pem': is not a file"),
        ({"wheelhouse": "/nonexistent/wheels"}, "--wheelhouse = '/nonexistent/wheels': is not a directory"),
    ],
)
def test_missing_source_paths_are_refused_where_the_options_are_read(cpu, options, message):
    with pytest.raises(TrainstackError, match=message):
        sources_for(cpu, **options)


def test_empty_wheelhouse_is_refused(cpu, tmp_path):
    with pytest.raises(TrainstackError, match="holds no .whl files"):
        sources_for(cpu, wheelhouse=str(tmp_path))


def test_a_build_checks_its_sources_once(monkeypatch, tmp_path):
    """`invoke build` reads and checks the source options once, then writes the context and builds with them."""
    from invoke import Context

    from trainstack import docker_client
    from trainstack.image import build, build_context, sources
    from trainstack.tasks import images

    checked = []
    real_check = sources.check_sources
    counted = lambda *args: checked.append(args) or real_check(*args)  # noqa: E731
    for module in (sources, build, build_context):  # wherever a caller may have imported it by name
        monkeypatch.setattr(module, "check_sources", counted, raising=False)
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path)
    monkeypatch.setenv(build.BUILDER_VARIABLE, "classic")
    monkeypatch.setattr(docker_client, "connect", lambda: object())
    monkeypatch.setattr(build, "_ensure_base_image", lambda client, base: None)

    class BuildStarted(Exception):
        pass

    def run_build(client, context, no_cache, progress):
        assert (context / "Dockerfile").is_file()
        raise BuildStarted

    monkeypatch.setattr(build, "run_build", run_build)
    with pytest.raises(BuildStarted):
        images.build(Context(), set=[], skip_published_check=True)
    assert len(checked) == 1


def instructions(stage: str) -> list[str]:
    """A stage's instructions, each with its continuation lines joined and comments left out."""
    joined = []
    for line in stage.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
        else:
            joined.append(line)
    return joined


@pytest.mark.parametrize("name", ["cpu", "gpu", "gpu-cu13"])
def test_every_layer_of_the_image_is_made_the_same_in_every_build(name):
    # A RUN step of runtime-os or of the image begins by noting the time and ends in the step script, which
    # normalizes what the step changed since; a COPY writes a folder of normalized files into /, so that no folder
    # it makes carries the time of the build. The builder's steps reach the image only through such COPYs.
    dockerfile = render_dockerfile(load_matrix().flavor(name))
    runtime_os = dockerfile.split("AS runtime-os")[1].split("# --- image-os")[0]
    for stage in (runtime_os, image_os_stage(dockerfile), final_stage(dockerfile)):
        for instruction in instructions(stage):
            if instruction.startswith("RUN "):
                assert instruction.startswith(f"RUN {STEP_START} && ") and instruction.endswith(f"&& {STEP_END}")
            elif instruction.startswith("COPY "):
                assert instruction.endswith("/ /"), instruction
    assert instructions(runtime_os)[1] == f"COPY {RUNTIME_OS_ROOT}/ /"


def test_the_folders_copied_into_root_are_normalized_whatever_the_clone(cpu, tmp_path):
    context = write_build_context(cpu, SourceOptions(), tmp_path / "ctx")
    for root in (context / RUNTIME_OS_ROOT, context / IMAGE_ROOT):
        paths = [root, *root.rglob("*")]
        assert {path.lstat().st_mtime for path in paths} == {LAYER_MTIME}
        assert {oct(path.lstat().st_mode & 0o7777) for path in paths if path.is_dir()} == {"0o755"}
        assert {oct(path.lstat().st_mode & 0o7777) for path in paths if path.is_file()} <= {"0o644", "0o755"}
    assert (context / IMAGE_ROOT / "opt/trainstack/bin/trainstack-entrypoint").stat().st_mode & 0o777 == 0o755
    assert not (context / IMAGE_ROOT / "tmp").exists()  # a folder copied over /tmp would take its 1777 away
