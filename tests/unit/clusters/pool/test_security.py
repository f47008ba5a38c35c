"""The pool's secret conf: what it turns on and off, and who can read it on the host."""
import os
import stat

import pytest

from trainrun.backends.spark.pool_secret import security_conf
from trainstack.clusters.pool.security import remove_pool_conf, write_pool_conf

pytestmark = pytest.mark.unit


def test_conf_authenticates_encrypts_and_turns_off_rest_and_ui_kill() -> None:
    conf = security_conf("s3cret")
    assert conf["spark.authenticate"] == "true" and conf["spark.authenticate.secret"] == "s3cret"
    assert conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.master.rest.enabled"] == "false" and conf["spark.ui.killEnabled"] == "false"


def test_each_pool_gets_its_own_secret_in_a_private_file() -> None:
    first, second = write_pool_conf("p"), write_pool_conf("p")
    try:
        secrets = [line.split()[1] for path in (first, second) for line in path.read_text().splitlines()
                   if line.startswith("spark.authenticate.secret ")]
        assert len(secrets) == 2 and secrets[0] != secrets[1] and len(secrets[0]) == 64
        assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(first.stat().st_mode) == (0o600 if os.geteuid() == 0 else 0o644)
    finally:
        remove_pool_conf(first)
        remove_pool_conf(second)
    assert not first.parent.exists()
