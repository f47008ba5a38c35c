"""Which builder `invoke build` takes (trainstack.image.build.choose_builder) and the one line saying why: BuildKit
through a docker CLI that drives it (up to 22.x with DOCKER_BUILDKIT=1, or with buildx), else the classic builder
through the docker SDK; TRAINSTACK_BUILDER forces one."""
from __future__ import annotations

import subprocess

import pytest

from trainstack.errors import TrainstackError
from trainstack.image import build


class Engine:
    def __init__(self, version: str = "20.10.24+dfsg1", os: str = "linux"):
        self.answer = {"Version": version, "Os": os}

    def version(self) -> dict:
        return self.answer


def machine(monkeypatch, clis: dict[str, str], buildx: set[str] = frozenset()) -> None:
    """docker CLIs at these paths with these `--version` answers; `buildx`: the ones with the plugin."""
    monkeypatch.delenv(build.BUILDER_VARIABLE, raising=False)
    on_path = next(iter(clis))
    monkeypatch.setattr(build.shutil, "which", lambda name: on_path if name == "docker" else clis.get(name) and name)

    def run(command, **kwargs):
        if command[1:] == ["--version"]:
            return subprocess.CompletedProcess(command, 0, f"{clis[command[0]]}\n", "")
        assert command[1:] == ["buildx", "version"]
        return subprocess.CompletedProcess(command, 0 if command[0] in buildx else 1, "", "")

    monkeypatch.setattr(build.subprocess, "run", run)


def test_debians_docker_20_10_builds_with_buildkit_where_the_docker_on_path_lacks_buildx(monkeypatch):
    machine(monkeypatch, {"/usr/local/bin/docker": "Docker version 28.2.2, build e6534b4",
                          "/usr/bin/docker": "Docker version 20.10.24+dfsg1, build 297e128"})
    chosen = build.choose_builder(Engine())
    assert (chosen.buildkit, chosen.cli, chosen.buildx) == (True, "/usr/bin/docker", False)
    assert chosen.line() == (
        "builder: BuildKit through /usr/bin/docker for the builder stages, classic for the image's own (its image-os "
        "stage beside them): docker "
        "20.10 with DOCKER_BUILDKIT=1 (engine 20.10.24+dfsg1): independent stages build at once, pip's downloads come "
        "from a cache mount\n")
    assert "(its image-os stage after them: --no-cache): docker 20.10" in chosen.line(no_cache=True)


def test_a_cli_with_buildx_builds_through_buildx(monkeypatch):
    machine(monkeypatch, {"/usr/local/bin/docker": "Docker version 28.2.2, build e6534b4"},
            buildx={"/usr/local/bin/docker"})
    chosen = build.choose_builder(Engine("28.2.2"))
    assert (chosen.buildkit, chosen.cli, chosen.buildx) == (True, "/usr/local/bin/docker", True)


def test_without_a_cli_that_drives_buildkit_the_build_is_classic_and_says_why(monkeypatch):
    machine(monkeypatch, {"/usr/local/bin/docker": "Docker version 28.2.2, build e6534b4"})
    chosen = build.choose_builder(Engine("28.2.2"))
    assert not chosen.buildkit
    assert chosen.line() == (
        "builder: classic, through the docker SDK: /usr/local/bin/docker is docker 28.2 without the buildx plugin "
        "(BuildKit needs a CLI up to 22.x or buildx); the stages build one after another\n")


def test_an_engine_without_buildkit_gets_the_classic_builder(monkeypatch):
    machine(monkeypatch, {"/usr/bin/docker": "Docker version 20.10.24+dfsg1, build 297e128"})
    assert build.choose_builder(Engine("18.06.3-ce")).line() == (
        "builder: classic, through the docker SDK: the engine (18.06.3-ce on linux) has no BuildKit; the stages "
        "build one after another\n")


def test_trainstack_builder_forces_one(monkeypatch):
    machine(monkeypatch, {"/usr/local/bin/docker": "Docker version 28.2.2, build e6534b4"})
    monkeypatch.setenv(build.BUILDER_VARIABLE, "classic")
    assert build.choose_builder(object()).line() == (
        "builder: classic, through the docker SDK: $TRAINSTACK_BUILDER=classic\n")
    monkeypatch.setenv(build.BUILDER_VARIABLE, "buildkit")
    with pytest.raises(TrainstackError, match=r"^\$TRAINSTACK_BUILDER=buildkit: /usr/local/bin/docker is docker 28.2 "):
        build.choose_builder(Engine("28.2.2"))
    monkeypatch.setenv(build.BUILDER_VARIABLE, "kaniko")
    with pytest.raises(TrainstackError, match="expected classic or buildkit"):
        build.choose_builder(Engine())


def fake_cli(tmp_path, script: str) -> build.Builder:
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\n" + script)
    cli.chmod(0o755)
    return build.Builder(True, "a fake CLI", str(cli))


def test_a_buildkit_build_passes_its_progress_on_and_returns_the_image_id(tmp_path):
    builder = fake_cli(tmp_path, 'while [ "$1" != --iidfile ]; do shift; done\n'
                                 'echo "#5 [base 1/1] RUN true"; echo "#5 DONE 0.1s"; printf sha256:abc > "$2"\n')
    lines = []
    assert build.run_buildkit_build(builder, tmp_path, False, lines.append, "builder", "b:cpu") == "sha256:abc"
    assert lines == ["#5 [base 1/1] RUN true\n", "#5 DONE 0.1s\n"]


def test_a_failed_buildkit_build_names_its_scripts_explanation_and_buildkits_error(tmp_path):
    builder = fake_cli(tmp_path, 'echo "#9 12.34 error: torch 2.13.0 is not the matrix\'s 2.12.0"\n'
                                 'echo "#9 ERROR: executor failed running [/bin/sh -c check]: exit code: 2"\n'
                                 'echo "error: failed to solve: executor failed running [/bin/sh -c check]: '
                                 'exit code: 2"\n'
                                 'exit 1\n')
    with pytest.raises(TrainstackError) as failed:
        build.run_buildkit_build(builder, tmp_path, True, lambda line: None, "builder", "b:cpu")
    assert str(failed.value) == ("build: torch 2.13.0 is not the matrix's 2.12.0\n"
                                 "  (error: failed to solve: executor failed running [/bin/sh -c check]: exit code: 2)")


def test_the_stage_built_beside_buildkit_marks_each_line_once_however_the_stream_splits_it():
    shown = []
    marked = build._prefixed("image-os", shown.append)
    for chunk in ("Step 1/2 : FROM base", "\n", " ---> abc\nStep 2/2 : RUN x\n", " ---> Running in d\n"):
        marked(chunk)
    assert "".join(shown) == ("[image-os] Step 1/2 : FROM base\n[image-os]  ---> abc\n[image-os] Step 2/2 : RUN x\n"
                              "[image-os]  ---> Running in d\n")
