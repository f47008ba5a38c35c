"""invoke tasks: thin wrappers over the trainstack package.

Options that depend on the machine default to environment variables, so one machine's setup
(see ./dev) is written once: TRAINSTACK_BASE_IMAGE, TRAINSTACK_WHEELHOUSE, TRAINSTACK_CA_BUNDLE.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pooltemplates.pool_tasks
import pooltemplates.tasks
from invoke import Collection, task

from trainstack.errors import TrainstackError


def user_errors(function):
    """Prints a TrainstackError as one clear message and exits non-zero."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except TrainstackError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper


def _flavor(gpu: bool, flavor: str | None, settings: list[str], base_image: str | None = None):
    from trainstack.matrix import load_matrix, parse_overrides

    overrides = parse_overrides(settings)
    base_image = base_image or os.environ.get("TRAINSTACK_BASE_IMAGE")
    if base_image:
        overrides.setdefault("base_image", base_image)
    matrix = load_matrix()
    return matrix, matrix.flavor(flavor or ("gpu" if gpu else "cpu"), overrides)


def _sources(ca_bundle, wheelhouse, index_url, extra_index_url):
    from trainstack.render import SourceOptions

    ca_bundle = ca_bundle or os.environ.get("TRAINSTACK_CA_BUNDLE")
    wheelhouse = wheelhouse or os.environ.get("TRAINSTACK_WHEELHOUSE")
    return SourceOptions(
        ca_bundle=Path(ca_bundle) if ca_bundle else None,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        index_url=index_url,
        extra_index_urls=list(extra_index_url or []),
    )


@task(help={"gpu": "show only GPU flavors"})
@user_errors
def matrix(c, gpu=False):
    """Print every flavor of images/matrix.yaml with its component versions."""
    from trainstack.matrix import load_matrix
    from trainstack.report import flavor_table

    print(flavor_table(load_matrix(), gpu_only=gpu))


@task
def docs(c):
    """Regenerate the README's version table (from the matrix) and workflow table."""
    from trainstack.matrix import REPO_ROOT, load_matrix
    from trainstack.report import with_generated_tables
    from trainstack.workflows import WORKFLOWS

    readme = REPO_ROOT / "README.md"
    readme.write_text(with_generated_tables(readme.read_text(), load_matrix(), WORKFLOWS))


@task(iterable=["set"], help={"gpu": "the gpu flavor", "flavor": "any flavor by name", "set": "override KEY=VALUE"})
@user_errors
def render(c, gpu=False, flavor=None, set=None, base_image=None, ca_bundle=None, wheelhouse=None):
    """Render a flavor's Dockerfile and build context under build/FLAVOR/ for inspection."""
    from trainstack.build import BUILD_DIR
    from trainstack.render import write_build_context

    _, chosen = _flavor(gpu, flavor, set, base_image)
    out = write_build_context(chosen, _sources(ca_bundle, wheelhouse, None, None), BUILD_DIR / chosen.name)
    print(out / "Dockerfile")


@task(
    iterable=["set", "extra_index_url", "tag"],
    help={
        "gpu": "build the gpu flavor",
        "flavor": "build any flavor by name",
        "set": "override a matrix value, KEY=VALUE (e.g. torch=2.10.0); checked against the rules first",
        "base-image": "base image (default: the matrix's, or $TRAINSTACK_BASE_IMAGE)",
        "wheelhouse": "folder of wheels pip may use (default $TRAINSTACK_WHEELHOUSE)",
        "index-url": "pip index replacing PyPI",
        "extra-index-url": "extra pip index (repeatable); replaces the flavor's own",
        "ca-bundle": "CA bundle for TLS-intercepting proxies, used during the build only (default $TRAINSTACK_CA_BUNDLE)",
        "tag": "extra tag NAME:TAG (repeatable)",
        "no-cache": "build every layer anew",
    },
)
@user_errors
def build(c, gpu=False, flavor=None, set=None, base_image=None, wheelhouse=None, index_url=None,
          extra_index_url=None, ca_bundle=None, tag=None, no_cache=False):
    """Build, verify and tag a training image (default: the cpu flavor)."""
    from trainstack.build import build_image

    image_matrix, chosen = _flavor(gpu, flavor, set, base_image)
    built = build_image(chosen, image_matrix.image_name, _sources(ca_bundle, wheelhouse, index_url, extra_index_url),
                        extra_tags=tag, no_cache=no_cache)
    print(f"\nbuilt and verified {built.image_id[:19]}: " + ", ".join(built.tags))


@task(help={"tag": "tag of the base image to make"})
@user_errors
def base(c, tag=None):
    """Make a Debian bookworm base image offline (debootstrap + docker import)."""
    from trainstack.base_image import DEFAULT_BASE_TAG, make_base_image

    image_id = make_base_image(tag or DEFAULT_BASE_TAG)
    print(f"{tag or DEFAULT_BASE_TAG} {image_id[:19]}")


@task(help={"registry": "registry HOST[:PORT]", "gpu": "push the gpu flavor", "flavor": "any flavor by name"})
@user_errors
def push(c, registry, gpu=False, flavor=None):
    """Push a built flavor under its content tag and its short tag."""
    from trainstack.matrix import load_matrix
    from trainstack.publish import push_flavor

    image_matrix = load_matrix()
    for pushed in push_flavor(image_matrix.image_name, flavor or ("gpu" if gpu else "cpu"), registry):
        print(pushed)


@task(help={"gpu": "use the gpu flavor", "flavor": "any flavor by name", "processes": "Horovod ranks"})
@user_errors
def train(c, gpu=False, flavor=None, processes=2):
    """Train the example model in a built image with `trainrun mpi` (the main job)."""
    from trainstack.demo import train_in_image
    from trainstack.matrix import load_matrix

    train_in_image(f"{load_matrix().image_name}:{flavor or ('gpu' if gpu else 'cpu')}", int(processes))


@task(help={
    "tier": "unit, integration or image (default: all)",
    "pytest-args": "extra pytest arguments",
    "gpu-build": "instead: build a GPU image and run tests/image/test_gpu_image.py in it (too long for CI)",
    "gpu-flavor": "the flavor --gpu-build builds and tests: gpu (default) or gpu-cu13",
})
def test(c, tier=None, pytest_args="", gpu_build=False, gpu_flavor="gpu"):
    """Run the tests (one tier, or all)."""
    if gpu_build:
        from trainstack.matrix import load_matrix

        build(c, flavor=gpu_flavor, set=[])
        image = f"{load_matrix().image_name}:{gpu_flavor}"
        c.run(f"{sys.executable} -m pytest tests/image/test_gpu_image.py {pytest_args}",
              env={"TRAINSTACK_TEST_GPU_IMAGE": image}, pty=sys.stdout.isatty())
        return
    marker = f"-m {tier}" if tier else ""
    c.run(f"{sys.executable} -m pytest tests {marker} {pytest_args}", pty=sys.stdout.isatty())


ns = Collection(matrix, render, build, base, push, train, docs, test)
ns.add_collection(Collection.from_module(pooltemplates.tasks), name="template")
ns.add_collection(Collection.from_module(pooltemplates.pool_tasks), name="pool")
