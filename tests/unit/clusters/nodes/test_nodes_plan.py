"""The plan of a multi-node cluster and its docker SDK arguments as data, compared with reviewed golden files;
bad options refused before docker is asked.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/clusters/nodes`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainrun import image_contract
from trainrun.remote import IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV
from trainstack.clusters.containers import ClusterError, network_kwargs
from trainstack.clusters.nodes import nodes_plan
from trainstack.clusters.nodes.plan import NODES_KEYS_LABEL, NODES_LABEL, NODES_ROLE_LABEL, launcher_spec
from trainstack.clusters.nodes.specs import launcher_kwargs, worker_kwargs

CASES = {
    "default": {},
    "three-workers-two-slots": {"count": 3, "slots": 2, "name": "ci-nodes", "image": "localhost:5000/trainstack:cpu"},
}
KEYS = Path("/tmp/trainstack-nodes-x-abc123")
SHARE = Path("/home/me/job")


@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_matches_golden(case: str, golden) -> None:
    golden(f"plan-{case}.json", json.dumps(nodes_plan(**CASES[case]), indent=2) + "\n")


@pytest.mark.parametrize("case", sorted(CASES))
def test_docker_arguments_match_golden(case: str, golden) -> None:
    plan = nodes_plan(**CASES[case])
    arguments = {
        "network": network_kwargs(plan),
        "workers": [worker_kwargs(plan, spec, KEYS, SHARE) for spec in plan["workers"]],
        "launcher": launcher_kwargs(plan["launcher"], plan["image"], plan["network"]["name"],
                                    ["trainrun", "mpi", "-np", "2", "-H", plan["hosts"], "python", "t.py"],
                                    f"{plan['nodes']}-launcher-0123abcd", KEYS, SHARE),
    }
    golden(f"docker-{case}.json", json.dumps(arguments, indent=2) + "\n")


def test_nothing_is_published_and_workers_never_see_the_private_key() -> None:
    plan = nodes_plan(count=2)
    for spec in plan["workers"]:
        kwargs = worker_kwargs(plan, spec, KEYS)
        assert "ports" not in kwargs and spec["ports"] == []
        assert kwargs["volumes"] == {f"{KEYS}/authorized_keys": {"bind": "/etc/trainstack/ssh/authorized_keys",
                                                                 "mode": "ro"}}
        assert kwargs["command"] == [image_contract.SSHD_COMMAND]
    launcher = launcher_kwargs(launcher_spec("n"), "img", "n", ["true"], "n-launcher-1", KEYS)
    assert "ports" not in launcher and all(volume["mode"] == "ro" for volume in launcher["volumes"].values())
    assert sorted(launcher["volumes"]) == [f"{KEYS}/hostfile", f"{KEYS}/id_ed25519", f"{KEYS}/known_hosts"]


def test_launchers_point_trainrun_at_the_mounted_key_and_host_keys() -> None:
    spec = launcher_spec("n")
    targets = {mount["key_file"]: mount["target"] for mount in spec["mounts"]}
    assert spec["environment"] == {PORT_ENV: str(image_contract.SSHD_PORT), IDENTITY_ENV: targets["id_ed25519"],
                                   KNOWN_HOSTS_ENV: targets["known_hosts"]}


def test_everything_is_labelled_with_the_clusters_name() -> None:
    plan = nodes_plan(name="ci")
    assert plan["network"]["labels"] == {NODES_LABEL: "ci"}
    kwargs = [worker_kwargs(plan, spec, KEYS) for spec in plan["workers"]]
    kwargs.append(launcher_kwargs(plan["launcher"], "i", "ci", ["true"], "ci-launcher-1", KEYS))
    for entry in kwargs:
        assert entry["labels"][NODES_LABEL] == "ci" and entry["labels"][NODES_KEYS_LABEL] == str(KEYS)
    assert [entry["labels"][NODES_ROLE_LABEL] for entry in kwargs] == ["worker", "worker", "launcher"]


@pytest.mark.parametrize(("options", "message"), [
    ({"count": 0}, "--count = 0: is not a number of workers (valid: 1 to 64)"),
    ({"count": 65}, "--count = 65: is not a number of workers (valid: 1 to 64)"),
    ({"slots": 0}, "--slots = 0: is not a number of ranks per worker (valid: 1 to 64)"),
    ({"name": "-x"}, "--name = '-x': is not a docker name"),
    ({"name": "a" * 49}, "is not a docker name"),
    ({"image": "Trainstack:CPU"}, "--image = 'Trainstack:CPU': is not a docker image reference"),
])
def test_bad_options_name_the_option_and_what_is_valid(options: dict, message: str) -> None:
    with pytest.raises(Exception) as caught:
        nodes_plan(**options)
    assert message in str(caught.value)
    assert isinstance(caught.value, ClusterError) or "image reference" in message
