"""Builds a flavor's image, with BuildKit through a docker CLI that drives it or else with the classic builder through
the docker SDK, verifies it, then tags it."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import docker
import docker.errors
import docker.utils.build

from trainrun.image_contract import CONSTRAINTS_PATH, IMAGE_SCRIPTS_DIR, MANIFEST_PATH, SBOM_PATH
from trainstack import docker_client
from trainstack.console import report as progress
from trainstack.errors import TrainstackError
from trainstack.image.build_context import write_build_context
from trainstack.image.build_timing import (
    BUILDKIT_CPU_TIME_SOURCE,
    BuildKitStepTimer,
    BuildSteps,
    StepTimer,
    TimedStep,
    dockerfile_instructions,
    merged_phases,
    record_build_steps,
)
from trainstack.image.components import BUILDER_STAGE
from trainstack.image.dockerfile import (
    BUILDER_IMAGE,
    BUILDER_OUTPUT_STAGE,
    IMAGE_OS_STAGE,
    IMAGE_ROOT,
    IMAGE_STAGES_DOCKERFILE,
    RUNTIME_OS_ROOT,
)
from trainstack.image.manifest import (
    HOROVOD_MODULES,
    SETID_FIND,
    cuda_stack_mismatches,
    manifest_mismatches,
    parse_constraints,
    pip_check_problems,
    setid_problems,
)
from trainstack.image.matrix import REPO_ROOT, Flavor
from trainstack.image.naming import (
    CREATED_FORMAT,
    CREATED_LABEL,
    GHCR_NAMESPACE,
    REVISION_LABEL,
    content_tag,
    image_reference,
    image_tags,
    immutable_tag,
    published_image,
)
from trainstack.image.published import check_published
from trainstack.image.published_images import PUBLISHED_FLAVORS
from trainstack.image.sbom import sbom_problems
from trainstack.image.sources import SourceOptions

BUILD_DIR = REPO_ROOT / "build"
# images/scripts/check_cuda_stack.py, run in GPU images as their user.
CUDA_STACK_CHECK = ["python", f"{IMAGE_SCRIPTS_DIR}/check_cuda_stack.py"]
SLIM_SCRIPT = f"{IMAGE_SCRIPTS_DIR}/slim_site_packages.py"
# Docker keeps these predefined build args out of `docker history`.
PROXY_BUILD_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "FTP_PROXY", "ALL_PROXY")
# A builder script's one-line explanation; the daemon colours stderr with ANSI escapes.
SCRIPT_ERROR = re.compile(r"^(?:\x1b\[\d+m)?error: ([^\x1b\n]+)", re.MULTILINE)
# A line a step wrote, in BuildKit's plain progress: `#VERTEX SECONDS TEXT`.
BUILDKIT_LOG_LINE = re.compile(r"#\d+ \d+\.\d+ (.*)")
# `classic` or `buildkit` forces a builder; unset, the build takes BuildKit where a docker CLI here can drive it.
BUILDER_VARIABLE = "TRAINSTACK_BUILDER"
# The docker CLIs tried for BuildKit: the one on PATH, then Debian's docker.io.
DOCKER_CLIS = ("docker", "/usr/bin/docker")
# The CLI's `docker build` builds with BuildKit itself (DOCKER_BUILDKIT=1) up to 22.x; from 23.0 it needs the buildx
# plugin, whose `buildx build --load` puts the image in the engine's store whichever buildx builder is selected.
LAST_CLI_WITHOUT_BUILDX = 22
# The first engine with BuildKit, on Linux.
BUILDKIT_ENGINE = (18, 9)
CLI_VERSION = re.compile(r"Docker version (\d+)\.(\d+)\S*")
# What the image's own stages read of the build context: the classic builder is sent these alone, not the builder
# stages' files (their wheelhouse holds a 183 MB torch wheel).
IMAGE_STAGES_CONTEXT = (IMAGE_STAGES_DOCKERFILE, RUNTIME_OS_ROOT, IMAGE_ROOT)


@dataclass(frozen=True)
class BuiltImage:
    image_id: str
    tags: list[str]
    manifest: dict
    steps: BuildSteps


def build_image(
    flavor: Flavor,
    image_name: str,
    sources: SourceOptions,
    extra_tags: list[str] | None = None,
    no_cache: bool = False,
    progress: Callable[[str], None] = lambda line: print(line, end="", flush=True),
    must_check: Collection[str] = (),
    skip_published_check: bool = False,
) -> BuiltImage:
    """Builds, verifies against the flavor and tags; a build that fails verification is removed untagged.

    `must_check`: fields of pins an unreachable index may not leave unchecked (check_published).
    """
    if not skip_published_check:
        check_published(flavor, sources, must_check)
    client = docker_client.connect()
    _ensure_base_image(client, flavor.base_image)
    builder = choose_builder(client)
    context = write_build_context(flavor, sources, BUILD_DIR / flavor.name, buildkit=builder.buildkit)
    progress(builder.line(no_cache))
    if builder.buildkit:
        image_id, steps = _build_in_two_phases(client, builder, context, flavor.name, no_cache, progress)
    else:
        timer = StepTimer()
        image_id = run_build(client, context, no_cache, _timed(timer, progress))
        steps = BuildSteps(timer.finish(), timer.elapsed_s, timer.builder, timer.cpu_time)
    record_build_steps(flavor.name, steps)
    try:
        manifest = verify_image(client, image_id, flavor)
    except TrainstackError:
        client.images.remove(image_id, force=True)
        raise
    image = client.images.get(image_id)
    tags = [*(image_reference(image_name, tag) for tag in image_tags(manifest, image.labels)),
            *published_names(image_name, manifest), *(extra_tags or [])]
    if immutable_tag(manifest, image.labels) is None:
        progress(f"no immutable tag: the image has no {REVISION_LABEL} label (built outside a git checkout), "
                 "so `invoke push` will refuse it\n")
    for tag in tags:
        repository, _, name = tag.rpartition(":")
        image.tag(repository, name)
    return BuiltImage(image_id, tags, manifest, steps)


def _timed(timer: StepTimer | BuildKitStepTimer, progress: Callable[[str], None]) -> Callable[[str], None]:
    def timed_progress(text: str) -> None:
        timer.observe(text)
        progress(text)
    return timed_progress


def _build_in_two_phases(client: docker.DockerClient, builder: Builder, context: Path, flavor: str, no_cache: bool,
                         progress: Callable[[str], None]) -> tuple[str, BuildSteps]:
    """The builder stages with BuildKit, tagged BUILDER_IMAGE, while the classic builder makes the image's system stage
    (IMAGE_OS_STAGE, which needs no builder stage), then the image's own stages from both with the classic builder
    (dockerfile.BUILDER_IMAGE says why), image-os from its cache; the image's ID and the phases' steps as one build's.
    With no_cache there is no cache to take image-os from, so it is built once, in the last phase."""
    started = time.monotonic()
    dockerfile = dockerfile_instructions((context / "Dockerfile").read_text())
    image_stages = dockerfile_instructions((context / IMAGE_STAGES_DOCKERFILE).read_text())
    builder_timer = BuildKitStepTimer((context / "Dockerfile").read_text())

    def build_image_os() -> list[TimedStep]:
        timer = StepTimer()
        run_build(client, context, False, _timed(timer, _prefixed(IMAGE_OS_STAGE, progress)), IMAGE_STAGES_DOCKERFILE,
                  target=IMAGE_OS_STAGE, reads=IMAGE_STAGES_CONTEXT)
        return timer.finish()

    with ThreadPoolExecutor(max_workers=1) as classic:
        image_os = None if no_cache else classic.submit(build_image_os)
        run_buildkit_build(builder, context, no_cache, _timed(builder_timer, progress), target=BUILDER_OUTPUT_STAGE,
                           tag=BUILDER_IMAGE.format(flavor=flavor))
        phases = [(dockerfile, builder_timer.finish())]
        if image_os is not None:
            phases.append((image_stages, image_os.result()))
    image_timer = StepTimer()
    image_id = run_build(client, context, no_cache, _timed(image_timer, progress), IMAGE_STAGES_DOCKERFILE,
                         reads=IMAGE_STAGES_CONTEXT)
    phases.append((image_stages, image_timer.finish()))
    beside = "" if image_os is None else f" (its {IMAGE_OS_STAGE} stage while BuildKit built)"
    return image_id, BuildSteps(merged_phases(dockerfile, phases), round(time.monotonic() - started, 3),
                                f"{builder_timer.builder} for the {BUILDER_STAGE} stages, then {image_timer.builder}"
                                f"{beside}", BUILDKIT_CPU_TIME_SOURCE if image_os is None else
                                f"{BUILDKIT_CPU_TIME_SOURCE}; the {IMAGE_OS_STAGE} stage's steps count the CPU of "
                                "BuildKit's steps that ran beside them, as those count theirs")


def _prefixed(stage: str, progress: Callable[[str], None]) -> Callable[[str], None]:
    """The classic builder's output of a stage built beside BuildKit, each line marked with the stage's name (the
    stream splits lines across its chunks)."""
    at_line_start = True

    def marked(text: str) -> None:
        nonlocal at_line_start
        pieces = []
        for piece in text.splitlines(keepends=True):
            pieces.append(f"[{stage}] {piece}" if at_line_start else piece)
            at_line_start = piece.endswith("\n")
        progress("".join(pieces))
    return marked


def published_names(image_name: str, manifest: dict) -> list[str]:
    """A published flavor's names as a pull gives them (its flavor's and content tags under ghcr.io/OWNER), so that
    the pages' commands run as pasted on a local build; not its immutable tag, which names a build CI pushed."""
    if manifest["flavor"] not in PUBLISHED_FLAVORS:
        return []
    return [image_reference(image_name, content_tag(manifest), GHCR_NAMESPACE), published_image(manifest["flavor"])]


