"""The worker addresses a pool records when it comes up name the workers that have stopped since."""
from pathlib import Path

import pytest

from trainstack.clusters.pool.lookup import record_worker_addresses, recorded_worker_addresses

pytestmark = pytest.mark.unit


def test_recorded_addresses_round_trip_beside_the_conf(tmp_path: Path) -> None:
    conf = tmp_path / "spark-defaults.conf"
    assert recorded_worker_addresses(conf) == {}
    record_worker_addresses(conf, {"172.18.0.3": "pool-worker-1", "172.18.0.4": "pool-worker-2"})
    assert recorded_worker_addresses(conf) == {"172.18.0.3": "pool-worker-1", "172.18.0.4": "pool-worker-2"}
