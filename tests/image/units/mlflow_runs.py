"""The runs of an MLflow experiment as the store holds them, read back with MLflow's client:

    python mlflow_runs.py TRACKING_URI EXPERIMENT

Prints one JSON line: {"runs": [{"run_id", "status", "params", "metrics": {name: [[step, value], ...]},
"artifact_uri"}]}, or
{"runs": null} when there is no such experiment.
"""
import json
import sys

from mlflow import MlflowClient

client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name(sys.argv[2])
runs = None if experiment is None else [
    {"run_id": run.info.run_id, "status": run.info.status, "params": run.data.params,
     "artifact_uri": run.info.artifact_uri,
     "metrics": {name: [[metric.step, metric.value] for metric in client.get_metric_history(run.info.run_id, name)]
                 for name in run.data.metrics}}
    for run in client.search_runs([experiment.experiment_id])]
print(json.dumps({"runs": runs}), flush=True)
