"""Bad input: one error naming the option, the value and what is valid; missing backends say what to install."""
from __future__ import annotations

import os
import socket
import sys
import time
import types

import pytest

import trainrun
from trainrun import cli
from trainrun.errors import MissingBackend, UsageError
from trainrun.validate import MASTER_CONNECT_SECONDS, check_reachable

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
    "restarts of mpirun": (["spark", "--local-mode", "--framework", "horovod", "-np", "2", "--max-restarts", "1",
                            "t.py"], "--max-restarts", "0 with --framework horovod --local-mode"),
    "conf without value": (["spark", "--num-processes", "2", "--conf", "spark.x", "--", "t.py"], "--conf",
                           "KEY=VALUE"),
    "rank filter beyond the job": (["mpi", "-np", "2", "--ranks-filter", "0,2", "python", "t.py"],
                                   "--ranks-filter", "rank numbers below 2"),
    "rank filter not numbers": (["spark", "--num-processes", "2", "--ranks-filter", "first", "t.py"],
                                "--ranks-filter", "comma-separated"),
    "local mode gpus": (["spark", "--local-mode", "--use-gpu", "--num-processes", "4", "--", "t.py"],
                        "--num-processes", "at most 0"),
    "mpi ranks beyond the limit": (["mpi", "-np", "1000000", "python", "t.py"], "-np", "from 1 to 4096"),
    "gloo ranks beyond the limit": (["mpi", "--gloo", "-np", "4097", "python", "t.py"], "-np", "from 1 to 4096"),
    "torch ranks beyond the limit": (["torch", "--nproc-per-node", "1000000", "t.py"], "--nproc-per-node",
                                     "from 1 to 4096"),
    "spark ranks beyond the limit": (["spark", "-np", "1000000", "t.py"], "--num-processes", "from 1 to 4096"),
    "spark local mode ranks beyond the limit": (["spark", "--local-mode", "-np", "1000000", "t.py"],
                                                "--num-processes", "from 1 to 4096"),
    "host slots beyond the limit": (["mpi", "-np", "2", "-H", "a:1000000", "python", "t.py"], "-H",
                                    "with 1 to 4096 slots"),
    "unknown master scheme": (["spark", "-np", "2", "--master", "foo://bar", "t.py"], "--master",
                              "local, local[N], local[*], local[N,F], local-cluster[N,C,M], "
                              "spark://HOST:PORT[,HOST:PORT...], yarn or k8s://https://HOST:PORT"),
    "standalone master without port": (["spark", "-np", "2", "--master", "spark://head", "t.py"], "--master",
                                       "spark://HOST:PORT"),
    "ray on kubernetes": (["ray", "--master", "k8s://https://api:6443", "python", "t.py"], "--master",
                          "spark://HOST:PORT, local-cluster[N,C,M], local[N] or yarn"),
    "ray worker nodes without spark": (["ray", "--max-worker-nodes", "2", "python", "t.py"], "--max-worker-nodes",
                                       "together with --master URL, or inside trainrun spark-pool"),
    "ray dashboard not a bool": (["ray", "--include-dashboard", "maybe", "python", "t.py"], "--include-dashboard",
                                 "true or false"),
    "host with a space for slots": (["mpi", "-np", "2", "-H", "localhost 2", "python", "t.py"], "-H",
                                    "host:slots[,host:slots...]"),
    "host with a semicolon for a colon": (["mpi", "-np", "2", "-H", "localhost;2", "python", "t.py"], "-H",
                                          "'localhost;2' is not a host name (valid: host:slots[,host:slots...]"),
    "an interface this host lacks": (["mpi", "--num-proc", "2", "-H", "localhost:2", "--network-interface", "nosuch0",
                                      "python", "t.py"], "--network-interface",
                                     "'nosuch0': is not a network interface of this host (valid: lo, eth0)"),
    "an interface this host lacks, gloo": (["mpi", "--gloo", "-np", "2", "--network-interface", "nosuch0", "python",
                                            "t.py"], "--network-interface", "(valid: lo, eth0)"),
    "-x name with a space": (["mpi", "-np", "2", "-x", "BAD NAME=1", "python", "t.py"], "-x",
                             "NAME of letters, digits and _"),
    "-x name starting with a digit": (["mpi", "-np", "2", "-x", "1X=1", "python", "t.py"], "-x",
                                      "NAME of letters, digits and _"),
    "conf outside spark.": (["spark", "-np", "2", "--conf", "notspark.key=1", "t.py"], "--conf",
                            "spark.KEY=VALUE, e.g. spark.executor.memory=4g"),
    "master from conf": (["spark", "-np", "2", "--conf", "spark.master=local[0]", "t.py"], "spark.master",
                         "local[N]"),
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
    (["ray", "python", "t.py"], {"has_ray": False}, r"pip install 'ray\[default,train\]'"),
    (["ray", "--master", "local-cluster[2,1,1024]", "python", "t.py"], {"has_pyspark": False}, "pip install pyspark"),
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


