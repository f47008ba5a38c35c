"""Option checks shared by every backend, host lists in mpirun's `host:slots,...` form included; each
failure names the option, the value and what is valid."""
from __future__ import annotations

import math
import queue
import re
import socket
import threading
import time
from dataclasses import dataclass

from .errors import UsageError

LOCAL_NAMES = ("localhost", "127.0.0.1")
# The most ranks one count may ask for (-np, --num-processes, --nproc-per-node, a host's slots). Not this host's
# cores, since oversubscribing is legal; a bound so that a typo (-np 1000000) is refused before a launch tries
# to start that many processes and exhausts the host's process and file limits.
MAX_RANKS = 4096
# How long a spark:// master has to accept a TCP connection before trainrun spark starts anything.
MASTER_CONNECT_SECONDS = 3.0
# How long node 0's name (trainrun torch --master-addr, --rdzv-endpoint) has to resolve: torchrun itself would
# retry an unknown name for its whole rendezvous timeout (10 minutes).
MASTER_RESOLVE_SECONDS = 10.0
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
# A host of -H, --hostfile: a name or an IPv4 address (docker's container names may hold `_`).
_HOST_OF_SLOTS = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_STANDALONE_MASTER = re.compile(rf"spark://({_HOST}:[0-9]+(?:,{_HOST}:[0-9]+)*)")
# The master URLs Spark accepts besides spark:// (SparkContext.createTaskScheduler, SparkSubmit).
_OTHER_MASTERS = re.compile(r"local(?:\[(?:[1-9][0-9]*|\*)(?:,[0-9]+)?\])?"
                            r"|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]"
                            rf"|yarn|k8s://(?:https?://)?{_HOST}(?::[0-9]+)?(?:/[A-Za-z0-9._~/-]*)?")
SPARK_MASTERS = ("local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], "
                 "yarn or k8s://https://HOST:PORT")


