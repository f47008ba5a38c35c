"""A Ray on Spark cluster set up with Databricks' bare call, then the user's work failing with no
shutdown_ray_cluster(). Before it fails: the dashboard's job API refuses a request without the cluster's token and
answers one with it, a Ray client started without the token cannot connect, and no file of Ray's logs holds the
token; one JSON line says so, with the time it was printed. Then it raises: the driver should end with that error
(exit 1), not wait for Ray on Spark's threads."""
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import ray
from pyspark.sql import SparkSession
from ray.util.spark import setup_ray_cluster

FAILURE = "the user's training failed"


def status_of(url: str, headers: dict) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


spark = SparkSession.builder.master("local-cluster[1,1,1024]").appName("ray-on-spark-checks").getOrCreate()
setup_ray_cluster(max_worker_nodes=1)
context = ray.init()
jobs = f"http://{context.dashboard_url}/api/jobs/"
token = os.environ["RAY_AUTH_TOKEN"]
without_token = {name: value for name, value in os.environ.items() if not name.startswith("RAY_AUTH")}
client = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={os.environ['RAY_ADDRESS']!r})"],
                        env=without_token, capture_output=True, text=True, timeout=120)
print(json.dumps({
    "without_token": status_of(jobs, {}),
    "with_token": status_of(jobs, {"Authorization": f"Bearer {token}"}),
    "client_exit": client.returncode,
    "client_error": (client.stderr.strip().splitlines() or [""])[-1],
    "token_in_ray_logs": any(token in path.read_text(errors="replace")
                             for folder in pathlib.Path("/tmp").glob("ray*") for path in folder.rglob("*")
                             if path.is_file()),
    "failing_at": time.time(),
}), flush=True)
raise ValueError(FAILURE)