ARGUMENT_CASES = {
    "type of a count": (["torch", "--nproc-per-node", "0", "--", "t.py"],
                        "--nproc-per-node = '0': is invalid (valid: an integer >= 1)"),
    "np not a number": (["mpi", "-np", "x", "--", "python", "t.py"], "-np = 'x': is invalid (valid: an integer >= 1)"),
    "--np for -np": (["mpi", "--np", "2", "python", "t.py"],
                     "option = '--np': is not an option of trainrun mpi; did you mean -np? "
                     "(valid: the options `trainrun mpi --help` lists)"),
    "--dryrun": (["mpi", "-np", "2", "--dryrun", "python", "t.py"],
                 "option = '--dryrun': is not an option of trainrun mpi; did you mean --dry-run?"),
    "--nprocs-per-node": (["torch", "--nprocs-per-node", "2", "t.py"],
                          "option = '--nprocs-per-node': is not an option of trainrun torch; "
                          "did you mean --nproc-per-node?"),
    "mpirun's -np under torch": (["torch", "-np", "2", "t.py"],
                                 "option = '-np': is not an option of trainrun torch; did you mean --nproc-per-node?"),
    "a module under spark": (["spark", "-np", "2", "-m", "pkg.train"],
                             "option = '-m': is not an option of trainrun spark; did you mean -- -m MODULE?"),
    "torchrun's option under spark": (["spark", "--nproc-per-node", "2", "t.py"],
                                      "option = '--nproc-per-node': is not an option of trainrun spark; "
                                      "did you mean --num-processes?"),
    "no backend": (["-np", "2", "python", "t.py"],
                   "backend = '': is missing before -np (valid: mpi, torch, spark, spark-pool, ray, doctor, selftest, e.g. trainrun "
                   "mpi -np 2 python train.py)"),
    "misspelled backend": (["mpy", "-np", "2", "python", "t.py"], "backend = 'mpy': is not a backend; did you mean mpi?"),
    "nothing at all": ([], "backend = '': is missing (valid: mpi, torch, spark, spark-pool, ray, doctor, selftest"),
    "an option selftest lacks": (["selftest", "--ranks", "0"],
                                 "option = '--ranks': is not an option of trainrun selftest "
                                 "(valid: the options `trainrun selftest --help` lists)"),
    "an unknown selftest option": (["selftest", "--bogus"], "option = '--bogus': is not an option of trainrun selftest"),
    "launcher arguments without =": (["mpi", "-np", "2", "--mpi-args", "--bogus", "python", "t.py"],
                                     "--mpi-args = '--bogus': is read as an option of trainrun's own "
                                     "(valid: --mpi-args=--bogus or --mpi-args='--bogus ...', with `=`)"),
    "np missing": (["mpi", "python", "t.py"], "-np = '': is required (valid: -np N: the number of ranks)"),
    "np without value": (["mpi", "-np"], "-np = '': needs a value (valid: -np N: the number of ranks)"),
    "framework choice": (["spark", "-np", "2", "--framework", "tf", "t.py"],
                         "--framework = 'tf': is invalid (valid: torch, horovod)"),
    "exclusive gpu options": (["spark", "-np", "2", "--use-gpu", "--no-gpu", "t.py"],
                              "--no-gpu = True: is not allowed with --use-gpu (valid: either --use-gpu or --no-gpu, "
                              "not both)"),
    "-H and --hostfile": (["mpi", "-np", "2", "-H", "localhost:2", "--hostfile", "/etc/hostname", "python", "ok.py"],
                          "--hostfile = '/etc/hostname': is not allowed with -H (valid: either -H or --hostfile, "
                          "not both)"),
    "--hostfile= and -H": (["mpi", "-np", "2", "--hostfile=/etc/hostname", "-H", "localhost:2", "python", "ok.py"],
                           "-H = 'localhost:2': is not allowed with --hostfile"),
    "selftest's -H and --hostfile": (["selftest", "-H", "a:1", "--hostfile", "hosts"],
                                     "--hostfile = 'hosts': is not allowed with -H"),
}


