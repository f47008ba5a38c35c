"""Pure parts of the Spark barrier task, and the driver's output stream over a loopback socket."""
from __future__ import annotations

import socket
import struct
import threading

import pytest
from polling import wait_until

from trainrun.backends.spark.driver import parse_args
from trainrun.backends.spark.output import EXIT, OutputClient, OutputServer, is_local_master, new_token
from trainrun.backends.spark.task import (
    Rendezvous,
    TaskConfig,
    horovod_task_env,
    host_of,
    rank_command,
)
from trainrun.proctree import job_temp_prefix
from trainrun.program import Program, program_from_rank_args


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


@pytest.mark.parametrize("program", [Program("script", "t.py", ("--lr", "0.1")), Program("module", "pkg.train", ("-m",)),
                                     Program("payload", "p.pkl", ("r.pkl",)), Program("script", "t.py")])
def test_rank_args_are_read_back_by_their_one_parser(program) -> None:
    # Written by Program.rank_args for torchrun, the Spark driver and payloads; read by the driver and the rank entry.
    assert program_from_rank_args(program.rank_args()) == program


def test_output_server_prints_lines_and_reports_first_failure(capsys) -> None:
    failures, events = [], []
    server = OutputServer("127.0.0.1", failures.append, on_event=lambda *event: events.append(event))
    try:
        for rank, code, sig in ((1, 3, None), (0, 143, "SIGTERM")):
            client = OutputClient(server.address, server.token)
            client.send_start(rank)
            client.send_line(f"[rank {rank}] hello\n")
            client.send_exit(rank, code, sig)
            client.close()
            wait_until(lambda: rank in server.status().exits, 5)
    finally:
        server.close()
    assert [(f.rank, f.exit_code, f.signal) for f in failures] == [(1, 3, None)]
    assert [(kind, rank) for kind, rank, _ in events] == [("start", 1), ("exit", 1), ("start", 0), ("exit", 0)]
    status = server.status()
    assert status.exits[0].signal == "SIGTERM" and status.running() == [] and status.first_failure().rank == 1
    out = capsys.readouterr().out
    assert "[rank 1] hello\n" in out and "[rank 0] hello\n" in out


def test_output_server_believes_nothing_from_a_connection_without_the_token(capsys) -> None:
    """One connection injects a log line and a fake failure: without the job's token neither counts."""
    failures = []
    server = OutputServer("127.0.0.1", failures.append)
    try:
        for first_line in (b"", b"0" * 64 + b"\n", b"not-the-token\n", server.token.encode()[:-1] + b"\n"):
            with socket.create_connection(server.address) as sock:
                try:
                    sock.sendall(first_line + b"[rank 0] injected\n" + EXIT.encode() + b"0 42 -\n")
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(1)  # the server closes the connection
                except OSError:
                    pass  # it closed it before we were done (EPIPE, ECONNRESET, ENOTCONN)
        wait_until(lambda: server.refused == 4, 5)
        assert server.refused == 4
        good = OutputClient(server.address, server.token)
        good.send_line("[rank 1] real\n")
        good.send_exit(1, 0)
        good.close()
        wait_until(lambda: 1 in server.status().exits, 5)
    finally:
        server.close()
    assert failures == [] and server.failure is None and list(server.status().exits) == [1]
    out = capsys.readouterr().out
    assert "[rank 1] real" in out and "injected" not in out


def _reset(sock: socket.socket) -> None:
    """Close with a reset (RST), as a connection cut by a dying executor or a network ends."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_refused_and_broken_connections_leave_stderr_clean(capfd, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client the server refuses (however it ends its connection), or a task's connection that breaks, prints
    nothing: no traceback of the server's threads reaches the driver's stderr, which the user reads."""
    thread_errors = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    threads = threading.active_count()
    server = OutputServer("127.0.0.1", lambda failure: None)
    try:
        for first_bytes, reset in ((b"", False), (b"not-the-token\n", False), (b"x" * 1000, False),
                                   (b"not-the-to", True), (b"not-the-token\nmore", True)):
            sock = socket.create_connection(server.address)
            sock.sendall(first_bytes)
            if reset:
                _reset(sock)
            else:
                sock.close()
        assert wait_until(lambda: server.refused == 5, 5)
        broken = OutputClient(server.address, server.token)
        broken.send_start(0)
        broken.send_line("[rank 0] half a li")
        assert wait_until(lambda: 0 in server.status().started, 5)
        _reset(broken._sock)
        assert wait_until(lambda: threading.active_count() == threads + 1, 5)  # the accept thread alone
    finally:
        server.close()
    assert thread_errors == [] and capfd.readouterr().err == ""


def test_output_server_listens_on_loopback_for_local_masters() -> None:
    assert all(is_local_master(m) for m in ("local", "local[2]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]"))
    assert not any(is_local_master(m) for m in ("spark://head:7077", "yarn", "k8s://https://api:6443", "localhost"))
    assert len(new_token()) == 64 and new_token() != new_token()


def test_task_directory_is_named_by_job_so_trainrun_finds_it() -> None:
    assert job_temp_prefix("abc123") == "trainrun-task-abc123-"
