"""trainrun selftest's pure parts: --sizes, the bandwidth formulas, how rank records are combined and judged,
the plans its jobs run, and its bad input (one line, exit 2)."""
from __future__ import annotations

import json

import pytest
from conftest import make_machine

from trainrun import arguments, cli
from trainrun.doctor import Facts, run_checks
from trainrun.errors import UsageError
from trainrun.remote import SshOptions
from trainrun.selftest.driver import Selftest
from trainrun.selftest.report import (
    MARKER,
    Report,
    algorithm_bandwidth,
    bus_bandwidth,
    compile_checks,
    device_checks,
    nccl_hints,
    ray_train_checks,
    records,
    sweep_from_records,
)
from trainrun.selftest.sizes import CPU_DEFAULT, GPU_DEFAULT, format_size, parse_sizes
from trainrun.validate import parse_hosts


def test_a_range_doubles_from_low_up_to_high_as_nccl_tests_f_2() -> None:
    assert parse_sizes("--sizes", "8B:1KiB") == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert parse_sizes("--sizes", "8B:100B") == (8, 16, 32, 64)
    gpu = parse_sizes("--sizes", GPU_DEFAULT)
    assert (gpu[0], gpu[-1], len(gpu)) == (8, 1 << 30, 28)
    assert parse_sizes("--sizes", CPU_DEFAULT)[-1] == 64 << 20


def test_a_list_takes_units_and_bare_bytes_sorted_without_repeats() -> None:
    assert parse_sizes("--sizes", "1MiB,8B, 64K,4096,8b,1G") == (8, 4096, 64 << 10, 1 << 20, 1 << 30)


@pytest.mark.parametrize("text", ["1x", "", "6B", "2B", "0", "1MiB:8B", "8B:64B:128B", "17GiB", "8KB", "8B,,16B",
                                  "-8B", "1.5MiB"])
def test_sizes_that_are_not_whole_float32_buffers_in_range_are_refused_naming_the_option(text) -> None:
    with pytest.raises(UsageError) as raised:
        parse_sizes("--sizes", text)
    assert raised.value.option == "--sizes" and raised.value.value == text
    assert "8B:1GiB" in raised.value.valid


@pytest.mark.parametrize("size,text", [(8, "8B"), (1024, "1KiB"), (1536, "1536B"), (64 << 20, "64MiB"),
                                       (1 << 30, "1GiB")])
def test_format_size(size, text) -> None:
    assert format_size(size) == text


def test_busbw_is_algbw_times_2_n_minus_1_over_n() -> None:
    algbw = algorithm_bandwidth(1 << 30, 0.5)
    assert algbw == 2 * (1 << 30)
    assert bus_bandwidth(100.0, 8) == 175.0
    assert bus_bandwidth(100.0, 2) == 100.0
    assert bus_bandwidth(100.0, 1) == 0.0  # one rank moves nothing


def _record(rank: int, size: int, seconds: float, correct: bool = True, suite: str = "torch") -> dict:
    return {"kind": "allreduce", "suite": suite, "transport": "gloo", "host": "h", "rank": rank, "ranks": 2,
            "bytes": size, "seconds": seconds, "correct": correct}


def test_records_are_found_behind_any_launchers_tag_and_broken_lines_skipped() -> None:
    lines = [f"[1,0]<stdout>:{MARKER}{json.dumps(_record(0, 8, 0.1))}",
             f"[default1]:{MARKER}{json.dumps(_record(1, 8, 0.2))}",
             f"{MARKER}{{not json", "an unrelated line"]
    assert [r["rank"] for r in records("\n".join(lines))] == [0, 1]


def test_a_sweep_times_each_size_by_its_slowest_rank_and_reports_nccl_tests_bandwidths() -> None:
    sweep = sweep_from_records("torch", 2, (8, 1 << 20),
                               [_record(0, 8, 1e-4), _record(1, 8, 2e-4), _record(0, 1 << 20, 1e-3),
                                _record(1, 1 << 20, 5e-4)], "gloo")
    assert [r.seconds for r in sweep.results] == [2e-4, 1e-3]
    row = sweep.to_dict()["results"][1]
    assert row["algbw_gbps"] == round((1 << 20) / 1e-3 / 1e9, 4) and row["busbw_gbps"] == row["algbw_gbps"]
    assert sweep.check().status == "ok" and "every sum exact" in sweep.check().detail


