"""Ranks on other hosts (trainrun.remote): the ssh options of a plan, the check before a launch (one error
naming the host and the fix, within its bound), the sweep after a failure, and the runner calling both.
No host is reached: ssh is replaced, except for `ssh -G`, which only prints what ssh would use."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from trainrun import arguments, remote
from trainrun.errors import JobFailed, UsageError
from trainrun.plan import Plan
from trainrun.proctree import JOB_ID
from trainrun.remote import Answer, RemoteHosts, SshOptions, diagnose, ssh_options
from trainrun.validate import check_resolves


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_ed25519"
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def known_hosts(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text("[worker-1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample\n")
    return path


def remote_of(hosts=(("worker-1", 1), ("worker-2", 1)), needs="orted", **options) -> RemoteHosts:
    ssh = SshOptions(**{"port": 2222, "connect_timeout": 10.0, **options})
    return remote.remote_hosts("-H", tuple(hosts), ssh, (), "/opt/venv/bin/python", needs)


# --- plans -----------------------------------------------------------------------------------------------

def test_plans_with_a_key_match_golden(plan_for, key, known_hosts, tmp_path, golden) -> None:
    """The launcher container of `invoke nodes.run`: port, key and known hosts from its environment."""
    environ = {"PATH": "/opt/venv/bin:/usr/bin", remote.PORT_ENV: "2222", remote.IDENTITY_ENV: str(key),
               remote.KNOWN_HOSTS_ENV: str(known_hosts)}
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("nodes-worker-1 slots=1\nnodes-worker-2 slots=1\n")
    cases = {
        "from_environment": (["mpi", "-np", "2", "--hostfile", str(hostfile), "python", "train.py"], environ),
        "key_option": (["mpi", "-np", "2", "-H", "worker-1:1,worker-2:1", "-i", str(key), "--", "python",
                        "train.py"], {"PATH": "/opt/venv/bin:/usr/bin"}),
    }
    for name, (argv, env) in cases.items():
        plan = plan_for([*argv[:1], "--dry-run", *argv[1:]], environ=env).to_dict()
        text = json.dumps({"cli": ["trainrun", *argv], "environ": env, "plan": plan}, indent=2) + "\n"
        golden(f"remote/{name}.json", text.replace(str(tmp_path), "$TMP"))


def test_mpirun_gets_one_ssh_argument_without_spaces_inside_options(plan_for, key) -> None:
    plan = plan_for(["mpi", "-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", str(key), "python", "t.py"])
    rsh_args = plan.argv[plan.argv.index("plm_rsh_args") + 1]
    assert rsh_args.split(" ") == plan.remote.options
    assert f"-i {key} -o IdentitiesOnly=yes" in rsh_args and "-p 2222" in rsh_args
    assert plan.argv[plan.argv.index("plm_rsh_no_tree_spawn") + 1] == "1"
    assert ["-x", JOB_ID] == plan.argv[plan.argv.index(JOB_ID) - 1:plan.argv.index(JOB_ID) + 1]
    assert plan.remote.needs == "orted" and plan.remote.hosts == (("a", 1), ("b", 1))


def test_hosts_of_this_machine_need_no_ssh(plan_for) -> None:
    for hosts, local_names in (("localhost:2", ()), ("127.0.0.1:1,localhost:1", ()), ("vm:2", ("vm",))):
        plan = plan_for(["mpi", "-np", "2", "-H", hosts, "python", "t.py"], local_names=local_names)
        assert plan.remote is None and "plm_rsh_args" not in plan.argv and JOB_ID not in plan.argv


def test_ssh_options_are_checked_even_for_a_local_job(plan_for) -> None:
    with pytest.raises(UsageError, match="^--ssh-identity-file = '/no/such/key': is not a readable file"):
        plan_for(["mpi", "-np", "2", "-i", "/no/such/key", "python", "t.py"])


def test_text_plan_shows_the_remote_hosts_and_ssh(plan_for) -> None:
    text = plan_for(["mpi", "-np", "2", "-H", "w1:1,w2:1", "-p", "2222", "python", "t.py"]).to_text()
    assert "remote hosts: w1:1, w2:1 (checked within 20 s before the launch, swept after a failure or a stop)" in text
    assert "ssh: ssh -o BatchMode=yes " in text and " -p 2222 HOST COMMAND" in text


@pytest.mark.parametrize("argv,environ,option,fragment", [
    (["-i", "{missing}"], {}, "--ssh-identity-file", "is not a readable file"),
    ([], {remote.IDENTITY_ENV: "{missing}"}, remote.IDENTITY_ENV, "is not a readable file"),
    ([], {remote.PORT_ENV: "twentytwo"}, remote.PORT_ENV, "a TCP port between 1 and 65535"),
    ([], {remote.PORT_ENV: "70000"}, remote.PORT_ENV, "a TCP port between 1 and 65535"),
    (["--ssh-known-hosts", "{missing}"], {}, "--ssh-known-hosts", "a known_hosts file"),
    (["-i", "{spaced}"], {}, "--ssh-identity-file", "a path without spaces"),
    (["-i", "{open}"], {}, "--ssh-identity-file", "chmod 600"),
])
def test_bad_ssh_settings_name_the_option_and_the_fix(plan_for, tmp_path, argv, environ, option, fragment) -> None:
    spaced = tmp_path / "my key"
    spaced.write_text("k")
    spaced.chmod(0o600)
    open_key = tmp_path / "open_key"
    open_key.write_text("k")
    open_key.chmod(0o644)
    paths = {"{missing}": str(tmp_path / "missing"), "{spaced}": str(spaced), "{open}": str(open_key)}
    argv = [paths.get(word, word) for word in argv]
    environ = {name: paths.get(value, value) for name, value in environ.items()}
    with pytest.raises(UsageError) as err:
        plan_for(["mpi", "-np", "2", "-H", "w1:1,w2:1", *argv, "python", "t.py"], environ=environ)
    assert err.value.option == option and fragment in str(err.value)


def test_mpich_refuses_ssh_options_it_cannot_pass(plan_for) -> None:
    with pytest.raises(UsageError, match="^--ssh-port = 2222: .*MPICH's Hydra takes ssh settings from ~/.ssh/config"):
        plan_for(["mpi", "-np", "2", "-H", "a:1,b:1", "-p", "2222", "python", "t.py"], mpi_flavor="mpich")


def test_connect_timeout_is_bounded() -> None:
    with pytest.raises(UsageError) as err:
        arguments.build_parser().parse_args(["mpi", "-np", "2", "--ssh-connect-timeout", "0", "python", "t.py"])
    assert str(err.value) == "--ssh-connect-timeout = '0': is invalid (valid: seconds from 1 to 300)"


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")
def test_ssh_reads_the_options_and_expands_the_jobs_known_hosts_file(key, tmp_path) -> None:
    """`ssh -G` prints the settings ssh would connect with, without connecting."""
    options = ssh_options(SshOptions(2222, str(key), None, 7.0))
    env = {**os.environ, "TRAINRUN_STATUS_DIR": str(tmp_path)}
    shown = subprocess.run(["ssh", "-G", *options, "worker-1"], env=env, capture_output=True, text=True,
                           timeout=30, check=True).stdout.splitlines()
    for line in ("port 2222", "batchmode yes", "connecttimeout 7", "stricthostkeychecking accept-new",
                 f"userknownhostsfile {tmp_path}/known_hosts", "loglevel ERROR", f"identityfile {key}",
                 "identitiesonly yes", "serveraliveinterval 5", "serveralivecountmax 3"):
        assert line in shown


# --- the check before a launch ---------------------------------------------------------------------------

ANSWERS = {
    "resolve": (255, "ssh: Could not resolve hostname worker-9: Name or service not known", "-H", "does not resolve",
                "a host name or address this machine resolves"),
    "refused": (255, "ssh: connect to host worker-1 port 2222: Connection refused", "-H",
                "refuses connections on port 2222", "trainstack-sshd"),
    "timed out": (255, "ssh: connect to host 10.0.0.9 port 2222: Connection timed out", "-H", "cannot be reached",
                  "check the name, --ssh-port and firewalls"),
    "no route": (255, "ssh: connect to host 10.0.0.9 port 2222: No route to host", "-H", "cannot be reached",
                 "firewalls"),
    "refused key": (255, "trainer@worker-1: Permission denied (publickey).", "-H", "refuses the key /k",
                    "--ssh-identity-file KEY"),
    "host key": (255, "Host key verification failed.", "-H", "presents a host key that /kh does not hold",
                 "invoke nodes.up"),
    "open key": (255, "Permissions 0644 for '/k' are too open.\nThis private key will be ignored.",
                 "--ssh-identity-file", "is refused by ssh", "chmod 600 /k"),
    "bad key": (255, 'Load key "/k": invalid format\ntrainer@w: Permission denied (publickey).',
                "--ssh-identity-file", "cannot be used", "ssh-keygen"),
    "closed": (255, "kex_exchange_identification: Connection closed by remote host", "-H", "closed the connection",
               "too many connections"),
    "other": (255, "something new", "-H", "ssh failed with exit code 255 (something new)", "BatchMode"),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_each_ssh_failure_is_one_line_naming_the_host_and_the_fix(case: str) -> None:
    code, stderr, option, rule, valid = ANSWERS[case]
    problem = diagnose(remote_of(identity_file="/k", known_hosts="/kh"), Answer("worker-1", code, "", stderr))
    assert problem is not None and problem.option == option
    assert rule in problem.rule and valid in problem.valid
    assert "\n" not in str(problem)
    if option == "-H":
        assert str(problem).startswith("-H = 'worker-1': ")


def test_no_answer_and_a_missing_orted_are_named() -> None:
    silent = diagnose(remote_of(), Answer("worker-1", None))
    assert silent.rule == "did not answer ssh within 20 s" and "port 2222" in silent.valid
    no_mpi = diagnose(remote_of(), Answer("worker-1", 0, "trainrun-probe cores=4 needs=-\n"))
    assert no_mpi.rule == "has no orted on PATH for ssh commands" and "trainstack-sshd" in no_mpi.valid
    assert diagnose(remote_of(), Answer("worker-1", 0, "motd\ntrainrun-probe cores=4 needs=/usr/bin/orted\n")) is None
    assert diagnose(remote_of(needs=None), Answer("worker-1", 0, "trainrun-probe cores=4 needs=/bin/true")) is None


def fake_ssh(monkeypatch, answers: dict[str, tuple[int | None, str, str]], seen: list | None = None) -> None:
    def run(argv, env, seconds):
        if seen is not None:
            seen.append((argv, env, seconds))
        host = argv[-2]
        return answers[host]

    monkeypatch.setattr(remote, "_run_ssh", run)
    monkeypatch.setattr(remote, "resolves_here", lambda name, addresses: name == "this-host")


def test_check_asks_every_host_and_names_the_first_failure(monkeypatch) -> None:
    seen: list = []
    fake_ssh(monkeypatch, {"worker-1": (0, "trainrun-probe cores=8 needs=/usr/bin/orted\n", ""),
                           "worker-2": (255, "", "ssh: connect to host worker-2 port 2222: Connection refused"),
                           "worker-3": (None, "", "")}, seen)
    hosts = (("worker-1", 1), ("worker-2", 1), ("worker-3", 1), ("this-host", 1))
    with pytest.raises(UsageError) as err:
        remote.check_hosts(remote_of(hosts), {"TRAINRUN_STATUS_DIR": "/tmp/x"})
    assert str(err.value).startswith("-H = 'worker-2': refuses connections on port 2222 (ssh: connect to host ")
    assert "; also failing: worker-3 (valid: " in str(err.value)
    assert sorted(argv[-2] for argv, _, _ in seen) == ["worker-1", "worker-2", "worker-3"]  # not this host
    argv, env, seconds = seen[0]
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and env["TRAINRUN_STATUS_DIR"] == "/tmp/x"
    assert seconds == 20.0 and "command -v orted" in argv[-1]


def test_check_passes_and_warns_about_more_slots_than_cores(monkeypatch) -> None:
    fake_ssh(monkeypatch, {"worker-1": (0, "trainrun-probe cores=2 needs=/usr/bin/orted\n", ""),
                           "worker-2": (0, "trainrun-probe cores=8 needs=/usr/bin/orted\n", "")})
    warnings: list[str] = []
    remote.check_hosts(remote_of((("worker-1", 4), ("worker-2", 4))), {}, warnings.append)
    assert warnings == ["trainrun: worker-1 has 2 cores for its 4 slots; its ranks share cores"]


def test_a_silent_host_is_given_up_after_the_bound() -> None:
    started = time.monotonic()
    assert remote._run_ssh([sys.executable, "-c", "import time; time.sleep(30)"], os.environ, 0.5)[0] is None
    assert time.monotonic() - started < 5


def test_hosts_are_asked_at_once_within_one_bound(monkeypatch) -> None:
    def slow(argv, env, seconds):
        time.sleep(0.5)
        return 0, "trainrun-probe cores=4 needs=/usr/bin/orted\n", ""

    monkeypatch.setattr(remote, "_run_ssh", slow)
    monkeypatch.setattr(remote, "resolves_here", lambda name, addresses: False)
    started = time.monotonic()
    remote.check_hosts(remote_of(tuple((f"w{i}", 1) for i in range(8))), {}, lambda line: None)
    assert time.monotonic() - started < 2.5


def test_a_host_whose_name_lookup_hangs_is_given_up_within_the_same_bound(monkeypatch) -> None:
    def hang(name, addresses):
        time.sleep(30)

    monkeypatch.setattr(remote, "resolves_here", hang)
    monkeypatch.setattr(remote, "CHECK_MARGIN", 0.0)
    started = time.monotonic()
    with pytest.raises(UsageError, match="did not answer ssh within 1 s; also failing: w1, w2"):
        remote.check_hosts(remote_of((("w0", 1), ("w1", 1), ("w2", 1)), connect_timeout=1.0), {})
    assert time.monotonic() - started < 5


def test_this_machine_under_another_name_is_not_asked() -> None:
    assert remote.resolves_here("localhost", remote.local_addresses() | {"127.0.0.1", "::1"})
    assert not remote.resolves_here("no-such-host.invalid", remote.local_addresses())


# --- the sweep after a failure ---------------------------------------------------------------------------

def test_sweep_runs_proctree_on_every_host_and_warns_when_it_cannot(monkeypatch) -> None:
    seen: list = []
    fake_ssh(monkeypatch, {"worker-1": (0, "2\n", ""), "worker-2": (255, "", "ssh: connect to host worker-2 "
                                                                              "port 2222: Connection refused")}, seen)
    warnings: list[str] = []
    job = uuid.uuid4().hex
    remote.sweep(remote_of(), {JOB_ID: job}, warnings.append)
    assert {argv[-1] for argv, _, _ in seen} == {
        f"/opt/venv/bin/python -m trainrun.proctree {job} 5 2>/dev/null || python3 -m trainrun.proctree {job} 5"}
    assert warnings == ["trainrun: could not check worker-2 for processes left of the job (ssh: connect to host "
                        "worker-2 port 2222: Connection refused)"]
    seen.clear()
    remote.sweep(remote_of(), {JOB_ID: "x; rm -rf /"}, warnings.append)
    assert seen == []


def test_proctree_ends_the_jobs_processes_by_its_id() -> None:
    job = uuid.uuid4().hex
    env = {**os.environ, JOB_ID: job}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        done = subprocess.run([sys.executable, "-m", "trainrun.proctree", job, "2"], capture_output=True, text=True,
                              timeout=30, env={k: v for k, v in os.environ.items() if k != JOB_ID})
        assert done.returncode == 0 and done.stdout.strip() == "1"
        assert child.wait(timeout=10) != 0 and other.poll() is None
    finally:
        for proc in (child, other):
            proc.kill()
            proc.wait()


# --- the runner ------------------------------------------------------------------------------------------

def test_runner_checks_before_the_launch_and_sweeps_after_a_failure(monkeypatch, tmp_path) -> None:
    calls: list[str] = []
    marker = tmp_path / "started"
    monkeypatch.setattr(remote, "check_hosts", lambda plan_remote, env: calls.append(f"check {env[JOB_ID]}"))
    monkeypatch.setattr(remote, "sweep", lambda plan_remote, env: calls.append(f"sweep {env[JOB_ID]}"))
    from trainrun.runner import run_plan

    plan = Plan(backend="mpi (openmpi)", argv=["sh", "-c", f"touch {marker}; exit 3"], remote=remote_of())
    with pytest.raises(JobFailed):
        run_plan(plan)
    assert marker.exists() and [call.split()[0] for call in calls] == ["check", "sweep"]
    assert calls[0].split()[1] == calls[1].split()[1]
    calls.clear()
    run_plan(Plan(backend="mpi (openmpi)", argv=["true"], remote=remote_of()))
    assert [call.split()[0] for call in calls] == ["check"]


def test_a_failed_check_starts_nothing(monkeypatch, tmp_path) -> None:
    marker = tmp_path / "started"

    def refuse(plan_remote, env):
        raise UsageError("-H", "worker-1", valid="a host", rule="does not resolve")

    monkeypatch.setattr(remote, "check_hosts", refuse)
    from trainrun.runner import run_plan

    with pytest.raises(UsageError, match="does not resolve"):
        run_plan(Plan(backend="mpi (openmpi)", argv=["touch", str(marker)], remote=remote_of()))
    assert not marker.exists()


# --- torch across nodes ----------------------------------------------------------------------------------

def test_node_zeros_name_must_resolve_before_torchrun_starts(plan_for, monkeypatch) -> None:
    monkeypatch.setattr("trainrun.validate._resolves", lambda host: host == "node0")
    monkeypatch.setattr("trainrun.validate.MASTER_RESOLVE_SECONDS", 0.2)
    argv = ["torch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1", "--master-addr", "nod0", "t.py"]
    plan_for(["torch", "--dry-run", *argv[1:]])  # offline: nothing asked
    with pytest.raises(UsageError, match=r"^--master-addr = 'nod0': nod0 does not resolve to an address within"):
        plan_for(argv)
    plan_for([*argv[:-2], "node0", "t.py"])
    with pytest.raises(UsageError, match=r"^--rdzv-endpoint = 'nod0:29400': nod0 does not resolve"):
        plan_for(["torch", "--nnodes", "2", "--rdzv-endpoint", "nod0:29400", "t.py"])


def test_a_name_that_appears_late_is_waited_for_within_the_bound() -> None:
    started = time.monotonic()
    answers = iter([False, False, True])
    check_resolves("--master-addr", "node0", "node0", seconds=5, resolve=lambda host: next(answers))
    assert 0.9 < time.monotonic() - started < 3
    started = time.monotonic()
    with pytest.raises(UsageError, match="within 1 s"):
        check_resolves("--master-addr", "node0", "node0", seconds=1, resolve=lambda host: False)
    assert time.monotonic() - started < 3
