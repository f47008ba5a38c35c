"""Entry point of Python ranks: `python -m trainrun.rank [-m module | --payload FILE RESULT | script] ARGS`.

It runs torchrun's ranks and function payloads; other commands under mpirun and Horovod's Gloo
controller start through the sh entry (trainrun.rank.env) instead. It maps the launcher's variables to the uniform rank
environment, runs the program in this interpreter, and on failure leaves `rank-N.json` in
$TRAINRUN_STATUS_DIR so the launcher can name the rank and its exit code. Imports stay minimal:
this runs once per rank on every launch.
"""
from __future__ import annotations

import os
import runpy
import sys

from .env import launcher_rank_env, output_shown
from .status import exit_code_of, record_failure


def run_payload(payload_path: str, result_path: str) -> None:
    import cloudpickle

    with open(payload_path, "rb") as f:
        fn, args, kwargs = cloudpickle.load(f)
    result = fn(*args, **kwargs)
    if os.environ.get("RANK") == "0":
        with open(result_path + ".tmp", "wb") as f:
            cloudpickle.dump(result, f)
        os.replace(result_path + ".tmp", result_path)


def run_program(args: list[str]) -> None:
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "--payload":
        run_payload(args[1], args[2])
    else:
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def main(args: list[str]) -> int:
    os.environ.update(launcher_rank_env(os.environ))
    if not output_shown(os.environ):
        _silence()
    if not args:
        print("usage: python -m trainrun.rank [-m module | --payload FILE RESULT | script] ARGS",
              file=sys.stderr)
        return 2
    try:
        run_program(args)
        code = 0
    except SystemExit as exc:
        code = exit_code_of(exc)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code != 0:
        record_failure(code)
    return code

