# Rendered from pool template single-node-multi-gpu; change the template, not this file.
# Ray on Spark in a notebook of the databricks target's cluster: a Ray worker node in each executor, sized as the
# executor. The trainstack images' start hook (RAY_ON_SPARK_START_HOOK) gives the Ray nodes a token made for the
# cluster; Databricks Runtime's own hook gives them no Ray token.
import ray
from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster

setup_ray_cluster(
    max_worker_nodes=1,
    num_cpus_worker_node=16,
    num_gpus_worker_node=4,
    memory_worker_node=57724360459,
    object_store_memory_worker_node=24739011624,
)
ray.init()
# Ray work here, then shutdown_ray_cluster() to end the Ray cluster and free the executors.