def verify_image(client: docker.DockerClient, image: str, flavor: Flavor) -> dict:
    """Checks what the image holds against the flavor; returns its manifest or raises naming every mismatch."""
    progress(f"verify: {MANIFEST_PATH} and {CONSTRAINTS_PATH} against the matrix")
    status, manifest_text = docker_client.run_in_image(client, image, ["cat", MANIFEST_PATH])
    if status != 0:
        raise TrainstackError(f"verify: {MANIFEST_PATH} missing in the image: {manifest_text.strip()}")
    manifest = json.loads(manifest_text)
    _, constraints_text = docker_client.run_in_image(client, image, ["cat", CONSTRAINTS_PATH])
    installed = parse_constraints(constraints_text)
    problems = manifest_mismatches(flavor, manifest, installed)
    progress(f"verify: the SBOM {SBOM_PATH} lists what is installed")
    status, sbom_text = docker_client.run_in_image(client, image, ["cat", SBOM_PATH])
    problems += sbom_problems(flavor, sbom_text if status == 0 else None, installed)
    progress("verify: no setuid/setgid files")
    problems += setid_problems(*docker_client.run_container(
        client, {"image": image, "command": SETID_FIND, "user": "root"}, timeout=300))
    if flavor.prune:
        progress("verify: no file the matrix prunes")
        problems += _pruned_file_problems(client, image, flavor)
    progress("verify: pip check")
    _, pip_check_output = docker_client.run_in_image(client, image, ["pip", "check"])
    problems += pip_check_problems(flavor, pip_check_output)
    progress("verify: " + ("the CUDA stack in one process (frameworks, Horovod, NCCL)" if flavor.gpu
                           else "importing the Horovod extensions"))
    problems += _cuda_stack_problems(client, image, flavor) if flavor.gpu else _import_problems(client, image, flavor)
    if problems:
        raise TrainstackError("verify: the image does not match the matrix:\n  " + "\n  ".join(problems))
    return manifest


