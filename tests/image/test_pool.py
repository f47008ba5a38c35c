"""A real pool of the image (1 master + 2 workers + a notebook with MLflow's server): trainrun spark, horovod.spark,
TorchDistributor and Ray on Spark jobs across the workers, a notebook run in the pool's JupyterLab container, a TorchDistributor run
in MLflow's UI, a client without the pool's secret, a killed worker started again under a job that resumes, a killed
worker left dead, pool.down.

Jobs run through `pool.submit`: a driver container of the image on the pool network. The tests run
in file order: the worker kill left dead damages the pool, so it comes last but for `down`.
"""
from __future__ import annotations

import io
import json
import re
import socket
import threading
import time
import uuid
from pathlib import Path

import nbformat
import pytest
import requests
from chromium import RESULTS_DIR, browser_node
from fault_harness import once_more_after_gloo_abort
from mlflow_ui import check_the_run_in_the_ui
from notebook_checks import check_trainings, executed_notebook, shown

from trainrun.image_contract import EXAMPLES_DIR, MLFLOW_PORT, MLFLOW_STORE, NOTEBOOK_DIR
from trainstack.clusters import pool
from trainstack.clusters.containers import ClusterError
from trainstack.clusters.pool.layout import POOL_CONF_LABEL, POOL_LABEL
from trainstack.clusters.pool.master import read_master_state
from trainstack.clusters.pool.specs import driver_kwargs
from trainstack.docker_client import run_container
from trainstack.image.workflows import summary

# ./dev test (CI) leaves these out to stay under an hour; `invoke test --long` runs them (about 7 minutes: the
# pool up, its jobs, down).
pytestmark = pytest.mark.long

UNITS_DIR = Path(__file__).parent / "units"
JOB_TIMEOUT = 240
# 47 batches an epoch on each of 2 ranks: a checkpoint every 10 steps falls mid-epoch.
CHECKPOINTED_TRAINING = [f"{EXAMPLES_DIR}/ddp_torch_mnist.py", "--epochs", "3", "--checkpoint-every", "10"]
RESUMED = re.compile(r"resumed from step (\d+) \((.+)\)")
# Fail at the first lost task instead of retrying it or the barrier stage on what is left.
FAIL_FAST = ["--conf", "spark.task.maxFailures=1", "--conf", "spark.stage.maxConsecutiveAttempts=1"]


