"""Ranks on other hosts, reached over ssh: the ssh options every connection of a job uses (mpirun's
plm_rsh_args, horovodrun's, the checks before a launch and the sweep after one), the check that each host
answers and takes the key before anything starts, and the sweep that ends a failed or stopped job's
processes on every host.

One ssh setup for all of them:

- `BatchMode=yes`: a missing or refused key fails at once instead of asking for a password or passphrase
  (an ssh-agent still works: its keys are offered, BatchMode only forbids prompts);
- `ConnectTimeout`, and keepalives (`ServerAliveInterval` x `ServerAliveCountMax`), so that an ssh session
  to a host that stops answering (the check, a daemon's start, the sweep) ends within seconds instead of
  TCP's minutes. Open MPI's daemons detach from ssh once started (no tree spawn makes them --daemonize);
  during the job, mpirun and its daemons watch each other over their own TCP connections;
- host keys: with `--ssh-known-hosts FILE` only the keys in FILE are accepted (`StrictHostKeyChecking=yes`);
  without it a host's key is accepted the first time the job meets it (`accept-new`) into a known-hosts
  file of the job's own, `${TRAINRUN_STATUS_DIR}/known_hosts`, which ssh expands from the environment the
  runner gives it (OpenSSH >= 8.4) and which goes with the job. Keys of hosts from an earlier job (workers
  make new host keys whenever they start) never make a later job fail, and every connection of one job
  must meet the same key;
- `LogLevel=ERROR`, so accept-new's "Permanently added" lines stay out of the job's output;
- `-p PORT` and `-i KEY -o IdentitiesOnly=yes` when given.

Open MPI splits plm_rsh_args at spaces, so no option may hold one (paths are checked).
"""
from __future__ import annotations

import math
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from .errors import UsageError
from .image_contract import SSH_KEYS_DIR, SSHD_COMMAND, SSHD_PORT
from .proctree import JOB_ID
from .validate import LOCAL_NAMES, port

# Defaults for --ssh-port, --ssh-identity-file and --ssh-known-hosts (a launcher container sets them once;
# `invoke nodes.run` does).
PORT_ENV = "TRAINRUN_SSH_PORT"
IDENTITY_ENV = "TRAINRUN_SSH_IDENTITY_FILE"
KNOWN_HOSTS_ENV = "TRAINRUN_SSH_KNOWN_HOSTS"
CONNECT_TIMEOUT = 10.0
KEEPALIVE_SECONDS = 5
KEEPALIVE_COUNT = 3
# The job's own known-hosts file: in the status directory the runner makes for every job (ssh expands it).
JOB_KNOWN_HOSTS = "${TRAINRUN_STATUS_DIR}/known_hosts"
# The check before a launch may take this much longer than ssh's own connect timeout (login, the command).
CHECK_MARGIN = 10.0
# The sweep after a failed or stopped job: ssh's connect timeout, plus the remote end's grace, plus this.
SWEEP_GRACE = 5.0
SWEEP_MARGIN = 5.0
# What the check runs on every host: its cores, and where the program the launcher needs there is.
PROBE = ('printf "trainrun-probe cores=%s needs=%s\\n" "$(nproc 2>/dev/null || echo 0)" '
         '"$(command -v {needs} 2>/dev/null || echo -)"')
_PROBE_LINE = re.compile(r"trainrun-probe cores=(\d+) needs=(\S+)")
TRAINSTACK_AUTHORIZED_KEYS = f"{SSH_KEYS_DIR}/authorized_keys"


@dataclass(frozen=True)
class SshOptions:
    """What the command line (or the API) says about ssh; None takes the TRAINRUN_SSH_* variable, then ssh's
    own default (port 22, ~/.ssh/id_*, an agent)."""

    port: int | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    connect_timeout: float | None = None

    def given(self) -> bool:
        return any(value is not None for value in (self.port, self.identity_file, self.known_hosts))


