"""The image's site hook for MLflow's tracking URI (images/site-packages/trainstack_mlflow_tracking.py), against a
stand-in of MLflow's REST client and real sockets: loaded by its .pth at every start, it wraps
mlflow.utils.rest_utils.http_request once that module runs; a server that refuses, or a name that does not resolve,
is one error naming the URI before any request, a reachable one is checked once. In the image, against MLflow itself
and in a script, a rank and a notebook cell: tests/image/test_mlflow_tracking.py."""
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SITE_PACKAGES = Path(__file__).resolve().parents[3] / "images" / "site-packages"
# MLflow's REST client as far as the hook sees it: the module it watches, whose http_request records its calls.
STAND_IN = {
    "mlflow/__init__.py": "",
    "mlflow/exceptions.py": "class MlflowException(Exception):\n"
                            "    def __init__(self, message):\n        super().__init__(message)\n"
                            "        self.message = message\n",
    "mlflow/utils/__init__.py": "",
    "mlflow/utils/rest_utils.py": "from mlflow.exceptions import MlflowException\ncalls = []\n\n\n"
                                  "def http_request(host_creds, endpoint, method, **kwargs):\n"
                                  "    calls.append(endpoint)\n    return 'response'\n\n\n"
                                  "def call_endpoint(host_creds, endpoint):\n"
                                  "    return http_request(host_creds, endpoint, 'GET')\n",
}
# Requests to HOST as MLflow's client makes them (call_endpoint looks http_request up at call time); prints what
# came of each, and what a notebook cell would show of an error.
PROBE = """
import json, site, sys, types
site.addsitedir(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from mlflow.utils import rest_utils
creds = types.SimpleNamespace(host=sys.argv[3])
results = []
for endpoint in ("/api/2.0/mlflow/runs/create", "/api/2.0/mlflow/runs/log-metric"):
    try:
        results.append(rest_utils.call_endpoint(creds, endpoint))
    except Exception as err:
        results.append({"error": type(err).__name__, "mlflow": type(err).__mro__[1].__name__,
                        "cell": err._render_traceback_()})
print(json.dumps({"results": results, "requests": rest_utils.calls}))
"""


