"""The Kubernetes targets: every rendered manifest against its CRD's own OpenAPI schema, the templates a
target refuses, and the parameters and image references the goldens (default parameters) do not show.

No cluster is reachable here, and kubeconform (a Go binary from GitHub) cannot be fetched, so the CRDs'
`openAPIV3Schema`s, pinned in tests/support/crds/, are checked with jsonschema, made as strict as
`kubectl apply` (server-side strict field validation): objects with declared properties take no others.

KubeRay's CRDs (the rayjob and raycluster targets) are not pinned: nothing fetched from another repository is
committed here, and KubeRay's CRD files are only in its repository. Their ray.io/v1 types are written out below
instead (kuberay_schemas), field by field as KubeRay's API reference documents them, in the same strict form; the pod
templates inside them are core/v1 PodTemplateSpecs, checked with that schema from the pinned PyTorchJob CRD.
"""
from __future__ import annotations

import functools
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pooltemplates import TemplateError, TemplateWarning, load_template, packaged_templates, render
from pooltemplates.targets import k8s, workload
from trainstack.image import naming
from trainstack.image.matrix import load_matrix

CRDS = Path(__file__).parents[2] / "support" / "crds"
MANIFEST_TARGETS = ("spark-application", "pytorchjob", "mpijob", "trainjob-torch", "trainjob-mpi")
KUBERAY_TARGETS = ("rayjob", "raycluster")
TRAINING_TARGETS = ("pytorchjob", "mpijob", "trainjob-torch", "trainjob-mpi")
# Overrides that make each packaged template a CPU pool (local-pool also drops its fractional task GPUs).
CPU = {"gpu.per_executor": "0"}
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# The packaged GPU templates keep their gpu.reserve in the CPU variants, which warns and changes nothing.
pytestmark = pytest.mark.filterwarnings("ignore:.*gpu.reserve.*has no effect:pooltemplates.errors.TemplateWarning")


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict schema of that served CRD version."""
    schemas = {}
    for path in CRDS.glob("*/*.yaml"):
        for crd in yaml.load_all(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version["served"]:
                    schemas[(f"{group}/{version['name']}", kind)] = strict(version["schema"]["openAPIV3Schema"])
    return schemas


def strict(schema: Any) -> Any:
    """A structural schema as jsonschema reads it with the API server's meaning: int-or-string takes
    either; an embedded resource has apiVersion, kind and metadata; declared properties are all there is."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: strict(value) for key, value in schema.items()}
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in schema:
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("x-kubernetes-embedded-resource"):
        schema["properties"] = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                "metadata": {"type": "object"}, **schema.get("properties", {})}
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


