"""KubeRay (ray.io/v1), for two targets: rayjob (a RayJob: KubeRay starts a Ray cluster, runs the script on it through
`python` and deletes the cluster when the job ends) and raycluster (the Ray cluster alone, for jobs submitted to it).

The cluster is the template's pool as Ray nodes: a head sized as the driver, which runs no tasks (as Ray on Spark's
head), and one worker group of a Ray worker node per executor, each pod with the executor's cores, memory and GPUs,
from which KubeRay sets the node's num-cpus, memory and num-gpus. Token authentication is KubeRay's own
(authOptions.mode token): the operator makes a Secret holding a random token for each Ray cluster (a RayJob makes a
cluster per run) and gives it to the Ray containers and the job's submitter, so no token is in the manifest. The
head's service, reachable inside the cluster only (ClusterIP, no ingress), carries the two ports KubeRay uses: the GCS,
where worker nodes join, and the dashboard, where the submitter sends the job.
"""
from __future__ import annotations

import shlex
from typing import Any

from .. import image_contract
from ..errors import Problem, TemplateError
from ..schema import PoolTemplate
from . import k8s, ray_sizes, workload

API_VERSION = "ray.io/v1"
# KubeRay 1.6 is the first to probe Ray 2.53 and later nodes over HTTP; before, the probes run wget, which the images
# lack. Token authentication (authOptions) came in 1.5.1.
NEEDS = "KubeRay v1.6.0 or later (ray.io/v1)"
# The images' Ray (test_ray.py holds it to images/matrix.yaml); KubeRay chooses the probes and allows token
# authentication (2.52 or later) by it.
RAY_VERSION = "2.60.0"
TOKEN_NOTE = ("Token authentication: KubeRay makes a Secret with a random token for the Ray cluster and gives it to "
              "the Ray containers (authOptions.mode: token).")
DEFAULT_SCRIPT = f"{image_contract.EXAMPLES_DIR}/ray_train_mnist.py"
# The ports of the head's service (KubeRay makes it from these, adding its metrics port): worker nodes join the GCS,
# and the job's submitter and `ray job submit` reach the dashboard; Ray Client's and Serve's are left off it.
HEAD_PORTS = [{"name": "gcs-server", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265}]
WORKER_GROUP = "workers"
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")


def render_job(template: PoolTemplate, image: str | None = None, registry: str | None = None,
               namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
               script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "rayjob", job_name=name, namespace=namespace)
    cluster_spec = _cluster_spec(template, "rayjob", image, registry)
    # One Ray Train worker per Ray worker node.
    default = (DEFAULT_SCRIPT, "--num-workers", str(template.executor.instances))
    entrypoint = ["python", *workload.script_words(template, "rayjob", script, default)]
    job = {
        "apiVersion": API_VERSION,
        "kind": "RayJob",
        "metadata": k8s.metadata(name, namespace),
        "spec": {
            # Ray runs a job's entrypoint in a shell.
            "entrypoint": shlex.join(entrypoint),
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": cluster_spec,
        },
    }
    return k8s.dump(template, NEEDS, [job], notes=(TOKEN_NOTE,))


def render_cluster(template: PoolTemplate, image: str | None = None, registry: str | None = None,
                   namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "raycluster", job_name=name, namespace=namespace)
    cluster = {"apiVersion": API_VERSION, "kind": "RayCluster", "metadata": k8s.metadata(name, namespace),
               "spec": _cluster_spec(template, "raycluster", image, registry)}
    return k8s.dump(template, NEEDS, [cluster], notes=(TOKEN_NOTE,))


def _cluster_spec(template: PoolTemplate, target: str, image: str | None, registry: str | None) -> dict[str, Any]:
    problems = ray_sizes.missing_sizes(template, target, ray_sizes.WORKER_FIELDS + ray_sizes.HEAD_FIELDS)
    # KubeRay keeps these where a container has them already: a token would be in the manifest for anyone to read
    # (and is not repeated in the error either).
    problems += [Problem(f"executor.env.{name}", "(not shown)" if name == "RAY_AUTH_TOKEN" else value,
                         "is KubeRay's to set (authOptions: a token made for each Ray cluster)",
                         "leave it out of executor.env")
                 for name, value in template.executor.env.items() if name in AUTH_VARIABLES]
    if problems:
        raise TemplateError(f"render {template.name!r} for {target}", problems)
    image = workload.image_reference(template, image, registry)
    # Placeholder GPUs are addresses Spark schedules by, with no device behind them: Kubernetes is asked for none.
    gpus = 0 if template.gpu.placeholders else template.gpu.per_executor
    head = {
        "name": "ray-head",
        "image": image,
        "ports": HEAD_PORTS,
        "resources": k8s.resources(template.driver.cores, template.driver.memory),
        "volumeMounts": [k8s.shm_mount()],
    }
    worker = k8s.compact({
        "name": "ray-worker",
        "image": image,
        "env": k8s.env(template),
        "resources": k8s.resources(template.executor.cores, template.executor.memory, gpus),
        "volumeMounts": [k8s.shm_mount()],
    })
    return {
        "rayVersion": RAY_VERSION,
        "authOptions": {"mode": "token"},
        "headGroupSpec": {
            "serviceType": "ClusterIP",
            "enableIngress": False,
            # Tasks and actors go to the worker nodes, as on Ray on Spark, whose head has no CPUs either.
            "rayStartParams": {"num-cpus": "0"},
            "template": {"spec": {"containers": [head], "volumes": [k8s.shm_volume()]}},
        },
        "workerGroupSpecs": [{
            "groupName": WORKER_GROUP,
            # A fixed size: the CRD requires the bounds, which only the autoscaler reads.
            "replicas": template.executor.instances,
            "minReplicas": template.executor.instances,
            "maxReplicas": template.executor.instances,
            "template": {"spec": {"containers": [worker], "volumes": [k8s.shm_volume()]}},
        }],
    }