def positive_int(option: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(option, value, valid="an integer >= 1")
    return value


def rank_count(option: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RANKS:
        raise UsageError(option, value, valid=f"an integer from 1 to {MAX_RANKS}, trainrun's MAX_RANKS",
                         rule="is not a number of ranks trainrun starts")
    return value


def timeout(option: str, value: str | float) -> float:
    """Seconds, from the command line's text or the API's number; NaN and infinity would never fire."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(option, value, valid="a finite number of seconds > 0, e.g. 3600")
    return seconds


def port(option: str, value: int) -> int:
    if not isinstance(value, int) or not 1 <= value <= 65535:
        raise UsageError(option, value, valid="a TCP port between 1 and 65535")
    return value


def rank_list(option: str, value: str, num_processes: int) -> str:
    """`0` or `0,2`: ranks of a job of `num_processes`, normalized (sorted, no repeats)."""
    parts = value.split(",")
    if not all(part.strip().isdigit() and int(part) < num_processes for part in parts):
        raise UsageError(option, value, valid=f"rank numbers below {num_processes}, comma-separated, e.g. 0 or 0,1")
    return ",".join(str(rank) for rank in sorted({int(part) for part in parts}))


def host_port(option: str, value: str) -> tuple[str, int]:
    host, sep, number = value.rpartition(":")
    if not sep or not host or not number.isdigit():
        raise UsageError(option, value, valid="HOST:PORT, e.g. node0:29400")
    return host, port(option, int(number))


def key_value(option: str, value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise UsageError(option, value, valid="KEY=VALUE")
    return key, val


def spark_conf_item(option: str, value: str) -> tuple[str, str]:
    """`spark.KEY=VALUE`: Spark ignores, with a log line only, conf keys outside `spark.`."""
    key, val = key_value(option, value)
    if not key.startswith("spark.") or key == "spark.":
        raise UsageError(option, value, "is not Spark conf (Spark reads only keys that start with `spark.`)",
                         valid="spark.KEY=VALUE, e.g. spark.executor.memory=4g")
    return key, val


@dataclass(frozen=True)
class HostSlots:
    name: str
    slots: int

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


def parse_hosts(option: str, value: str) -> tuple[HostSlots, ...]:
    valid = f"host:slots[,host:slots...] with 1 to {MAX_RANKS} slots, e.g. node0:4,node1:4"
    hosts = []
    for entry in value.split(","):
        name, sep, slots = entry.strip().partition(":")
        if name and not _HOST_OF_SLOTS.fullmatch(name):
            raise UsageError(option, value, f"{name!r} is not a host name", valid=valid)
        if not name or (sep and not slots.isdigit()) or (sep and not 1 <= int(slots) <= MAX_RANKS):
            raise UsageError(option, value, valid=valid)
        hosts.append(HostSlots(name, int(slots) if sep else 1))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise UsageError(option, value, valid="each host listed once")
    return tuple(hosts)


def parse_hostfile(option: str, path: str) -> tuple[HostSlots, ...]:
    """horovodrun's and Open MPI's hostfile: one `HOST slots=N` (or `HOST`) a line; # starts a comment."""
    try:
        with open(path) as f:
            lines = [line.split("#", 1)[0].split() for line in f]
    except OSError as err:
        raise UsageError(option, path, valid=f"a readable hostfile ({err.strerror})") from None
    entries = []
    for words in filter(None, lines):
        slots = [word.partition("=")[2] for word in words[1:] if word.startswith("slots=")]
        if len(words) > 2 or (len(words) == 2 and not slots):
            raise UsageError(option, " ".join(words), valid="lines of HOST or HOST slots=N")
        entries.append(f"{words[0]}:{slots[0]}" if slots else words[0])
    if not entries:
        raise UsageError(option, path, valid="a hostfile that lists at least one host")
    return parse_hosts(option, ",".join(entries))


def check_capacity(option: str, num_processes: int, hosts: tuple[HostSlots, ...]) -> None:
    total = sum(h.slots for h in hosts)
    if num_processes > total:
        raise UsageError(option, num_processes, valid=f"at most {total}, the slots in -H {','.join(map(str, hosts))}")


def spark_master(option: str, url: str) -> list[tuple[str, int]]:
    """A master URL Spark accepts; returns the HOST:PORT of each spark:// (standalone) master, none for others."""
    standalone = _STANDALONE_MASTER.fullmatch(url)
    if standalone:
        masters = [host_port(option, entry) for entry in standalone.group(1).split(",")]
        return [(host.strip("[]"), number) for host, number in masters]
    if not _OTHER_MASTERS.fullmatch(url):
        raise UsageError(option, url, valid=SPARK_MASTERS)
    return []


def check_reachable(option: str, url: str, masters: list[tuple[str, int]],
                    seconds: float = MASTER_CONNECT_SECONDS) -> None:
    """Refuses a standalone master URL of which no master accepts a TCP connection within `seconds` in all (one
    suffices: the others of a list are standby masters)."""
    if not masters:
        return
    answers: queue.Queue[bool] = queue.Queue()
    for host, number in masters:
        # Threads, so that a slow name lookup (which has no timeout of its own) stays within the bound too.
        threading.Thread(target=lambda address=(host, number): answers.put(_connects(address, seconds)),
                         daemon=True).start()
    end = time.monotonic() + seconds
    for _ in masters:
        try:
            if answers.get(timeout=max(0.0, end - time.monotonic())):
                return
        except queue.Empty:
            break
    where = ", ".join(f"{host}:{number}" for host, number in masters)
    raise UsageError(option, url, valid="a running Spark master: start it (the local pool: invoke pool.up), or correct "
                     "HOST:PORT and check that no firewall is in between",
                     rule=f"{where} did not accept a TCP connection within {seconds:g} s")


def _connects(address: tuple[str, int], seconds: float) -> bool:
    try:
        with socket.create_connection(address, timeout=seconds):
            return True
    except OSError:
        return False


def check_resolves(option: str, value: str, host: str, seconds: float | None = None, resolve=None) -> None:
    """Refuses a host name that does not resolve within `seconds` (MASTER_RESOLVE_SECONDS; asked again every
    half second, as a container or pod just started may be missing from DNS for a moment)."""
    seconds = MASTER_RESOLVE_SECONDS if seconds is None else seconds
    resolve = resolve or _resolves
    answers: queue.Queue[bool] = queue.Queue()
    deadline = time.monotonic() + seconds

    def ask() -> None:
        while True:
            if resolve(host):
                answers.put(True)
                return
            if time.monotonic() + 0.5 >= deadline:
                answers.put(False)
                return
            time.sleep(0.5)

    # A thread, so that a slow name lookup (which has no timeout of its own) stays within the bound too.
    threading.Thread(target=ask, daemon=True).start()
    try:
        if answers.get(timeout=seconds + 1):
            return
    except queue.Empty:
        pass
    raise UsageError(option, value, valid="the host name or address of node 0, as every node resolves it (containers "
                     "on one docker network: the container's name)",
                     rule=f"{host} does not resolve to an address within {seconds:g} s")


def _resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host.strip("[]"), None))
    except (OSError, UnicodeError):
        return False
