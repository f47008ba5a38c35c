"""Bad input: one error naming the option, the value and what is valid; missing backends say what to install."""
from __future__ import annotations

import sys

import pytest

from trainrun import cli
from trainrun.errors import MissingBackend, UsageError

USAGE_CASES = {
    "np beyond host slots": (["mpi", "-np", "5", "-H", "a:2,b:2", "--", "python", "t.py"], "-np", "at most 4"),
    "malformed hosts": (["mpi", "-np", "2", "-H", "a:x", "--", "python", "t.py"], "-H", "host:slots"),
    "duplicate host": (["mpi", "-np", "2", "-H", "a:1,a:1", "--", "python", "t.py"], "-H", "each host listed once"),
    "unset -x variable": (["mpi", "-np", "2", "-x", "NOT_SET_ANYWHERE", "--", "python", "t.py"], "-x",
                          "NAME=VALUE"),
    "node rank out of range": (["torch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2",
                                "--master-addr", "n0", "--", "t.py"], "--node-rank", "0 <= rank < --nnodes (2)"),
    "multinode without master": (["torch", "--nproc-per-node", "2", "--nnodes", "2", "--", "t.py"],
                                 "--master-addr", "address of node 0"),
    "rdzv and master together": (["torch", "--nproc-per-node", "2", "--rdzv-endpoint", "n0:1",
                                  "--master-addr", "n0", "--", "t.py"], "--rdzv-endpoint", "not both"),
    "rdzv without port": (["torch", "--nproc-per-node", "2", "--rdzv-endpoint", "n0", "--", "t.py"],
                          "--rdzv-endpoint", "HOST:PORT"),
    "torch option as script": (["torch", "--nproc-per-node", "2", "--", "--lr", "1"], "command", "script path"),
    "missing command": (["torch", "--nproc-per-node", "2"], "command", "a program and its arguments"),
    "gpu without task gpus": (["spark", "--num-processes", "2", "--use-gpu", "--", "t.py"], "--use-gpu",
                              "spark.task.resource.gpu.amount"),
    "set without template": (["spark", "--num-processes", "2", "--set", "a=1", "--", "t.py"], "--set",
                             "with --template"),
    "conf without value": (["spark", "--num-processes", "2", "--conf", "spark.x", "--", "t.py"], "--conf",
                           "KEY=VALUE"),
    "rank filter beyond the job": (["mpi", "-np", "2", "--ranks-filter", "0,2", "python", "t.py"],
                                   "--ranks-filter", "rank numbers below 2"),
    "rank filter not numbers": (["spark", "--num-processes", "2", "--ranks-filter", "first", "t.py"],
                                "--ranks-filter", "comma-separated"),
    "local mode gpus": (["spark", "--local-mode", "--use-gpu", "--num-processes", "4", "--", "t.py"],
                        "--num-processes", "at most 0"),
}


@pytest.mark.parametrize("case", sorted(USAGE_CASES))
def test_usage_error_names_option_value_and_valid(case: str, plan_for) -> None:
    argv, option, valid = USAGE_CASES[case]
    with pytest.raises(UsageError) as err:
        plan_for(argv)
    assert err.value.option == option
    assert str(err.value).startswith(f"{option} = ") and "(valid: " in str(err.value) and valid in str(err.value)


@pytest.mark.parametrize("argv,machine_change,install", [
    (["mpi", "-np", "2", "--", "python", "t.py"], {"mpi_flavor": None}, "apt-get install openmpi-bin"),
    (["mpi", "--gloo", "-np", "2", "--", "python", "t.py"], {"horovodrun": None}, "pip install horovod"),
    (["torch", "--nproc-per-node", "2", "--", "t.py"], {"has_torch": False}, "pip install torch"),
    (["spark", "--num-processes", "2", "--", "t.py"], {"has_pyspark": False}, "pip install pyspark"),
    (["spark", "--num-processes", "2", "--", "t.py"], {"has_java": False}, "openjdk-17-jre-headless"),
])
def test_missing_backend_says_what_to_install(argv, machine_change, install, plan_for) -> None:
    with pytest.raises(MissingBackend, match=install):
        plan_for(argv, **machine_change)