def test_a_wrong_sum_or_a_silent_rank_fails_the_sweep_naming_size_and_rank() -> None:
    sweep = sweep_from_records("torch", 2, (8, 16), [_record(0, 8, 1e-4), _record(1, 8, 1e-4, correct=False),
                                                     _record(0, 16, 1e-4)], "gloo")
    check = sweep.check()
    assert check.status == "fail"
    assert "8B: wrong sum on rank 1" in check.detail and "16B: no result from rank 1" in check.detail
    report = Report(sweeps=[sweep])
    assert not report.ok and json.loads(report.to_json())["ok"] is False
    assert "WRONG" in report.to_text() and "MISSING" in report.to_text()


def test_a_failed_job_is_named_and_the_sizes_it_never_reached_are_left_out() -> None:
    sweep = sweep_from_records("horovod-torch", 2, (8, 16), [_record(0, 8, 1e-4, suite="horovod-torch"),
                                                             _record(1, 8, 1e-4, suite="horovod-torch")],
                               "mpi", error="rank 1 exited with code 1; job stopped")
    assert [r.size for r in sweep.results] == [8]
    assert sweep.check().status == "fail" and "rank 1 exited with code 1" in sweep.check().detail


def _probe(host: str = "h", **gpus: int) -> dict:
    return {"kind": "probe", "host": host, "gpus": gpus, "frameworks": {"torch": "2"}, "errors": {}}


def test_every_framework_must_see_the_gpus_nvidia_smi_lists() -> None:
    [check] = device_checks([_probe(**{"nvidia-smi": 2, "torch": 1, "tensorflow": 2})], hosts=1)
    assert check.status == "fail" and "nvidia-smi lists 2 GPU(s) but torch sees 1" in check.detail
    [check] = device_checks([_probe(**{"nvidia-smi": 0, "torch": 0})], hosts=1)
    assert check.status == "ok" and "CPU path" in check.detail


def test_a_host_that_did_not_report_and_a_framework_that_does_not_import_fail() -> None:
    probe = {**_probe(**{"nvidia-smi": 0}), "errors": {"tensorflow": "ImportError: libcudart.so.12"}}
    checks = device_checks([probe], hosts=2)
    assert [(c.name, c.status) for c in checks] == [("hosts", "fail"), ("gpus", "ok"), ("tensorflow", "fail")]
    assert "libcudart" in checks[-1].detail


def test_a_compiled_step_that_differs_from_eager_or_does_not_compile_fails() -> None:
    base = {"kind": "compile", "host": "h", "device": "cpu", "eager_seconds": 0.01, "compiled_seconds": 9.0}
    ok, differs, broken = compile_checks([{**base, "ok": True, "max_abs_diff": 1e-8},
                                          {**base, "ok": False, "max_abs_diff": 0.5},
                                          {**base, "ok": False, "error": "InvalidCxxCompiler: no g++"}])
    assert (ok.status, differs.status, broken.status) == ("ok", "fail", "fail")
    assert "0.5" in differs.detail and "g++" in broken.hint


def test_ray_train_s_allreduce_must_be_right_on_every_worker_and_a_failed_fit_is_named() -> None:
    base = {"kind": "ray-train", "host": "h", "workers": 2}
    ok, wrong, failed = ray_train_checks([{**base, "correct": True, "backend": "gloo", "seconds": 24.2},
                                         {**base, "correct": False, "backend": "gloo", "seconds": 20.0},
                                         {**base, "error": "RayTaskError: worker died"}])
    assert (ok.status, wrong.status, failed.status) == ("ok", "fail", "fail")
    assert "gloo correct, fit in 24.2 s" in ok.detail and "worker died" in failed.detail


def test_the_ray_train_check_s_driver_runs_under_trainrun_ray_here() -> None:
    plan = _selftest().ray_plan("cpu")
    assert plan.backend == "ray (this host)" and plan.run.timeout == 60.0
    assert plan.argv[plan.argv.index("--") + 1:][1:] == ["-m", "trainrun.selftest.worker", "ray-train", "cpu"]


def test_nccl_hints_are_doctors_own() -> None:
    facts = Facts("/none", None, {"torch": "2"}, gpu_count=2, driver_version="550.54", driver_cuda="12.4",
                  shm_bytes=8 << 30, primary_interface="eth0", interfaces=("eth0", "lo"))
    hints = nccl_hints(run_checks(facts))
    assert any("NCCL_P2P_DISABLE=1" in hint for hint in hints)
    assert any("NCCL_SOCKET_IFNAME=eth0" in hint for hint in hints)