@functools.cache
def kuberay_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> a strict schema of KubeRay's RayJob and RayCluster: every field of the types the targets
    write, as KubeRay's API reference lists them for v1.6 (https://docs.ray.io/en/master/cluster/kubernetes/references/
    api.html: RayJobSpec, RayClusterSpec, AuthOptions, HeadGroupSpec, WorkerGroupSpec), with the fields its ray.io/v1
    CRD requires; types the targets do not write are open objects."""
    string, boolean, integer, number = {"type": "string"}, {"type": "boolean"}, {"type": "integer"}, {"type": "number"}
    strings, open_object = {"type": "object", "additionalProperties": string}, {"type": "object"}
    pytorch_job = crd_schemas()[("kubeflow.org/v1", "PyTorchJob")]
    pod_template = pytorch_job["properties"]["spec"]["properties"]["pytorchReplicaSpecs"]["additionalProperties"][
        "properties"]["template"]

    def closed(properties: dict[str, Any], *required: str) -> dict[str, Any]:
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        return {**schema, "required": list(required)} if required else schema

    auth_options = closed({"enableK8sTokenAuth": boolean, "secretName": string,
                           "mode": {"type": "string", "enum": ["disabled", "token"]}})
    head_group = closed({"template": pod_template, "headService": open_object, "enableIngress": boolean,
                         "resources": strings, "labels": strings, "rayStartParams": strings, "serviceType": string},
                        "template")
    worker_group = closed({"suspend": boolean, "groupName": string, "replicas": integer, "minReplicas": integer,
                           "maxReplicas": integer, "idleTimeoutSeconds": integer, "resources": strings,
                           "labels": strings, "rayStartParams": strings, "template": pod_template,
                           "scaleStrategy": open_object, "numOfHosts": integer},
                          "groupName", "minReplicas", "maxReplicas", "template")
    cluster_spec = closed({"upgradeStrategy": open_object, "authOptions": auth_options, "suspend": boolean,
                           "managedBy": string, "autoscalerOptions": open_object, "headServiceAnnotations": strings,
                           "enableInTreeAutoscaling": boolean, "gcsFaultToleranceOptions": open_object,
                           "headGroupSpec": head_group, "rayVersion": string,
                           "workerGroupSpecs": {"type": "array", "items": worker_group}},
                          "headGroupSpec")
    job_spec = closed({
        "activeDeadlineSeconds": integer, "backoffLimit": integer, "rayClusterSpec": cluster_spec,
        "submitterPodTemplate": pod_template, "metadata": strings, "clusterSelector": strings,
        "submitterConfig": open_object, "managedBy": string, "deletionStrategy": open_object, "entrypoint": string,
        "runtimeEnvYAML": string, "jobId": string,
        "submissionMode": {"type": "string", "enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
        "entrypointResources": string, "entrypointNumCpus": number, "entrypointNumGpus": number,
        "ttlSecondsAfterFinished": integer, "preRunningDeadlineSeconds": {"type": "integer", "minimum": 1},
        "shutdownAfterJobFinishes": boolean, "suspend": boolean})

    def resource(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
        return closed({"apiVersion": {"enum": ["ray.io/v1"]}, "kind": {"enum": [kind]}, "metadata": open_object,
                       "spec": spec}, "apiVersion", "kind", "metadata", "spec")

    return {("ray.io/v1", "RayJob"): resource("RayJob", job_spec),
            ("ray.io/v1", "RayCluster"): resource("RayCluster", cluster_spec)}


def schema_errors(document: dict[str, Any]) -> list[str]:
    schema = {**crd_schemas(), **kuberay_schemas()}[(document["apiVersion"], document["kind"])]
    errors = [f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
              for error in jsonschema.Draft4Validator(schema).iter_errors(document)]
    for field in ("name", "namespace"):
        if not DNS_LABEL.fullmatch(document["metadata"][field]):
            errors.append(f"metadata.{field}: {document['metadata'][field]!r} is not a DNS label")
    return errors


def documents(text: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(text) if document]


def renders(name: str, target: str, overrides: dict[str, str]) -> bool:
    try:
        with warnings.catch_warnings(action="ignore", category=TemplateWarning):
            render(load_template(name, overrides), target)
    except TemplateError:
        return False
    return True


CASES = [(name, target, overrides) for name in packaged_templates() for target in MANIFEST_TARGETS + KUBERAY_TARGETS
         for overrides in ({}, CPU) if renders(name, target, overrides)]


@pytest.mark.parametrize(("name", "target", "overrides"), CASES,
                         ids=[f"{n}-{t}{'-cpu' if o else ''}" for n, t, o in CASES])
def test_manifests_validate_against_their_crds(name: str, target: str, overrides: dict[str, str]) -> None:
    rendered = documents(render(load_template(name, overrides), target))
    assert rendered
    for document in rendered:
        assert schema_errors(document) == [], f"{document['kind']} {document['metadata']['name']}"


def test_every_template_renders_for_every_manifest_target_on_cpus() -> None:
    assert {(n, t) for n, t, o in CASES if o and t in MANIFEST_TARGETS} == \
        {(n, t) for n in packaged_templates() for t in MANIFEST_TARGETS}


def test_kuberay_manifests_are_validated_for_every_template_with_sizes() -> None:
    """Only synapse-gpu-minimal, which leaves the sizes to Synapse, has none (test_ray.py: its refusal)."""
    sized = {name for name in packaged_templates() if name != "synapse-gpu-minimal"}
    assert {(n, t) for n, t, o in CASES if t in KUBERAY_TARGETS} == \
        {(n, t) for n in sized for t in KUBERAY_TARGETS}


def test_the_validator_finds_what_the_api_server_refuses() -> None:
    job = documents(render(load_template("multi-node-gpu"), "pytorchjob"))[0]
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]
    master["template"]["spec"]["containers"][0]["resourcez"] = {}
    master["replicas"] = "one"
    master["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "lots"
    errors = schema_errors(job)
    assert any("'resourcez' was unexpected" in error for error in errors)
    assert any("'one' is not of type 'integer'" in error for error in errors)
    assert any("memory" in error and "'lots'" in error for error in errors)


def test_the_kuberay_outline_finds_what_the_api_server_refuses() -> None:
    job = documents(render(load_template("multi-node-gpu"), "rayjob"))[0]
    cluster = job["spec"]["rayClusterSpec"]
    cluster["headGroupSpec"]["serviceTyp"] = "ClusterIP"
    cluster["authOptions"]["mode"] = "tokens"
    cluster["workerGroupSpecs"][0]["replicas"] = "four"
    del cluster["workerGroupSpecs"][0]["groupName"]
    cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resourcez"] = {}
    job["spec"]["shutdownAfterJobFinish"] = True
    errors = schema_errors(job)
    assert any("'serviceTyp' was unexpected" in error for error in errors)
    assert any("'tokens' is not one of ['disabled', 'token']" in error for error in errors)
    assert any("'four' is not of type 'integer'" in error for error in errors)
    assert any("'groupName' is a required property" in error for error in errors)
    assert any("'resourcez' was unexpected" in error for error in errors)
    assert any("'shutdownAfterJobFinish' was unexpected" in error for error in errors)


def containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every container spec in a manifest, wherever its CRD nests pod templates."""
    found = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            found.extend(value.get("containers", []))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document)
    return found


