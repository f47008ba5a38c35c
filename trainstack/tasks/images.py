"""invoke tasks for the images: render, build, base, push, sbom, export, scan, release-notes, train, test.

Options that depend on the machine default to environment variables, so one machine's setup
(see ./dev) is written once: TRAINSTACK_BASE_IMAGE, TRAINSTACK_WHEELHOUSE, TRAINSTACK_CA_BUNDLE.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from trainstack.console import reports_errors
from trainstack.errors import bad_value, whole_number


# In a folder `invoke render --set` wrote: the overrides it was rendered with.
RENDERED_WITH = "RENDERED_WITH_OVERRIDES"


def _flavor_name(gpu: bool, flavor: str | None) -> str:
    """The flavor --flavor names, else gpu with --gpu, else cpu; both together are refused."""
    if gpu and flavor is not None:
        raise bad_value("--flavor", flavor, "cannot be given with --gpu",
                        "--gpu alone (the gpu flavor), or --flavor NAME alone")
    return flavor or ("gpu" if gpu else "cpu")


def _flavor(gpu: bool, flavor: str | None, settings: list[str], base_image: str | None = None):
    from trainstack.image.matrix import check_base_image, load_matrix, parse_overrides

    name = _flavor_name(gpu, flavor)
    overrides = parse_overrides(settings)
    option = "--base-image" if base_image else "$TRAINSTACK_BASE_IMAGE"
    base_image = base_image or os.environ.get("TRAINSTACK_BASE_IMAGE")
    if base_image:
        overrides.setdefault("base_image", check_base_image(option, base_image))
    matrix = load_matrix()
    return matrix, matrix.flavor(name, overrides)


def _index_url(option: str, url: str | None) -> str | None:
    """pip indexes over https (plain http only on this machine's loopback, e.g. a local mirror)."""
    if url is not None and not re.fullmatch(r"(https://[^\s\"'\\]+|http://(localhost|127\.0\.0\.1)(:\d+)?(/[^\s\"'\\]*)?)", url):
        raise bad_value(option, url, "is not an https URL", "https://HOST/PATH (http:// only for localhost)")
    return url


def _sources(flavor, ca_bundle, wheelhouse, index_url, extra_index_url):
    from trainstack.image.sources import sources_for

    return sources_for(flavor, ca_bundle, wheelhouse, _index_url("--index-url", index_url),
                       [_index_url("--extra-index-url", url) for url in extra_index_url or []])


@task(iterable=["set"], help={"gpu": "the gpu flavor", "flavor": "any flavor by name", "set": "override KEY=VALUE"})
@reports_errors
def render(c, gpu=False, flavor=None, set=None, base_image=None, ca_bundle=None, wheelhouse=None):
    """Render a flavor's Dockerfile and build context under build/FLAVOR/ for inspection."""
    from trainstack.image.build import BUILD_DIR
    from trainstack.image.build_context import write_build_context

    _, chosen = _flavor(gpu, flavor, set, base_image)
    out = write_build_context(chosen, _sources(chosen, ca_bundle, wheelhouse, None, None), BUILD_DIR / chosen.name)
    print(out / "Dockerfile", flush=True)  # before the note on stderr, in this order in a shared log
    if set:
        # The folder is the flavor's, which every render and build replaces: it says what it was rendered with.
        again = "invoke render" + ("" if chosen.name == "cpu" else f" --flavor {chosen.name}")
        (out / RENDERED_WITH).write_text(
            f"# {out.name}/ was rendered with these overrides of images/matrix.yaml; `{again}` renders the "
            "matrix's own again.\n" + "".join(f"--set {setting}\n" for setting in set))
        print(f"{out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}/ holds the flavor with "
              f"--set {' --set '.join(set)} (listed in {RENDERED_WITH}); `{again}` renders the matrix's own again",
              file=sys.stderr)


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
        "skip-published-check": "do not check that the pinned versions are published (a --set pin no index "
                                "answered for stops the build otherwise)",
    },
)
@reports_errors
def build(c, gpu=False, flavor=None, set=None, base_image=None, wheelhouse=None, index_url=None,
          extra_index_url=None, ca_bundle=None, tag=None, no_cache=False, skip_published_check=False):
    """Build, verify and tag a training image (default: the cpu flavor)."""
    from trainstack.image.build import build_image
    from trainstack.image.naming import check_reference
    from trainstack.image.published import overridden_pins

    for extra_tag in tag or []:
        check_reference("--tag", extra_tag)
    image_matrix, chosen = _flavor(gpu, flavor, set, base_image)
    built = build_image(chosen, image_matrix.image_name, _sources(chosen, ca_bundle, wheelhouse, index_url, extra_index_url),
                        extra_tags=tag, no_cache=no_cache, skip_published_check=skip_published_check,
                        must_check=overridden_pins(image_matrix.flavors[chosen.name], chosen))
    print(f"\nbuilt and verified {built.image_id[:19]}: " + ", ".join(built.tags))
    print(built.steps.summary())


