"""The pool's invoke tasks: thin, and bad options end them with `error: ...` and exit code 2 before docker is asked."""
import pytest
from invoke import Collection, Context

from trainstack.tasks import pool as pool_tasks


def test_collection_offers_up_status_submit_down() -> None:
    assert set(Collection.from_module(pool_tasks).task_names) == {"up", "status", "submit", "down"}


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": 0}, "error: --workers = 0: must be at least 1"),
    ({"template": "tiny-pool"}, "  - --template = 'tiny-pool': is neither a packaged template"),
    ({"gpus": "amd"}, "error: --gpus = 'amd': is not a GPU mode"),
    ({"share": "/no/such/dir"}, "error: --share = '/no/such/dir': is not a directory"),
    ({"notebook": True, "notebook_port": "8080"}, "error: --notebook-port = 8080: is the same port as --ui-port"),
    ({"notebook": True, "notebook_port": "70000"}, "error: --notebook-port = 70000: is not a TCP port"),
    ({"notebook": True, "notebook_port": "x"}, "error: --notebook-port = 'x': is not a whole number"),
    ({"mlflow": True}, "error: --mlflow-port = 5000: needs the notebook, whose container runs MLflow's server "
                       "(valid: --notebook with it)"),
    ({"notebook": True, "mlflow": True, "mlflow_port": "8888"},
     "error: --mlflow-port = 8888: is the same port as --notebook-port"),
])
def test_up_exits_2_naming_the_bad_option(options: dict, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        pool_tasks.up(Context(), **options)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_submit_without_a_command_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        pool_tasks.submit(Context(remainder=""))
    assert caught.value.code == 2
    assert capsys.readouterr().err.startswith("error: command = '': is missing (valid: a command after `--`")
