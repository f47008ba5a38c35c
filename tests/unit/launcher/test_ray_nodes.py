"""What a `trainrun ray` node starts Ray with (trainrun.backends.ray.node): its sizes from the Slurm job, its
address and interface toward the head, free ports where Ray's are fixed, the dashboard on localhost, /dev/shm named
when too small; and the images' Ray on Spark start hook's environment for the nodes."""
from __future__ import annotations

import argparse

import pytest

from trainrun.backends.ray import node
from trainrun.backends.spark.ray_start_hook import TrainstackStartHook

GIB = 2**30


def args(role: str, **given) -> argparse.Namespace:
    return argparse.Namespace(role=role, port=given.get("port", 6390), address=given.get("address"),
                              num_cpus=given.get("num_cpus"), num_gpus=given.get("num_gpus"),
                              no_dashboard=given.get("no_dashboard", False))


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_head_takes_the_cpus_and_memory_slurm_gave_the_job_on_its_node_and_ray_s_split_of_it():
    argv = node.start_argv(args("head"), "10.0.0.5", {"SLURM_CPUS_ON_NODE": "8", "SLURM_MEM_PER_NODE": "10240"})
    assert argv[1:4] == ["start", "--block", "--disable-usage-stats"] and "--head" in argv
    assert (option(argv, "--port"), option(argv, "--node-ip-address"), option(argv, "--num-cpus")) == \
        ("6390", "10.0.0.5", "8")
    memory, object_store = int(option(argv, "--memory")), int(option(argv, "--object-store-memory"))
    assert memory + object_store == int(10 * GIB * 0.8) and object_store == int(10 * GIB * 0.8 * 0.3)


def test_sizes_the_user_gave_win_and_without_slurm_ray_sizes_the_host():
    argv = node.start_argv(args("worker", address="n1:6390", num_cpus=2, num_gpus=1), None,
                           {"SLURM_CPUS_ON_NODE": "8"})
    assert (option(argv, "--address"), option(argv, "--num-cpus"), option(argv, "--num-gpus")) == ("n1:6390", "2", "1")
    assert "--head" not in argv and "--node-ip-address" not in argv and "--memory" not in argv
    assert option(node.start_argv(args("worker", address="n1:1"), None, {}), "--num-cpus") is None


def test_the_dashboard_is_on_localhost_unless_turned_off_and_ray_s_fixed_ports_are_free_ones():
    on = node.start_argv(args("head"), None, {})
    assert (option(on, "--include-dashboard"), option(on, "--dashboard-host")) == ("true", "127.0.0.1")
    assert all(option(on, name) not in (None, fixed) for name, fixed in
               (("--dashboard-port", "8265"), ("--ray-client-server-port", "10001"),
                ("--dashboard-agent-listen-port", "52365")))
    off = node.start_argv(args("head", no_dashboard=True), None, {})
    assert option(off, "--include-dashboard") == "false" and "--dashboard-host" not in off


def test_gloo_and_nccl_get_the_interface_of_the_node_s_address_unless_the_user_set_them(monkeypatch):
    monkeypatch.setattr(node, "interface_for_address", lambda address: {"10.0.0.5": "ib0"}.get(address))
    assert node.interface_env("10.0.0.5", {}) == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"}
    assert node.interface_env("10.0.0.5", {"NCCL_SOCKET_IFNAME": "eth1"}) == {"GLOO_SOCKET_IFNAME": "ib0"}
    assert node.interface_env(None, {}) == {}


def test_a_node_on_loopback_leaves_its_address_to_ray():
    assert node.node_address("127.0.0.1") is None


@pytest.mark.parametrize("size,named", [(64 * 2**20, True), (2 * GIB, False)])
def test_a_small_dev_shm_is_named_in_one_line(monkeypatch, size, named):
    monkeypatch.setattr(node.shutil, "disk_usage", lambda path: type("Usage", (), {"total": size})())
    line = node.small_shm_line("n1")
    assert (line is not None) == named
    if named:
        assert line.startswith("/dev/shm on n1 is 64 MiB") and "--shm-size" in line and "\n" not in line


def test_the_start_hook_gives_the_nodes_the_token_and_the_default_route_s_interface(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t0ken")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    monkeypatch.setattr("trainrun.backends.spark.ray_start_hook.default_route_interface", lambda: "eth0")
    monkeypatch.delenv(node.DRAIN_TIMEOUT, raising=False)
    assert TrainstackStartHook().custom_environment_variables() == {
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t0ken", "GLOO_SOCKET_IFNAME": "eth0", node.DRAIN_TIMEOUT: "0"}
    monkeypatch.setenv(node.DRAIN_TIMEOUT, "5")  # the driver's own timeout reaches the worker nodes too
    assert TrainstackStartHook().custom_environment_variables()[node.DRAIN_TIMEOUT] == "5"