@task(help={"tag": "tag of the base image to make"})
@reports_errors
def base(c, tag=None):
    """Make a Debian bookworm base image offline (debootstrap + docker import)."""
    from trainstack.image.base_image import DEFAULT_BASE_TAG, make_base_image

    image_id = make_base_image(tag or DEFAULT_BASE_TAG)
    print(f"{tag or DEFAULT_BASE_TAG} {image_id[:19]}")


@task(help={"registry": "registry HOST[:PORT][/PATH]", "gpu": "push the gpu flavor", "flavor": "any flavor by name",
            "sign-key": "sign the pushed image with this cosign private key (needs skopeo); its passphrase in "
                        "$TRAINSTACK_SIGN_PASSPHRASE"})
@reports_errors
def push(c, registry, gpu=False, flavor=None, sign_key=None):
    """Push a built flavor under its immutable tag, then its content tag and its flavor's; an immutable tag that names
    another image in the registry is never moved. Then its SBOM as an artifact referring to the image, and, with
    --sign-key, its signature. Credentials: $TRAINSTACK_REGISTRY_USER and $TRAINSTACK_REGISTRY_PASSWORD, else those
    `docker login REGISTRY` stored."""
    from trainstack.image.matrix import load_matrix
    from trainstack.image.publish import push_flavor
    from trainstack.image.signing import PASSPHRASE_ENV, load_signing_key

    image_matrix = load_matrix()
    name = image_matrix.flavor(_flavor_name(gpu, flavor)).name
    key = load_signing_key("--sign-key", sign_key, os.environ.get(PASSPHRASE_ENV)) if sign_key is not None else None
    pushed = push_flavor(image_matrix.image_name, name, registry, key)
    print("\n".join([*pushed.references, pushed.digest_reference]))


@task(help={"registry": "registry HOST[:PORT][/PATH]", "tag": "a tag or sha256:DIGEST (default: the flavor's tag)",
            "gpu": "the gpu flavor's tag", "flavor": "a flavor's tag (default cpu)"})
@reports_errors
def pull(c, registry, tag=None, gpu=False, flavor=None):
    """Pull an image from a registry, checked there first: a tag it does not hold is refused, naming those it holds.
    Credentials as `invoke push` takes them."""
    from trainstack import docker_client
    from trainstack.image.matrix import load_matrix
    from trainstack.image.naming import check_tag
    from trainstack.image.publish import check_registry, pull_image

    image_matrix = load_matrix()
    check_registry(registry)
    if tag is not None and (gpu or flavor is not None):
        raise bad_value("--tag", tag, "cannot be given with --gpu or --flavor", "--tag alone, or a flavor alone")
    chosen = check_tag("--tag", tag) if tag is not None else image_matrix.flavor(_flavor_name(gpu, flavor)).name
    pulled = pull_image(docker_client.connect(), registry, image_matrix.image_name, chosen)
    print(f"{pulled.reference}\n{pulled.digest_reference}\n{pulled.image_id}")


@task(help={"image": "the image, REGISTRY/NAME:TAG", "key": "the public key file (cosign.pub)"})
@reports_errors
def verify(c, image, key):
    """Check that an image in a registry carries a signature by KEY (cosign's format, as `invoke push --sign-key`
    makes it), without pulling it; print its digest. Credentials as `invoke push` takes them."""
    from trainstack import docker_client
    from trainstack.image.naming import check_reference
    from trainstack.image.publish import verify_image

    print(verify_image(docker_client.connect(), check_reference("--image", image), key))


