"""Entry point of Python ranks: `python -m trainrun.rank [-m module | --payload FILE RESULT | script] ARGS`.

It runs torchrun's ranks, Spark tasks' ranks and function payloads; other commands under mpirun and Horovod's
Gloo controller start through the sh entry (trainrun.rank.env) instead. It maps the launcher's variables to
the uniform rank environment and runs the program in a forked child of itself, in this interpreter (no second
Python start). The entry stays as the rank's supervisor:

- it records the rank's start and its end (success included, a signal by name: a rank the kernel's OOM killer
  SIGKILLs is "killed by SIGKILL") in $TRAINRUN_STATUS_DIR, which only a waiting parent can know;
- it forwards the signals it gets to the program's process group;
- it is a child subreaper: what the program leaves behind is reparented to it, and when the program ends it
  ends those leftovers (and anything tagged with its pid), so that a helper holding the rank's stdout never
  keeps the launcher waiting; then it exits with the program's exit code (128 + N for signal N).

The program's process dies with the entry (PR_SET_PDEATHSIG), e.g. when a launcher SIGKILLs it. Imports stay
minimal: this runs once per rank on every launch.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback

from ..program import Program, program_from_rank_args
from .env import VERBOSE, launcher_rank_env, output_shown
from .status import TASK_DIR, exit_code_of, exit_of_wait_status, record_exit, record_start

# Signals the entry passes on to the program instead of acting on them itself.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run_payload(payload_path: str, result_path: str) -> None:
    import cloudpickle

    with open(payload_path, "rb") as f:
        fn, args, kwargs = cloudpickle.load(f)
    result = fn(*args, **kwargs)
    if os.environ.get("RANK") == "0":
        with open(result_path + ".tmp", "wb") as f:
            cloudpickle.dump(result, f)
        os.replace(result_path + ".tmp", result_path)


def run_program(program: Program) -> None:
    if program.kind == "payload":
        run_payload(program.target, program.args[0])
        return
    sys.argv = [program.target, *program.args]
    if program.kind == "module":
        runpy.run_module(program.target, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(program.target))
        runpy.run_path(program.target, run_name="__main__")


def print_user_traceback(exc: BaseException) -> None:
    """The program's traceback as Python would print it for `python script.py`, through sys.excepthook (the
    image's one-line errors, e.g. trainstack_mlflow_tracking's, and the program's own hook): without the frames of
    this entry and runpy in front (a missing script is one line), nor those of trainrun's own code that hides itself
    (`__tracebackhide__`, as IPython and pytest read it: a %%trainrun cell's runner), unless trainrun --verbose."""
    tb = exc.__traceback__
    if not os.environ.get(VERBOSE):
        while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>")
                                  or tb.tb_frame.f_locals.get("__tracebackhide__")):
            tb = tb.tb_next
    # Python's own hook prints the exception's __traceback__ (whatever `tb` it is given), so that is cut too.
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def run_rank(program: Program) -> int:
    """Run the program in this process; its exit code (exceptions are 1, Ctrl-C 130)."""
    if sys.excepthook is sys.__excepthook__:
        # Python's own hook reads source files, not linecache, where a %%trainrun cell's lines are; the traceback
        # module reads both. A hook installed later (the image's MLflow hook, the program's own) wraps this one.
        sys.excepthook = traceback.print_exception
    try:
        run_program(program)
        code = 0
    except SystemExit as exc:
        code = exit_code_of(exc)
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:
        print_user_traceback(exc)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _child(program: Program, entry_pid: int, mask: set) -> None:
    """The forked program: its own process group (signals reach it through the entry once), dies with the entry,
    and ends as the interpreter normally does, atexit handlers included (mpi4py's MPI_Finalize is one)."""
    try:
        os.setpgid(0, 0)
        from ..proctree import PR_SET_PDEATHSIG, prctl

        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != entry_pid:  # the entry died before the death signal was armed
            os._exit(128 + signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    except BaseException:
        os._exit(1)
    raise SystemExit(run_rank(program))


def supervise(program: Program) -> int:
    """Fork the program, forward signals to it, wait for it, end its leftovers, record how it ended."""
    from ..proctree import PR_SET_CHILD_SUBREAPER, RANK_ENTRY, end_rank_leftovers, prctl

    entry_pid, parent = os.getpid(), os.getppid()
    os.environ[RANK_ENTRY] = str(entry_pid)
    record_start(entry_pid)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    sys.stdout.flush()
    sys.stderr.flush()
    # Blocked across the fork, so that a signal arriving meanwhile is forwarded, not lost or fatal to the entry.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    child = os.fork()
    if child == 0:
        _child(program, entry_pid, old_mask)
    try:
        os.setpgid(child, child)
    except OSError:
        pass

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(child, signum)
        except OSError:
            try:
                os.kill(child, signum)
            except OSError:
                pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    status = _wait_for(child)
    code, signal_text = exit_of_wait_status(status)
    end_rank_leftovers(entry_pid)
    record_exit(code, signal_text, entry_pid)
    task_dir = os.environ.get(TASK_DIR)
    if task_dir and os.getppid() != parent:  # the Spark task that would read the record and remove it is gone
        import shutil

        shutil.rmtree(task_dir, ignore_errors=True)
    return code


def _wait_for(child: int) -> int:
    """The wait status of `child`; orphans inherited meanwhile are reaped as they exit."""
    while True:
        pid, status = os.wait()
        if pid == child:
            return status


def main(args: list[str]) -> int:
    os.environ.update(launcher_rank_env(os.environ))
    if not output_shown(os.environ):
        _silence()
    if not args:
        print("usage: python -m trainrun.rank [-m module | --payload FILE RESULT | script] ARGS",
              file=sys.stderr)
        return 2
    return supervise(program_from_rank_args(args))
