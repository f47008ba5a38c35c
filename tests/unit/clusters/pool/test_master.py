"""Readiness and the status table, from a standalone master's /json/ report (recorded from Spark 4.3)."""
import copy
import json
from pathlib import Path

import pytest

from trainstack.clusters.pool.master import missing_for_ready, status_table, worker_reports

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def state() -> dict:
    return json.loads((GOLDEN / "master-state.json").read_text(encoding="utf-8"))


def test_worker_reports_read_cores_memory_and_gpus(state: dict) -> None:
    first, second = worker_reports(state)
    assert (first.host, first.state, first.cores, first.cores_used) == ("172.18.0.3", "ALIVE", 2, 2)
    assert (first.gpu_addresses, first.gpus_used, second.gpu_addresses, second.gpus_used) == (("0",), 1, ("1",), 0)


def test_ready_once_every_worker_is_alive_with_its_gpus(state: dict) -> None:
    assert missing_for_ready(state, workers=2, gpus_per_worker=1) is None


def test_not_ready_while_the_master_is_in_standby(state: dict) -> None:
    assert missing_for_ready({**state, "status": "STANDBY"}, 2, 1) == "master is STANDBY, not ALIVE"


def test_not_ready_until_all_workers_registered(state: dict) -> None:
    dead = copy.deepcopy(state)
    dead["workers"][1]["state"] = "DEAD"
    assert missing_for_ready(dead, 2, 1) == "1 of 2 workers ALIVE"
    assert missing_for_ready({**state, "workers": []}, 2, 1) == "0 of 2 workers ALIVE"


def test_not_ready_while_a_worker_lacks_gpus(state: dict) -> None:
    assert missing_for_ready(state, 2, 2) == "workers at 172.18.0.3, 172.18.0.4 advertise fewer than 2 GPUs"


def test_status_table_rows_follow_worker_names(state: dict) -> None:
    table = status_table(state, {"172.18.0.3": "pool-worker-2", "172.18.0.4": "pool-worker-1"})
    assert [line.split()[0] for line in table.splitlines()] == ["worker", "pool-worker-1", "pool-worker-2"]


def test_status_table_matches_golden(state: dict, golden) -> None:
    golden("status-table.txt", status_table(state, {"172.18.0.3": "trainstack-pool-worker-1"}) + "\n")
