"""Runs PySpark's own distributor suites, taken from the image's pyspark.zip, against the installed pyspark.

The pyspark wheel ships the Spark release's Python sources, tests included, in pyspark/python/lib/pyspark.zip (the
archive Spark's Python workers import). This extracts the suites named below into a temporary directory and runs
them with pytest, the suites' packages appended to the installed packages' __path__, so that
`pyspark.ml.torch.distributor` is the installed (patched) module and only the tests come from the archive.

python pyspark_suites.py [--slow] OUT_DIR [PYTEST_ARGS...]: a JUnit report per suite, OUT_DIR/SUITE.xml
--slow: also the test classes Spark's CI skips as "Disabled due to slowness" (SPARK-50864).
"""
from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

SUITES = (
    "pyspark/ml/torch/tests/test_distributor.py",
    "pyspark/ml/torch/tests/test_data_loader.py",
    "pyspark/ml/torch/tests/test_log_communication.py",
    "pyspark/ml/deepspeed/tests/test_deepspeed_distributor.py",
    "pyspark/ml/tests/connect/test_parity_torch_distributor.py",
    "pyspark/ml/tests/connect/test_parity_torch_data_loader.py",
)
# The test packages' __init__.py, taken from the archive too.
TEST_PACKAGES = ("pyspark/ml/torch/tests", "pyspark/ml/deepspeed/tests", "pyspark/ml/tests",
                 "pyspark/ml/tests/connect")
# Installed packages that hold the test packages: each gets the extracted directory at the end of its __path__.
INSTALLED_PARENTS = ("pyspark.ml.torch", "pyspark.ml.deepspeed", "pyspark.ml")
SLOW = "Disabled due to slowness"


class RunSlowClasses:
    """Clears unittest's class-level skip of the classes Spark's CI skips as slow, before pytest collects them."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector, name, obj):
        if isinstance(obj, type) and getattr(obj, "__unittest_skip_why__", None) == SLOW:
            obj.__unittest_skip__ = False


class UnittestOrder:
    """Runs the test classes and their tests in the order unittest's loader, which Spark's CI runs them with, gives:
    by name. The suites depend on it: DeepspeedTorchDistributorDistributedEndToEnd builds its SparkConf without the
    JVM's defaults, as DeepspeedDistributorLocalEndToEndTests has run before it; in the order of the file it runs
    first, and the local class then inherits its deleted GPU discovery script."""

    def pytest_collection_modifyitems(self, items):
        items.sort(key=lambda item: (item.cls.__name__ if item.cls else "", item.name))


def extract_suites(archive: Path, target: Path) -> None:
    with zipfile.ZipFile(archive) as zipped:
        names = [*SUITES, *(f"{package}/__init__.py" for package in TEST_PACKAGES)]
        for name in names:
            zipped.extract(name, target)
    # Empty markers, never imported (pyspark is imported from site-packages first): with them pytest names each
    # suite by its full module name, pyspark.ml.torch.tests.test_distributor, as the suites import one another.
    for parent in ("pyspark", "pyspark/ml", "pyspark/ml/torch", "pyspark/ml/deepspeed"):
        (target / parent / "__init__.py").touch()


def run_suite(target: Path, suite: str, junit: str, slow: bool, pytest_args: list[str]) -> int:
    """Runs one extracted suite with pytest in this process, its test packages found after the installed ones."""
    import pyspark

    installed = Path(pyspark.__file__).parent
    for parent in INSTALLED_PARENTS:
        package = importlib.import_module(parent)
        package.__path__.append(str(target.joinpath(*parent.split("."))))
    for name in ("pyspark.ml.torch.distributor", "pyspark.ml.deepspeed.deepspeed_distributor"):
        module = importlib.import_module(name)
        assert Path(module.__file__).is_relative_to(installed), f"{name} is {module.__file__}, not the installed one"
    return pytest.main(["-p", "no:cacheprovider", "-rs", f"--rootdir={target}", f"--junitxml={junit}",
                        "-o", "junit_family=xunit1", str(target / suite), *pytest_args],
                       plugins=[UnittestOrder(), *([RunSlowClasses()] if slow else [])])


def main() -> int:
    arguments = sys.argv[1:]
    slow = arguments[0] == "--slow"
    if slow:
        arguments.pop(0)
    if arguments[0] == "--suite":
        _, target, suite, junit, *pytest_args = arguments
        return run_suite(Path(target), suite, junit, slow, pytest_args)
    out, *pytest_args = arguments
    import pyspark
    from pyspark.testing.utils import connect_requirement_message

    installed = Path(pyspark.__file__).parent
    archive = installed / "python" / "lib" / "pyspark.zip"
    target = Path(tempfile.mkdtemp(prefix="pyspark-suites-"))
    extract_suites(archive, target)
    print(f"suites from {archive} (pyspark {pyspark.__version__}) in {target}, against {installed}")
    print(f"Spark Connect client: {connect_requirement_message or 'present'}", flush=True)
    # One process per suite, as Spark's python/run-tests runs them: the suites leave environment variables set
    # (test_deepspeed_distributor.py sets PYSPARK_TORCH_DISTRIBUTOR_RDZV_ID, which a later suite expects unset).
    status = 0
    for suite in SUITES:
        junit = Path(out) / (Path(suite).stem + ".xml")
        command = [sys.executable, __file__, *(["--slow"] if slow else []), "--suite", str(target), suite, str(junit),
                   *pytest_args]
        status = max(status, subprocess.run(command, check=False).returncode)
    return status


if __name__ == "__main__":
    sys.exit(main())
