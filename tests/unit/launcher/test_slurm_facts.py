"""Slurm's facts as trainrun reads them (trainrun.engines.slurm): host lists and task counts expanded as `scontrol show
hostnames` would, the rank environment of a task srun started (and none elsewhere), the allocation of a salloc or
sbatch shell; the sh rank entry maps what Python maps; the image's MPI checks in a step
(images/site-packages/trainstack_framework_ranks.py). Real clusters: tests/integration/test_slurm.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainrun.errors import UsageError
from trainrun.rank.env import launcher_rank_env, shell_rank_argv
from trainrun.engines.slurm import (Allocation, allocation, expand_hostlist, expand_tasks_per_node, gpus_on_node, master_port,
                           step_rank_env)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "images" / "site-packages"))
import trainstack_framework_ranks as hook  # noqa: E402

# What srun gave task 3 of `srun -N2 -n4` on the loopback cluster (job 123456).
STEP = {"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_TASKS_PER_NODE": "2(x2)",
        "PMIX_RANK": "3", "SLURM_MPI_TYPE": "pmix"}
# The batch script's own shell: the job's variables, SLURM_PROCID=0, no step.
BATCH = {"SLURM_JOB_ID": "123456", "SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
         "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("text,hosts", [
    ("n1", ["n1"]),
    ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
    ("gpu[01-02],login", ["gpu01", "gpu02", "login"]),
    ("a[08-10]", ["a08", "a09", "a10"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("node-a,node-b", ["node-a", "node-b"]),
])
def test_host_lists_expand_as_scontrol_does(text, hosts) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-", "n[a-b]", "n]1["])
def test_a_broken_host_list_is_an_error(text) -> None:
    with pytest.raises(ValueError, match="not a Slurm host list"):
        expand_hostlist(text)


@pytest.mark.parametrize("text,counts", [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,3(x2)", [1, 3, 3])])
def test_tasks_per_node_expand(text, counts) -> None:
    assert expand_tasks_per_node(text) == counts


def test_a_task_srun_started_gets_every_name() -> None:
    assert step_rank_env(STEP) == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                                   "NODE_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "18456"}
    assert master_port("123456") == 18456  # Lightning's SLURMEnvironment: 15000 + the id's last four digits


@pytest.mark.parametrize("extra,kept", [
    ({"MASTER_PORT": "29500", "RANK": "9"}, {"MASTER_PORT", "RANK"}),  # the user's values stay
    ({"MASTER_ADDR": "head"}, {"MASTER_ADDR"}),
])
def test_values_already_set_are_kept(extra, kept) -> None:
    mapped = step_rank_env({**STEP, **extra})
    assert kept.isdisjoint(mapped)
    assert mapped["WORLD_SIZE"] == "4"


@pytest.mark.parametrize("environ", [
    BATCH,  # the batch script's shell
    {**STEP, "OMPI_COMM_WORLD_RANK": "0"},  # mpirun's ranks (its daemons run as a step)
    {**STEP, "HOROVOD_RANK": "0"},  # horovodrun --gloo's
    {**STEP, "GROUP_RANK": "0", "RANK": "1"},  # torchrun's workers, under srun torchrun
    {},
])
def test_nothing_is_mapped_outside_a_step_or_where_another_launcher_made_the_world(environ) -> None:
    assert step_rank_env(environ) == {}


def test_launcher_rank_env_maps_slurm_after_the_other_launchers() -> None:
    assert launcher_rank_env(STEP)["RANK"] == "3"
    assert launcher_rank_env({**STEP, "PMI_RANK": "3", "PMI_SIZE": "4"})["WORLD_SIZE"] == "4"
    assert launcher_rank_env(BATCH) == {}


@pytest.mark.parametrize("environ", [STEP, {**STEP, "RANK": "kept"}, BATCH, {**STEP, "OMPI_COMM_WORLD_RANK": "2",
                                                                            "OMPI_COMM_WORLD_SIZE": "8"}])
def test_the_shell_rank_entry_maps_what_python_maps(environ) -> None:
    probe = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    result = subprocess.run(shell_rank_argv(probe, sys.executable), env={"PATH": os.environ["PATH"], **environ},
                            capture_output=True, text=True, timeout=30)
    env = json.loads(result.stdout)
    python = {**environ, **launcher_rank_env(environ)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK"):
        assert env.get(name) == python.get(name), name


def test_the_allocation_of_a_salloc_or_sbatch_shell() -> None:
    assert allocation(BATCH) == Allocation("123456", ("n1", "n2"), (2, 2))
    assert allocation(BATCH).tasks == 4
    assert allocation(STEP) is None  # a task srun started starts no ranks through srun of its own
    assert allocation({}) is None


def test_inside_an_allocation_plans_check_the_step_fits(plan_for) -> None:
    alloc = Allocation("7", ("n1", "n2"), (2, 2))
    with pytest.raises(UsageError, match=r"-np = 5: is more than the 4 tasks Slurm job 7 may start"):
        plan_for(["mpi", "-np", "5", "python", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--nodes = 3: is more than the 2 nodes of Slurm job 7"):
        plan_for(["mpi", "-np", "2", "-N", "3", "python", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--nnodes = 3: is more than the 2 nodes"):
        plan_for(["torch", "--nnodes", "3", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--mpi = 'pmi3': is not an MPI plugin type of srun"):
        plan_for(["mpi", "-np", "2", "--mpi", "pmi3", "python", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--output-filename = '/o': is mpirun's"):
        plan_for(["mpi", "-np", "2", "--output-filename", "/o", "python", "t.py"], slurm=alloc)


def test_a_container_route_is_checked_before_anything_starts(plan_for) -> None:
    alloc = Allocation("7", ("n1", "n2"), (2, 2))
    image = ["--container-image", "ghcr.io/trainstack/trainstack:cpu"]
    with pytest.raises(UsageError, match=r"--container-runtime = 'docker': is not a container runtime trainrun "
                                         r"starts under srun \(valid: host, pyxis, apptainer, podman, charliecloud\)"):
        plan_for(["mpi", "-np", "2", "--container-runtime", "docker", *image, "python", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--container-image = '': is needed with --container-runtime podman"):
        plan_for(["mpi", "-np", "2", "--container-runtime", "podman", "python", "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--container-image = 'ghcr.io/trainstack/trainstack:cpu': is not a file: "
                                         r"Charliecloud runs an image file"):
        plan_for(["torch", "--nnodes", "2", "--container-runtime", "charliecloud", *image, "t.py"], slurm=alloc)
    with pytest.raises(UsageError, match=r"--container-runtime charliecloud = '/scratch/alice': is a folder the job "
                                         r"needs in the container, and Charliecloud binds only onto folders its "
                                         r"read-only image has \(valid: work under one of /home, "):
        plan_for(["torch", "--nnodes", "2", "--container-runtime", "charliecloud", "--container-image",
                  "/scratch/alice/trainstack+cpu.sqsh", "t.py"], slurm=alloc, cwd="/scratch/alice")
    with pytest.raises(UsageError, match=r"--container-runtime = 'podman': starts the image on the tasks srun "
                                         r"starts, and this job does not start through srun"):
        plan_for(["mpi", "-np", "2", "--container-runtime", "podman", *image, "python", "t.py"])


@pytest.mark.parametrize("environ,problem", [
    ({**STEP, "PMIX_SERVER_TMPDIR": "/"}, None),
    ({k: v for k, v in STEP.items() if k not in ("PMIX_RANK", "SLURM_MPI_TYPE")},
     "srun started these 4 tasks with --mpi=none, and this image's Open MPI meets srun through PMIx only"),
    ({**{k: v for k, v in STEP.items() if k != "PMIX_RANK"}, "SLURM_MPI_TYPE": "pmi2", "PMI_RANK": "3"},
     "with --mpi=pmi2"),
    ({**STEP, "PMIX_SERVER_TMPDIR": "/nonexistent/pmix.2.0/"},
     "PMIX_SERVER_TMPDIR=/nonexistent/pmix.2.0/ is not in this container"),
    (BATCH, None),
    ({**STEP, "OMPI_COMM_WORLD_RANK": "1"}, None),
])
def test_mpi_in_a_step_needs_pmix_and_its_folder(environ, problem) -> None:
    found = hook.pmix_problem(environ)
    assert (found is None) if problem is None else (problem in found)


def test_an_mpi_world_other_than_the_steps_is_a_problem() -> None:
    assert hook.mpi_world_problem(4, STEP) is None
    assert "MPI's world is 1 process: not the 4 tasks srun started" in hook.mpi_world_problem(1, STEP)
    assert hook.mpi_world_problem(1, BATCH) is None


def doctor_facts(**changes):
    from trainrun.doctor import Facts

    return Facts("/etc/trainstack/manifest.json", None, **{"packages": {}, **changes})


@pytest.mark.parametrize("changes,expected", [
    ({}, []),  # no srun, no job: no Slurm section
    ({"srun_mpi_plugins": ("pmix", "none", "cray_shasta", "pmi2")}, [("slurm", "ok"), ("srun-mpi", "ok")]),
    ({"srun_mpi_plugins": ("pmi2", "none")}, [("slurm", "ok"), ("srun-mpi", "fail")]),
    ({"environ": BATCH, "memlock_bytes": 65536}, [("slurm", "ok"), ("memlock", "warn"), ("spark-pool", "warn")]),
    ({"environ": BATCH, "memlock_bytes": None}, [("slurm", "ok"), ("spark-pool", "warn")]),
    ({"environ": BATCH, "memlock_bytes": None, "packages": {"pyspark": "4.3.0"}, "java": "17"},
     [("slurm", "ok"), ("spark-pool", "ok")]),
    ({"environ": {**STEP, "CUDA_VISIBLE_DEVICES": "3"}}, [("slurm", "ok"), ("cuda-visible", "warn")]),
    ({"environ": {**STEP, "CUDA_VISIBLE_DEVICES": "0,1"}}, [("slurm", "ok")]),
])
def test_the_doctor_checks_what_slurm_gives(changes, expected) -> None:
    from trainrun.engines.slurm import slurm_checks

    assert [(check.name, check.status) for check in slurm_checks(doctor_facts(**changes))] == expected


@pytest.mark.parametrize("device,visible,problem", [
    (1, "3", "cuda:1 does not exist in this task: srun left it 1 GPU (CUDA_VISIBLE_DEVICES=3)"),
    ("cuda:2", "0,1", "cuda:2 does not exist in this task: srun left it 2 GPUs"),
    (0, "3", None),
    (1, "0,1,2,3", None),
    (1, "", None),  # nothing narrowed: CUDA's own error stands
])
def test_a_gpu_index_srun_did_not_leave_the_task_is_a_problem(device, visible, problem) -> None:
    found = hook.gpu_index_problem(device, {**STEP, "CUDA_VISIBLE_DEVICES": visible})
    assert (found is None) if problem is None else (problem in found)
    assert hook.gpu_index_problem(device, {"CUDA_VISIBLE_DEVICES": visible}) is None  # outside a step


def test_ranks_in_an_image_are_not_checked_against_this_hosts_files(plan_for) -> None:
    """The script of a container route is the image's (/opt/trainstack/examples/...), not this host's."""
    alloc = Allocation("7", ("n1", "n2"), (2, 2))
    image = ["--container-runtime", "podman", "--container-image", "ghcr.io/trainstack/trainstack:cpu"]
    assert not plan_for(["mpi", "-np", "4", *image, "python", "/opt/x.py"], slurm=alloc).ranks_start_here()
    assert plan_for(["mpi", "-np", "4", "python", "x.py"], slurm=alloc).ranks_start_here()


def test_the_doctor_names_where_the_pool_of_an_allocation_would_run() -> None:
    from trainrun.engines.slurm import spark_pool_checks

    (check,) = spark_pool_checks(doctor_facts(environ=BATCH, packages={"pyspark": "4.3.0"}, java="17"))
    assert check.detail.startswith("trainrun spark-pool, and trainrun spark with no --master, start a pool here: its "
                                   "master on n1 (a free port there, the UI on another), a worker on each of n1, n2 "
                                   "through srun; no worker reports GPUs (Slurm gave this job none)")
    (check,) = spark_pool_checks(doctor_facts(environ={**BATCH, "SLURM_GPUS_ON_NODE": "4"},
                                              packages={"pyspark": "4.3.0"}, java="17"))
    assert check.detail.endswith("each worker reports the 4 GPU(s) Slurm gave its node (CUDA_VISIBLE_DEVICES)")


@pytest.mark.parametrize(("environ", "gpus"), [
    ({"SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}, 4),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0),
    ({"SLURM_GPUS_PER_NODE": "a100:2"}, 2),
    ({"SLURM_GPUS_PER_NODE": "8"}, 8),
    ({}, 0),
])
def test_the_gpus_slurm_gave_a_node(environ: dict[str, str], gpus: int) -> None:
    assert gpus_on_node(environ) == gpus
    assert allocation({**BATCH, **environ}).gpus_on_node == gpus


def test_a_spark_pool_is_started_only_inside_an_allocation(plan_for, fake_pooltemplates) -> None:
    with pytest.raises(UsageError, match=r"trainrun spark-pool = 'python train.py': starts a pool across the nodes of "
                                         r"a Slurm allocation, and this shell holds none \(valid: a shell of salloc"):
        plan_for(["spark-pool", "--", "python", "train.py"])


def test_a_pool_asking_a_node_for_more_gpus_than_slurm_gave_is_refused_before_anything_starts(
        plan_for, fake_pooltemplates) -> None:
    alloc = Allocation("7", ("n1", "n2"), (1, 1), gpus_on_node=1)
    script = ["--conf", "spark.executor.resource.gpu.discoveryScript=/opt/gpus.sh"]
    with pytest.raises(UsageError, match=r"spark.executor.resource.gpu.amount = '2': asks each node for 2 GPU\(s\) "
                                         r"\(1 executor\(s\) a node\), and Slurm gave job 7 1 on n1"):
        plan_for(["spark-pool", "--template", "gpu-pool", *script, "--", "python", "train.py"], slurm=alloc)
    plan = plan_for(["spark-pool", "--template", "gpu-pool", *script, "--", "python", "train.py"],
                    slurm=Allocation("7", ("n1", "n2"), (1, 1), gpus_on_node=2))
    assert "--executor-gpus 2" in " ".join(plan.argv) and "--placeholder-gpus" not in plan.argv
    assert "2 GPUs (those Slurm gave the node)" in plan.notes[0]


def test_the_pools_master_is_its_own(plan_for) -> None:
    with pytest.raises(UsageError, match="spark.master = 'spark://elsewhere:7077': is the pool's own"):
        plan_for(["spark-pool", "--conf", "spark.master=spark://elsewhere:7077", "--", "python", "train.py"],
                 slurm=Allocation("7", ("n1", "n2"), (1, 1)))


@pytest.mark.parametrize(("environ", "srun", "engine"), [
    ({**BATCH, "SLURM_STEP_NUM_TASKS": "4"}, "/usr/bin/srun", "slurm-step"),
    (BATCH, "/usr/bin/srun", "slurm-allocation"),
    (BATCH, None, "local"),  # the job's variables in a container without srun
    ({}, "/usr/bin/srun", "local"),  # a login node
])
def test_one_place_says_which_engine_the_process_is_in(environ: dict[str, str], srun: str | None,
                                                        engine: str) -> None:
    from trainrun.engines import current

    where = current(environ, which=lambda name: srun)
    assert where.engine == engine
    assert (where.allocation is not None) == (engine == "slurm-allocation")
