"""Beyond one machine (issue 14): jobs between containers of the image, as between nodes.

A cluster of `invoke nodes.up` (two workers running trainstack-sshd on a docker network of their own, nothing
published) and launchers of `nodes.run` (a container on that network with the cluster's key and the workers'
host keys): Horovod allreduce (torch and TF) with `trainrun mpi -H`, the uniform rank environment across
hosts, a failing remote rank and a stopped launcher ending every rank on both workers within 30 s, bad input
as one line naming the host within 30 s; a 2-node `trainrun torch` DDP step (static and c10d rendezvous)
through `nodes.exec`; the Horovod MNIST example trained across the two containers; `nodes.down` leaving
nothing. The tests run in file order: `down` comes last.
"""
from __future__ import annotations

import io
import json
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from fault_harness import once_more_after_gloo_abort
from workflow_checks import checkpoint_writers

from trainrun.image_contract import EXAMPLES_DIR
from trainstack.clusters import nodes
from trainstack.clusters.nodes.lookup import find_nodes
from trainstack.clusters.nodes.plan import NODES, NODES_LABEL
from trainstack.image.workflows import summary

UNITS_DIR = Path(__file__).parent / "units"
RANKS_DIR = Path(__file__).parents[1] / "support" / "ranks"
JOB_TIMEOUT = "240"
BOUND = 30.0  # a failure ends the job, and bad input is named, within this many seconds
# What is left of a job on a worker: anything of the image's user but its sshd, tini and the ps itself.
JOB_PROCESS = re.compile(r"python|orted|sleep|trainrun|fail_rank")
# The image's HEALTHCHECK, which docker execs every 15 s, is no job's process.
HEALTHCHECK = "trainstack-healthcheck"