@dataclass(frozen=True)
class RemoteHosts:
    """The hosts of a plan that are not this one, and how to reach them: part of the Plan, so --dry-run
    shows it; the runner checks them before the launch and sweeps them after a failure."""

    option: str  # -H or --hostfile, named in errors
    hosts: tuple[tuple[str, int], ...]  # (name, slots) of each remote host
    ssh: tuple[str, ...]  # ssh and its options, the host and the command follow
    port: int | None
    identity_file: str | None
    known_hosts: str | None
    connect_timeout: float
    python: str  # the Python that runs `-m trainrun.proctree` there (the same image: the same path)
    needs: str | None = None  # a program the hosts must have on a non-interactive ssh login's PATH

    def to_dict(self) -> dict:
        return {"hosts": [f"{name}:{slots}" for name, slots in self.hosts], "ssh": list(self.ssh),
                "needs": self.needs, "checked_within_seconds": self.check_seconds}

    @property
    def options(self) -> list[str]:
        return list(self.ssh[1:])

    @property
    def check_seconds(self) -> float:
        return self.connect_timeout + CHECK_MARGIN


def resolve_options(ssh: SshOptions, environ: Mapping[str, str]) -> SshOptions:
    """The options given, else their TRAINRUN_SSH_* variables; each checked (a key must be readable)."""
    number = ssh.port
    if number is not None:
        port("--ssh-port", number)
    elif environ.get(PORT_ENV):
        text = environ[PORT_ENV]
        number = port(PORT_ENV, int(text)) if text.isdigit() else port(PORT_ENV, text)
    identity = _path("--ssh-identity-file", ssh.identity_file, IDENTITY_ENV, environ, key=True)
    known_hosts = _path("--ssh-known-hosts", ssh.known_hosts, KNOWN_HOSTS_ENV, environ, key=False)
    timeout = CONNECT_TIMEOUT if ssh.connect_timeout is None else ssh.connect_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 1 <= timeout <= 300:
        raise UsageError("--ssh-connect-timeout", timeout, valid="seconds from 1 to 300")
    return SshOptions(number, identity, known_hosts, float(timeout))


def _path(option: str, value: str | None, variable: str, environ: Mapping[str, str], key: bool) -> str | None:
    if value is None and environ.get(variable):
        option, value = variable, environ[variable]
    if value is None:
        return None
    value = os.path.expanduser(value)
    what = "a private key file whose public half the hosts authorize" if key else "a known_hosts file"
    if any(ch.isspace() for ch in value):
        raise UsageError(option, value, valid=f"{what}, at a path without spaces (Open MPI splits its ssh arguments "
                                              "at spaces)")
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        hint = f"; invoke nodes.run's launcher has {SSH_KEYS_DIR}/{'id_ed25519' if key else 'known_hosts'}"
        raise UsageError(option, value, valid=what + hint, rule="is not a readable file")
    if key:
        mode = os.stat(value)
        if mode.st_uid == os.getuid() and mode.st_mode & 0o077:
            raise UsageError(option, value, valid=f"a key only its owner reads: chmod 600 {shlex.quote(value)}",
                             rule=f"is readable by others (mode {mode.st_mode & 0o777:o}), which ssh refuses")
    return value


def ssh_options(ssh: SshOptions) -> list[str]:
    """ssh's options for every connection of a job (module docstring); `ssh` is resolved."""
    timeout = math.ceil(ssh.connect_timeout or CONNECT_TIMEOUT)
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout}",
               "-o", f"ServerAliveInterval={KEEPALIVE_SECONDS}", "-o", f"ServerAliveCountMax={KEEPALIVE_COUNT}"]
    if ssh.known_hosts:
        options += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={ssh.known_hosts}"]
    else:
        options += ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={JOB_KNOWN_HOSTS}"]
    options += ["-o", "LogLevel=ERROR"]
    if ssh.port is not None:
        options += ["-p", str(ssh.port)]
    if ssh.identity_file:
        options += ["-i", ssh.identity_file, "-o", "IdentitiesOnly=yes"]
    return options


def is_local(name: str, local_names: tuple[str, ...]) -> bool:
    return name in LOCAL_NAMES or name in local_names


def remote_hosts(option: str, hosts: tuple[tuple[str, int], ...], ssh: SshOptions, local_names: tuple[str, ...],
                 python: str, needs: str | None) -> RemoteHosts | None:
    """The hosts that are not this machine, with the resolved ssh setup; None when every host is local."""
    remote = tuple((name, slots) for name, slots in hosts if not is_local(name, local_names))
    if not remote:
        return None
    return RemoteHosts(option, remote, ("ssh", *ssh_options(ssh)), ssh.port, ssh.identity_file, ssh.known_hosts,
                       ssh.connect_timeout or CONNECT_TIMEOUT, python, needs)