def _pruned_file_problems(client: docker.DockerClient, image: str, flavor: Flavor) -> list[str]:
    command = ["python", SLIM_SCRIPT, "--check", flavor.site_packages,
               *(argument for glob in flavor.prune_globs for argument in ("--prune", glob))]
    status, output = docker_client.run_in_image(client, image, command)
    return [] if status == 0 else [output.strip().splitlines()[-1].removeprefix("error: ")]


def _import_problems(client: docker.DockerClient, image: str, flavor: Flavor) -> list[str]:
    """Imports each Horovod extension as the image's user."""
    imports = [f"import {HOROVOD_MODULES[name]}" for name in flavor.field("horovod", "frameworks") or []]
    status, output = docker_client.run_in_image(client, image, ["python", "-c", "; ".join(imports) or "pass"])
    return [] if status == 0 else [f"importing the Horovod extensions failed: {output.strip().splitlines()[-1:]}"]


def _cuda_stack_problems(client: docker.DockerClient, image: str, flavor: Flavor) -> list[str]:
    """The CUDA stack as one process of the image's user sees it, after importing every framework and extension."""
    status, output = docker_client.run_in_image(client, image, CUDA_STACK_CHECK)
    report = next((line for line in reversed(output.splitlines()) if line.startswith("{")), None)
    if status != 0 or report is None:
        return [f"{' '.join(CUDA_STACK_CHECK)} failed (exit {status}): {output.strip().splitlines()[-1:]}"]
    return [f"in the image: {problem}" for problem in cuda_stack_mismatches(flavor, json.loads(report))]


