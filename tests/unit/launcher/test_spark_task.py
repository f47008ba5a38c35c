"""Pure parts of the Spark barrier task, and the driver's output stream over a loopback socket."""
from __future__ import annotations

import time

from trainrun.backends.spark.driver import parse_args, program_from_rank_args
from trainrun.backends.spark.output import OutputClient, OutputServer
from trainrun.backends.spark.task import (
    Rendezvous,
    TaskConfig,
    horovod_task_env,
    host_of,
    rank_command,
)
from trainrun.program import Program


def test_host_of_task_address() -> None:
    assert host_of("10.0.0.5:41234") == "10.0.0.5"
    assert host_of("[fe80::1]:41234") == "fe80::1"


def test_horovod_env_makes_each_task_a_one_slot_host() -> None:
    env = horovod_task_env(1, 4, Rendezvous("10.0.0.5", 29400, 31000), "eth0")
    assert env["HOROVOD_RANK"] == env["HOROVOD_CROSS_RANK"] == "1"
    assert env["HOROVOD_SIZE"] == env["HOROVOD_CROSS_SIZE"] == "4"
    assert env["HOROVOD_LOCAL_RANK"] == "0" and env["HOROVOD_LOCAL_SIZE"] == "1"
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "10.0.0.5"
    assert env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "31000"
    assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert env["HOROVOD_GLOO_IFACE"] == "eth0"


def test_torch_task_is_rank_n_with_torchruns_variables() -> None:
    config = TaskConfig(3, Program("script", "t.py", ("--lr", "1")), "torch", False, ("h", 1))
    argv, env = rank_command(config, 2, ["10.0.0.5", "10.0.0.7", "10.0.0.7"], Rendezvous("10.0.0.5", 29400, None),
                             config.program, "/tmp/w")
    assert argv[1:] == ["-m", "trainrun.rank", "t.py", "--lr", "1"]
    assert {name: env[name] for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                         "MASTER_PORT", "TRAINRUN_STATUS_DIR")} == {
        "RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29400", "TRAINRUN_STATUS_DIR": "/tmp/w"}


def test_torch_tasks_on_one_host_share_its_cores(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    config = TaskConfig(2, Program("script", "t.py"), "torch", False, ("h", 1))
    _, env = rank_command(config, 1, ["10.0.0.7", "10.0.0.7"], Rendezvous("10.0.0.7", 29400, None),
                          config.program, "/tmp/w")
    assert env["OMP_NUM_THREADS"] == "4"


def test_driver_argv_round_trip() -> None:
    args, rank_args = parse_args(["--master", "local[2]", "--num-processes", "2", "--framework", "torch",
                                  "--no-gpu", "--conf", "a=b", "--", "-m", "pkg", "x"])
    assert (args.master, args.num_processes, args.use_gpu, args.conf) == ("local[2]", 2, False, ["a=b"])
    assert program_from_rank_args(rank_args) == Program("module", "pkg", ("x",))
    assert program_from_rank_args(["--payload", "p", "r"]) == Program("payload", "p", ("r",))


def test_output_server_prints_lines_and_reports_first_failure(capsys) -> None:
    failures = []
    server = OutputServer("127.0.0.1", failures.append)
    try:
        for rank, code in ((1, 3), (0, 143)):
            client = OutputClient(server.address)
            client.send_line(f"[rank {rank}] hello\n")
            client.send_failure(rank, code)
            client.close()
            deadline = time.monotonic() + 5
            while not failures and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(0.2)
    finally:
        server.close()
    assert [(f.rank, f.exit_code) for f in failures] == [(1, 3)]
    out = capsys.readouterr().out
    assert "[rank 1] hello\n" in out and "[rank 0] hello\n" in out