@pytest.fixture(scope="module")
def share():
    """The test units and rank scripts in one folder every container sees at /job."""
    folder = Path(tempfile.mkdtemp(prefix="trainstack-nodes-share-"))
    folder.chmod(0o755)
    for source in (*UNITS_DIR.glob("*.py"), *RANKS_DIR.glob("*.py")):
        shutil.copyfile(source, folder / source.name)
        (folder / source.name).chmod(0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(docker_client, image, share):
    name = f"tsnodes-{uuid.uuid4().hex[:6]}"
    try:
        yield nodes.up(count=2, image=image.id, name=name, share=str(share), client=docker_client)
    finally:
        nodes.down(name, client=docker_client)


def launch(docker_client, plan: dict, command: list[str], out: io.StringIO | None = None) -> tuple[int, str, float]:
    """Runs `command` in a launcher container of the cluster; exit code, output, seconds."""
    out = out or io.StringIO()
    started = time.monotonic()
    code = nodes.run(command, plan["nodes"], docker_client, out)
    return code, out.getvalue(), time.monotonic() - started


def trainrun_mpi(plan: dict, *args: str, np: int = 2) -> list[str]:
    return ["trainrun", "mpi", "--timeout", JOB_TIMEOUT, "-np", str(np), "-H", plan["hosts"], *args]


def worker(docker_client, plan: dict, index: int):
    return docker_client.containers.get(plan["workers"][index]["name"])


def job_processes(docker_client, plan: dict) -> dict[str, list[str]]:
    """Per worker, the image user's processes that belong to jobs (not sshd, tini or ps)."""
    left = {}
    for spec in plan["workers"]:
        code, output = docker_client.containers.get(spec["name"]).exec_run(["ps", "-u", "trainer", "-o", "args="])
        lines = output.decode(errors="replace").splitlines()
        left[spec["name"]] = [line for line in lines if JOB_PROCESS.search(line) and not line.startswith("ps ")
                              and HEALTHCHECK not in line]
    return left


def wait_until_no_job_processes(docker_client, plan: dict, seconds: float) -> dict[str, list[str]]:
    deadline = time.monotonic() + seconds
    while True:
        left = job_processes(docker_client, plan)
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


# --- the workers ---------------------------------------------------------------------------------------

def test_the_sshd_command_is_on_path_and_says_what_it_lacks(in_image):
    output = in_image.run(["trainstack-sshd"], expect=2)
    assert output == ("trainstack-sshd: no authorized keys: mount a public key at /etc/trainstack/ssh/authorized_keys "
                      "(or /home/trainer/.ssh/authorized_keys); password logins are off\n")
    assert "not root" in in_image.run(["trainstack-sshd"], expect=2, user="root")



def test_workers_run_sshd_as_the_image_user_and_publish_nothing(docker_client, cluster):
    for index in range(2):
        container = worker(docker_client, cluster, index)
        assert not container.attrs["HostConfig"].get("PortBindings"), container.attrs["HostConfig"]
        assert all(not bindings for bindings in (container.attrs["NetworkSettings"]["Ports"] or {}).values())
        code, output = container.exec_run(["ps", "-o", "user=,args=", "-C", "sshd"])
        assert code == 0 and all(line.split()[0] == "trainer" for line in output.decode().splitlines()), output
        assert "-f /home/trainer/.trainstack-sshd/sshd_config" in output.decode()
        code, output = container.exec_run(["sh", "-c", "ls /etc/ssh/ssh_host_* 2>/dev/null; "
                                           "stat -c %a /home/trainer/.trainstack-sshd"])
        assert output.decode().split() == ["700"], "a host key baked into the image, or a readable state folder"


def test_host_keys_differ_between_workers_and_are_recorded_for_launchers(docker_client, cluster):
    keys = find_nodes(docker_client, cluster["nodes"]).keys
    lines = (keys / "known_hosts").read_text().splitlines()
    assert len(lines) == 2 and lines[0].split()[-1] != lines[1].split()[-1]
    assert lines[0].startswith(f"[{cluster['workers'][0]['name']}]:2222,[")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700


def test_only_the_clusters_key_logs_in_and_never_with_a_password(docker_client, cluster):
    host = cluster["workers"][0]["name"]
    ssh = "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -p 2222"
    command = ("ssh-keygen -q -t ed25519 -N '' -f /tmp/other; "
               f"{ssh} -o PreferredAuthentications=password {host} true; echo password=$?; "
               f"{ssh} -i /tmp/other -o IdentitiesOnly=yes {host} true; echo other=$?; "
               f"{ssh} -i /etc/trainstack/ssh/id_ed25519 {host} 'echo PATH=$PATH; command -v orted'; echo key=$?")
    code, output, _ = launch(docker_client, cluster, ["sh", "-c", command])
    assert "password=255" in output and "other=255" in output and "key=0" in output, output
    assert "PATH=/opt/venv/bin:" in output and "/usr/bin/orted" in output, output


# --- trainrun mpi -H -----------------------------------------------------------------------------------

@pytest.mark.parametrize("unit,tag", [("hvd_allreduce_torch.py", "torch"), ("hvd_allreduce_tf.py", "tf")])
def test_horovod_allreduce_across_two_containers(docker_client, cluster, unit, tag):
    code, output, _ = launch(docker_client, cluster, trainrun_mpi(cluster, "python", f"/job/{unit}"))
    assert code == 0, output[-4000:]
    assert f"{tag} rank 0/2 allreduce=3.0" in output and f"{tag} rank 1/2 allreduce=3.0" in output, output[-4000:]


def test_ranks_run_on_both_workers_with_the_uniform_environment(docker_client, cluster):
    code, output, _ = launch(docker_client, cluster, [
        *trainrun_mpi(cluster, "-x", "EXTRA=forwarded"), "sh", "-c",
        'echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE on $(hostname) extra=$EXTRA"'])
    assert code == 0, output
    for rank in range(2):
        name = cluster["workers"][rank]["name"]
        assert f"rank {rank}/2 local 0/1 on {name} extra=forwarded" in output, output
    code, output, _ = launch(docker_client, cluster, trainrun_mpi(cluster, "python", "/job/rank_env.py"))
    assert code == 0, output[-4000:]
    decoder = json.JSONDecoder()
    reports = [decoder.raw_decode(output, found.end())[0] for found in re.finditer("rank-env ", output)]
    assert sorted(report["rank"] for report in reports) == [0, 1]
    assert all(report["allreduce"] == 3.0 and report["env"]["MASTER_ADDR"] == cluster["workers"][0]["name"]
               for report in reports), reports


def test_the_hostfile_of_the_launcher_works_as_dash_h(docker_client, cluster):
    code, output, _ = launch(docker_client, cluster, ["trainrun", "mpi", "-np", "2", "--hostfile",
                                                      "/etc/trainstack/ssh/hostfile", "python",
                                                      "/job/hvd_allreduce_torch.py"])
    assert code == 0 and "torch rank 1/2 allreduce=3.0" in output, output[-4000:]


def test_horovod_gloo_across_two_containers(docker_client, cluster):
    code, output, _ = launch(docker_client, cluster, [
        "trainrun", "mpi", "--gloo", "--timeout", JOB_TIMEOUT, "-np", "2", "-H", cluster["hosts"], "python",
        "/job/hvd_allreduce_torch.py"])
    assert code == 0 and "torch rank 1/2 allreduce=3.0" in output, output[-4000:]


def test_a_failing_remote_rank_ends_the_job_within_30s_and_leaves_nothing(docker_client, cluster):
    # Rank 1 (on the second worker) exits 3 after a second; rank 0 would sleep for 10 minutes.
    code, output, seconds = launch(docker_client, cluster, trainrun_mpi(
        cluster, "-x", "FAIL_RANK=1", "-x", "FAIL_AFTER=1", "-x", "FAIL_CODE=3", "python", "/job/fail_rank.py"))
    assert code == 3, output[-4000:]
    assert seconds < BOUND, (seconds, output[-4000:])
    assert wait_until_no_job_processes(docker_client, cluster, 5) == {spec["name"]: [] for spec in cluster["workers"]}


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_stopped_launcher_ends_every_remote_rank_within_30s(docker_client, cluster, how):
    """`docker stop` (SIGTERM to trainrun, which ends the job on every host) and `docker kill` (the launcher
    gone at once: the workers' Open MPI daemons lose mpirun and end their ranks)."""
    out = io.StringIO()
    command = trainrun_mpi(cluster, "-x", "FAIL_RANK=9", "python", "/job/fail_rank.py")  # nobody fails: all sleep
    thread = threading.Thread(target=launch, args=(docker_client, cluster, command, out), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not all(any("fail_rank" in line for line in lines) for lines in job_processes(docker_client, cluster).values()):
        assert time.monotonic() < deadline, f"ranks never started on both workers:\n{out.getvalue()[-4000:]}"
        time.sleep(0.5)
    launcher = NODES.containers(docker_client, cluster["nodes"], "launcher")[0]
    started = time.monotonic()
    launcher.stop(timeout=25) if how == "stop" else launcher.kill()
    left = wait_until_no_job_processes(docker_client, cluster, BOUND)
    assert left == {spec["name"]: [] for spec in cluster["workers"]}, left
    assert time.monotonic() - started < BOUND
    thread.join(60)
    if how == "stop":
        assert "received SIGTERM; job stopped" in out.getvalue(), out.getvalue()[-4000:]


BAD_INPUT = {
    "a host that does not resolve": (["-H", "{w1}:1,{name}-worker-9:1"], [], "-H = '{name}-worker-9': does not resolve"),
    "a port nothing listens on": (["-p", "2223"], [], "-H = '{w1}': refuses connections on port 2223"),
    "a missing key": (["-i", "/tmp/no-such-key"], [], "--ssh-identity-file = '/tmp/no-such-key': is not a readable"),
    "a key the hosts refuse": (["-i", "/tmp/other"], ["ssh-keygen -q -t ed25519 -N '' -f /tmp/other"],
                               "-H = '{w1}': refuses the key /tmp/other"),
    "more ranks than slots": (["-np", "3"], [], "-np = 3: is invalid (valid: at most 2, the slots in -H {w1}:1,"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_one_line_naming_the_host_and_the_fix_within_30s(docker_client, cluster, case):
    args, before, expected = BAD_INPUT[case]
    fill = {"{w1}": cluster["workers"][0]["name"], "{name}": cluster["nodes"]}
    for key, value in fill.items():
        args = [arg.replace(key, value) for arg in args]
        expected = expected.replace(key, value)
    hosts = [] if "-H" in args else ["-H", cluster["hosts"]]
    np = [] if "-np" in args else ["-np", "2"]
    trainrun = " ".join(["trainrun", "mpi", *np, *hosts, *args, "python", "/job/hvd_allreduce_torch.py"])
    code, output, seconds = launch(docker_client, cluster, ["sh", "-c", "; ".join([*before, trainrun])])
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and lines[-1].startswith(f"trainrun: {expected}") and "(valid: " in lines[-1], output
    assert seconds < BOUND
    assert job_processes(docker_client, cluster) == {spec["name"]: [] for spec in cluster["workers"]}


def test_a_worker_that_does_not_answer_is_named_within_30s(docker_client, cluster):
    paused = worker(docker_client, cluster, 1)
    paused.pause()
    try:
        code, output, seconds = launch(docker_client, cluster, trainrun_mpi(
            cluster, "--ssh-connect-timeout", "5", "python", "/job/hvd_allreduce_torch.py"))
    finally:
        paused.unpause()
    name = cluster["workers"][1]["name"]
    assert code == 2 and f"trainrun: -H = '{name}': " in output, output
    assert seconds < BOUND
    assert job_processes(docker_client, cluster)[cluster["workers"][0]["name"]] == []


# --- trainrun torch on two nodes -----------------------------------------------------------------------

@pytest.mark.parametrize("rendezvous", [
    ["--master-addr", "{master_addr}", "--master-port", "29500", "--node-rank", "{node_rank}"],
    ["--rdzv-endpoint", "{master_addr}:29400", "--rdzv-id", "two-containers"],
], ids=["static", "c10d"])
def test_trainrun_torch_ddp_step_across_two_containers(docker_client, cluster, rendezvous):
    command = ["trainrun", "torch", "--timeout", JOB_TIMEOUT, "--nproc-per-node", "1", "--nnodes", "{nnodes}",
               *rendezvous, "/job/ddp_step.py"]

    def run() -> tuple[int, str]:
        out = io.StringIO()
        return nodes.run_on_workers(command, cluster["nodes"], docker_client, out), out.getvalue()
    code, output = once_more_after_gloo_abort(run, "trainrun torch across two containers")
    assert code == 0, output[-4000:]
    assert "ddp rank 0/2 local_rank 0 in sync" in output and "ddp rank 1/2 local_rank 0 in sync" in output, output
    first, second = (spec["name"] for spec in cluster["workers"])
    assert re.search(rf"\[{first}\] .*ddp rank \d/2", output) and re.search(rf"\[{second}\] .*ddp rank \d/2", output)


# --- the examples --------------------------------------------------------------------------------------

def test_horovod_mnist_trains_across_two_containers(docker_client, cluster):
    code, output, seconds = launch(docker_client, cluster, trainrun_mpi(
        cluster, "python", f"{EXAMPLES_DIR}/horovod_torch_mnist.py", "--checkpoint-dir", "/tmp/checkpoints"))
    assert code == 0, output[-4000:]
    result = summary(output)
    assert result["ranks"] == 2, output[-3000:]
    assert result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= 0.9, result
    assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
    wrote = [worker(docker_client, cluster, index).exec_run(["test", "-f", "/tmp/checkpoints/model.pt"])[0]
             for index in range(2)]
    assert wrote == [0, 1], "rank 0 runs on the first worker and alone writes the checkpoint"


# --- down ----------------------------------------------------------------------------------------------

def test_down_removes_every_container_the_network_and_the_keys(docker_client, cluster):
    keys = find_nodes(docker_client, cluster["nodes"]).keys
    removed = nodes.down(cluster["nodes"], client=docker_client)
    assert set(removed) >= {spec["name"] for spec in cluster["workers"]} | {cluster["nodes"]}
    label = f"{NODES_LABEL}={cluster['nodes']}"
    assert docker_client.containers.list(all=True, filters={"label": label}) == []
    assert docker_client.networks.list(filters={"label": label}) == []
    assert not keys.exists()