@dataclass(frozen=True)
class Builder:
    """The builder a build gets, and why: BuildKit through `cli` (`buildx` where that CLI needs its plugin), or the
    classic builder through the docker SDK."""

    buildkit: bool
    why: str
    cli: str | None = None
    buildx: bool = False

    def line(self, no_cache: bool = False) -> str:
        """What builds what, and why; with `no_cache`, the image's system stage has no cache to come from, so it is
        built after the builder stages, not beside them (_build_in_two_phases)."""
        where = "after them: --no-cache" if no_cache else "beside them"
        how = (f"BuildKit through {self.cli} for the builder stages, classic for the image's own (its {IMAGE_OS_STAGE} "
               f"stage {where})"
               if self.buildkit else "classic, through the docker SDK")
        return f"builder: {how}: {self.why}\n"


def choose_builder(client: docker.DockerClient) -> Builder:
    """BuildKit where the engine has it and a docker CLI here drives it (TRAINSTACK_BUILDER=classic|buildkit
    forces one); else the classic builder, which builds the same layers one stage after another."""
    forced = os.environ.get(BUILDER_VARIABLE)
    if forced not in (None, "", "classic", "buildkit"):
        raise TrainstackError(f"${BUILDER_VARIABLE} = {forced!r}: expected classic or buildkit")
    if forced == "classic":
        return Builder(False, f"${BUILDER_VARIABLE}=classic")
    engine = client.version()
    engine_version = tuple(int(part) for part in re.findall(r"\d+", engine.get("Version", "0.0"))[:2])
    if engine.get("Os") != "linux" or engine_version < BUILDKIT_ENGINE:
        reason = f"the engine ({engine.get('Version')} on {engine.get('Os')}) has no BuildKit"
    else:
        found = []
        for cli in dict.fromkeys(path for path in map(shutil.which, DOCKER_CLIS) if path):
            version = _cli_version(cli)
            if version is None:
                continue
            if version[0] <= LAST_CLI_WITHOUT_BUILDX:
                return Builder(True, f"docker {'.'.join(map(str, version))} with DOCKER_BUILDKIT=1 (engine "
                                     f"{engine['Version']}): independent stages build at once, pip's downloads come "
                                     "from a cache mount", cli)
            if subprocess.run([cli, "buildx", "version"], capture_output=True).returncode == 0:
                return Builder(True, f"docker {'.'.join(map(str, version))} with buildx (engine {engine['Version']}): "
                                     "independent stages build at once, pip's downloads come from a cache mount",
                               cli, buildx=True)
            found.append(f"{cli} is docker {'.'.join(map(str, version))} without the buildx plugin")
        reason = "; ".join(found) or "no docker CLI found"
        reason += f" (BuildKit needs a CLI up to {LAST_CLI_WITHOUT_BUILDX}.x or buildx)"
    if forced == "buildkit":
        raise TrainstackError(f"${BUILDER_VARIABLE}=buildkit: {reason}")
    return Builder(False, f"{reason}; the stages build one after another")


def _cli_version(cli: str) -> tuple[int, int] | None:
    answer = subprocess.run([cli, "--version"], capture_output=True, text=True)
    found = CLI_VERSION.match(answer.stdout.strip())
    return (int(found[1]), int(found[2])) if answer.returncode == 0 and found else None