@pytest.mark.parametrize("target", TRAINING_TARGETS)
def test_gpu_pods_request_gpus_mount_shm_and_get_the_template_env(target: str) -> None:
    template = load_template("multi-node-gpu", {"executor.env.NCCL_DEBUG": "INFO",
                                                "executor.env.NCCL_SOCKET_IFNAME": "eth0"})
    text = render(template, target)
    resources = [c.get("resources", {}) for d in documents(text) for c in containers(d)]
    if target == "trainjob-torch":
        resources.append(documents(text)[1]["spec"]["trainer"]["resourcesPerNode"])
    assert {"memory": "96Gi", "nvidia.com/gpu": 4} in [r.get("limits") for r in resources]
    assert "mountPath: /dev/shm" in text and "medium: Memory" in text
    assert "name: NCCL_DEBUG\n" in text and "name: NCCL_SOCKET_IFNAME\n" in text
    assert "localhost:5000/trainstack:gpu-cuda12.8-" in text


@pytest.mark.parametrize("target", [*MANIFEST_TARGETS, *KUBERAY_TARGETS, "kubernetes"])
def test_cpu_templates_request_no_gpus_and_use_the_cpu_image(target: str) -> None:
    text = render(load_template("single-node-multi-gpu", {**CPU, "job.processes": "4"}), target)
    assert "nvidia" not in text and "resource.gpu" not in text
    assert f"localhost:5000/trainstack:{workload.IMAGE_TAGS['cpu']}" in text


