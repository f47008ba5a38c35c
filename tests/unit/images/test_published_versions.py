"""Which pinned versions count as published: simple-API listings (JSON and HTML), local version labels and the
wheelhouse, and what the check says. No test reaches the network: the indexes are a fake `fetch_listing`."""
import json
import urllib.error

import pytest
from packaging.version import Version

from trainstack.errors import TrainstackError
from trainstack.image import published
from trainstack.image.matrix import load_matrix
from trainstack.image.published import (
    PYPI_SIMPLE_URL,
    Pin,
    listing_versions,
    nearest_versions,
    pinned_packages,
    pip_indexes,
    wheelhouse_versions,
)
from trainstack.image.sources import SourceOptions

TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"

JSON_LISTING = json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": [
    {"filename": "torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "https://files/a.whl"},
    {"filename": "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "https://files/b.whl"},
    {"filename": "torch-2.14.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "https://files/c.whl"},
    {"filename": "torch-1.0.0.tar.gz", "url": "https://files/d.tar.gz"},
    {"filename": "torch-0.9.0.zip", "url": "https://files/e.zip"},
    {"filename": "torch-0.8.0-py2.7.egg", "url": "https://files/f.egg"},
    {"filename": "torch-latest.tar.gz", "url": "https://files/g.tar.gz"},
]}).encode()

HTML_LISTING = b"""<!DOCTYPE html>
<html><body><h1>Links for torch</h1>
<a href="/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00ff"
   data-requires-python="&gt;=3.10">torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>
<a href="../../packages/torch-2.10.0%2Bcpu-cp311-cp311-linux_x86_64.whl">torch-2.10.0+cpu-cp311-linux</a>
<a href="https://files.example/torch-2.9.1.tar.gz#sha256=11aa">torch-2.9.1.tar.gz</a>
<a name="no-href">not a file</a>
</body></html>"""


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_json_listing_gives_the_versions_of_wheels_and_sdists():
    versions = listing_versions(JSON_LISTING, "application/vnd.pypi.simple.v1+json")
    assert versions == {Version(v) for v in ["2.12.0", "2.13.0", "2.14.0rc1", "1.0.0", "0.9.0"]}


def test_html_listing_gives_the_versions_of_its_links_with_local_labels():
    versions = listing_versions(HTML_LISTING, "text/html")
    assert versions == {Version("2.13.0+cpu"), Version("2.10.0+cpu"), Version("2.9.1")}


@pytest.mark.parametrize("pinned, listed, matches", [
    ("2.13.0", "2.13.0+cpu", True),       # pip's rule: a pin without a label takes any local build
    ("2.13.0", "2.13.0+cu128", True),
    ("2.13", "2.13.0", True),
    ("2.13.0+cpu", "2.13.0+cpu", True),
    ("2.13.0+cpu", "2.13.0", False),      # a pin with a label takes only that label
    ("2.13.0+cpu", "2.13.0+cu128", False),
    ("2.13.0", "2.13.1", False),
    ("2.14.0rc1", "2.14.0rc1", True),
])
def test_a_pin_matches_as_pips_double_equals(pinned, listed, matches):
    assert Pin("torch.version", "torch", pinned).matches(Version(listed)) is matches