@pytest.mark.parametrize("case", sorted(ARGUMENT_CASES))
def test_argument_errors_are_one_line_in_the_project_format(case: str, capsys) -> None:
    argv, fragment = ARGUMENT_CASES[case]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trainrun: {fragment}") and err.count("\n") == 1, err


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
    assert capsys.readouterr().out.startswith("backend: torch\nlauncher: torchrun\nranks: 2 (2 on this host)\n"
                                              "argv: /usr/bin/python3 -m trainrun.torchrun")


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


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e400", "soon"])
def test_timeout_must_be_finite_and_positive(value: str, capsys, monkeypatch: pytest.MonkeyPatch, machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    assert cli.main(["mpi", "-np", "2", f"--timeout={value}", "--dry-run", "python", "t.py"]) == 2
    assert capsys.readouterr().err == (f"trainrun: --timeout = {value!r}: is invalid "
                                       "(valid: a finite number of seconds > 0, e.g. 3600)\n")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0, -5, True])
def test_api_timeout_must_be_finite_and_positive(value: object) -> None:
    with pytest.raises(UsageError, match=r"^timeout = .*a finite number of seconds > 0"):
        trainrun.run("t.py", timeout=value)


@pytest.mark.parametrize("master", ["local", "local[4]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]", "yarn",
                                    "k8s://https://api.example.org:6443", "k8s://api:443"])
def test_spark_master_urls_spark_accepts_are_planned(plan_for, master: str) -> None:
    plan = plan_for(["spark", "-np", "2", "--master", master, "t.py"])
    assert plan.argv[plan.argv.index("--master") + 1] == master


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_standalone_master_is_refused_within_the_bound(plan_for) -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(UsageError) as err:
        plan_for(["spark", "-np", "2", "--master", f"spark://127.0.0.1:{port}", "t.py"])
    assert time.monotonic() - started < MASTER_CONNECT_SECONDS + 1
    assert str(err.value) == (
        f"--master = 'spark://127.0.0.1:{port}': 127.0.0.1:{port} did not accept a TCP connection within 3 s "
        "(valid: a running Spark master: start it (the local pool: invoke pool.up), or correct HOST:PORT and "
        "check that no firewall is in between)")


def test_dry_run_plans_a_standalone_master_offline(plan_for) -> None:
    plan_for(["spark", "--dry-run", "-np", "2", "--master", f"spark://127.0.0.1:{closed_port()}", "t.py"])


def test_one_listening_master_of_a_list_suffices(plan_for) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        plan_for(["spark", "-np", "2", "--master", f"spark://127.0.0.1:{closed_port()},127.0.0.1:{port}", "t.py"])


def test_a_silent_master_is_given_up_after_the_bound() -> None:
    started = time.monotonic()
    # 192.0.2.0/24 is TEST-NET-1: nothing answers there (or the network says at once that it is unreachable).
    with pytest.raises(UsageError, match="192.0.2.1:7077 did not accept a TCP connection within 0.3 s"):
        check_reachable("--master", "spark://192.0.2.1:7077", [("192.0.2.1", 7077)], seconds=0.3)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("value", ["x" * 500, list(range(300)), {"a": ["b" * 200] * 50}, 10 ** 200, "short", 3.5])
def test_usage_error_shows_values_as_pooltemplates_problems_do(value: object) -> None:
    pooltemplates = pytest.importorskip("pooltemplates")
    assert trainrun.errors.shown(value) == pooltemplates.shown(value)
    assert str(UsageError("--opt", value, "is wrong", valid="anything")) == \
        str(pooltemplates.Problem("--opt", value, "is wrong", "anything"))
    assert len(str(UsageError("--opt", value, valid="v"))) <= len("--opt = : is invalid (valid: v)") + 80