def _image_sbom(gpu: bool, flavor: str | None, image: str | None, sbom_file: str | None) -> tuple[str, dict]:
    """(where it came from, the SBOM): a file, an image reference (an image here, else a registry's SBOM artifact
    of it, read without pulling the image), or a built flavor's image."""
    from trainstack.image.sbom import parse_sbom

    if sbom_file:
        path = Path(sbom_file)
        if not path.is_file():
            raise bad_value("--sbom", sbom_file, "is not a file", "an SBOM file (CycloneDX 1.5 JSON)")
        return sbom_file, parse_sbom(path.read_text(encoding="utf-8"), sbom_file)
    from trainrun.image_contract import SBOM_PATH
    from trainstack import docker_client
    from trainstack.image.matrix import load_matrix
    from trainstack.image.naming import check_reference, flavor_image
    from trainstack.image.publish import registry_sbom
    from trainstack.image.sbom import read_image_sbom

    reference = check_reference("--image", image) if image else flavor_image(
        load_matrix().flavor(_flavor_name(gpu, flavor)).name)
    client = docker_client.connect()
    if image and not docker_client.has_image(client, reference):
        return registry_sbom(client, reference)
    return f"{reference}:{SBOM_PATH}", read_image_sbom(client, reference)


SBOM_HELP = {"gpu": "the gpu flavor's image", "flavor": "a flavor's image (default cpu)",
             "image": "any image reference instead of a flavor's"}


@task(help={**SBOM_HELP, "out": "write the SBOM here instead of stdout"})
@reports_errors
def sbom(c, gpu=False, flavor=None, image=None, out=None):
    """Print (or --out FILE) the CycloneDX SBOM the image carries (/etc/trainstack/sbom.cdx.json)."""
    import json

    _, document = _image_sbom(gpu, flavor, image, None)
    text = json.dumps(document, indent=1) + "\n"
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")


@task(help={
    **SBOM_HELP,
    "sbom": "an SBOM file (CycloneDX 1.5 JSON) instead of an image's; needs no docker",
    "require": "exit 2 unless a database answered for every package (default: 'not scanned' is reported, exit 0)",
    "osv-url": "OSV API (default https://api.osv.dev)",
    "pypi-url": "PyPI JSON API, asked for the Python packages OSV did not answer for (default https://pypi.org)",
})
@reports_errors
def scan(c, gpu=False, flavor=None, image=None, sbom=None, require=False, osv_url=None, pypi_url=None):
    """Look the image's SBOM up in vulnerability databases; exit 1 on a known vulnerability.

    Says "not scanned: no vulnerability database reachable (tried ...)" when no database answered, and never
    "no known vulnerabilities" of a package none answered for.
    """
    from trainstack.errors import TrainstackError
    from trainstack.image.scan import OSV_URL, PYPI_URL, scan_sbom

    osv_url = _index_url("--osv-url", osv_url) or OSV_URL
    pypi_url = _index_url("--pypi-url", pypi_url) or PYPI_URL
    origin, document = _image_sbom(gpu, flavor, image, sbom)
    print(f"scan of {origin}: {len(document['components'])} components", file=sys.stderr)
    result = scan_sbom(document, osv_url, pypi_url)
    print(result.report())
    if require and result.not_scanned:
        raise TrainstackError(f"--require: {result.not_scanned_line()}")
    if result.vulnerable:
        raise Exit(code=1)


@task(help={**SBOM_HELP, "out": "the folder to write into (default build/export)",
            "format": "docker-archive, squashfs or both, comma-separated (default both)"})
@reports_errors
def export(c, gpu=False, flavor=None, image=None, out="build/export", format="docker-archive,squashfs"):
    """Write an image as files for a cluster without docker: a docker archive (podman load, Apptainer) and a zstd
    squashfs that Enroot, Pyxis and Charliecloud run; print what each cost."""
    from trainstack import docker_client
    from trainstack.image.export import export_image, local_flavor_image
    from trainstack.image.matrix import load_matrix
    from trainstack.image.naming import check_reference

    client = docker_client.connect()
    reference = check_reference("--image", image) if image else local_flavor_image(
        client, load_matrix().flavor(_flavor_name(gpu, flavor)).name)
    formats = tuple(name.strip() for name in format.split(",") if name.strip())
    for done in export_image(client, reference, Path(out), formats):
        print(f"{done.format}: {done.path} ({done.bytes / 1e9:.2f} GB, {done.seconds:g} s)")


@task(help={"from-image": "the earlier image (FROM, the first argument), e.g. the last release's tag",
            "to-image": "the later image (TO, the second argument), e.g. trainstack:cpu"})
