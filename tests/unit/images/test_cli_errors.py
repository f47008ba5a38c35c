"""Bad input to the invoke tasks: one clear error, a non-zero exit, and no docker call made."""
import os
import subprocess
import sys

import pytest

from trainstack.image.matrix import REPO_ROOT


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        # The unit tier stays off the network: no check of the pins against the package index.
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock", "TRAINSTACK_SKIP_PUBLISHED_CHECK": "1",
             **(env or {})},
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["build", "--flavor", "tpu"], "error: --flavor = 'tpu': is not a flavor (valid: cpu, gpu, gpu-cu13)\n"),
        (["build", "--gpu", "--set", "torch=2.10.0", "--set", "tensorflow=2.21.0"],
         "error: rule tensorflow-2.21-cuda-stack:"),
        (["build", "--set", "torch"], "error: --set: 1 error\n  - --set = 'torch': must look like key=value"),
        (["build", "--ca-bundle", "/nonexistent/ca.pem"], "error: --ca-bundle = '/nonexistent/ca.pem': is not a file (valid: a PEM bundle"),
        (["render", "--wheelhouse", "/nonexistent/wheels"], "error: --wheelhouse = '/nonexistent/wheels': is not a directory (valid: a folder of .whl files)\n"),
        (["build", "--tag", "bad tag!"], "error: --tag = 'bad tag!': is not a docker image reference"),
        # The option named as given, the example said once.
        (["build", "--base-image", "::bad::"],
         "error: --base-image = '::bad::': is not a docker image reference (valid: a docker image reference, e.g. "
         "debian:bookworm-slim or registry:5000/debian-base:bookworm, with no whitespace, quotes or shell "
         "metacharacters)\n"),
        (["build", "--index-url", "http://pypi.example.org/simple"],
         "error: --index-url = 'http://pypi.example.org/simple': is not an https URL"),
        (["build", "--extra-index-url", "https://ok.example.org/simple", "--extra-index-url", "ftp://x"],
         "error: --extra-index-url = 'ftp://x': is not an https URL"),
        (["pool.up", "--workers", "two"], "error: --workers = 'two': is not a whole number (valid: a whole number >= 0)"),
        (["train", "--flavor", "nope"], "error: --flavor = 'nope': is not a flavor"),
        (["build", "--set", "java.apt_package=x; echo INJ"],
         "error: --set java.apt_package = 'x; echo INJ': is not an image, flavor, component or package name "
         "(valid: an image, flavor, component or package name, with no whitespace, quotes or shell metacharacters)\n"),
        (["build", "--set", "horovod.patch=/etc/passwd"],
         "error: --set horovod.patch.0 = '/etc/passwd': is not a file in images/patches/ (valid: horovod-0.28.1-common-once.patch, "),
        (["build", "--set", "torch.version=1.0-foo-bar"],
         "error: --set torch.version = '1.0-foo-bar': is not a version (PEP 440) "
         "(valid: a version, e.g. 2.10.0 or 2.13.0+cpu)\n"),
        (["template.validate", "/etc/passwd"],
         "error: template 'passwd': 1 error\n  - template = '/etc/passwd': is not a valid template: it holds a YAML "
         "scalar, not a mapping (valid: a YAML mapping with keys such as description, nodes, executor, gpu)\n"),
        (["template.validate", "local-pool", "--set", "gpu.per_task=nan"],
         "error: template 'local-pool': 1 error\n  - gpu.per_task = nan: must be a finite number (valid: a number)\n"),
        (["build", "--gpu", "--flavor", "cpu"],
         "error: --flavor = 'cpu': cannot be given with --gpu (valid: --gpu alone (the gpu flavor), or --flavor NAME "
         "alone)\n"),
        (["push", "--gpu", "--flavor", "gpu", "--registry", "localhost:5000"], "error: --flavor = 'gpu': cannot be given"),
        (["push", "--registry", "not a registry!!"],
         "error: --registry = 'not a registry!!': is not a registry (valid: HOST[:PORT][/PATH]"),
        (["push", "--flavor", "tpu", "--registry", "localhost:5000"], "error: --flavor = 'tpu': is not a flavor"),
        (["pull", "--registry", "not a registry!!"], "error: --registry = 'not a registry!!': is not a registry"),
        (["pull", "--registry", "localhost:5000", "--tag", "bad tag!"],
         "error: --tag = 'bad tag!': is not a tag or a digest (valid: a tag such as cpu or "),
        (["pull", "--registry", "localhost:5000", "--tag", "cpu", "--gpu"],
         "error: --tag = 'cpu': cannot be given with --gpu or --flavor (valid: --tag alone, or a flavor alone)\n"),
        (["test", "--tier", "units"], "error: --tier = 'units': is not a test tier (valid: unit, integration, image)\n"),
        # invoke's own parse errors, in the same format.
        (["template.render", "local-pool"],
         "error: --target = '': is required by `invoke template.render` (valid: `invoke template.render --target "
         "VALUE`; `invoke --help template.render` says what it takes)\n"),
        (["push"], "error: --registry = '': is required by `invoke push`"),
        (["buidl"], "error: task = 'buidl': is not a task (valid: build (the closest); `invoke --list` lists them)\n"),
        (["--help", "buidl"], "error: task = 'buidl': is not a task (valid: build (the closest)"),
        (["template.valdate", "local-pool"], "error: task = 'template.valdate': is not a task (valid: template.validate"),
        (["build", "--no-cahce"],
         "error: build option = '--no-cahce': is not an option of `invoke build` (valid: --no-cache (the closest); "
         "`invoke --help build` lists them)\n"),
        (["pool.up", "--workers"], "error: --workers = '': needs a value (valid: `invoke pool.up --workers VALUE`"),
        (["release-notes", "BAD REF", "trainstack:cpu"],
         "error: --from-image = 'BAD REF': is not a docker image reference (valid: [REGISTRY/]NAME[:TAG]"),
        (["release-notes", "trainstack:cpu"], "error: --to-image = '': is required by `invoke release-notes`"),
        (["release-notes", "trainstack:a", "trainstack:b"], "error: docker: the daemon is not reachable"),
        (["build"], "error: docker: the daemon is not reachable"),
        (["push", "--registry", "localhost:5000"], "error: docker: the daemon is not reachable"),
    ],
)
def test_bad_input_gives_one_clear_error(args, message):
    result = invoke(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


UNREACHABLE_INDEX = ["--index-url", "https://127.0.0.1:1/simple", "--extra-index-url", "https://127.0.0.1:1/simple"]
CHECKED_PINS = {"TRAINSTACK_SKIP_PUBLISHED_CHECK": "0", "TRAINSTACK_WHEELHOUSE": ""}


def test_a_set_pin_no_index_answered_for_stops_the_build_before_docker():
    result = invoke("build", "--set", "torch=9.9.9", *UNREACHABLE_INDEX, env=CHECKED_PINS)
    assert result.returncode == 2
    error = result.stderr.splitlines()[-1]
    assert error.startswith("error: torch.version = '9.9.9': could not be checked: no index answered "
                            "(https://127.0.0.1:1/simple: "), result.stderr
    assert error.endswith("(valid: a version from a reachable index (--index-url), or --skip-published-check to "
                          "build without the check)")
    # The matrix's own pins, which the build's pip may reach through a proxy, only warn.
    assert result.stderr.startswith("warning: could not check that these pins are published")
    assert "docker" not in result.stderr


def test_skip_published_check_goes_on_to_docker():
    result = invoke("build", "--set", "torch=9.9.9", "--skip-published-check", *UNREACHABLE_INDEX, env=CHECKED_PINS)
    assert (result.returncode, result.stderr.splitlines()[-1][:40]) == (2, "error: docker: the daemon is not reachab")
