"""The Ray targets: KubeRay's RayJob and RayCluster (rayjob, raycluster) and Ray on Spark in a Databricks notebook
(databricks-ray). Their nodes are the template's executors and driver, no output holds a token, and the targets that
run Spark on Kubernetes send Ray to KubeRay. The manifests' structure: test_kubernetes.py."""
from __future__ import annotations

import ast
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooltemplates import TARGETS, TemplateError, load_template, packaged_templates, render
from pooltemplates.cli import TARGET_OPTIONS, main
from pooltemplates.targets import databricks_ray, k8s, kuberay, workload
from pooltemplates.units import parse_size
from trainrun.backends.spark import ray_on_spark
from trainstack.image.matrix import load_matrix

RAY_TARGETS = ("rayjob", "raycluster", "databricks-ray")
KUBERAY_TARGETS = ("rayjob", "raycluster")
# Templates that set the executor's and the driver's sizes (synapse-gpu-minimal leaves them to Synapse).
SIZED = [name for name in packaged_templates() if name != "synapse-gpu-minimal"]


def cluster_spec(text: str) -> dict[str, Any]:
    document = next(document for document in yaml.safe_load_all(text) if document)
    return document["spec"]["rayClusterSpec"] if document["kind"] == "RayJob" else document["spec"]