# --- at run time -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    host: str
    returncode: int | None  # None: no answer within the bound
    stdout: str = ""
    stderr: str = ""


def _run_ssh(argv: list[str], env: Mapping[str, str], seconds: float) -> tuple[int | None, str, str]:
    try:
        done = subprocess.run(argv, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=seconds)
    except subprocess.TimeoutExpired as expired:
        return None, _text(expired.stdout), _text(expired.stderr)
    except OSError as err:
        return 255, "", f"ssh: {err.strerror}"
    return done.returncode, done.stdout, done.stderr


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _on_every_host(names: list[str], ask, seconds: float) -> list[Answer]:
    """ask(name) -> Answer for every host at once, each within `seconds` (ssh is killed after)."""
    answers: dict[str, Answer] = {}
    threads = [threading.Thread(target=lambda name=name: answers.__setitem__(name, ask(name)), daemon=True)
               for name in names]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + seconds + 2  # one bound for all: a name lookup has no timeout of its own
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [answers.get(name, Answer(name, None)) for name in names]


def local_addresses() -> set[str]:
    try:
        import psutil
    except ImportError:
        return {"127.0.0.1", "::1"}
    return {address.address.split("%")[0] for addresses in psutil.net_if_addrs().values() for address in addresses}


def resolves_here(name: str, addresses: set[str]) -> bool:
    """Whether `name` is this machine under another name (as Open MPI decides: one of its addresses)."""
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(info[4][0] in addresses for info in infos)


def check_hosts(remote: RemoteHosts, env: Mapping[str, str], warn=None) -> None:
    """Before anything starts: every remote host answers ssh within the bound, takes the key and has what the
    launch needs there. Raises UsageError naming the first host that does not, and the fix. A name that is
    this machine's own address (Open MPI starts its ranks without ssh) is not asked."""
    warn = warn or (lambda line: print(line, file=sys.stderr))
    addresses = local_addresses()
    command = PROBE.format(needs=remote.needs or "true")

    def ask(name: str) -> Answer:
        if resolves_here(name, addresses):
            return Answer(name, 0, f"trainrun-probe cores=0 needs={remote.needs or 'true'}")
        return Answer(name, *_run_ssh([*remote.ssh, name, command], env, remote.check_seconds))

    answers = _on_every_host([name for name, _ in remote.hosts], ask, remote.check_seconds)
    problems = [problem for problem in (diagnose(remote, answer) for answer in answers) if problem]
    if problems:
        first = problems[0]
        if len(problems) > 1:
            others = ", ".join(str(problem.value) for problem in problems[1:])
            raise UsageError(first.option, first.value, valid=first.valid, rule=f"{first.rule}; also failing: {others}")
        raise first
    slots = dict(remote.hosts)
    for answer in answers:
        cores = _probe(answer)[0]
        if cores and slots[answer.host] > cores:
            warn(f"trainrun: {answer.host} has {cores} cores for its {slots[answer.host]} slots; "
                 "its ranks share cores")


def _probe(answer: Answer) -> tuple[int, str | None]:
    found = _PROBE_LINE.search(answer.stdout)
    return (int(found.group(1)), found.group(2)) if found else (0, None)