def test_missing_pooltemplates_says_what_to_install(plan_for, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pooltemplates", None)
    with pytest.raises(MissingBackend, match="pip install ./templates"):
        plan_for(["spark", "--template", "gpu-pool", "--num-processes", "2", "--", "t.py"])


def test_template_error_becomes_usage_error(plan_for, fake_pooltemplates) -> None:
    with pytest.raises(UsageError, match="--template = 'gpu-pool'.*more task slots"):
        plan_for(["spark", "--template", "gpu-pool", "--num-processes", "9", "--", "t.py"])
    with pytest.raises(UsageError, match="'missing' not found"):
        plan_for(["spark", "--template", "missing", "--num-processes", "2", "--", "t.py"])


def test_template_checked_with_job_shape(plan_for, fake_pooltemplates) -> None:
    plan_for(["spark", "--template", "gpu-pool", "--use-gpu", "--num-processes", "4", "--", "t.py"])
    assert fake_pooltemplates.checked == [("gpu-pool", 4, True)]


@pytest.mark.parametrize("argv,fragment,code", [
    (["torch", "--nproc-per-node", "0", "--", "t.py"], "--nproc-per-node/--nproc_per_node: expected an integer >= 1, got '0'", 2),
    (["torch", "--nproc-per-node", "2", "--timeout", "-1", "--", "t.py"], "--timeout: expected a number", 2),
    (["mpi", "-np", "x", "--", "python", "t.py"], "-np/--num-processes/--num-proc/--num_processes/--num_proc: expected an integer >= 1, got 'x'", 2),
])
def test_cli_option_type_errors_exit_2(argv, fragment, code, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == code
    assert fragment in capsys.readouterr().err


def test_cli_prints_one_line_and_exit_code(capsys, monkeypatch: pytest.MonkeyPatch, machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine(has_torch=False))
    assert cli.main(["torch", "--nproc-per-node", "2", "--", "t.py"]) == 127
    err = capsys.readouterr().err
    assert err == "trainrun: torch is not available: pip install torch\n"


def test_json_needs_dry_run(capsys, monkeypatch: pytest.MonkeyPatch, machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    assert cli.main(["torch", "--nproc-per-node", "2", "--json", "--", "t.py"]) == 2
    assert "--json = True: is invalid (valid: together with --dry-run)" in capsys.readouterr().err


def test_dry_run_prints_and_starts_nothing(capsys, monkeypatch: pytest.MonkeyPatch, machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    monkeypatch.setattr("trainrun.runner.run_plan", lambda *a, **k: pytest.fail("dry run started the job"))
    assert cli.main(["torch", "--nproc-per-node", "2", "--dry-run", "--", "t.py"]) == 0
    assert capsys.readouterr().out.startswith("backend: torch\nranks: 2\nargv: /usr/bin/python3 -m torch.distributed.run")


def test_hostfile_lines_become_hosts(tmp_path, plan_for) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nnode0 slots=2\nnode1 slots=2  # the second\n")
    plan = plan_for(["mpi", "-np", "4", "--hostfile", str(hostfile), "python", "t.py"])
    assert plan.argv[plan.argv.index("-H") + 1] == "node0:2,node1:2"


@pytest.mark.parametrize("text", ["node0 cores=2\n", "node0 slots=2 extra\n", "# only a comment\n"])
def test_malformed_hostfile_names_the_line(tmp_path, plan_for, text: str) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text(text)
    with pytest.raises(UsageError, match="^--hostfile = "):
        plan_for(["mpi", "-np", "2", "--hostfile", str(hostfile), "python", "t.py"])


@pytest.mark.parametrize("argv,valid", [
    (["torch", "--nproc-per-node", "gpu", "t.py"], "a number, cpu or auto on a host without GPUs"),
    (["torch", "--standalone", "--nnodes", "2", "--master-addr", "n0", "t.py"], "a single-node job"),
    (["torch", "--nnodes", "1:4", "t.py"], "together with --rdzv-endpoint"),
    (["torch", "--nnodes", "4:2", "--rdzv-endpoint", "n0:1", "t.py"], "MIN:MAX with MIN <= MAX"),
    (["mpi", "--gloo", "-np", "2", "--no-tag-output", "--output-filename", "/o", "python", "t.py"], None),
])
def test_torchrun_and_horovodrun_options_are_checked(plan_for, argv, valid) -> None:
    if valid is None:
        plan_for(argv)
        return
    with pytest.raises(UsageError) as err:
        plan_for(argv)
    assert valid in str(err.value)


def test_mpich_has_no_output_filename(plan_for) -> None:
    with pytest.raises(UsageError, match="Open MPI"):
        plan_for(["mpi", "-np", "2", "--output-filename", "/o", "python", "t.py"], mpi_flavor="mpich")


def test_version_and_help_speak_to_users(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["--version"])
    assert caught.value.code == 0 and capsys.readouterr().out.startswith("trainrun 0.")
    with pytest.raises(SystemExit):
        cli.main(["torch", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--nproc-per-node N|auto|gpu|cpu, --nproc_per_node N|auto|gpu|cpu" in text
    assert "a `--` before it is optional" in text and "auto (gpu if any, else cpu)" in text
