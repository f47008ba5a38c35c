"""The pure parts of trainrun's notebook extension: %%trainrun's line, the cell's last value, and how %%configure
sizes a session to the container or the pool it is attached to."""
import shlex

import pytest

pytest.importorskip("IPython")

from pooltemplates import TemplateError, load_template  # noqa: E402
from pooltemplates.configure import template_from_body  # noqa: E402

from trainrun.notebook import session  # noqa: E402
from trainrun.notebook.cell import run_cell  # noqa: E402
from trainrun.notebook.errors import CellError  # noqa: E402
from trainrun.notebook.magics import parse_cell_options, take_push  # noqa: E402


def test_push_names_anywhere_in_the_line() -> None:
    assert take_push(["mpi", "--push", "model,lr", "-np", "2", "--push=data"]) == (
        ["model", "lr", "data"], ["mpi", "-np", "2"])
    with pytest.raises(CellError, match=r"--push = '1x': names no notebook variable"):
        take_push(["mpi", "--push", "1x"])


def test_line_parsed_as_the_cli_parses_it() -> None:
    args, push = parse_cell_options("torch --nproc-per-node 2 --push x --timeout 30")
    assert (args.backend, args.nproc_per_node, args.timeout, push) == ("torch", 2, 30.0, ["x"])


@pytest.mark.parametrize(("line", "message"), [
    ("", r"backend = '': %%trainrun needs a backend first \(valid: one of mpi, torch, spark"),
    ("doctor", r"backend = 'doctor': %%trainrun needs a backend first"),
    ("mpi -np two", r"expected an integer >= 1, got 'two'"),
    ("mpi -np 2 python train.py", r"command = 'python train.py': the cell is the program"),
    ("mpi -np 2 'unclosed", r"No closing quotation"),
])
def test_bad_lines_are_one_line_errors(line: str, message: str) -> None:
    with pytest.raises(CellError, match=message) as caught:
        parse_cell_options(line)
    assert "\n" not in str(caught.value)


def test_a_cell_returns_its_last_expression_with_pushed_names() -> None:
    assert run_cell("y = x * 2\ny + 1", {"x": 20}) == 41
    assert run_cell("y = 1", {}) is None
    assert run_cell("__name__", {}) == "__main__"


def test_a_local_session_is_sized_to_the_container(monkeypatch) -> None:
    monkeypatch.setattr(session, "available_cpus", lambda: 4)
    monkeypatch.setattr(session, "available_memory", lambda: 8 * 2**30)
    plan = session.plan_session(template_from_body({"numExecutors": 2, "executorCores": 2}, {}), None)
    assert plan.master == "local[4]"
    with pytest.raises(TemplateError) as caught:
        session.plan_session(template_from_body({"numExecutors": 3, "executorCores": 2, "executorMemory": "4g",
                                                 "driverMemory": "2g"}, {}), None)
    problems = [str(problem) for problem in caught.value.problems]
    assert problems[0].startswith("numExecutors × executorCores = '3 × 2 = 6': this container has 4 cores")
    assert problems[1].startswith("driverMemory + numExecutors × executorMemory = '2g + 3 × 4g': needs 14.0 GiB, "
                                  "more than this container's 8.0 GiB")


def test_a_pool_notebook_uses_the_pools_master_within_its_template(monkeypatch) -> None:
    monkeypatch.setenv(session.POOL_MASTER_ENV, "spark://pool-master:7077")
    pool = load_template("local-pool")
    defaults = session.session_defaults(pool)
    plan = session.plan_session(template_from_body({"numExecutors": 1}, defaults), pool)
    assert plan.master == "spark://pool-master:7077"
    assert plan.conf["spark.cores.max"] == str(pool.executor.cores)
    with pytest.raises(TemplateError, match=r"numExecutors = 3: the pool 'local-pool' has 2 .*\n.*executorMemory = "
                                            r"'8g': the pool 'local-pool' gives executors 1g"):
        session.plan_session(template_from_body({"numExecutors": 3, "executorMemory": "8g"}, defaults), pool)


def test_submit_args_are_quoted_for_pyspark() -> None:
    plan = session.SessionPlan("local[2]", {"spark.app.name": "my app; rm -rf /"})
    assert shlex.split(plan.submit_args()) == ["--master", "local[2]", "--conf", "spark.app.name=my app; rm -rf /",
                                               "pyspark-shell"]


@pytest.mark.parametrize(("source", "uses"), [
    ("spark.range(3).count()", True),
    ("sc.parallelize([1]).collect()", True),
    ("from pyspark.ml.torch.distributor import TorchDistributor", True),
    ("import horovod.spark.torch as hvd_spark", True),
    ("from spark_tensorflow_distributor import MirroredStrategyRunner", True),
    ("spark = make()\nspark.stop()", False),
    ("import horovod.torch as hvd\nprint('no session')", False),
    ("def f(:", False),
])
def test_cells_that_use_spark_get_the_session_first(source: str, uses: bool) -> None:
    assert session.uses_spark(source) is uses
