"""The image's entrypoint in the two roles Spark on Kubernetes gives it (spark-submit's k8s backend and
spark-operator start pods with the image's entrypoint and `driver ...` / `executor` arguments), and in
pass-through for every other command. No cluster here: the driver role runs a local app through its
properties file; the executor role is a KubernetesExecutorBackend container that registers with a driver in
another container on a docker network (a standalone master with no workers of its own) and runs its tasks."""
from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from trainstack.docker_client import run_container

pytestmark = [pytest.mark.image, pytest.mark.timeout(400)]

ENTRYPOINT = "/opt/trainstack/bin/trainstack-entrypoint"


def test_the_image_entrypoint_passes_other_commands_through(image, in_image):
    assert image.attrs["Config"]["Entrypoint"] == ["tini", "-g", "--", ENTRYPOINT]
    assert in_image.run(["python", "-c", "print('as given')"]).strip().endswith("as given")


def test_driver_runs_spark_submit_in_client_mode(in_image, tmp_path):
    (tmp_path / "spark.properties").write_text("spark.master local[2]\nspark.app.name entrypoint-driver\n")
    tmp_path.chmod(0o755)
    output = in_image.run(["driver", "--properties-file", "/conf/spark.properties", "/units/spark_k8s_app.py",
                           "local[2]", "localhost"], env={"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.1"},
                          volumes={str(tmp_path): {"bind": "/conf", "mode": "ro"}})
    assert re.search(r"tasks ran on \S+", output), output[-3000:]


@pytest.mark.parametrize("role,missing", [("driver", "SPARK_DRIVER_BIND_ADDRESS"), ("executor", "SPARK_DRIVER_URL")])
def test_a_role_without_spark_s_variables_says_which_is_missing(in_image, role, missing):
    output = in_image.run([role], expect=2)
    assert f"trainstack-entrypoint: {role}: ${missing} is not set" in output


def test_executor_registers_with_a_driver_and_runs_its_tasks(docker_client, image):
    name = f"k8s-entry-{uuid.uuid4().hex[:6]}"
    network = docker_client.networks.create(name)
    units = {str(Path(__file__).parent / "units"): {"bind": "/units", "mode": "ro"}}
    driver = docker_client.containers.run(
        image.id, ["bash", "-c", "spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 "
                   ">/tmp/master.log 2>&1 & sleep 10; python /units/spark_k8s_app.py spark://127.0.0.1:7077 "
                   f"{name}-driver"], name=f"{name}-driver", network=name, volumes=units, detach=True)
    try:
        app_id = _wait_for(driver, r"application (\S+)", 180)
        code, output = run_container(docker_client, {
            "image": image.id, "command": ["executor"], "name": f"{name}-executor", "hostname": f"{name}-executor",
            "network": name,
            "environment": {
                "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@{name}-driver:40000", "SPARK_EXECUTOR_ID": "1",
                "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": app_id, "SPARK_EXECUTOR_POD_IP": f"{name}-executor",
                "SPARK_EXECUTOR_MEMORY": "512m", "SPARK_RESOURCE_PROFILE_ID": "0",
                "SPARK_EXECUTOR_POD_NAME": f"{name}-executor", "SPARK_JAVA_OPT_0": "-Dspark.driver.port=40000"}},
            timeout=240)
        ran_on = _wait_for(driver, r"tasks ran on (.+)", 60)
        assert "Driver commanded a shutdown" in output, output[-3000:]
        assert ran_on.split() == [f"{name}-executor"], (ran_on, output[-3000:])
    finally:
        driver.remove(force=True)
        network.remove()


def _wait_for(container, pattern: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, container.logs().decode(errors="replace"))
        if found:
            return found.group(1).strip()
        time.sleep(1)
    raise AssertionError(f"no {pattern!r} from {container.name}:\n{container.logs().decode(errors='replace')[-3000:]}")

