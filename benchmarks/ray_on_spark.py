"""Ray on Spark against raw `ray start`, side by side in one container of the image: the time until two Ray worker
nodes are up, and the time of the Databricks example's two-worker TorchTrainer on them (examples/ray_on_spark_mnist.py's
training loop).

    python benchmarks/ray_on_spark.py [--image trainstack:cpu] [--repeats 2] [--out FILE | --update-results]

Raw: `ray start --head` with no CPUs, then two `ray start --address` worker nodes of 2 CPUs each, sized as Ray on
Spark sizes an executor of `local-cluster[2,2,2048]` (its memory and object store), on the container's loopback. Ray
on Spark: a SparkSession on `local-cluster[2,2,2048]` (its start timed apart), then
`setup_ray_cluster(max_worker_nodes=2)` as Databricks' guide calls it. Each repeat runs both, alternating which goes
first, so the machine's load falls on both alike. Writes a scratch file, or with --update-results
benchmarks/results/ray_on_spark.json: each run's figures, the medians and their ratios (Ray on Spark over raw).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from datetime import datetime, timezone

import results_file

from trainstack import docker_client

NAME = "ray_on_spark.json"
# What runs in the container: one JSON line per way of starting Ray.
IN_CONTAINER = r'''
import json, subprocess, sys, tempfile, time
import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray_train_mnist import train_loop_per_worker

HEAP, OBJECT_STORE = 601295422, 257698037  # what Ray on Spark gives a worker node of a 1 GiB executor


def workers_up():
    return sum(1 for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0)


def up_and_train(start_cluster, stop_cluster):
    started = time.monotonic()
    start_cluster()
    while workers_up() < 2:
        time.sleep(0.2)
    up = time.monotonic() - started
    started = time.monotonic()
    result = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.04, "epochs": 3},
                          scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=tempfile.mkdtemp())).fit()
    trained = time.monotonic() - started
    stop_cluster()
    return {"up_s": round(up, 2), "train_s": round(trained, 2), "accuracy": result.metrics["accuracy"]}


def raw():
    def start():
        subprocess.run(["ray", "start", "--head", "--num-cpus=0", "--port=6390", "--include-dashboard=false",
                        "--disable-usage-stats"], check=True, capture_output=True)
        for _ in range(2):
            subprocess.run(["ray", "start", "--address=127.0.0.1:6390", "--num-cpus=2", f"--memory={HEAP}",
                            f"--object-store-memory={OBJECT_STORE}", "--disable-usage-stats"],
                           check=True, capture_output=True)
        ray.init(address="127.0.0.1:6390")

    def stop():
        ray.shutdown()
        subprocess.run(["ray", "stop", "--force"], check=True, capture_output=True)

    return up_and_train(start, stop)


def on_spark():
    from pyspark.sql import SparkSession
    from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster

    started = time.monotonic()
    spark = SparkSession.builder.master("local-cluster[2,2,2048]").getOrCreate()
    spark.sparkContext.parallelize(range(2), 2).count()
    spark_s = time.monotonic() - started

    def start():
        setup_ray_cluster(max_worker_nodes=2)
        ray.init()

    def stop():
        shutdown_ray_cluster()

    figures = up_and_train(start, stop)
    spark.stop()
    return {**figures, "spark_s": round(spark_s, 2)}


way = {"raw": raw, "on_spark": on_spark}[sys.argv[1]]
print(json.dumps({"way": sys.argv[1], **way()}), flush=True)
'''


def run_once(client, image: str, way: str) -> dict:
    create = {"image": image, "command": ["python", "-c", IN_CONTAINER, way], "shm_size": "1g"}
    code, output = docker_client.run_container(client, create, timeout=900)
    lines = [line for line in output.splitlines() if line.startswith('{"way"')]
    if code != 0 or not lines:
        raise SystemExit(f"{way} exited {code}:\n{output[-3000:]}")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--repeats", type=int, default=2)
    results_file.add_options(parser, NAME)
    args = parser.parse_args()
    out = results_file.chosen(args, NAME)
    client = docker_client.connect()
    runs = []
    for repeat in range(args.repeats):
        order = ("raw", "on_spark") if repeat % 2 == 0 else ("on_spark", "raw")
        runs += [run_once(client, args.image, way) for way in order]
        print(json.dumps(runs[-2:]), flush=True)
    medians = {way: {key: statistics.median(run[key] for run in runs if run["way"] == way)
                     for key in ("up_s", "train_s")} for way in ("raw", "on_spark")}
    result = {
        "image": args.image, "image_id": client.images.get(args.image).id,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "runs": runs, "medians": medians,
        "ratios": {key: round(medians["on_spark"][key] / medians["raw"][key], 2) for key in ("up_s", "train_s")},
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{out}: {json.dumps(result['ratios'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
