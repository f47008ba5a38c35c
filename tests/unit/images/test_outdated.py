"""The drift report of `invoke matrix.outdated` (trainstack/image/outdated.py): each pin's newest version and the
rules that hold it back, from the real matrix. No test reaches the network: the index is a fake dict."""
import json
import os
import subprocess
import sys

import pytest
from invoke import Context

from trainstack.docsite.task_reference import load_collection
from trainstack.image import outdated
from trainstack.image.matrix import REPO_ROOT, MatrixError, load_matrix
from trainstack.image.outdated import Drift, IndexUnanswered, drift, drift_json, drift_table, flavor_pins
from trainstack.tasks import matrix as matrix_tasks

# Newer than the matrix where it shows a rule at work, the matrix's own pin where it shows none.
NEWEST = {
    "torch": "2.13.0",  # gpu: on CUDA 13 with its own NCCL and torchvision
    "tensorflow": "2.21.0",  # gpu: needs an NCCL no CUDA 12 torch shares
    "tensorflow-cpu": "2.21.0",
    "horovod": "0.28.1",
    "nvidia-nccl-cu12": "2.27.7",  # gpu: torch 2.10 pins 2.27.5
    "pyarrow": "26.0.0",  # mlflow 3.17 requires pyarrow < 26
    "cloudpickle": "3.1.3",  # nothing holds it
}


def fake_index(versions: dict[str, str]):
    def newest(distribution: str) -> str:
        if distribution not in versions:
            raise IndexUnanswered(f"https://pypi.example/pypi/{distribution}/json: HTTP 404")
        return versions[distribution]

    return newest


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def rows(matrix):
    return {(row.flavor, row.key): row for row in drift(matrix.flavors.values(), matrix.rules, fake_index(NEWEST))}


def test_pins_are_the_pypi_distributions_by_their_index_names(matrix):
    cpu, gpu, cu13 = (flavor_pins(matrix.flavors[name]) for name in ("cpu", "gpu", "gpu-cu13"))
    assert ("tensorflow", "tensorflow-cpu", "2.21.0") in cpu
    assert ("torch", "torch", "2.13.0+cpu") in cpu
    assert {key for key, _, _ in cpu}.isdisjoint({"debian", "python", "java", "openmpi", "cuda", "nccl"})
    assert [pin for pin in gpu if pin[0] in ("nccl", "cudnn")] == [("nccl", "nvidia-nccl-cu12", "2.27.5"),
                                                                   ("cudnn", "nvidia-cudnn-cu12", "9.10.2.21")]
    assert [pin for pin in cu13 if pin[0] in ("nccl", "cudnn", "cuda.toolkit")] == [
        ("nccl", "nvidia-nccl-cu13", "2.30.7"), ("cudnn", "nvidia-cudnn-cu13", "9.26.0.51"),
        ("cuda.toolkit", "cuda-toolkit", "13.2.2")]
    # python_packages after the components, in the matrix's order.
    assert [key for key, _, _ in gpu][-len(matrix.flavors["gpu"].python_packages):] == list(
        matrix.flavors["gpu"].python_packages)


def test_a_newest_version_that_breaks_rules_names_them(rows):
    assert rows["gpu", "torch"].held_back_by == ("torch-pypi-cuda-13", "torch-2.13-nccl", "torchvision-torch-2.13")
    assert rows["gpu", "tensorflow"].held_back == "tensorflow-2.21-cuda-stack"
    assert rows["gpu", "nccl"].held_back == "torch-2.10-nccl"
    assert (rows["cpu", "pyarrow"].status, rows["cpu", "pyarrow"].held_back) == ("held back", "mlflow-3.17-pyarrow")


def test_held_back_is_what_set_would_refuse(matrix, rows):
    for row in rows.values():
        if row.status == "held back":
            with pytest.raises(MatrixError) as refused:
                matrix.flavor(row.flavor, {row.key: row.newest})
            assert [line.split(":")[0] for line in str(refused.value).splitlines()] == [
                f"rule {rule}" for rule in row.held_back_by]
        elif row.status == "bump":
            matrix.flavor(row.flavor, {row.key: row.newest})