def _selftest(hosts: str | None = None) -> Selftest:
    return Selftest(parse_hosts("-H", hosts) if hosts else (), "-H", SshOptions(), 60.0,
                    detect=lambda backend: make_machine(cpu_count=2, local_names=("here",)))


def test_here_the_probe_and_the_torch_sweep_run_under_torchrun_and_horovod_under_mpirun() -> None:
    selftest = _selftest()
    probe = selftest.plan(("probe",), 1, one_per_host=True)
    assert probe.backend == "torch" and probe.ranks == 1 and probe.run.timeout == 60.0  # --timeout, per job
    assert probe.argv[probe.argv.index("trainrun.rank") + 1:] == ["-m", "trainrun.selftest.worker", "probe"]
    sweep = selftest.plan(("allreduce", "torch", "cpu", "8,16"), 2)
    assert sweep.backend == "torch" and sweep.ranks == 2 and "--nproc-per-node" in sweep.argv
    horovod = selftest.plan(("allreduce", "horovod-torch", "cpu", "8,16"), 2)
    assert horovod.backend == "mpi (openmpi)" and horovod.argv[:1] == ["mpirun"]
    assert horovod.argv[-6:] == ["-m", "trainrun.selftest.worker", "allreduce", "horovod-torch", "cpu", "8,16"]


def test_with_hosts_every_job_is_trainrun_mpis_plan_the_probe_one_rank_per_host() -> None:
    selftest = _selftest("here:2,node1:2")
    probe = selftest.plan(("probe",), 2, one_per_host=True)
    assert probe.argv[probe.argv.index("-H") + 1] == "here:1,node1:1" and probe.ranks == 2
    assert probe.remote is not None and probe.remote.hosts == (("node1", 1),)  # ssh as trainrun mpi -H
    sweep = selftest.plan(("allreduce", "torch", "cpu", "8"), 4)
    assert sweep.argv[sweep.argv.index("-H") + 1] == "here:2,node1:2" and sweep.argv[sweep.argv.index("-np") + 1] == "4"
    assert sweep.env["MASTER_ADDR"] == "here"  # torch.distributed's rendezvous on rank 0's host


@pytest.mark.parametrize("argv,option", [
    (["selftest", "--sizes", "1x"], "--sizes"),
    (["selftest", "-H", "a:x"], "-H"),
    (["selftest", "--hostfile", "/nonexistent/hostfile"], "--hostfile"),
    (["selftest", "--skip", "allreduce"], "--skip"),
])
def test_bad_input_is_one_line_naming_the_option_exit_2(argv, option, capsys) -> None:
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"trainrun: {option} = ") and err.count("\n") == 1, err


def test_the_subcommand_parses_its_options() -> None:
    args = arguments.build_parser().parse_args(["selftest", "--json", "-H", "a:2,b:2", "--sizes", "8B:64B", "-p",
                                                "2222", "--timeout", "60"])
    assert (args.backend, args.json, args.hosts, args.sizes, args.ssh_port, args.timeout) == \
        ("selftest", True, "a:2,b:2", "8B:64B", 2222, 60.0)
    assert arguments.build_parser().parse_args(["selftest", "--skip", "ray-train"]).skip == ["ray-train"]


def test_a_skipped_ray_train_check_is_reported_as_skipped_and_runs_no_ray_job(monkeypatch) -> None:
    selftest = Selftest((), "-H", SshOptions(), 60.0, skip=frozenset({"ray-train"}),
                        detect=lambda backend: make_machine(cpu_count=2, local_names=("here",)))
    probe = {"kind": "probe", "host": "here", "gpus": {"nvidia-smi": 0, "torch": 0}, "frameworks": {"ray": "2.60.0"},
             "errors": {}}
    jobs = []

    def run_job(label, plan):
        jobs.append(plan.backend)
        return ([probe], None) if label.startswith("probe") else ([], "not run here")
    monkeypatch.setattr(selftest, "run_job", run_job)
    report = selftest.run((8,))
    assert not any(backend.startswith("ray") for backend in jobs)
    assert [(check.status, check.detail) for check in report.checks if check.name == "ray-train"] == \
        [("skip", "left out: --skip ray-train")]