@pytest.fixture
def mlflow_stand_in(tmp_path) -> Path:
    for name, text in STAND_IN.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def closed_port() -> int:
    """A port nothing listens on: bound, then let go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def requests_to(host: str, stand_in: Path, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-I", "-c", PROBE, str(SITE_PACKAGES), str(stand_in), host],
                          capture_output=True, text=True, check=True, env=env or {})
    return json.loads(done.stdout)


def test_a_refused_uri_is_one_error_naming_it_and_no_request(mlflow_stand_in):
    uri = f"http://127.0.0.1:{closed_port()}"
    done = requests_to(uri, mlflow_stand_in)
    assert done["requests"] == []
    for result in done["results"]:  # checked again at the next request, since it was never reached
        assert result["error"] == "UnreachableTrackingUri" and result["mlflow"] == "MlflowException", result
        (line,) = result["cell"]
        assert line.startswith(f"error: MLflow tracking URI = '{uri}': cannot be reached: "
                               f"{uri.removeprefix('http://')} refused the connection (valid: the URL of"), line


def test_a_name_that_does_not_resolve_says_so(mlflow_stand_in):
    (result, _) = requests_to("http://mlflow.invalid:5000", mlflow_stand_in)["results"]
    assert "cannot be reached: the name 'mlflow.invalid' does not resolve (valid: " in result["cell"][0], result


def test_a_reachable_server_is_checked_once(mlflow_stand_in):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        done = requests_to(f"http://127.0.0.1:{server.getsockname()[1]}", mlflow_stand_in)
    assert done == {"results": ["response", "response"],
                    "requests": ["/api/2.0/mlflow/runs/create", "/api/2.0/mlflow/runs/log-metric"]}


def test_the_proxy_requests_would_use_is_the_one_checked(mlflow_stand_in):
    proxy = f"http://127.0.0.1:{closed_port()}"
    (result, _) = requests_to("https://mlflow.example.com", mlflow_stand_in, {"HTTPS_PROXY": proxy})["results"]
    assert f"cannot be reached: the proxy {proxy} refused the connection" in result["cell"][0], result
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        bypassed = requests_to(uri, mlflow_stand_in, {"HTTP_PROXY": proxy, "NO_PROXY": "127.0.0.1"})
    assert bypassed["results"] == ["response", "response"], bypassed


def test_trainstack_mlflow_check_0_leaves_it_to_mlflow(mlflow_stand_in):
    done = requests_to(f"http://127.0.0.1:{closed_port()}", mlflow_stand_in, {"TRAINSTACK_MLFLOW_CHECK": "0"})
    assert done["results"] == ["response", "response"], done


def test_a_script_that_does_not_catch_it_prints_the_line_alone_and_exits_1(mlflow_stand_in):
    uri = f"http://127.0.0.1:{closed_port()}"
    script = ("import site, sys, types; site.addsitedir(sys.argv[1]); sys.path.insert(0, sys.argv[2])\n"
              "from mlflow.utils import rest_utils\n"
              "rest_utils.call_endpoint(types.SimpleNamespace(host=sys.argv[3]), '/api/2.0/mlflow/runs/create')\n")
    done = subprocess.run([sys.executable, "-I", "-c", script, str(SITE_PACKAGES), str(mlflow_stand_in), uri],
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith(f"error: MLflow tracking URI = '{uri}': cannot be reached: ") \
        and done.stderr.count("\n") == 1, done.stderr


# MLflow's SQL store as far as the hook sees it: the class whose artifact root it changes, recording its arguments.
STORE_STAND_IN = {
    "mlflow/store/__init__.py": "",
    "mlflow/store/tracking/__init__.py": "",
    "mlflow/store/tracking/sqlalchemy_store.py": "class SqlAlchemyStore:\n"
                                                 "    def __init__(self, db_uri, default_artifact_root):\n"
                                                 "        self.args = (db_uri, default_artifact_root)\n",
}
STORE_PROBE = """
import json, os, site, sys
site.addsitedir(sys.argv[1])
sys.path.insert(0, sys.argv[2])
os.chdir(sys.argv[3])
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
print(json.dumps([SqlAlchemyStore(uri, root).args[1] for uri, root in json.loads(sys.argv[4])]))
"""


def test_a_sqlite_store_keeps_its_artifacts_beside_it(tmp_path):
    for name, text in {**STAND_IN, **STORE_STAND_IN}.items():
        (tmp_path / "mlflow-stand-in" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mlflow-stand-in" / name).write_text(text)
    (tmp_path / "home").mkdir()
    stores = [("sqlite:////home/trainer/work/mlflow.db", "./mlruns"),  # the image's store, run from the home
              ("sqlite:////home/trainer/work/mlflow.db?timeout=30", "./mlruns"),
              (f"sqlite:///{tmp_path}/home/mlflow.db", "./mlruns"),  # in the process's folder: ./mlruns is beside it
              ("sqlite:///mlflow.db", "./mlruns"),
              ("sqlite:///:memory:", "./mlruns"),
              ("sqlite:////home/trainer/work/mlflow.db", "mlflow-artifacts:/"),  # the server's own root
              ("postgresql://db/mlflow", "./mlruns")]
    done = subprocess.run([sys.executable, "-I", "-c", STORE_PROBE, str(SITE_PACKAGES),
                           str(tmp_path / "mlflow-stand-in"), str(tmp_path / "home"), json.dumps(stores)],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == ["/home/trainer/work/mlartifacts", "/home/trainer/work/mlartifacts",
                                       "./mlruns", "./mlruns", "./mlruns", "mlflow-artifacts:/", "./mlruns"]