def test_up_to_date_and_a_free_bump(rows):
    assert (rows["gpu", "horovod"].status, rows["gpu", "horovod"].held_back) == ("up to date", "up to date")
    # The cpu flavor's torch comes from torch's own index, with a local label PyPI's version lacks.
    assert (rows["cpu", "torch"].pinned, rows["cpu", "torch"].newest, rows["cpu", "torch"].status) == (
        "2.13.0+cpu", "2.13.0", "up to date")
    # The gpu-cu13 flavor's torch (2.15.0) is at or past the index's newest: gpu's rule-breaking torch says nothing
    # about it.
    assert rows["gpu-cu13", "torch"].status == "up to date"
    assert (rows["gpu", "cloudpickle"].status, rows["gpu", "cloudpickle"].held_back) == ("bump", "nothing: a bump")


def test_a_package_the_index_does_not_answer_for_gets_a_row_saying_why(rows):
    row = rows["gpu-cu13", "mlflow"]
    assert (row.newest, row.status) == (None, "index error")
    assert row.held_back == "index: https://pypi.example/pypi/mlflow/json: HTTP 404"
    assert rows["gpu-cu13", "pyarrow"].held_back == "mlflow-3.17-pyarrow"


def test_an_answer_that_is_no_version_is_an_index_row(matrix):
    [row] = [row for row in drift([matrix.flavors["cpu"]], matrix.rules, fake_index({"psutil": "latest"}))
             if row.key == "psutil"]
    assert row.held_back == "index: answered 'latest', not a version (PEP 440)"


def test_each_distribution_is_asked_once(matrix):
    asked = []
    drift(matrix.flavors.values(), matrix.rules, lambda name: asked.append(name) or "0.1")
    assert sorted(asked) == sorted(set(asked)) and "pandas" in asked and "nvidia-nccl-cu13" in asked


TABLE_ROWS = [
    Drift("gpu", "torch", "torch", "2.10.0", "2.13.0", ("torch-pypi-cuda-13", "torch-2.13-nccl")),
    Drift("gpu", "nccl", "nvidia-nccl-cu12", "2.27.5", "2.27.5"),
    Drift("gpu", "cloudpickle", "cloudpickle", "3.1.2", "3.1.3"),
    Drift("gpu", "mlflow", "mlflow", "3.17.2", index_error="https://pypi.org/pypi/mlflow/json: HTTP 503"),
    Drift("cpu", "tensorflow", "tensorflow-cpu", "2.21.0", "2.21.0"),
]


def test_the_text_table(golden):
    golden("outdated.txt", drift_table(TABLE_ROWS) + "\n")


def test_the_json_rows():
    first, *_, last = json.loads(drift_json(TABLE_ROWS))
    assert first == {"flavor": "gpu", "key": "torch", "package": "torch", "pinned": "2.10.0", "newest": "2.13.0",
                     "held_back_by": ["torch-pypi-cuda-13", "torch-2.13-nccl"], "index_error": None,
                     "status": "held back"}
    assert last["status"] == "up to date" and last["package"] == "tensorflow-cpu"
    assert [row["status"] for row in json.loads(drift_json(TABLE_ROWS))][1:4] == ["up to date", "bump", "index error"]


def test_the_task_asks_the_index_for_one_flavor(monkeypatch, capsys):
    monkeypatch.setattr(outdated, "pypi_newest_version", fake_index(NEWEST))
    matrix_tasks.outdated(Context(), flavor="gpu-cu13", json=True)
    printed = json.loads(capsys.readouterr().out)
    assert {row["flavor"] for row in printed} == {"gpu-cu13"}
    assert {row["key"]: row["status"] for row in printed}["pyarrow"] == "held back"


def test_matrix_is_a_collection_whose_default_prints_the_flavors():
    collection = load_collection(REPO_ROOT / "tasks.py")
    assert collection.task_names["matrix.show"] == ["matrix"]
    assert "matrix.outdated" in collection.task_names


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "https_proxy": "http://127.0.0.1:1"})


def test_an_unknown_flavor_is_one_line_naming_the_valid_ones():
    result = invoke("matrix.outdated", "--flavor", "tpu")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "error: --flavor = 'tpu': is not a flavor (valid: cpu, gpu, gpu-cu13)\n"


def test_invoke_matrix_still_prints_the_flavors():
    result = invoke("matrix", "--gpu")
    assert result.returncode == 0, result.stderr
    assert [line.split(" | ")[0] for line in result.stdout.splitlines()[2:]] == ["| gpu", "| gpu-cu13"]