def test_a_templates_gpus_alone_do_not_turn_on_use_gpu(plan_for, fake_pooltemplates) -> None:
    plan = plan_for(["spark", "--template", "gpu-pool", "--num-processes", "2", "t.py"])
    assert "--no-gpu" in plan.argv and not [key for key in plan.spark_conf if ".resource.gpu." in key]
    assert fake_pooltemplates.checked == [("gpu-pool", 2, False)]


def test_no_gpu_drops_the_templates_gpu_conf_but_not_the_users(plan_for, fake_pooltemplates) -> None:
    plan = plan_for(["spark", "--template", "gpu-pool", "--no-gpu", "--conf", "spark.worker.resource.gpu.amount=1",
                     "--master", "spark://head:7077", "--dry-run", "-np", "2", "t.py"])
    assert [key for key in plan.spark_conf if ".resource.gpu." in key] == ["spark.worker.resource.gpu.amount"]


def test_the_documented_template_command_plans_a_cpu_job_on_this_host(plan_for) -> None:
    pytest.importorskip("pooltemplates")
    plan = plan_for(["spark", "--num-processes", "2", "--template", "local-pool", "train.py"])
    assert plan.argv[plan.argv.index("--master") + 1] == "local[2]" and "--no-gpu" in plan.argv
    assert not [key for key in plan.spark_conf if ".resource.gpu." in key]


def test_a_missing_discovery_script_is_refused_under_a_local_master(plan_for, tmp_path) -> None:
    pytest.importorskip("pooltemplates")
    script = "/opt/trainstack/discover-gpus.sh"
    if os.access(script, os.X_OK):
        pytest.skip(f"{script} exists here (an image)")
    with pytest.raises(UsageError) as err:
        plan_for(["spark", "--num-processes", "2", "--template", "local-pool", "--use-gpu", "train.py"])
    assert str(err.value).startswith(f"spark.executor.resource.gpu.discoveryScript = '{script}': is not an "
                                     "executable file on this host, where local[2] runs the executors (valid: --no-gpu")
    # A pool's workers have it: nothing to check here.
    plan_for(["spark", "--num-processes", "2", "--template", "local-pool", "--use-gpu", "--dry-run",
              "--master", "spark://head:7077", "train.py"])