def test_processes_follow_the_templates_slots() -> None:
    torch = documents(render(load_template("multi-node-gpu"), "trainjob-torch"))[1]["spec"]["trainer"]
    assert (torch["numNodes"], torch["numProcPerNode"]) == (4, 4)
    mpi = documents(render(load_template("multi-node-gpu", {"job.processes": "10"}), "mpijob"))[0]["spec"]
    assert mpi["slotsPerWorker"] == 4 and mpi["mpiReplicaSpecs"]["Worker"]["replicas"] == 4
    assert mpi["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][:3] == \
        ["mpirun", "-np", "10"]
    job = documents(render(load_template("single-node-multi-gpu"), "pytorchjob"))[0]["spec"]
    assert job["nprocPerNode"] == "4" and list(job["pytorchReplicaSpecs"]) == ["Master"]


def refusal(name: str, target: str, overrides: dict[str, str] | None = None, **parameters: str) -> list[str]:
    with pytest.raises(TemplateError) as caught:
        render(load_template(name, overrides), target, **parameters)
    assert str(caught.value).startswith(f"render {name!r} for {target}: ")
    return [problem.field for problem in caught.value.problems]


@pytest.mark.parametrize("target", TRAINING_TARGETS)
def test_training_jobs_run_one_process_per_gpu(target: str) -> None:
    assert refusal("local-pool", target) == ["gpu.per_task"]
    assert refusal("single-node-multi-gpu", target, {"gpu.per_task": "2", "job.processes": "2"}) == ["gpu.per_task"]


def test_spark_on_kubernetes_shares_an_executors_gpus_between_tasks() -> None:
    conf = documents(render(load_template("local-pool"), "spark-application"))[0]["spec"]["sparkConf"]
    assert (conf["spark.executor.resource.gpu.amount"], conf["spark.task.resource.gpu.amount"]) == ("1", "0.5")


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob-torch"])
def test_torchrun_needs_the_same_processes_in_every_pod(target: str) -> None:
    assert refusal("multi-node-gpu", target, {"job.processes": "10"}) == ["job.processes"]


@pytest.mark.parametrize("target", TRAINING_TARGETS)
def test_more_processes_than_slots_are_refused(target: str) -> None:
    assert refusal("synapse-gpu-minimal", target, {"job.processes": "4"}) == ["job.processes"]


@pytest.mark.parametrize("target", MANIFEST_TARGETS + KUBERAY_TARGETS)
def test_names_must_be_kubernetes_names(target: str) -> None:
    assert refusal("local-pool", target, CPU, job_name="Local_Pool", namespace="-x") == ["job_name", "namespace"]


@pytest.mark.parametrize("target", [*MANIFEST_TARGETS, "rayjob"])
def test_a_script_must_name_something(target: str) -> None:
    assert refusal("multi-node-gpu", target, script=" ") == ["script"]
    assert refusal("multi-node-gpu", target, script="train.py 'unclosed") == ["script"]


def test_spark_master_must_be_a_kubernetes_master() -> None:
    assert refusal("multi-node-gpu", "kubernetes", master="spark://head:7077") == ["master"]


def test_cli_refusal_is_one_error_with_exit_2(capsys) -> None:
    from pooltemplates.cli import main

    assert main(["render", "local-pool", "--target", "pytorchjob"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: render 'local-pool' for pytorchjob: 1 error\n  - gpu.per_task = 0.5: ")


def test_invoke_task_passes_the_kubernetes_parameters(capsys) -> None:
    from invoke import Context

    from trainstack.tasks import templates as tasks

    tasks.render_(Context(), "multi-node-gpu", "trainjob-mpi", namespace="ml", job_name="hvd", registry="reg:5000",
                  script="/home/trainer/train.py")
    runtime, job = documents(capsys.readouterr().out)
    assert job["metadata"] == {"name": "hvd", "namespace": "ml"}
    assert job["spec"]["trainer"]["command"][-2:] == ["python", "/home/trainer/train.py"]
    assert runtime["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "containers"][0]["image"].startswith("reg:5000/trainstack:gpu-")


def test_parameters_reach_the_manifests() -> None:
    text = render(load_template("multi-node-gpu"), "mpijob", registry="registry.example:5000",
                  namespace="training", job_name="hvd", script="/home/trainer/train.py --epochs 3")
    job = documents(text)[0]
    assert job["metadata"] == {"name": "hvd", "namespace": "training"}
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == \
        f"registry.example:5000/trainstack:{workload.IMAGE_TAGS['gpu']}"
    assert job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][-4:] == \
        ["python", "/home/trainer/train.py", "--epochs", "3"]
    pair = documents(render(load_template("multi-node-gpu"), "trainjob-torch", image="my/image:1", job_name="ddp"))
    assert pair[1]["spec"]["runtimeRef"]["name"] == pair[0]["metadata"]["name"] == "ddp-torch"
    assert "image: my/image:1" in yaml.safe_dump(pair[0])
    spark = documents(render(load_template("multi-node-gpu"), "spark-application",
                             script="s3a://bucket/app.py --rows 10", service_account="runner"))[0]["spec"]
    assert (spark["mainApplicationFile"], spark["arguments"]) == ("s3a://bucket/app.py", ["--rows", "10"])
    assert spark["driver"]["serviceAccount"] == "runner"


def test_spark_submit_arguments_for_kubernetes() -> None:
    args = render(load_template("multi-node-gpu"), "kubernetes", master="k8s://https://10.0.0.1:6443",
                  namespace="spark", service_account="driver", registry="registry.example")
    words = shlex.split(args)
    assert words[:4] == ["--master", "k8s://https://10.0.0.1:6443", "--deploy-mode", "cluster"]
    conf = dict(word.split("=", 1) for word in words[5::2])
    assert conf["spark.kubernetes.namespace"] == "spark"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "driver"
    assert conf["spark.kubernetes.container.image"] == f"registry.example/trainstack:{workload.IMAGE_TAGS['gpu']}"
    assert conf["spark.kubernetes.executor.volumes.emptyDir.dshm.options.medium"] == "Memory"


def test_image_tags_are_the_matrix_content_tags() -> None:
    matrix = load_matrix()
    for flavor_name, tag in workload.IMAGE_TAGS.items():
        flavor = matrix.flavors[flavor_name]
        assert tag == naming.content_tag(naming.matrix_manifest(flavor))
        assert k8s.SPARK_VERSION == flavor.version("pyspark")
    assert workload.IMAGE_NAME == matrix.image_name


def test_shared_values_are_written_out_not_aliased() -> None:
    text = render(load_template("multi-node-gpu"), "pytorchjob")
    assert "&id" not in text and "*id" not in text


def test_image_reference_grammar_is_the_host_toolings() -> None:
    assert workload.REFERENCE.pattern == naming.REFERENCE.pattern
