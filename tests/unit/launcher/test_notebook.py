"""The pure parts of trainrun's notebook extension: %%trainrun's line, the cell's last value, %%configure's line and
the plan of the session it configures (its sizing rules are pooltemplates': tests/unit/templates/test_configure.py),
and the errors a cell shows."""
import os
import re
import shlex

import pytest

pytest.importorskip("IPython")

from pooltemplates import TemplateError  # noqa: E402

from trainrun.backends.spark.allocation_pool import POOL_TEMPLATE_FILE, plan_pool, write_conf  # noqa: E402
from trainrun.engines.slurm import Allocation  # noqa: E402
from trainrun.errors import TrainrunError  # noqa: E402
from trainrun.notebook import session  # noqa: E402
from trainrun.notebook.cell import run_cell  # noqa: E402
from trainrun.notebook.errors import CellError  # noqa: E402
from trainrun.notebook.magics import one_line_configure, parse_cell_options, take_push  # noqa: E402
from trainrun.plan import Plan  # noqa: E402


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
    ("mpi -np two", r"^trainrun: -np = 'two': is invalid \(valid: an integer >= 1\)$"),
    ("mpi --np 2", r"^trainrun: option = '--np': is not an option of trainrun mpi; did you mean -np\?"),
    ("mpi -np 2 python train.py", r"command = 'python train.py': the cell is the program"),
    ("mpi -np 2 'unclosed", r"No closing quotation"),
])
def test_bad_lines_are_one_line_errors(line: str, message: str) -> None:
    """The option errors are the CLI's own UsageError, the line's the notebook's CellError: a cell shows each as
    the one line the CLI prints."""
    with pytest.raises(TrainrunError) as caught:
        parse_cell_options(line)
    shown = caught.value._render_traceback_()
    assert len(shown) == 1 and "\n" not in shown[0] and re.search(message, shown[0]), shown


def test_a_cell_returns_its_last_expression_with_pushed_names() -> None:
    assert run_cell("y = x * 2\ny + 1", {"x": 20}) == 41
    assert run_cell("y = 1", {}) is None
    assert run_cell("__name__", {}) == "__main__"


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "available_cpus", lambda: 4)
    monkeypatch.setattr(session, "available_memory", lambda: 8 * 2**30)
    monkeypatch.delenv(session.POOL_MASTER_ENV, raising=False)


def test_the_session_is_a_plan_with_a_local_master_sized_to_the_container(four_cores) -> None:
    plan = session.session_plan('{"numExecutors": 2, "executorCores": 2, "name": "my app; rm -rf /"}')
    assert isinstance(plan, Plan) and (plan.backend, plan.master, plan.ranks) == (session.SESSION_BACKEND,
                                                                                   "local[4]", 4)
    assert plan.spark_conf["spark.app.name"] == "my app; rm -rf /"
    submitted = shlex.split(session.submit_args(plan.master, plan.spark_conf))  # PYSPARK_SUBMIT_ARGS
    assert submitted == [
        "--master", "local[4]", "--conf", "spark.executor.instances=2", "--conf", "spark.executor.cores=2",
        "--conf", "spark.app.name=my app; rm -rf /", "pyspark-shell"]
    assert plan.argv == ["spark-submit", *submitted]  # what PySpark starts with them
    assert "master: local[4]" in plan.to_text()


def test_a_pool_notebooks_session_runs_on_the_pools_master(four_cores, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(session.POOL_MASTER_ENV, "spark://pool-master:7077")
    monkeypatch.setenv(session.POOL_TEMPLATE_ENV, "local-pool")
    plan = session.session_plan('{"numExecutors": 1}')
    assert (plan.master, plan.local_ranks, plan.spark_conf["spark.cores.max"]) == ("spark://pool-master:7077", 0, "2")


def test_template_problems_reach_the_cell_as_one_line_each(four_cores) -> None:
    with pytest.raises(CellError) as caught:
        session.session_plan('{"numExecutors": "three", "executorMemory": "60"}')
    lines = caught.value._render_traceback_()
    assert len(lines) == 2 and all(line.startswith("%%configure: ") for line in lines), lines
    assert isinstance(caught.value, TrainrunError) and not isinstance(caught.value, TemplateError)
    with pytest.raises(CellError, match=r"^%%configure: --template = 'nosuch-pool': is neither a packaged template "
                                        r"nor a .yaml path \(valid: one of local-pool, .*\)$"):
        session.session_plan(template="nosuch-pool")


@pytest.mark.parametrize(("line", "message"), [
    ("--bogus", r"^%%configure: option = '--bogus': is not an option of %%configure"),
    ("-f extra", r"^%%configure: line = 'extra': is not an option of %%configure"),
    ("--template", r"^%%configure: --template = '': needs a value"),
    ("--json", r"^%%configure: --json = True: is invalid \(valid: together with --dry-run\)$"),
    ("--template 'x", r"^%%configure: line = \"--template 'x\": No closing quotation"),
])
def test_bad_configure_lines_are_one_line_errors(line: str, message: str) -> None:
    with pytest.raises(CellError, match=message) as caught:
        session.parse_configure_line(line)
    assert "\n" not in str(caught.value)


def test_a_one_line_configure_cell_runs_as_the_line_magic() -> None:
    assert one_line_configure(["%%configure -f --template local-pool\n"]) == ["%configure -f --template local-pool\n"]
    assert one_line_configure(["%%configure -f\n", "\n"]) == ["%configure -f\n"]
    body = ["%%configure -f\n", '{"numExecutors": 1}\n']
    assert one_line_configure(body) == body
    assert one_line_configure(["%%configured\n"]) == ["%%configured\n"]
    assert one_line_configure(["%%trainrun mpi -np 2\n"]) == ["%%trainrun mpi -np 2\n"]


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


def test_a_notebook_started_on_an_allocations_pool_sizes_its_session_within_that_pool(
        four_cores, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """`trainrun spark-pool -- jupyter lab` writes the pool as a template beside its Spark conf and names both to the
    kernels it starts, as the local pool's notebook container has them."""
    allocation = Allocation("7", ("n1", "n2"), (4, 4))
    pool = plan_pool(allocation, {"spark.executor.instances": "4", "spark.executor.cores": "2",
                                  "spark.executor.memory": "2g"}, 7077)
    conf_dir = write_conf(pool, str(tmp_path), allocation.job_id)
    assert oct(os.stat(conf_dir).st_mode & 0o777) == "0o700"
    monkeypatch.setenv(session.POOL_MASTER_ENV, pool.master_url)
    monkeypatch.setenv(session.POOL_TEMPLATE_ENV, os.path.join(conf_dir, POOL_TEMPLATE_FILE))
    plan = session.session_plan()
    assert (plan.master, plan.ranks, plan.spark_conf["spark.executor.memory"]) == ("spark://n1:7077", 8, "2g")
    with pytest.raises(CellError, match=r"numExecutors = 5: the pool 'allocation-pool' has 4 \(valid: at most 4\)"):
        session.session_plan('{"numExecutors": 5}')
