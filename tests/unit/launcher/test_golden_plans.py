"""`--dry-run --json` plans for each backend and option set, compared with golden files.

Regenerate after an intended change with: UPDATE_GOLDEN=1 pytest tests/unit/launcher/test_golden_plans.py
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainrun.backends import plan_job
from trainrun.backends.spark import STAGE, BarrierStage
from trainrun.errors import UsageError
from trainrun.job import SparkJob
from trainrun.plan import RunOptions
from trainrun.program import Program
from trainrun.rank.env import VERBOSE
from trainrun.engines.slurm import Allocation

GOLDEN = Path(__file__).parent / "golden"
# Inside a Slurm allocation (salloc/sbatch, srun on PATH), as Machine.slurm holds it.
ALLOCATION = {"job_id": "4321", "nodes": ["gpu01", "gpu02"], "tasks_per_node": [2, 2]}

CASES = {
    "mpi_openmpi": (["mpi", "-np", "2", "--", "python", "train.py", "--epochs", "1"], {}),
    "mpi_openmpi_root_oversubscribed": (["mpi", "-np", "4", "--", "python3", "train.py"],
                                        {"is_root": True, "cpu_count": 2}),
    "mpi_openmpi_hosts_env": (["mpi", "-np", "8", "-H", "node0:4,node1:4", "-x", "FOO", "-x", "BAR=baz",
                               "--", "python", "-m", "pkg.train", "--lr", "0.1"], {}),
    "mpi_openmpi_exec_command": (["mpi", "-np", "2", "--", "./run.sh", "arg"], {}),
    "mpi_openmpi_one_core_per_rank": (["mpi", "-np", "2", "python", "train.py"], {"cpu_count": 2}),
    "mpi_mpich": (["mpi", "-np", "4", "-H", "node0:2,node1:2", "-x", "BAR=baz", "--", "python", "train.py"],
                  {"mpi_flavor": "mpich", "is_root": True}),
    "mpi_horovod_gloo": (["mpi", "--gloo", "-np", "2", "--", "python", "train.py"], {"mpi_flavor": None}),
    "torch_single_node": (["torch", "--nproc-per-node", "2", "--", "train.py", "--lr", "0.1"], {}),
    "torch_module": (["torch", "--nproc-per-node", "4", "--", "-m", "pkg.train", "--epochs", "3"], {}),
    "torch_static_multinode": (["torch", "--nproc-per-node", "8", "--nnodes", "2", "--node-rank", "1",
                                "--master-addr", "node0", "--master-port", "29501", "--", "train.py"], {}),
    "torch_rdzv": (["torch", "--nproc-per-node", "8", "--nnodes", "4", "--rdzv-endpoint", "node0:29400",
                    "--rdzv-id", "job7", "--", "train.py"], {}),
    "spark_local_cluster": (["spark", "--master", "local-cluster[2,1,1024]", "--num-processes", "2",
                             "--", "train.py", "--epochs", "1"], {}),
    "spark_ranks_filter": (["spark", "--num-processes", "3", "--ranks-filter", "2,0", "t.py"], {}),
    "mpi_ranks_filter": (["mpi", "-np", "4", "--ranks_filter", "0", "python", "t.py"], {}),
    "spark_default_master": (["spark", "--num-processes", "3", "--", "-m", "pkg.train"], {}),
    "spark_template_gpu": (["spark", "--template", "gpu-pool", "--use-gpu", "--set", "executor.instances=4",
                            "--conf", "spark.network.timeout=600s", "--master", "spark://head:7077",
                            "--num-processes", "8", "--", "train.py"], {}),
    "spark_template_no_gpu": (["spark", "--template", "gpu-pool", "--no-gpu", "--num-processes", "2",
                               "--", "train.py"], {}),
    "spark_horovod": (["spark", "--template", "cpu-pool", "--framework", "horovod", "--num-processes", "4",
                       "--master", "spark://head:7077", "--", "train_hvd.py"], {}),
    "mpi_without_double_dash": (["mpi", "-np", "2", "python", "train.py", "--lr", "0.1"], {}),
    "mpi_horovodrun_options": (["mpi", "--num-proc", "2", "--network-interface", "eth0", "--output-filename",
                                "/tmp/out", "--mpi-args", "--report-bindings -mca btl_base_verbose 0",
                                "--no-tag-output", "python", "train.py"], {}),
    "mpi_oversubscribed_threads_set": (["mpi", "-np", "16", "python", "train.py"],
                                       {"environ": {"OMP_NUM_THREADS": "2"}}),
    "torch_underscore_spellings": (["torch", "--nproc_per_node", "2", "--nnodes", "2", "--node_rank", "1",
                                    "--master_addr", "n0", "--master_port", "29500", "python", "train.py"], {}),
    "torch_module_flag": (["torch", "--nproc-per-node", "2", "-m", "pkg.train", "--epochs", "1"], {}),
    "mpi_srun_in_allocation": (["mpi", "-np", "4", "python", "train.py"], {"slurm": ALLOCATION}),
    "mpi_srun_options": (["mpi", "-np", "3", "-N", "2", "--ntasks-per-node", "2", "--mpi", "pmi2", "-x", "BAR=baz",
                          "--mpi-args=--cpu-bind=cores", "python", "train.py"], {"slurm": ALLOCATION}),
    "mpi_hosts_in_allocation": (["mpi", "-np", "2", "-H", "node0:1,node1:1", "python", "train.py"],
                                {"slurm": ALLOCATION}),
    "torch_srun_in_allocation": (["torch", "--nnodes", "2", "--nproc-per-node", "2", "train.py"],
                                 {"slurm": ALLOCATION}),
    "torch_single_node_in_allocation": (["torch", "--nproc-per-node", "2", "train.py"], {"slurm": ALLOCATION}),
    # Inside salloc or sbatch with no master: a pool across the allocation's nodes for this job.
    "spark_pool_in_allocation": (["spark", "-np", "2", "train.py"], {"slurm": ALLOCATION}),
    "spark_template_pool_in_allocation": (["spark", "--template", "cpu-pool", "-np", "4", "train.py"],
                                          {"slurm": ALLOCATION}),
    # trainrun spark-pool: the pool for any command, sized by the template; placeholder GPU addresses on CPUs.
    "spark_pool_command_in_allocation": (["spark-pool", "--template", "cpu-pool", "--", "spark-submit", "train.py"],
                                         {"slurm": ALLOCATION}),
    "spark_pool_placeholder_gpus": (["spark-pool", "--template", "gpu-pool", "--placeholder-gpus", "--conf",
                                     "spark.executor.resource.gpu.discoveryScript=/opt/gpus.sh", "--", "python",
                                     "train.py"], {"slurm": ALLOCATION}),
    "spark_pool_in_the_image_under_podman": (["spark-pool", "--template", "cpu-pool", "--container-runtime", "podman",
                                              "--container-image", "ghcr.io/trainstack/trainstack:cpu", "--", "python",
                                              "/opt/trainstack/examples/torch_distributor_mnist.py"],
                                             {"slurm": ALLOCATION, "is_root": True, "cwd": "/home/alice/mnist"}),
    # Inside the pool's command: MASTER names the pool, and trainrun spark starts none of its own.
    "spark_on_the_pool_of_master": (["spark", "-np", "2", "train.py"],
                                    {"slurm": ALLOCATION, "environ": {"MASTER": "spark://n1:7077"}}),
    # trainrun ray: a head here; in an allocation a head on the first node and a worker node on the others; Ray on
    # Spark on a master, or on the pool of trainrun spark-pool around the command.
    "ray_on_this_host": (["ray", "--", "python", "driver.py"], {}),
    "ray_sizes_without_dashboard": (["ray", "--num-cpus", "4", "--num-gpus", "2", "--include-dashboard", "false",
                                     "python", "driver.py"], {}),
    "ray_in_allocation": (["ray", "--num-cpus", "1", "python", "driver.py"], {"slurm": ALLOCATION}),
    "ray_on_spark_master": (["ray", "--master", "spark://head:7077", "--max-worker-nodes", "2", "python",
                             "driver.py"], {}),
    "ray_on_the_pool_of_spark_pool": (["ray", "python", "driver.py"],
                                      {"slurm": ALLOCATION, "environ": {"TRAINSTACK_POOL_MASTER": "spark://n1:7077"}}),
    # The image on every task (trainrun.containers), from the working folder /home/alice/mnist.
    "mpi_srun_podman_as_root": (["mpi", "-np", "4", "--container-runtime", "podman", "--container-image",
                                 "ghcr.io/trainstack/trainstack:cpu", "python", "train.py"],
                                {"slurm": ALLOCATION, "is_root": True, "cwd": "/home/alice/mnist"}),
    "mpi_srun_pyxis": (["mpi", "-np", "4", "--container-runtime", "pyxis", "--container-image",
                        "ghcr.io/trainstack/trainstack:cpu", "python", "train.py"],
                       {"slurm": ALLOCATION, "cwd": "/home/alice/mnist"}),
    "mpi_srun_charliecloud": (["mpi", "-np", "4", "--container-runtime", "charliecloud", "--container-image",
                               "/home/alice/trainstack+cpu.sqsh", "python", "train.py"],
                              {"slurm": ALLOCATION, "cwd": "/home/alice/mnist"}),
    "torch_srun_podman_rootless_gpus": (["torch", "--nnodes", "2", "--nproc-per-node", "2", "--container-runtime",
                                         "podman", "--container-image", "ghcr.io/trainstack/trainstack:gpu",
                                         "train.py"],
                                        {"slurm": ALLOCATION, "cwd": "/home/alice/mnist", "gpu_count": 2}),
    "torch_srun_apptainer": (["torch", "--nnodes", "2", "--nproc-per-node", "2", "--container-runtime", "apptainer",
                              "--container-image", "/home/alice/trainstack-cpu.sif", "train.py"],
                             {"slurm": ALLOCATION, "cwd": "/home/alice/mnist"}),
    "torch_srun_charliecloud": (["torch", "--nnodes", "2", "--nproc-per-node", "2", "--container-runtime",
                                 "charliecloud", "--container-image", "/var/tmp/trainstack+cpu.sqsh", "train.py"],
                                {"slurm": ALLOCATION, "cwd": "/var/tmp/mnist"}),
    "torch_elastic": (["torch", "--nproc-per-node", "gpu", "--nnodes", "1:4", "--rdzv-endpoint", "n0:29400",
                       "--max-restarts", "3", "--log-dir", "/tmp/logs", "--local-ranks-filter", "0",
                       "--torchrun-args", "--monitor-interval 1", "--", "train.py"], {"gpu_count": 4}),
    "torch_restarts_on_one_host": (["torch", "--nproc-per-node", "2", "--max-restarts", "2", "train.py"], {}),
    "torch_standalone_cpu": (["torch", "--standalone", "--nproc-per-node", "cpu", "--no-tag-output", "train.py"],
                             {}),
    "spark_verbose": (["spark", "--num-processes", "2", "--verbose", "train.py"], {}),
    # A failed stage runs again, as torchrun's group does; in local mode, torchrun's own restarts.
    "spark_restarts": (["spark", "--master", "spark://head:7077", "--num-processes", "2", "--max-restarts", "2",
                        "train.py"], {}),
    "spark_local_mode_restarts": (["spark", "--local-mode", "--num-processes", "2", "--max-restarts", "1",
                                   "train.py"], {}),
    "torch_timeouts_timestamps": (["torch", "--nproc-per-node", "2", "--timeout", "600", "--exit-barrier-timeout", "30",
                                   "--timestamp-output", "train.py"], {}),
    "spark_local_mode_torch": (["spark", "--local-mode", "--num-processes", "2", "--", "train.py"], {}),
    "spark_local_mode_horovod_gpu": (["spark", "--local-mode", "--use-gpu", "--framework", "horovod",
                                      "--num-processes", "2", "--", "train_hvd.py"], {"gpu_count": 2}),
    # Ranks on other hosts over ssh (trainrun.remote); plans with a key file: test_remote.py.
    "mpi_remote_defaults": (["mpi", "-np", "2", "-H", "worker-1:1,worker-2:1", "--", "python", "train.py"], {}),
    "mpi_remote_port_and_timeout": (["mpi", "-np", "4", "-H", "worker-1:2,worker-2:2", "--ssh-port", "2222",
                                     "--ssh-connect-timeout", "5", "--", "python", "train.py"], {}),
    "mpi_remote_this_host_by_name": (["mpi", "-np", "2", "-H", "launcher:1,worker-1:1", "-p", "2222", "--",
                                      "python", "train.py"], {"local_names": ("launcher",)}),
    "mpi_remote_gloo": (["mpi", "--gloo", "-np", "2", "-H", "worker-1:1,worker-2:1", "--ssh-port", "2222", "--",
                         "python", "train.py"], {"mpi_flavor": None}),
    # One node of a two-container job, as tests/image/test_multinode.py starts it in each container.
    "torch_two_containers_node1": (["torch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1",
                                    "--master-addr", "nodes-worker-1", "--master-port", "29500", "--",
                                    "ddp_step.py"], {}),
    "torch_two_containers_rdzv": (["torch", "--nproc-per-node", "1", "--nnodes", "2", "--rdzv-endpoint",
                                   "nodes-worker-1:29400", "--", "ddp_step.py"], {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_matches_golden(name: str, fake_pooltemplates: object, plan_for, golden) -> None:
    argv, machine = CASES[name]
    facts = {name: Allocation(value["job_id"], tuple(value["nodes"]), tuple(value["tasks_per_node"]))
             if name == "slurm" else value for name, value in machine.items()}
    plan = plan_for([*argv[:1], "--dry-run", "--json", *argv[1:]], **facts).to_dict()
    golden(f"{name}.json", json.dumps({"cli": ["trainrun", *argv], "machine": machine, "plan": plan}, indent=2) + "\n")


def test_every_golden_file_has_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)


def test_text_plan_shows_argv_env_and_spark_conf(fake_pooltemplates: object, plan_for) -> None:
    text = plan_for(["spark", "--template", "gpu-pool", "--use-gpu", "--num-processes", "2", "--", "train.py"]).to_text()
    assert "argv: /usr/bin/python3 -m trainrun.backends.spark.driver" in text
    assert "  PYSPARK_PYTHON=/usr/bin/python3" in text
    assert "spark conf:\n" in text and "  spark.task.resource.gpu.amount=1" in text


VERBOSE_CASES = [["mpi", "-np", "2", "python", "t.py"], ["mpi", "--gloo", "-np", "2", "python", "t.py"],
                 ["torch", "--nproc-per-node", "2", "t.py"], ["spark", "--num-processes", "2", "t.py"],
                 ["spark", "--local-mode", "--num-processes", "2", "t.py"]]


@pytest.mark.parametrize("argv", VERBOSE_CASES)
def test_every_planner_puts_verbose_in_the_ranks_env_and_the_text_shows_it(plan_for, argv) -> None:
    verbose = plan_for([argv[0], "--verbose", *argv[1:]], mpi_flavor=None if "--gloo" in argv else "openmpi")
    assert verbose.env[VERBOSE] == "1" and "verbose: yes" in verbose.to_text().splitlines()
    quiet = plan_for(argv, mpi_flavor=None if "--gloo" in argv else "openmpi")
    assert VERBOSE not in quiet.env and "verbose: no" in quiet.to_text().splitlines()


class FakeSession:
    class sparkContext:  # noqa: N801 (SparkSession's attribute)
        master = "spark://pool-master:7077"


def test_a_caller_s_spark_session_is_planned_too(machine) -> None:
    session = FakeSession()
    program = Program("payload", "/tmp/p.pkl", ("/tmp/r.pkl",))
    job = SparkJob(num_processes=2, program=program, session=session, ranks_filter="0",
                   run=RunOptions(exit_barrier_timeout=30))
    plan = plan_job(job, machine(has_pyspark=False, has_java=False))  # the session has its own
    assert (plan.master, plan.launcher, plan.local_ranks, plan.argv) == ("spark://pool-master:7077", STAGE, 0, [])
    assert plan.stage == BarrierStage(session=session, num_processes=2, program=program, framework="torch",
                                      use_gpu=False, ranks_filter="0")
    assert plan.stage.session is session  # what the stage runs in: the caller's own, not a process of trainrun's
    text = plan.to_text()
    assert "session: the caller's SparkSession, in this process" in text and "exit barrier timeout: 30s" in text
    assert ("stage: a task per rank runs --payload /tmp/p.pkl /tmp/r.pkl (torch, no GPUs, output of ranks 0)"
            in text.splitlines()) and "argv" not in text
    assert plan.to_dict()["stage"] == {"program": ["--payload", "/tmp/p.pkl", "/tmp/r.pkl"], "framework": "torch",
                                       "use_gpu": False, "ranks_filter": "0", "max_restarts": 0}
    assert "argv" not in plan.to_dict()
    with pytest.raises(UsageError, match="^spark = 'a SparkSession': is used as it is"):
        plan_job(dataclasses.replace(job, master="local[2]"), machine())