def test_wheelhouse_versions_are_its_wheels_of_that_project(tmp_path):
    for name in [CPU_TORCH_WHEEL, "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "torch-2.12.0.tar.gz", "torch-broken.whl"]:
        (tmp_path / name).touch()
    assert wheelhouse_versions(tmp_path, "torch") == {Version("2.13.0+cpu")}
    assert wheelhouse_versions(tmp_path, "pandas") == set()
    assert wheelhouse_versions(None, "torch") == set()


def test_nearest_versions_are_around_the_pin_or_the_latest_beyond_them_all():
    listed = {Version(v) for v in ["2.8.0", "2.9.0", "2.9.1", "2.10.0+cpu", "2.10.0", "2.11.0", "2.12.0",
                                   "2.13.0", "2.14.0rc1"]}
    assert list(map(str, nearest_versions(listed, "99.0.0"))) == ["2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.13.0"]
    assert list(map(str, nearest_versions(listed, "2.9.5"))) == ["2.9.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0"]
    assert list(map(str, nearest_versions(listed, "0.1"))) == ["2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0"]
    assert "2.14.0rc1" in map(str, nearest_versions(listed, "2.14.0rc2"))


def test_pins_name_their_matrix_field_and_distribution(matrix):
    cpu = {pin.field: pin for pin in pinned_packages(matrix.flavor("cpu"))}
    assert cpu["torch.version"] == Pin("torch.version", "torch", "2.13.0+cpu")
    assert cpu["tensorflow.version"].project == "tensorflow-cpu"
    assert cpu["horovod.version"].project == "horovod"
    assert cpu["deepspeed.version"] == Pin("deepspeed.version", "deepspeed", "0.19.8")
    assert cpu["python_packages.tf_keras"] == Pin("python_packages.tf_keras", "tf_keras", "2.21.0")
    assert "cuda.toolkit" not in cpu
    cu13 = {pin.field: pin for pin in pinned_packages(matrix.flavor("gpu-cu13"))}
    assert cu13["cuda.toolkit"] == Pin("cuda.toolkit", "cuda-toolkit", "13.2.2")
    assert cu13["torchvision.version"] == Pin("torchvision.version", "torchvision", "0.29.2")
    assert "torchvision.version" not in cpu
    assert "deepspeed.version" not in cu13


def test_indexes_are_the_builds_own(matrix, tmp_path):
    cpu = matrix.flavor("cpu")
    assert pip_indexes(cpu, SourceOptions()) == [PYPI_SIMPLE_URL, TORCH_INDEX]
    (tmp_path / CPU_TORCH_WHEEL).touch()
    assert pip_indexes(cpu, SourceOptions(wheelhouse=tmp_path)) == [PYPI_SIMPLE_URL]
    mirror = SourceOptions(index_url="https://mirror/simple", extra_index_urls=["https://mirror/simple", "https://x/y"])
    assert pip_indexes(cpu, mirror) == ["https://mirror/simple", "https://x/y"]


class Indexes:
    """A fake `fetch_listing`: {index: {project: versions}}; an index missing from it does not answer."""

    def __init__(self, listings: dict[str, dict[str, list[str]]]):
        self.listings = listings
        self.asked: list[tuple[str, str]] = []

    def __call__(self, index: str, project: str, context=None) -> set[Version]:
        self.asked.append((index, project))
        if index not in self.listings:
            raise urllib.error.URLError(OSError(-2, "Name or service not known"))
        return {Version(version) for version in self.listings[index].get(project, [])}


def everything_published(flavor, **overrides) -> dict[str, list[str]]:
    return {pin.project: [pin.version] for pin in pinned_packages(flavor)} | overrides


@pytest.fixture
def indexes(monkeypatch):
    monkeypatch.delenv(published.SKIP_ENV, raising=False)

    def install(listings: dict[str, dict[str, list[str]]]) -> Indexes:
        fake = Indexes(listings)
        monkeypatch.setattr(published, "fetch_listing", fake)
        return fake

    return install


def test_a_torch_in_the_wheelhouse_is_published(matrix, indexes, tmp_path, capsys):
    (tmp_path / CPU_TORCH_WHEEL).touch()
    cpu = matrix.flavor("cpu")
    fake = indexes({PYPI_SIMPLE_URL: everything_published(cpu, torch=["2.13.0"])})
    published.check_published(cpu, SourceOptions(wheelhouse=tmp_path))
    assert ("https://pypi.org/simple", "torch") not in fake.asked
    assert capsys.readouterr().err == ""


def test_an_unpublished_version_names_field_value_and_the_nearest_published(matrix, indexes, tmp_path):
    (tmp_path / CPU_TORCH_WHEEL).touch()
    cpu = matrix.flavor("cpu", {"torch": "99.0.0"})
    indexes({PYPI_SIMPLE_URL: everything_published(cpu, torch=["2.11.0", "2.12.0", "2.13.0"]),
             TORCH_INDEX: {"torch": ["2.10.0+cpu", "2.13.0+cpu"]}})
    with pytest.raises(TrainstackError) as raised:
        published.check_published(cpu, SourceOptions(wheelhouse=tmp_path))
    assert str(raised.value) == (
        "torch.version = '99.0.0': is not a published version of torch on https://pypi.org/simple, "
        f"{TORCH_INDEX} or the wheelhouse {tmp_path} (valid: 2.10.0, 2.11.0, 2.12.0, 2.13.0; nearest of 4 published)")


def test_every_unpublished_pin_is_listed_and_an_unknown_project_is_named(matrix, indexes):
    gpu = matrix.flavor("gpu", {"pandas": "2.3.99"})
    listings = everything_published(gpu, pandas=["2.3.3"])
    del listings["spark-tensorflow-distributor"]
    indexes({PYPI_SIMPLE_URL: listings})
    with pytest.raises(TrainstackError) as raised:
        published.check_published(gpu, SourceOptions())
    assert str(raised.value).splitlines() == [
        "2 problems:",
        "  python_packages.pandas = '2.3.99': is not a published version of pandas on https://pypi.org/simple "
        "(valid: 2.3.3; nearest of 1 published)",
        "  python_packages.spark-tensorflow-distributor = '1.0.0': spark-tensorflow-distributor is not a project "
        "on https://pypi.org/simple (valid: a package published there under its distribution name)",
    ]


def test_an_index_without_answer_leaves_its_pins_unchecked_with_one_warning(matrix, indexes, capsys):
    cpu = matrix.flavor("cpu", {"torch": "99.0.0"})
    fake = indexes({PYPI_SIMPLE_URL: everything_published(cpu, torch=["2.13.0"])})
    published.check_published(cpu, SourceOptions())
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: could not check that these pins are published")
    assert warning.endswith(f"torch==99.0.0 ({TORCH_INDEX}: no answer ([Errno -2] Name or service not known))")
    # After the first request went unanswered, that index is not asked again (up to the requests in flight).
    assert len([asked for asked in fake.asked if asked[0] == TORCH_INDEX]) <= published.WORKERS


def test_the_check_can_be_skipped(matrix, indexes, monkeypatch):
    fake = indexes({})
    monkeypatch.setenv(published.SKIP_ENV, "1")
    published.check_published(matrix.flavor("cpu", {"torch": "99.0.0"}), SourceOptions())
    assert fake.asked == []


def test_a_set_pin_no_index_answered_for_is_refused_naming_the_skip_option(matrix, indexes, capsys):
    cpu = matrix.flavor("cpu", {"torch": "99.0.0"})
    indexes({PYPI_SIMPLE_URL: everything_published(cpu, torch=["2.13.0"])})
    assert published.overridden_pins(matrix.flavors["cpu"], cpu) == {"torch.version"}
    with pytest.raises(TrainstackError) as raised:
        published.check_published(cpu, SourceOptions(), must_check={"torch.version"})
    assert str(raised.value) == (
        "torch.version = '99.0.0': could not be checked: no index answered "
        f"({TORCH_INDEX}: no answer ([Errno -2] Name or service not known)) (valid: a version from a reachable "
        "index (--index-url), or --skip-published-check to build without the check)")