def run_buildkit_build(builder: Builder, context: Path, no_cache: bool, progress: Callable[[str], None], target: str,
                       tag: str) -> str:
    """Builds the context's Dockerfile up to stage `target` with BuildKit through the builder's CLI, tagged `tag`, its
    plain progress passed to `progress` line by line; returns the image ID."""
    with tempfile.TemporaryDirectory(prefix="trainstack-build-") as scratch:
        iidfile = Path(scratch) / "image-id"
        command = [builder.cli, *(["buildx", "build", "--load"] if builder.buildx else ["build"]),
                   "--progress=plain", "--iidfile", str(iidfile), "--target", target, "--tag", tag,
                   *(["--no-cache"] if no_cache else []),
                   # A name without a value: the CLI passes the variable's value from its environment.
                   *(argument for name in PROXY_BUILD_ARGS if os.environ.get(name)
                     for argument in ("--build-arg", name)),
                   str(context)]
        explanation = failure = None
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "DOCKER_BUILDKIT": "1"}) as build:
            assert build.stdout is not None
            for line in build.stdout:
                progress(line)
                written = BUILDKIT_LOG_LINE.match(line)
                if written:
                    explanation = next(iter(SCRIPT_ERROR.findall(written[1])), explanation)
                elif line.lower().startswith(("error:", "failed to solve")):
                    failure = line.strip()
        if build.returncode != 0:
            failure = failure or f"{builder.cli} build exited with {build.returncode}"
            raise TrainstackError(f"build: {explanation}\n  ({failure})" if explanation else f"build: {failure}")
        return iidfile.read_text().strip()


def run_build(client: docker.DockerClient, context: Path, no_cache: bool, progress: Callable[[str], None],
              dockerfile: str = "Dockerfile", target: str | None = None, reads: Collection[str] | None = None) -> str:
    """Builds the context's `dockerfile` (up to stage `target`, if given) with the classic builder through the docker
    SDK, sent the whole context or, given `reads`, those of its entries alone; returns the image ID."""
    image_id = None
    # The builder's scripts explain a failure on one line starting so; docker's own error only gives the exit code.
    explanation = None
    with contextlib.ExitStack() as sent_files:
        sent = None if reads is None else sent_files.enter_context(docker.utils.build.tar(
            str(context), exclude=sorted(entry.name for entry in context.iterdir() if entry.name not in reads)))
        stream = client.api.build(
            path=None if sent else str(context),
            fileobj=sent,
            custom_context=sent is not None,
            dockerfile=dockerfile,
            target=target,
            rm=True,
            forcerm=True,
            nocache=no_cache,
            decode=True,
            buildargs={name: os.environ[name] for name in PROXY_BUILD_ARGS if os.environ.get(name)},
            labels=_build_labels(),
        )
        for chunk in stream:
            if "stream" in chunk:
                progress(chunk["stream"])
                explanation = next(iter(SCRIPT_ERROR.findall(chunk["stream"])), explanation)
            if "error" in chunk:
                reason = f"{explanation}\n  ({chunk['error'].strip()})" if explanation else chunk["error"].strip()
                raise TrainstackError(f"build: {reason}")
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    if image_id is None:
        raise TrainstackError("build: the daemon finished without reporting an image")
    return image_id


def _build_labels() -> dict[str, str]:
    labels = {CREATED_LABEL: datetime.now(timezone.utc).strftime(CREATED_FORMAT)}
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    if revision.returncode == 0:
        labels[REVISION_LABEL] = revision.stdout.strip()
    return labels


def _ensure_base_image(client: docker.DockerClient, base_image: str) -> None:
    try:
        client.images.get(base_image)
        return
    except docker.errors.ImageNotFound:
        pass
    print(f"pulling base image {base_image}", file=sys.stderr)
    try:
        client.images.pull(base_image)
    except docker.errors.APIError as exc:
        raise TrainstackError(
            f"--base-image: {base_image} is not present and could not be pulled ({exc.explanation}); "
            "on a machine without a registry run `invoke base` and build with --base-image trainstack/debian-base:bookworm"
        ) from exc
