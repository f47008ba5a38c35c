"""MLflow in the image: its tracking server beside JupyterLab (`lab` with MLFLOW_PORT), whose UI shows a run in
Debian's chromium; and a tracking URI that cannot be reached, one line naming it in a script, a rank and a notebook
cell (images/site-packages/trainstack_mlflow_tracking.py), where MLflow alone retries for minutes and ends in a long
traceback."""
import json

import pytest
from chromium import RESULTS_DIR, browser_node
from mlflow_ui import check_the_run_in_the_ui

from trainrun.image_contract import EXAMPLES_DIR, MLFLOW_PORT
from trainstack.clusters.lab import lab_url, mlflow_url
from trainstack.image.workflows import summary

# Nothing listens on port 9 in a container; the .invalid domain never resolves (RFC 6761).
UNREACHABLE = {"refused": ("http://127.0.0.1:9", "127.0.0.1:9 refused the connection"),
               "unresolved": ("http://mlflow.invalid:5000", "the name 'mlflow.invalid' does not resolve")}
LOG_A_RUN = "import mlflow\nwith mlflow.start_run():\n    mlflow.log_param('lr', 0.1)\n"


def the_line(uri: str, problem: str) -> str:
    return f"error: MLflow tracking URI = {uri!r}: cannot be reached: {problem} (valid: "


@pytest.mark.parametrize("case", UNREACHABLE)
def test_an_unreachable_tracking_uri_is_one_line_naming_it(in_image, case):
    uri, problem = UNREACHABLE[case]
    # Killed after 120 s, where MLflow alone would still be retrying.
    output = in_image.run(["python", "-c", LOG_A_RUN], expect=1, timeout=120, env={"MLFLOW_TRACKING_URI": uri})
    (line,) = [line for line in output.splitlines() if line.strip()]
    assert line.startswith(the_line(uri, problem)) and "sqlite:////home/trainer/work/mlflow.db" in line, output


def test_a_rank_that_cannot_reach_it_says_so_on_one_line(in_image):
    """The Lightning example under `trainrun torch`: rank 0 prints the line and the job stops."""
    uri, problem = UNREACHABLE["refused"]
    output = in_image.run(["trainrun", "torch", "--nproc-per-node", "2",
                           "/opt/trainstack/examples/mlflow_lightning_autolog.py", "--tracking-uri", uri],
                          expect=1, timeout=300)
    assert f"[default0]:{the_line(uri, problem)}" in output, output[-3000:]
    assert "Traceback" not in output and "trainrun: rank 0 exited with code 1" in output, output[-3000:]


def test_a_notebook_cell_shows_the_line_alone(in_image):
    uri, problem = UNREACHABLE["refused"]
    cells = [f"import mlflow\nmlflow.set_tracking_uri({uri!r})", LOG_A_RUN]
    outputs = json.loads(in_image.run(["python", "/units/run_cells.py", json.dumps(cells)],
                                      timeout=300).strip().splitlines()[-1])
    (error,) = outputs[1]
    assert error["output_type"] == "error" and error["ename"] == "UnreachableTrackingUri", error
    (line,) = error["traceback"]
    assert line.startswith(the_line(uri, problem)), line


def test_lab_runs_mlflow_beside_it_and_its_ui_shows_a_run_and_its_loss_chart(start_lab):
    """`lab` with MLFLOW_PORT: JupyterLab and MLflow's server, both published on 127.0.0.1 alone; a run that
    HorovodRunner's rank 0 logs through the server (the image's check lets a server it reaches be) shows in the UI."""
    browser_tools = browser_node()
    container = start_lab(environment={"MLFLOW_PORT": str(MLFLOW_PORT)}, also_published=(MLFLOW_PORT,),
                          shm_size="1g")
    lab_url(container, timeout=180)
    url = mlflow_url(container, timeout=180)
    assert [binding["HostIp"] for binding in container.ports[f"{MLFLOW_PORT}/tcp"]] == ["127.0.0.1"]
    code, output = container.exec_run(["python", f"{EXAMPLES_DIR}/horovod_runner_mnist.py", "--checkpoint-dir",
                                       "/tmp/checkpoints", "--tracking-uri", f"http://127.0.0.1:{MLFLOW_PORT}"])
    assert code == 0, output.decode(errors="replace")[-3000:]
    result = summary(output.decode(errors="replace"))
    RESULTS_DIR.mkdir(exist_ok=True)
    check_the_run_in_the_ui(browser_tools, container, url, result, {"lr": "0.02", "world_size": "2"},
                            RESULTS_DIR / "mlflow-lab")
    # The server says which hosts it takes, and nothing a user cannot act on (images/scripts/trainstack-entrypoint).
    logs = container.logs().decode(errors="replace")
    assert "[MLflow] Security middleware enabled. Allowed hosts: localhost, 127.0.0.1" in logs, logs[-3000:]
    assert "use --host 0.0.0.0" not in logs and "DeprecationWarning" not in logs, logs[-3000:]