def test_spark_without_a_master_says_which_it_uses(capsys, monkeypatch: pytest.MonkeyPatch, machine, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    monkeypatch.setattr("trainrun.runner.run_plan", lambda *a, **k: None)
    assert cli.main(["spark", "--num-processes", "2", "t.py"]) == 0
    note, summary = capsys.readouterr().err.splitlines()
    assert note == ("trainrun: no --master: Spark runs every rank on this host (local[2]); a pool's: --master "
                    "spark://HOST:7077 (invoke pool.status prints it)")
    assert cli.main(["spark", "--num-processes", "2", "--master", "local[2]", "t.py"]) == 0
    assert "no --master" not in capsys.readouterr().err


MISSING_PROGRAMS = {
    "torch script": (["torch", "--nproc-per-node", "2", "missing.py"],
                     "command = 'missing.py': is not a file on this host (valid: the path of a Python script, "
                     "absolute or relative to {cwd})"),
    "torch module": (["torch", "--nproc-per-node", "2", "-m", "nosuchmodule"],
                     "command = 'nosuchmodule': is not a module {python} finds (valid: a module on its sys.path or "
                     "under {cwd}, e.g. -m pkg.train)"),
    "module of a package": (["torch", "--nproc-per-node", "2", "-m", "pkg.nosuchmodule"],
                            "command = 'pkg.nosuchmodule': is not a module"),
    "spark script on a local master": (["spark", "--num-processes", "2", "missing.py"],
                                       "command = 'missing.py': is not a file on this host"),
    "spark local mode module": (["spark", "--local-mode", "--num-processes", "2", "--", "-m", "nosuchmodule"],
                                "command = 'nosuchmodule': is not a module"),
    "mpi script": (["mpi", "-np", "2", "python", "missing.py"], "command = 'missing.py': is not a file on this host"),
    "mpi command": (["mpi", "-np", "2", "./missing.sh"], "command = './missing.sh': is not a command on this host"),
    "mpi python that is not here": (["mpi", "-np", "2", "python3.99", "train.py"],
                                    "command = 'python3.99': is not a command on this host (valid: a Python on PATH "
                                    "that every rank runs, e.g. python3 or {python})"),
}


@pytest.mark.parametrize("case", sorted(MISSING_PROGRAMS))
def test_a_missing_program_is_refused_before_the_launch(case: str, capsys, monkeypatch: pytest.MonkeyPatch, machine,
                                                       tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('a package is looked up, not imported')")
    (tmp_path / "train.py").write_text("")
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    monkeypatch.setattr("trainrun.runner.run_plan", lambda *a, **k: pytest.fail("started a missing program"))
    argv, expected = MISSING_PROGRAMS[case]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainrun: " + expected.format(cwd=tmp_path, python=sys.executable)) and err.count("\n") == 1


@pytest.mark.parametrize("argv", [
    ["torch", "--nproc-per-node", "2", "train.py"],
    ["torch", "--nproc-per-node", "2", "-m", "pkg.train"],
    ["torch", "--nproc-per-node", "2", "-m", "json.tool"],
    ["mpi", "-np", "2", "python", "-m", "pkg"],
    ["mpi", "-np", "2", "sh", "-c", "true"],
    ["spark", "--num-processes", "2", "--master", "spark://head:7077", "on_the_workers.py"],
    ["mpi", "-np", "2", "-H", "w1:1,w2:1", "python", "on_the_hosts.py"],
])
def test_a_program_that_is_there_or_elsewhere_is_launched(argv, monkeypatch: pytest.MonkeyPatch, machine,
                                                          tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('a package is looked up, not imported')")
    (tmp_path / "pkg" / "train.py").write_text("")
    started = []
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine(local_names=()))
    monkeypatch.setattr("trainrun.validate.check_reachable", lambda *a, **k: None)
    monkeypatch.setattr("trainrun.backends.spark.check_reachable", lambda *a, **k: None)
    monkeypatch.setattr("trainrun.backends.mpi.remote_hosts", lambda *a, **k: types.SimpleNamespace(options=()))
    monkeypatch.setattr("trainrun.runner.run_plan", lambda *a, **k: started.append(True))
    assert cli.main(argv) == 0 and started


def test_an_unknown_trainrun_variable_gets_a_warning_naming_the_closest(capsys, monkeypatch: pytest.MonkeyPatch,
                                                                        machine) -> None:
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine())
    monkeypatch.setenv("TRAINRUN_SSH_PROT", "2222")
    monkeypatch.setenv("TRAINRUN_JOB_ID", "set for a job's processes: known")
    assert cli.main(["mpi", "-np", "2", "--dry-run", "python", "t.py"]) == 0
    assert capsys.readouterr().err == (
        "trainrun: warning: TRAINRUN_SSH_PROT = '2222': is not a variable trainrun reads; did you mean "
        "TRAINRUN_SSH_PORT? (valid: TRAINRUN_SSH_PORT, TRAINRUN_SSH_IDENTITY_FILE, TRAINRUN_SSH_KNOWN_HOSTS)\n")


@pytest.mark.parametrize("argv,warned", [
    (["mpi", "-np", "64", "python", "t.py"], "64 ranks on this host's 2 cores (32 per core)"),
    (["torch", "--nproc-per-node", "9", "t.py"], "9 ranks on this host's 2 cores (4.5 per core)"),
    (["mpi", "-np", "8", "python", "t.py"], None),
    (["torch", "--nproc-per-node", "4", "--nnodes", "4", "--master-addr", "127.0.0.1", "t.py"], None),
])
def test_heavy_oversubscription_gets_a_warning(argv, warned, capsys, monkeypatch: pytest.MonkeyPatch, machine,
                                               tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    monkeypatch.setattr(cli, "detect_machine", lambda backend: machine(cpu_count=2))
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 2)
    monkeypatch.setattr("trainrun.runner.run_plan", lambda *a, **k: None)
    assert cli.main(argv) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    if warned is None:
        assert warnings == []
    else:
        assert warnings == [f"trainrun: warning: {warned}: each runs a fraction of the time, and collective timeouts "
                            "may fire (valid: at most 8 here, or more hosts)"]
