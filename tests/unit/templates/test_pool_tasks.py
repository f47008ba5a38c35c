"""The pool's invoke tasks: thin, and bad options end them with exit code 1 before docker is asked."""
import pytest
from invoke import Collection, Context
from invoke.exceptions import Exit

from pooltemplates import pool_tasks


def test_collection_offers_up_status_submit_down() -> None:
    assert set(Collection.from_module(pool_tasks).task_names) == {"up", "status", "submit", "down"}


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": 0}, "error: --workers = 0: must be at least 1"),
    ({"template": "tiny-pool"}, "  - --template = 'tiny-pool': is neither a packaged template"),
    ({"gpus": "amd"}, "error: --gpus = 'amd': is not a GPU mode"),
    ({"share": "/no/such/dir"}, "error: --share = '/no/such/dir': is not a directory"),
])
def test_up_exits_1_naming_the_bad_option(options: dict, message: str) -> None:
    with pytest.raises(Exit) as caught:
        pool_tasks.up(Context(), **options)
    assert caught.value.code == 1
    assert message in caught.value.message


def test_submit_without_a_command_exits_1() -> None:
    with pytest.raises(Exit) as caught:
        pool_tasks.submit(Context(remainder=""))
    assert caught.value.message.startswith("error: command = '': is missing (valid: a command after `--`")
