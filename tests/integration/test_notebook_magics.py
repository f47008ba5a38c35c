"""trainrun's IPython extension in a real Jupyter kernel (nbclient): %%trainrun cells on real ranks, %%configure
sessions of a real Spark, and what reaches the cell."""
from __future__ import annotations

import os

import pytest
from fault_harness import MARK
from launch_helpers import leftover_processes, requires

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.timeout(600)


def execute(cells: list[str], timeout: int = 300, interrupt_on_timeout: bool = False) -> list[dict]:
    """Runs the cells in one kernel that loaded the extension; returns each cell's outputs."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)
                                               for source in ["%load_ext trainrun.notebook", *cells]])
    nbclient.NotebookClient(notebook, timeout=timeout, allow_errors=True, kernel_name="python3",
                            interrupt_on_timeout=interrupt_on_timeout).execute()
    return [cell.outputs for cell in notebook.cells[1:]]


def stream(outputs: list[dict], name: str = "stdout") -> str:
    return "".join(output["text"] for output in outputs if output["output_type"] == "stream" and output["name"] == name)


def result(outputs: list[dict]) -> str | None:
    return next((output["data"]["text/plain"] for output in outputs if output["output_type"] == "execute_result"), None)


def error(outputs: list[dict]) -> dict | None:
    return next((output for output in outputs if output["output_type"] == "error"), None)


@pytest.fixture
def kernel_env(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    mark = os.urandom(8).hex()
    monkeypatch.setenv(MARK, mark)  # the kernel, and so every rank, inherits it
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("SPARK_WORKER_DIR", str(tmp_path / "spark-work"))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    return mark


@requires(torch=True, mpirun=True)
def test_trainrun_cells_stream_every_rank_into_the_cell_and_return_rank_0s_value(kernel_env) -> None:
    hello, mpi_hello, failing, bad_option, unknown_push = execute([
        "factor = 21\n"
        "import torch  # the kernel has nothing of the ranks but what --push sends",
        "%%trainrun torch --nproc-per-node 2 --push factor\nimport os\nprint('hello from', os.environ['RANK'])\n"
        "factor * (int(os.environ['RANK']) + 2)",
        "%%trainrun mpi -np 2\nimport os\nprint('mpi hello from', os.environ['RANK'])",
        "%%trainrun torch --nproc-per-node 2\nimport os\nif os.environ['RANK'] == '1':\n    raise ValueError('boom on 1')",
        "%%trainrun mpi -np two\nprint('never')",
        "%%trainrun mpi -np 2 --push nowhere\nprint('never')",
    ])[1:]
    assert "[default0]:hello from 0" in stream(hello) and "[default1]:hello from 1" in stream(hello), hello
    assert result(hello) == "42"  # rank 0's last expression, as a cell's Out[]
    assert "[1,0]<stdout>:mpi hello from 0" in stream(mpi_hello) and "[1,1]<stdout>:mpi hello from 1" in stream(mpi_hello)
    assert "ValueError: boom on 1" in stream(failing, "stderr"), failing
    # trainrun's own errors reach the cell as they are, shown as the one line the CLI prints.
    assert error(failing)["ename"] == "JobFailed", error(failing)
    assert error(failing)["traceback"][0].startswith("trainrun: rank 1 exited with code 1"), error(failing)
    assert error(bad_option)["ename"] == "UsageError" and error(bad_option)["traceback"] == [
        "trainrun: -np = 'two': is invalid (valid: an integer >= 1)"], error(bad_option)
    assert error(unknown_push)["ename"] == "CellError" and "nowhere" in error(unknown_push)["evalue"]
    assert "never" not in stream(bad_option) + stream(unknown_push)
    assert leftover_processes(kernel_env) == []


@requires(mpirun=True)
def test_interrupting_the_kernel_ends_the_job_with_nothing_left(kernel_env) -> None:
    (hanging,) = execute(["%%trainrun mpi -np 2\nimport time\nprint('started', flush=True)\ntime.sleep(600)"],
                         timeout=20, interrupt_on_timeout=True)
    assert "started" in stream(hanging), hanging
    assert "SIGINT" in error(hanging)["evalue"], error(hanging)
    assert leftover_processes(kernel_env) == []


@requires(spark=True)
def test_configure_sets_the_predefined_spark_session_as_sparkmagic_does(kernel_env) -> None:
    configured, conf, refused, forced, restarted, bad_values, bad_json, too_big = execute([
        '%%configure\n{"numExecutors": 2, "executorCores": 1, "executorMemory": "512m", "name": "synapse-style",\n'
        ' "conf": {"spark.kryoserializer.buffer.max": "256m", "spark.rapids.memory.gpu.reserve": "1g"}}',
        "c = spark.sparkContext.getConf()\n"
        "(spark.sparkContext.master, c.get('spark.executor.memory'), c.get('spark.kryoserializer.buffer.max'), "
        "c.get('spark.rapids.memory.gpu.reserve'), c.get('spark.app.name'), sc is spark.sparkContext)",
        '%%configure\n{"numExecutors": 1}',
        '%%configure -f\n{"numExecutors": 1, "executorCores": 2, "driverMemory": "700m"}',
        "(spark.sparkContext.master, spark.sparkContext.getConf().get('spark.driver.memory'), "
        "spark.sparkContext.getConf().get('spark.executor.memory'), spark.range(10).count())",
        '%%configure -f\n{"numExecutors": "three", "executorMemory": "60", "numExecutor": 2}',
        '%%configure -f\n{"numExecutors": 2,\n  "executorCores": 1,, }',
        '%%configure -f\n{"numExecutors": 30, "executorCores": 4}',
    ])
    assert "local[2]" in stream(configured)
    assert result(conf) == "('local[2]', '512m', '256m', '1g', 'synapse-style', True)"
    assert "already running" in stream(refused) and "-f" in stream(refused)
    assert "restarted" in stream(forced)
    # The body replaced the configuration (no executor memory any more) and a new JVM has the driver's memory.
    assert result(restarted) == "('local[2]', '700m', None, 10)"
    problems = error(bad_values)["evalue"].splitlines()  # one line each, as the CLI's, and no traceback
    assert len(problems) == 3 and all(line.startswith("%%configure: ") for line in problems), problems
    assert error(bad_values)["traceback"] == problems and error(bad_values)["ename"] == "CellError"
    problems = "\n".join(problems)
    assert "numExecutors = 'three'" in problems and "executorMemory = '60'" in problems
    assert "numExecutor = 2: is not a field %%configure takes" in problems
    assert "line 2 column 22" in error(bad_json)["evalue"]
    assert "this container has" in error(too_big)["evalue"] and "120" in error(too_big)["evalue"]
    assert leftover_processes(kernel_env) == []


@requires(spark=True)
def test_the_one_line_configure_checks_the_template_and_a_spark_cell_says_where_it_runs(kernel_env) -> None:
    unknown, one_line, line_magic, dry_run, spark_cell = execute([
        "%%configure -f --template nosuch-pool",
        "%%configure -f --template local-pool --set spark.executor.instances=1",
        "%configure -f --template local-pool --set executor.instances=1 --set spark.sql.shuffle.partitions=3",
        "%configure --dry-run --json",
        "%%trainrun spark -np 2\nimport os\nprint('spark rank', os.environ['RANK'])",
    ])
    assert error(unknown)["traceback"] == [
        "%%configure: --template = 'nosuch-pool': is neither a packaged template nor a .yaml path (valid: one of "
        "local-pool, multi-node-gpu, single-node-multi-gpu, synapse-gpu-large, synapse-gpu-minimal, or a path to a "
        ".yaml file)"]
    for configured in (one_line, line_magic):
        assert error(configured) is None and "Spark session configured" in stream(configured), configured
        assert "master: local[2]" in stream(configured) and "a local master schedules no GPUs" in stream(configured)
    assert "spark.sql.shuffle.partitions=3" in stream(line_magic)
    assert '"backend": "spark (notebook session)"' in stream(dry_run), dry_run
    assert "spark rank 1" in stream(spark_cell), spark_cell
    assert "trainrun: no --master: Spark runs every rank on this host (local[2])" in stream(spark_cell, "stderr")
    assert leftover_processes(kernel_env) == []
