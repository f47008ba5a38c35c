"""The rendered MPIJob's pods, run on docker the way mpi-operator v0.8 runs them (no cluster is reachable here).

What the operator's controller adds to a manifest (kubeflow/mpi-operator, pkg/controller/mpi_job_controller.go):
- a Secret `<job>-ssh` (an ECDSA P-521 key in PEM and its public half) mounted at spec.sshAuthMountPath as
  id_rsa, id_rsa.pub and authorized_keys; outside /root/.ssh with the default mode, 0644, owned by root and
  the pod's fsGroup;
- a ConfigMap mounted at /etc/mpi whose `hostfile` lists `<job>-worker-<i>.<job>.<namespace>.svc slots=N`;
- pod hostnames `<job>-launcher` and `<job>-worker-<i>` under the job's headless Service;
- in the launcher, K_MPI_JOB_ROLE and Open MPI's OMPI_MCA_orte_keep_fqdn_hostnames, _orte_default_hostfile,
  _plm_rsh_args and _orte_set_default_slots; the launcher starts once every worker's readiness probe passes
  (launcherCreationPolicy: WaitForWorkersReady).

The test does the same with containers on a network of their own, and runs each pod's container as the kubelet
would: the manifest's `command` replaces the image's ENTRYPOINT, its env and memory limit apply unchanged.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml
from workflow_checks import checkpoint_writers

from pooltemplates import load_template, render
from trainstack.image.workflows import summary

OVERRIDES = {"gpu.per_executor": "0", "executor.cores": "1", "executor.memory": "2g", "job.processes": "2"}
CONFIG_MOUNT = "/etc/mpi"
READY_WITHIN = 60.0
JOB_TIMEOUT = 300


def memory_limit(quantity: str) -> str:
    """A Kubernetes memory quantity (2Gi) as docker takes it (2g)."""
    return quantity.removesuffix("i").lower()


@pytest.fixture(scope="module")
def mpijob(image) -> dict:
    text = render(load_template("local-pool", OVERRIDES), "mpijob", image=image.tags[0],
                  job_name=f"ts-{uuid.uuid4().hex[:6]}")
    (job,) = yaml.safe_load_all(text)
    return job


@pytest.fixture(scope="module")
def volumes(mpijob):
    """The operator's Secret and ConfigMap as the kubelet would mount them."""
    spec, name, namespace = mpijob["spec"], mpijob["metadata"]["name"], mpijob["metadata"]["namespace"]
    fs_group = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["securityContext"]["fsGroup"]
    root = Path(tempfile.mkdtemp(prefix="trainstack-mpijob-"))
    secret, config = root / "secret", root / "config"
    secret.mkdir()
    config.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-f", str(secret / "id_rsa")],
                   check=True)
    shutil.copyfile(secret / "id_rsa.pub", secret / "authorized_keys")
    for path in (secret, *secret.iterdir()):
        os.chown(path, 0, fs_group)
        path.chmod(0o755 if path.is_dir() else 0o644)
    hosts = [f"{name}-worker-{index}.{name}.{namespace}.svc slots={spec['slotsPerWorker']}"
             for index in range(spec["mpiReplicaSpecs"]["Worker"]["replicas"])]
    (config / "hostfile").write_text("".join(f"{line}\n" for line in hosts))
    config.chmod(0o755)
    (config / "hostfile").chmod(0o444)
    root.chmod(0o755)
    yield {str(secret): {"bind": spec["sshAuthMountPath"], "mode": "ro"},
           str(config): {"bind": CONFIG_MOUNT, "mode": "ro"}}
    shutil.rmtree(root, ignore_errors=True)


def pod_container(client, network: str, job: dict, role: str, hostname: str, volumes: dict, extra_env: dict):
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    pod = job["spec"]["mpiReplicaSpecs"][role.capitalize()]["template"]["spec"]
    (container,) = pod["containers"]
    env = {entry["name"]: entry["value"] for entry in container.get("env", [])}
    shm = next((mount for mount in container.get("volumeMounts", []) if mount["mountPath"] == "/dev/shm"), None)
    created = client.containers.create(
        container["image"], entrypoint=container["command"], command=container.get("args"),
        environment={**env, "K_MPI_JOB_ROLE": role, **extra_env}, hostname=hostname,
        mem_limit=memory_limit(container["resources"]["limits"]["memory"]),
        tmpfs={"/dev/shm": "rw,nosuid,nodev"} if shm else None, volumes=volumes,
        labels={"trainstack.test": "mpijob-pods"}, detach=True)
    client.networks.get(network).connect(
        created, aliases=[hostname, f"{hostname}.{name}.{namespace}.svc", f"{hostname}.{name}.{namespace}.svc.cluster.local"])
    return created


def wait_for_port(address: str, port: int, deadline: float) -> None:
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_rendered_mpijob_trains_across_its_worker_pods(docker_client, mpijob, volumes):
    name, spec = mpijob["metadata"]["name"], mpijob["spec"]
    network = docker_client.networks.create(name, driver="bridge", labels={"trainstack.test": "mpijob-pods"})
    containers = []
    try:
        for index in range(spec["mpiReplicaSpecs"]["Worker"]["replicas"]):
            worker = pod_container(docker_client, network.id, mpijob, "worker", f"{name}-worker-{index}", volumes, {})
            worker.start()
            containers.append(worker)
        probe = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["readinessProbe"]
        deadline = time.monotonic() + READY_WITHIN
        for worker in containers:
            worker.reload()
            address = worker.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
            wait_for_port(address, probe["tcpSocket"]["port"], deadline)
        launcher = pod_container(docker_client, network.id, mpijob, "launcher", f"{name}-launcher", volumes, {
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": f"{CONFIG_MOUNT}/hostfile",
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": str(spec["slotsPerWorker"]),
            "NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": "",
        })
        containers.append(launcher)
        launcher.start()
        code = launcher.wait(timeout=JOB_TIMEOUT)["StatusCode"]
        output = launcher.logs().decode(errors="replace")
        assert code == 0, output[-4000:]
        result = summary(output)
        assert result["ranks"] == 2, output[-3000:]
        assert result["losses"][-1] < result["losses"][0] / 2, result
        assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
        wrote = [worker.exec_run(["test", "-f", "/tmp/checkpoints/model.pt"])[0] for worker in containers[:2]]
        assert wrote == [0, 1], "rank 0 runs on the first worker pod and alone writes the checkpoint"
    finally:
        for container in containers:
            container.remove(force=True)
        network.remove()