class StreamedOutput(io.StringIO):
    """A job's output as it arrives, readable from another thread."""

    def wait_for(self, pattern: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(re.findall(pattern, self.getvalue())) < count:
            assert time.monotonic() < deadline, f"no {count} x {pattern!r} in:\n{self.getvalue()[-4000:]}"
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pool_leftovers(docker_client, name: str) -> list[str]:
    containers = docker_client.containers.list(all=True, filters={"label": f"{POOL_LABEL}={name}"})
    networks = docker_client.networks.list(filters={"label": f"{POOL_LABEL}={name}"})
    volumes = docker_client.volumes.list(filters={"label": f"{POOL_LABEL}={name}"})
    return [item.name for item in (*containers, *networks, *volumes)]


@pytest.fixture(scope="module")
def running_pool(docker_client, image):
    name = f"tspool-{uuid.uuid4().hex[:6]}"
    try:
        yield pool.up(workers=2, image=image.id, name=name, master_port=free_port(), ui_port=free_port(),
                      share=str(UNITS_DIR), notebook_port=free_port(), mlflow_port=free_port(), client=docker_client)
    finally:
        pool.down(name, client=docker_client)


def submit(docker_client, plan: dict, command: list[str]) -> tuple[int, str]:
    """Runs `command` on the pool's driver; returns its exit code and output. A job that ends in PyTorch's Gloo
    teardown abort runs once more (tests/support/fault_harness.py says why)."""
    def run() -> tuple[int, str]:
        out = io.StringIO()
        return pool.submit(command, plan["pool"], docker_client, out), out.getvalue()
    return once_more_after_gloo_abort(run, str(command))


def trainrun_spark(plan: dict, *args: str) -> list[str]:
    return ["trainrun", "spark", "--timeout", str(JOB_TIMEOUT), "--master", plan["master_url"]["network"],
            "--num-processes", "2", "--template", "local-pool", *args]


def test_up_refuses_a_port_in_use(docker_client, image):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(ClusterError, match=rf"^--ui-port = {taken}: is already in use on 127.0.0.1"):
            pool.up(image=image.id, name="tspool-port", master_port=free_port(), ui_port=taken,
                    client=docker_client)


def test_up_refuses_an_image_not_built(docker_client):
    with pytest.raises(ClusterError, match=r"^--image = 'trainstack:no-such-tag': is not built"):
        pool.up(image="trainstack:no-such-tag", name="tspool-image", client=docker_client)


def test_up_that_fails_leaves_nothing(docker_client, image):
    name = f"tspool-{uuid.uuid4().hex[:6]}"
    with pytest.raises(ClusterError, match="not ready after 1s"):
        pool.up(image=image.id, name=name, master_port=free_port(), ui_port=free_port(), timeout=1,
                client=docker_client)
    assert pool_leftovers(docker_client, name) == []


def test_workers_alive_with_distinct_placeholder_gpus(running_pool):
    workers = read_master_state(running_pool["ui_url"])["workers"]
    assert sorted((w["state"], w["cores"], w["resources"]["gpu"]["addresses"]) for w in workers) == [
        ("ALIVE", 2, ["0"]), ("ALIVE", 2, ["1"])]
    table = pool.status(running_pool["pool"])
    assert re.search(rf"{running_pool['pool']}-worker-1 .* ALIVE +0/2 +0/1024 MiB +0 +0/1", table), table
    assert re.search(rf"{running_pool['pool']}-worker-2 .* ALIVE +0/2 +0/1024 MiB +1 +0/1", table), table


def test_torchrun_gloo_job_spans_both_workers_with_distinct_gpus(docker_client, running_pool):
    # One GPU per task leaves one task slot per executor: the two ranks run on different workers.
    code, output = submit(docker_client, running_pool, trainrun_spark(
        running_pool, "--set", "gpu.per_task=1", "--use-gpu", "--", "/job/pool_rank.py"))
    assert code == 0, output[-4000:]
    ranks = re.findall(r"pool rank (\d)/2 on (\S+) gpu (\S+) in sync", output)
    assert sorted(rank for rank, _, _ in ranks) == ["0", "1"], output[-4000:]
    assert {host for _, host, _ in ranks} == {f"{running_pool['pool']}-worker-{n}" for n in (1, 2)}
    assert sorted(gpu for _, _, gpu in ranks) == ["0", "1"]


def test_horovod_spark_run_across_both_workers(docker_client, running_pool):
    code, output = submit(docker_client, running_pool, [
        "timeout", str(JOB_TIMEOUT), "python", "/job/pool_horovod_spark.py", running_pool["master_url"]["network"]])
    assert code == 0, output[-4000:]
    ranks = re.findall(r"horovod.spark rank (\d) on (\S+) allreduce=3.0", output)
    assert sorted(rank for rank, _ in ranks) == ["0", "1"], output[-4000:]
    assert {host for _, host in ranks} == {f"{running_pool['pool']}-worker-{n}" for n in (1, 2)}


@pytest.mark.parametrize("example", ["torch_distributor_mnist.py", "deepspeed_distributor_mnist.py"])
def test_distributor_trains_on_the_pool(docker_client, running_pool, example):
    """TorchDistributor and DeepspeedTorchDistributor (ZeRO-3), localMode=False: barrier tasks on the pool's
    executors."""
    command = ["timeout", str(JOB_TIMEOUT), "python", f"{EXAMPLES_DIR}/{example}",
               "--master", running_pool["master_url"]["network"]]
    code, output = submit(docker_client, running_pool, command)
    assert code == 0, output[-4000:]
    result = summary(output)
    assert result["ranks"] == 2, output[-4000:]
    assert result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= 0.9, result
    if example.startswith("deepspeed"):
        assert result["zero_stage"] == 3 and result["checkpoint_loaded_back"], result
        assert "distributor returned the summary of rank 0" in output, output[-4000:]


@pytest.mark.parametrize("how", ["spark-submit", "trainrun-ray"])
def test_ray_on_spark_trains_across_the_pools_workers(docker_client, running_pool, how):
    """Ray on Spark on the pool: the Databricks script under spark-submit (setup_ray_cluster(max_worker_nodes=2)), and
    a plain Ray driver under trainrun ray --master. A Ray worker node in each worker's executor, sized as that
    executor; Ray Train's two workers learn, their results in the pool's shared work folder."""
    master = running_pool["master_url"]["network"]
    # Ray Train's storage: the pool's work folder, which every worker and driver mounts, as DBFS is on Databricks.
    storage = ["--storage-path", f"{NOTEBOOK_DIR}/ray-results-{how}"]
    command = (["spark-submit", "--master", master, f"{EXAMPLES_DIR}/ray_on_spark_mnist.py", *storage]
               if how == "spark-submit" else
               ["trainrun", "ray", "--master", master, "python", f"{EXAMPLES_DIR}/ray_train_mnist.py", *storage])
    code, output = submit(docker_client, running_pool, ["timeout", str(JOB_TIMEOUT), *command])
    assert code == 0, output[-4000:]
    result = summary(output)
    assert result["ranks"] == 2 and result["accuracy"] >= 0.9, result
    workers = result.get("ray_worker_nodes") or [node for node in result["ray_nodes"] if node["cpus"]]
    assert len(workers) == 2 and all(node["cpus"] >= 1 for node in workers), result


# nbclient, as `jupyter execute` would, in the notebook container: the executed notebook on stdout.
EXECUTE_NOTEBOOK = """
import sys, nbclient, nbformat
notebook = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(notebook, timeout={timeout}, kernel_name="python3").execute()
nbformat.write(notebook, sys.stdout)
"""


def cell_text(cell: dict) -> str:
    return "".join(output.get("text", "") + "".join(output.get("traceback", [])) + output.get("evalue", "")
                   for output in cell["outputs"])


def test_notebook_serves_on_loopback_with_a_token(docker_client, running_pool):
    url = running_pool["notebook_url"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/lab\?token=[0-9a-f]{48}", url), url
    api = url.split("/lab?")[0] + "/api/status"
    assert requests.get(api).status_code == 403
    assert requests.get(api, headers={"Authorization": f"token {url.split('token=')[1]}"}).status_code == 200
    notebook = docker_client.containers.get(running_pool["notebook"]["name"])
    assert [binding["HostIp"] for binding in notebook.ports["8888/tcp"]] == ["127.0.0.1"]
    assert f"notebook: {url}" in pool.status(running_pool["pool"])


def test_notebook_runs_spark_on_the_pools_executors(docker_client, running_pool):
    notebook = docker_client.containers.get(running_pool["notebook"]["name"])
    code, (out, err) = notebook.exec_run(["timeout", str(JOB_TIMEOUT + 60), "python", "-c",
                                          EXECUTE_NOTEBOOK.format(timeout=JOB_TIMEOUT), "/job/pool_notebook.ipynb"],
                                         demux=True)
    assert code == 0, (out or b"")[-2000:].decode() + (err or b"")[-4000:].decode()
    cells = [cell for cell in nbformat.reads(out.decode(), as_version=4).cells if cell.cell_type == "code"]
    too_large, configure, session, job, trainrun_cell, unknown_template = (cell_text(cell) for cell in cells)
    assert "numExecutors = 3: the pool 'local-pool' has 2" in too_large, too_large
    assert "Spark session configured" in configure, configure
    master = running_pool["master_url"]["network"]
    assert f"master: {master} expected: {master}" in session, session
    assert "shuffle partitions: 7" in session, session
    workers = " ".join(f"{running_pool['pool']}-worker-{n}" for n in (1, 2))
    assert f"executor hosts: {workers} driver: {running_pool['notebook']['name']}" in job, job
    # %%trainrun spark without a master runs in the notebook's session, on the pool's workers, not local[N] here.
    ranks_on = set(re.findall(r"rank \d on (\S+)", trainrun_cell))
    assert ranks_on == set(workers.split()), trainrun_cell
    assert "no --master" not in trainrun_cell, trainrun_cell
    # The one-line %%configure checks the template's name: one line, no traceback.
    assert ("%%configure: --template = 'nosuch-pool': is neither a packaged template nor a .yaml path (valid: one of "
            "local-pool, ") in unknown_template and "Traceback" not in unknown_template, unknown_template


def test_the_synapse_notebook_trains_on_the_pool(docker_client, running_pool):
    # The seed notebook as the image ships it; its LocalStore is in ~/work, the pool's work volume, where the
    # executors write the training data and the ranks the checkpoint, and the notebook reads them.
    notebook = docker_client.containers.get(running_pool["notebook"]["name"])
    code, output = notebook.exec_run(["timeout", "1000", "python", "/job/run_notebook.py",
                                      f"{EXAMPLES_DIR}/notebooks/synapse_torch_estimator.ipynb",
                                      "/tmp/notebooks/synapse", "900"])
    executed = executed_notebook(code, output.decode(errors="replace"))
    check_trainings("synapse_torch_estimator", executed)
    text = "".join(shown(cell) for cell in executed["cells"] if cell["cell_type"] == "code")
    assert f"master: {running_pool['master_url']['network']}" in text, text[-3000:]
    assert "rank 0 wrote /home/trainer/work/horovod-store-" in text, text[-3000:]
    print(f"synapse_torch_estimator on the pool: {executed['metadata']['trainstack_seconds']} s")


def test_mlflow_in_the_notebook_shows_a_run_rank_0_logged_on_the_pool(docker_client, running_pool):
    """TorchDistributor on the pool's executors, rank 0 logging to the SQLite store in the pool's work volume; MLflow's
    server in the notebook's container, published on 127.0.0.1 alone, shows the run and its loss chart."""
    url = running_pool["mlflow_url"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), url
    notebook = docker_client.containers.get(running_pool["notebook"]["name"])
    assert [binding["HostIp"] for binding in notebook.ports[f"{MLFLOW_PORT}/tcp"]] == ["127.0.0.1"]
    assert f"mlflow: {url}" in pool.status(running_pool["pool"])
    code, output = submit(docker_client, running_pool, [
        "timeout", str(JOB_TIMEOUT), "python", f"{EXAMPLES_DIR}/torch_distributor_mnist.py",
        "--master", running_pool["master_url"]["network"], "--tracking-uri", MLFLOW_STORE])
    assert code == 0, output[-4000:]
    RESULTS_DIR.mkdir(exist_ok=True)
    check_the_run_in_the_ui(browser_node(), notebook, url, summary(output), {"lr": "0.04", "world_size": "2"},
                            RESULTS_DIR / "mlflow-pool")


# An app on the pool network that runs `id` on an executor: what an unauthorised client would try.
INTRUDER_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master({master!r}).appName("intruder").config("spark.cores.max", "1").getOrCreate()
print("ran:", spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("os").popen("id").read()).collect())
"""


def on_pool_network(docker_client, plan: dict, command: list[str], timeout: float = 150) -> tuple[int, str]:
    """A container of the image on the pool network *without* the pool's conf (its secret)."""
    create = driver_kwargs(plan["pool"], plan["image"], plan["network"]["name"], command,
                           f"{plan['pool']}-outsider-{uuid.uuid4().hex[:6]}", None)
    return run_container(docker_client, create, timeout=timeout)


def test_a_client_without_the_secret_runs_nothing(docker_client, running_pool):
    started = time.monotonic()
    code, output = on_pool_network(docker_client, running_pool, [
        "timeout", "100", "python", "-c", INTRUDER_JOB.format(master=running_pool["master_url"]["network"])])
    print(f"refused after {time.monotonic() - started:.0f}s:", *[line for line in output.splitlines()
                                                              if "ERROR" in line or "Error" in line][:3], sep="\n")
    assert code != 0, output[-4000:]
    assert "uid=" not in output, output[-4000:]
    state = read_master_state(running_pool["ui_url"])
    assert not [app for app in (*state["activeapps"], *state["completedapps"]) if app["name"] == "intruder"], state


def test_rest_submission_is_off(docker_client, running_pool):
    master = running_pool["master"]["hostname"]
    code, output = on_pool_network(docker_client, running_pool, [
        "python", "-c", f"import socket; socket.create_connection(({master!r}, 6066), timeout=5)"], timeout=60)
    assert code != 0 and "ConnectionRefusedError" in output, output


def test_the_secret_shows_in_no_inspect_process_line_or_log(docker_client, running_pool):
    containers = docker_client.containers.list(filters={"label": f"{POOL_LABEL}={running_pool['pool']}"})
    conf = Path(containers[0].labels[POOL_CONF_LABEL])
    (secret,) = [line.split()[1] for line in conf.read_text().splitlines()
                 if line.startswith("spark.authenticate.secret ")]
    for container in containers:
        container.reload()
        assert secret not in json.dumps(container.attrs)
        assert secret not in container.logs().decode(errors="replace")
        code, lines = container.exec_run(["sh", "-c", "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ | tr '\\0' ' '"])
        assert secret not in lines.decode(errors="replace")


def pool_worker(docker_client, plan: dict, index: int):
    return docker_client.containers.get(f"{plan['pool']}-worker-{index}")


def wait_for_checkpoint(worker, folder: str, timeout: float) -> str:
    """The first `step-N` checkpoint in `folder` of the pool's work volume, as a worker sees it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, listing = worker.exec_run(["sh", "-c", f"ls {folder} 2>/dev/null"])
        steps = [name for name in listing.decode().split() if re.fullmatch(r"step-\d+", name)]
        if steps:
            return steps[0]
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint in {folder} after {timeout:g}s")


def test_a_lost_worker_back_in_the_pool_resumes_the_job_from_its_checkpoint(docker_client, running_pool):
    """`trainrun spark --max-restarts 1`, one rank on each worker (a placeholder GPU each): worker-2's container
    killed once a checkpoint is written, then started again. The stage runs again once both workers have a slot, the
    ranks resume from the checkpoint, not step 0, and end with the accuracy of an unbroken run."""
    checkpoints = f"{NOTEBOOK_DIR}/checkpoints-{uuid.uuid4().hex[:6]}"
    on_each_worker = ["--set", "gpu.per_task=1", "--use-gpu"]
    code, output = submit(docker_client, running_pool, trainrun_spark(
        running_pool, *on_each_worker, "--", *CHECKPOINTED_TRAINING, "--checkpoint-dir", f"{checkpoints}-unbroken"))
    assert code == 0, output[-4000:]
    unbroken = summary(output)

    out = StreamedOutput()
    result: list[int] = []
    command = trainrun_spark(running_pool, *on_each_worker, "--max-restarts", "1", "--", *CHECKPOINTED_TRAINING,
                             "--checkpoint-dir", checkpoints)
    job = threading.Thread(target=lambda: result.append(pool.submit(command, running_pool["pool"],
                                                                    docker_client, out)))
    started = time.monotonic()
    job.start()
    first = wait_for_checkpoint(pool_worker(docker_client, running_pool, 1), checkpoints, JOB_TIMEOUT)
    worker_2 = pool_worker(docker_client, running_pool, 2)
    worker_2.kill()
    killed = time.monotonic()
    out.wait_for("the Spark stage starts again", count=1, timeout=120)
    failed = time.monotonic()
    worker_2.start()
    out.wait_for(RESUMED.pattern, count=1, timeout=JOB_TIMEOUT)
    resumed = time.monotonic()
    job.join(timeout=JOB_TIMEOUT)
    assert not job.is_alive(), out.getvalue()[-4000:]
    ended = time.monotonic()
    output = out.getvalue()
    print(f"first checkpoint {first} {killed - started:.1f}s after the start; the stage failed {failed - killed:.1f}s "
          f"after the kill; resumed {resumed - failed:.1f}s after worker-2 was started again; ended "
          f"{ended - resumed:.1f}s later")
    assert result == [0], output[-4000:]
    step = int(RESUMED.search(output)[1])
    assert step >= int(first.removeprefix("step-")), output[-4000:]
    got = summary(output)
    assert got["ranks"] == 2 and abs(got["accuracy"] - unbroken["accuracy"]) <= 0.02, (got, unbroken)


def test_killed_worker_fails_the_job_fast(docker_client, running_pool):
    out = StreamedOutput()
    result: list[int] = []
    command = trainrun_spark(running_pool, "--set", "gpu.per_task=1", "--use-gpu", *FAIL_FAST, "--",
                             "/job/pool_rank.py", "--hold", "600")
    job = threading.Thread(target=lambda: result.append(pool.submit(command, running_pool["pool"],
                                                                    docker_client, out)))
    job.start()
    out.wait_for(r"pool rank \d holding", count=2, timeout=JOB_TIMEOUT)
    worker_2 = docker_client.containers.get(f"{running_pool['pool']}-worker-2")
    address = next(iter(worker_2.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
    worker_2.kill()
    killed = time.monotonic()
    job.join(timeout=120)
    assert not job.is_alive(), f"job still running 120s after the kill:\n{out.getvalue()[-4000:]}"
    print(f"job failed {time.monotonic() - killed:.1f}s after the kill")
    assert result[0] != 0
    assert re.search(rf"trainrun: rank \d on {re.escape(address)} was lost with its Spark executor \S+", out.getvalue()), \
        out.getvalue()[-4000:]
    table = pool.status(running_pool["pool"])
    assert re.search(rf"{running_pool['pool']}-worker-2 +\S+ +DEAD", table), table


def test_a_stage_whose_slots_do_not_come_back_fails_in_one_line(docker_client, running_pool):
    """worker-2 is dead since the test before: a stage that needs a slot on each worker never starts, and Spark's
    slot check (every interval, up to maxFailures times; 15s and 40 by default) ends the job in one line, which
    --max-restarts does not run again."""
    check = ["--conf", "spark.scheduler.barrier.maxConcurrentTasksCheck.interval=1s",
             "--conf", "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures=3"]
    started = time.monotonic()
    code, output = submit(docker_client, running_pool, trainrun_spark(
        running_pool, "--set", "gpu.per_task=1", "--use-gpu", "--max-restarts", "1", *check, "--",
        "/job/pool_rank.py"))
    print(f"failed after {time.monotonic() - started:.1f}s")
    assert code != 0, output
    lines = [line for line in output.splitlines() if line.startswith("trainrun: ")]
    assert any("Spark found fewer free task slots than the stage's ranks" in line for line in lines), output[-4000:]
    assert "starts again" not in output and "Traceback" not in output, output[-4000:]


def test_down_leaves_no_containers_networks_or_volumes(docker_client, running_pool):
    conf = Path(docker_client.containers.get(running_pool["master"]["name"]).labels[POOL_CONF_LABEL])
    removed = pool.down(running_pool["pool"], client=docker_client)
    assert not conf.parent.exists()
    assert running_pool["network"]["name"] in removed and running_pool["work_volume"]["name"] in removed
    assert pool_leftovers(docker_client, running_pool["pool"]) == []