def refused_fields(name: str, target: str, overrides: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(TemplateError) as caught:
        render(load_template(name, overrides), target)
    assert str(caught.value).startswith(f"render {name!r} for {target}: ")
    return [problem.field for problem in caught.value.problems]


@pytest.mark.parametrize("target", KUBERAY_TARGETS)
def test_worker_nodes_are_the_executors_and_the_head_the_driver(target: str) -> None:
    spec = cluster_spec(render(load_template("multi-node-gpu", {"executor.env.NCCL_DEBUG": "INFO"}), target))
    head = spec["headGroupSpec"]["template"]["spec"]
    (group,) = spec["workerGroupSpecs"]
    worker = group["template"]["spec"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (4, 4, 4)
    assert worker["containers"][0]["resources"] == {"limits": {"memory": "96Gi", "nvidia.com/gpu": 4},
                                                    "requests": {"cpu": 16, "memory": "96Gi"}}
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in worker["containers"][0]["env"]
    assert head["containers"][0]["resources"] == {"limits": {"memory": "8Gi"}, "requests": {"cpu": 2, "memory": "8Gi"}}
    # No task or actor lands on the head, as on Ray on Spark.
    assert spec["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}
    for pod in (head, worker):
        assert pod["containers"][0]["volumeMounts"] == [k8s.shm_mount()]
        assert pod["volumes"] == [k8s.shm_volume()]
        assert pod["containers"][0]["image"] == f"localhost:5000/trainstack:{workload.IMAGE_TAGS['gpu']}"


@pytest.mark.parametrize("target", KUBERAY_TARGETS)
def test_placeholder_gpus_ask_kubernetes_for_no_devices(target: str) -> None:
    text = render(load_template("local-pool"), target)
    assert "nvidia" not in text
    assert f"localhost:5000/trainstack:{workload.IMAGE_TAGS['cpu']}" in text


@pytest.mark.parametrize("target", KUBERAY_TARGETS)
def test_token_authentication_is_kuberays_and_the_dashboard_stays_in_the_cluster(target: str) -> None:
    spec = cluster_spec(render(load_template("single-node-multi-gpu"), target))
    assert spec["authOptions"] == {"mode": "token"}
    # KubeRay allows token authentication from Ray 2.52, and probes over HTTP (no wget in the images) from 2.53.
    assert tuple(int(part) for part in spec["rayVersion"].split(".")) >= (2, 53)
    head = spec["headGroupSpec"]
    assert (head["serviceType"], head["enableIngress"]) == ("ClusterIP", False)
    assert [port["name"] for port in head["template"]["spec"]["containers"][0]["ports"]] == ["gcs-server", "dashboard"]


def test_ray_version_is_the_images() -> None:
    """The images the KubeRay targets run (workload.IMAGE_TAGS' flavors) hold the Ray that rayVersion names."""
    flavors = load_matrix().flavors
    assert {name: flavors[name].version("ray") for name in workload.IMAGE_TAGS} == \
        {name: kuberay.RAY_VERSION for name in workload.IMAGE_TAGS}


def test_rayjob_runs_the_script_through_python_and_deletes_its_cluster() -> None:
    job = yaml.safe_load(render(load_template("multi-node-gpu"), "rayjob").split("---\n", 1)[1])
    assert job["spec"]["entrypoint"] == "python /opt/trainstack/examples/ray_train_mnist.py --num-workers 4"
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    text = render(load_template("multi-node-gpu"), "rayjob", script="/home/trainer/train.py --name 'two words'",
                  job_name="train", namespace="ml", registry="registry.example:5000")
    job = yaml.safe_load(text.split("---\n", 1)[1])
    assert shlex.split(job["spec"]["entrypoint"]) == ["python", "/home/trainer/train.py", "--name", "two words"]
    assert job["metadata"] == {"name": "train", "namespace": "ml"}
    assert f"image: registry.example:5000/trainstack:{workload.IMAGE_TAGS['gpu']}\n" in text


@pytest.mark.parametrize("target", RAY_TARGETS)
def test_templates_without_sizes_are_refused(target: str) -> None:
    head = ["driver.cores", "driver.memory"] if target in KUBERAY_TARGETS else []
    assert refused_fields("synapse-gpu-minimal", target) == ["executor.cores", "executor.memory", *head]
    sized = {"executor.cores": "8", "executor.memory": "32g", "driver.cores": "2", "driver.memory": "8g"}
    assert render(load_template("synapse-gpu-minimal", sized), target)


@pytest.mark.parametrize("target", KUBERAY_TARGETS)
def test_a_token_in_the_template_is_refused_and_not_shown(target: str) -> None:
    overrides = {"executor.env.RAY_AUTH_TOKEN": "not-a-real-token", "executor.env.RAY_AUTH_MODE": "disabled"}
    with pytest.raises(TemplateError) as caught:
        render(load_template("local-pool", overrides), target)
    assert [problem.field for problem in caught.value.problems] == ["executor.env.RAY_AUTH_TOKEN",
                                                                    "executor.env.RAY_AUTH_MODE"]
    assert "not-a-real-token" not in str(caught.value)


@pytest.mark.parametrize(("name", "target"), [(name, target) for name in SIZED for target in RAY_TARGETS])
def test_no_output_holds_a_token(name: str, target: str, monkeypatch) -> None:
    """KubeRay makes the token, in a Secret of each Ray cluster; the images' start hook makes Ray on Spark's. A render
    takes none from its environment, makes none (two renders are the same) and names no token variable."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", "token-from-the-environment")
    text = render(load_template(name), target)
    assert text == render(load_template(name), target)
    assert "token-from-the-environment" not in text
    assert "RAY_AUTH_TOKEN" not in text and "auth_token" not in text


def _setup_ray_cluster_parameters() -> set[str]:
    """setup_ray_cluster's parameters, read from the installed Ray's source (importing Ray takes seconds)."""
    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        pytest.skip("Ray is not installed")
    source = Path(spec.origin).parent / "util" / "spark" / "cluster_init.py"
    function = next(node for node in ast.parse(source.read_text(encoding="utf-8")).body
                    if isinstance(node, ast.FunctionDef) and node.name == "setup_ray_cluster")
    return {argument.arg for argument in function.args.kwonlyargs}


@pytest.mark.parametrize("name", SIZED)
def test_databricks_ray_calls_ray_on_spark_with_its_own_parameters(name: str) -> None:
    module = ast.parse(render(load_template(name), "databricks-ray"))
    imports = [node for node in module.body if isinstance(node, ast.ImportFrom)]
    assert [(node.module, [alias.name for alias in node.names]) for node in imports] == \
        [("ray.util.spark", ["setup_ray_cluster", "shutdown_ray_cluster"])]
    calls = [node.value for node in module.body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)]
    assert [ast.unparse(call.func) for call in calls] == ["setup_ray_cluster", "ray.init"]
    keywords = {keyword.arg: ast.literal_eval(keyword.value) for keyword in calls[0].keywords}
    assert set(keywords) <= _setup_ray_cluster_parameters()
    assert keywords == databricks_ray.setup_arguments(load_template(name))


@pytest.mark.parametrize("name", SIZED)
def test_databricks_ray_sizes_worker_nodes_as_the_images_ray_on_spark(name: str) -> None:
    template = load_template(name)
    arguments = databricks_ray.setup_arguments(template)
    sized = ray_on_spark.sized(ray_on_spark.WorkerNodeSizes(None, None, None, None), master="spark://pool:7077",
                               conf=template.spark_conf(),
                               executor_memory_bytes=parse_size(template.executor.memory).bytes, registered_cores=[])
    assert arguments == {"max_worker_nodes": template.executor.instances, "num_cpus_worker_node": sized.num_cpus,
                         "num_gpus_worker_node": sized.num_gpus, "memory_worker_node": sized.heap_memory,
                         "object_store_memory_worker_node": sized.object_store_memory}
    assert (databricks_ray.NODE_SHARE_OF_MEMORY, databricks_ray.OBJECT_STORE_SHARE) == \
        (ray_on_spark.NODE_SHARE_OF_MEMORY, ray_on_spark.OBJECT_STORE_SHARE)


def test_spark_on_kubernetes_sends_ray_to_kuberay() -> None:
    header = render(load_template("multi-node-gpu"), "spark-application").split("---\n", 1)[0]
    assert f"# {k8s.RAY_ON_SPARK_NOTE}\n" in header
    assert "rayjob" in k8s.RAY_ON_SPARK_NOTE and "k8s://" in k8s.RAY_ON_SPARK_NOTE
    # The kubernetes target's output is spark-submit's arguments, where a comment would be an argument: its
    # --master option says it instead.
    assert "--target rayjob" in TARGET_OPTIONS["master"]


def test_the_cli_offers_the_ray_targets(capsys) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  rayjob (parameters: image, registry, namespace, job_name, script)\n" in out
    assert "  raycluster (parameters: image, registry, namespace, job_name)\n" in out
    assert "  databricks-ray (parameters: -)\n" in out
    with pytest.raises(SystemExit):
        main(["render", "local-pool", "--target", "ray"])
    assert "'rayjob', 'raycluster'" in capsys.readouterr().err
    assert set(RAY_TARGETS) <= set(TARGETS)


# The Ray render lines the guides show, as they show them (ray.md's with a registry, templates.md's without).
REPO = Path(__file__).resolve().parents[3]
RAYJOB_PAGE_LINES = [line for page in ("docs/guides/ray.md", "docs/guides/templates.md")
                     for line in (REPO / page).read_text(encoding="utf-8").splitlines()
                     if line.startswith("pooltemplates render") and "--target rayjob" in line]


@pytest.mark.parametrize("line", RAYJOB_PAGE_LINES)
def test_the_guides_rayjob_lines_render_the_job_they_describe(line, tmp_path):
    """Run in a shell with the venv's scripts on PATH, as a reader who installed the templates runs it."""
    assert len(RAYJOB_PAGE_LINES) == 2
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run(line, shell=True, cwd=tmp_path, env=env, check=True)
    text = (tmp_path / "rayjob.yaml").read_text()
    [job] = [document for document in yaml.safe_load_all(text) if document]
    assert (job["kind"], job["metadata"]["namespace"]) == ("RayJob", "ml")
    spec = cluster_spec(text)
    images = {container["image"] for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
              for container in group["template"]["spec"]["containers"]}
    assert len(images) == 1, images
    if "--registry registry.example:5000" in line:
        assert images.pop().startswith("registry.example:5000/"), line