@reports_errors
def release_notes(c, from_image, to_image):
    """Print Markdown release notes from one image to another, both on this docker engine: the versions, patches,
    matrix rules and SBOM components that changed, from each image's manifest and SBOM."""
    from trainstack import docker_client
    from trainstack.image.matrix import load_matrix
    from trainstack.image.naming import check_reference
    from trainstack.image.release_notes import read_release_image, release_notes as notes

    options = {"--from-image": from_image, "--to-image": to_image}
    for option, reference in options.items():
        check_reference(option, reference)
    client = docker_client.connect()
    image_name = load_matrix().image_name
    old, new = (read_release_image(client, option, reference, image_name) for option, reference in options.items())
    print(notes(old, new), end="")


@task(help={"gpu": "use the gpu flavor", "flavor": "any flavor by name", "processes": "Horovod ranks"})
@reports_errors
def train(c, gpu=False, flavor=None, processes="2"):
    """Train the example model in a built image with `trainrun mpi` (the main job)."""
    from trainstack.image.demo import train_in_image
    from trainstack.image.matrix import load_matrix
    from trainstack.image.naming import flavor_image

    name = load_matrix().flavor(_flavor_name(gpu, flavor)).name
    train_in_image(flavor_image(name), whole_number("--processes", processes))


TEST_TIERS = ("unit", "integration", "image")  # each a folder of tests/ and a pytest marker

# What `test --gpu-build` runs in the GPU image it builds: its CUDA stack, the frameworks (torchvision included)
# torch.compile (Inductor on CPU, Triton's launcher build), and DeepSpeed (ds_report's prebuilt ops, the CPU
# optimizers; in gpu-cu13, its absence explained).
GPU_BUILD_TESTS = ("tests/image/test_gpu_image.py", "tests/image/test_frameworks.py", "tests/image/test_compile.py",
                   "tests/image/test_deepspeed.py")


@task(help={
    "tier": "unit, integration or image (default: all)",
    "pytest-args": "extra pytest arguments",
    "gpu-build": "instead: build a GPU image and run the GPU_BUILD_TESTS in it (too long for CI)",
    "gpu-flavor": "the flavor --gpu-build builds and tests: gpu (default) or gpu-cu13",
    "upstream": "instead: Horovod's own suites (tests/upstream) in the cpu image, MPI and Gloo, and PySpark's "
                "distributor suites with the classes Spark's CI skips as slow (~32 min)",
    "long": "instead: the integration and image tests marked `long`, which CI's run leaves out (minutes each)",
})
@reports_errors
def test(c, tier=None, pytest_args="", gpu_build=False, gpu_flavor="gpu", upstream=False, long=False):
    """Run the tests (one tier, or all: the image tier beside the others, trainstack/test_tiers.py); --upstream:
    Horovod's and PySpark's own suites in the cpu image instead; --long: the long integration and image tests
    instead."""
    if tier is not None and tier not in TEST_TIERS:
        raise bad_value("--tier", tier, "is not a test tier", ", ".join(TEST_TIERS))
    if long:
        c.run(f"{sys.executable} -m pytest tests/integration tests/image -m long {pytest_args}",
              env={"TRAINSTACK_LONG": "1"},
              pty=sys.stdout.isatty())
        return
    if upstream:
        c.run(f"{sys.executable} -m pytest tests/image/test_upstream_horovod.py tests/image/test_upstream_pyspark.py "
              f"{pytest_args}",
              env={"TRAINSTACK_UPSTREAM": "1"}, pty=sys.stdout.isatty())
        return
    if gpu_build:
        from trainstack.image.naming import flavor_image

        build(c, flavor=gpu_flavor, set=[])
        gpu_image = flavor_image(gpu_flavor)
        c.run(f"{sys.executable} -m pytest {' '.join(GPU_BUILD_TESTS)} {pytest_args}",
              env={"TRAINSTACK_TEST_GPU_IMAGE": gpu_image, "TRAINSTACK_TEST_IMAGE": gpu_image},
              pty=sys.stdout.isatty())
        return
    if tier is None:
        c.run(f"{sys.executable} -m trainstack.test_tiers {pytest_args}", pty=sys.stdout.isatty())
        return
    # A tier's own folder as well as its marker: collecting the other tiers would import what they need.
    c.run(f"{sys.executable} -m pytest tests/{tier} -m {tier} {pytest_args}", pty=sys.stdout.isatty())