def diagnose(remote: RemoteHosts, answer: Answer) -> UsageError | None:
    """What failed reaching a host, as one error naming the host and the fix; None when it answered."""
    host, option = answer.host, remote.option
    where = f"port {remote.port}" if remote.port else "ssh's port (22 unless ~/.ssh/config says otherwise)"
    said = _last_line(answer.stderr)
    if answer.returncode is None:
        return UsageError(option, host, valid=f"a host up and reachable from here on {where}: check the name, "
                          "--ssh-port and firewalls", rule=f"did not answer ssh within {remote.check_seconds:g} s")
    if answer.returncode == 0:
        cores, found = _probe(answer)
        if found is None:
            return UsageError(option, host, valid="a host whose login shell runs commands (ssh HOST true)",
                              rule=f"did not run the check command over ssh (it printed: {said or 'nothing'})")
        if remote.needs and found == "-":
            return UsageError(option, host, valid=f"a host with {remote.needs} on the PATH of a non-interactive ssh "
                              "login: install Open MPI there (openmpi-bin), or run the trainstack image's "
                              f"`{SSHD_COMMAND}`, which gives ssh sessions the image's PATH",
                              rule=f"has no {remote.needs} on PATH for ssh commands")
        return None
    lowered = answer.stderr.lower()
    if "could not resolve hostname" in lowered or "name or service not known" in lowered:
        return UsageError(option, host, valid="a host name or address this machine resolves (the workers of "
                          "`invoke nodes.up`: `invoke nodes.status` lists them)", rule=f"does not resolve ({said})")
    if "connection refused" in lowered:
        return UsageError(option, host, valid=f"a host running sshd on {where}: trainstack images run "
                          f"`{SSHD_COMMAND}` (port {SSHD_PORT}: --ssh-port {SSHD_PORT}), or give --ssh-port",
                          rule=f"refuses connections on {where} ({said})")
    if any(text in lowered for text in ("timed out", "no route to host", "network is unreachable")):
        return UsageError(option, host, valid=f"a host up and reachable from here on {where}: check the name, "
                          "--ssh-port and firewalls", rule=f"cannot be reached ({said})")
    if "host key verification failed" in lowered or "host key for" in lowered:
        return UsageError(option, host, valid=f"the host's current key in {remote.known_hosts} (`invoke nodes.up` "
                          "writes it for its workers), or no --ssh-known-hosts to accept a new host's key for the "
                          "job", rule=f"presents a host key that {remote.known_hosts or 'known_hosts'} does not hold")
    if "too open" in lowered or "bad permissions" in lowered:
        key = remote.identity_file or "the key"
        return UsageError("--ssh-identity-file", key, valid=f"a key only its owner reads: chmod 600 {key}",
                          rule=f"is refused by ssh ({said})")
    if "load key" in lowered or "invalid format" in lowered or "no such identity" in lowered:
        key = remote.identity_file or "the key"
        return UsageError("--ssh-identity-file", key, valid="an unencrypted OpenSSH private key (ssh-keygen -t ed25519 "
                          "-N '' -f KEY), or an ssh-agent holding the key", rule=f"cannot be used ({said})")
    if "permission denied" in lowered:
        key = f"the key {remote.identity_file}" if remote.identity_file else "ssh's default keys and agent"
        return UsageError(option, host, valid="a key whose public half the host authorizes: --ssh-identity-file KEY "
                          f"(or ${IDENTITY_ENV}); `{SSHD_COMMAND}` authorizes the keys in "
                          f"{TRAINSTACK_AUTHORIZED_KEYS} or ~/.ssh/authorized_keys",
                          rule=f"refuses {key} ({said})")
    if "connection closed" in lowered or "connection reset" in lowered or "kex_exchange" in lowered:
        return UsageError(option, host, valid="an sshd that accepts this client (see its log: a wrong port, "
                          "or too many connections at once)", rule=f"closed the connection before login ({said})")
    return UsageError(option, host, valid="a host this machine logs into with ssh (BatchMode, no password)",
                      rule=f"ssh failed with exit code {answer.returncode} ({said or 'no message'})")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def sweep_command(python: str, job_id: str, grace: float = SWEEP_GRACE) -> str:
    """Ends every process of the job on a host: trainrun.proctree finds them by the job id in their
    environment (mpirun forwards it with -x). The image's Python first, then python3 for other hosts."""
    module = f"-m trainrun.proctree {job_id} {grace:g}"
    return f"{shlex.quote(python)} {module} 2>/dev/null || python3 {module}"


def sweep(remote: RemoteHosts, env: Mapping[str, str], warn=None) -> None:
    """After a failed or stopped job: end what is left of it on every remote host, within a bound."""
    warn = warn or (lambda line: print(line, file=sys.stderr))
    job_id = env.get(JOB_ID, "")
    if not re.fullmatch(r"[0-9a-f]{8,64}", job_id):
        return
    command = sweep_command(remote.python, job_id)
    seconds = remote.connect_timeout + SWEEP_GRACE + SWEEP_MARGIN
    addresses = local_addresses()

    def ask(name: str) -> Answer:
        if resolves_here(name, addresses):  # this machine: the runner has ended the job's processes here
            return Answer(name, 0)
        return Answer(name, *_run_ssh([*remote.ssh, name, command], env, seconds))

    for answer in _on_every_host([name for name, _ in remote.hosts], ask, seconds):
        if answer.returncode != 0:
            what = "no answer" if answer.returncode is None else _last_line(answer.stderr) or \
                f"exit code {answer.returncode}"
            warn(f"trainrun: could not check {answer.host} for processes left of the job ({what})")
