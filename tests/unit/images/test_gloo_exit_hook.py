"""The image's site hook for Gloo's exit abort (images/site-packages/trainstack_gloo_exit.py): at exit it finds the
process's Gloo worker threads by name in /proc and waits, with the GIL released, until they have all slept a few
polls in a row. The abort itself, and the hook's effect on it, are measured in the image by
benchmarks/gloo_exit.py: the abort needs a loaded machine and comes in some jobs, not in a test's few."""
import ctypes
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from file_modules import load_file_module
from polling import wait_until

SITE_PACKAGES = Path(__file__).resolve().parents[3] / "images" / "site-packages"
PR_SET_NAME = 15


@pytest.fixture(scope="module")
def hook():
    return load_file_module(SITE_PACKAGES / "trainstack_gloo_exit.py")


def test_it_reads_the_state_of_the_threads_named_as_gloo_names_its_workers(hook):
    named, stop = threading.Barrier(3), threading.Event()

    def worker():
        ctypes.CDLL(None).prctl(PR_SET_NAME, hook.WORKER_THREAD_NAME.encode())
        named.wait()
        stop.wait()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        named.wait(5)
        assert wait_until(lambda: hook.gloo_worker_states() == ["S", "S"], 10)  # both asleep on `stop`
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert wait_until(lambda: hook.gloo_worker_states() == [], 10)  # the threads have left the kernel's list too


def test_a_thread_name_with_spaces_and_parentheses_is_read_whole(hook, tmp_path):
    for tid, name, state in (("7", "pt_gloo_runloop", "R"), ("8", "a (b) c", "S"), ("9", "pt_gloo_runloop", "S")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "stat").write_text(f"{tid} ({name}) {state} 1 1 1 0 -1\n")
    (tmp_path / "10").mkdir()  # a thread that ended before its stat was read
    assert sorted(hook.gloo_worker_states(str(tmp_path))) == ["R", "S"]


def test_it_waits_while_a_worker_runs_and_stops_once_all_have_slept_enough_polls(hook):
    polls = iter([["R", "S"], ["S", "S"], ["R", "S"], *[["S", "S"]] * hook.SETTLED_POLLS, ["R", "R"]])
    seen = []
    hook.wait_for_gloo_workers(lambda: seen.append(next(polls)) or seen[-1])
    assert len(seen) == 3 + hook.SETTLED_POLLS


def test_without_gloo_workers_it_returns_without_sleeping(hook, monkeypatch):
    sleeps = []
    monkeypatch.setattr(hook.time, "sleep", sleeps.append)
    hook.wait_for_gloo_workers(lambda: [])
    assert sleeps == []


def test_a_worker_that_never_sleeps_delays_the_exit_at_most_max_wait(hook, monkeypatch):
    monkeypatch.setattr(hook, "MAX_WAIT", 0.05)
    assert 0.05 <= hook.wait_for_gloo_workers(lambda: ["R"]) < 1.0


@pytest.mark.parametrize("switch, registered", [(None, 1), ("0", 0)])
def test_python_starting_with_the_hook_registers_its_exit_wait_unless_switched_off(switch, registered):
    probe = "import atexit, site, sys\nsite.addsitedir(sys.argv[1])\nprint(atexit._ncallbacks())"
    env = {} if switch is None else {"TRAINSTACK_GLOO_EXIT_WAIT": switch}
    # -I: no site of this machine's, so the hook's is the only exit function registered
    output = subprocess.run([sys.executable, "-I", "-c", probe, str(SITE_PACKAGES)], env=env, capture_output=True,
                            text=True, check=True).stdout
    assert int(output) == registered
