"""How long trainrun's launch flows are: the stops from the entry point to the launch, counted.

For two flows, `%%trainrun mpi -np 2` (the cell magic, in an IPython shell whose output is not file descriptor 1, as
in a notebook kernel) and `trainrun spark --num-processes 2 train.py` (the CLI), it counts the distinct trainrun
functions entered (module.qualname, through sys.setprofile), from the entry point (the magic's method, cli.main)
to the moment trainrun's runner starts the launcher process, and the trainrun modules they live in. Nothing is
stubbed but that one spawn: the runner's subprocess.Popen stops the count and the flow, so no rank starts.
Comprehensions, module and class bodies (a first import runs them) and generated code (dataclasses' __init__) are
not counted as functions.

Each flow runs in a fresh interpreter. `--commit REV` measures the launcher of that commit (extracted with git
archive) instead of this checkout's; each run is one row of the results file under its label, with the lines of
cli.py and of runner.run_plan beside the counts.

    python benchmarks/launcher_flow.py [--commit REV] [--label NAME] [--out FILE | --update-results]
"""
from __future__ import annotations

import argparse
import ast
import datetime
import inspect
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import results_file

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ("%%trainrun mpi -np 2", "trainrun spark")
SPAWNER = "trainrun.runner"
COMPREHENSIONS = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"}


class Spawned(BaseException):
    """The runner reached the launcher's spawn: the flow ends there (a BaseException, so no handler of trainrun's
    catches it)."""


def count(flow: str, workdir: str) -> dict:
    """The stops of one flow, in this interpreter (its trainrun is the first on sys.path)."""
    import trainrun

    package = os.path.dirname(os.path.abspath(trainrun.__file__)) + os.sep
    entered: list[str] = []

    def profile(frame, event, _arg) -> None:
        code = frame.f_code
        # A function's code is optimized; a module's or class's body (run by a first import) is not.
        if event == "call" and code.co_flags & inspect.CO_OPTIMIZED and code.co_filename.startswith(package) \
                and code.co_name not in COMPREHENSIONS:
            name = f"{frame.f_globals.get('__name__')}:{code.co_qualname}"
            if name not in entered:
                entered.append(name)

    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__") == SPAWNER:
            sys.setprofile(None)
            raise Spawned
        return real_popen(*args, **kwargs)

    subprocess.Popen = popen
    script = os.path.join(workdir, "train.py")
    Path(script).write_text("print('rank')\n")
    if flow == "trainrun spark":
        from trainrun.cli import main

        start, args = main, (["spark", "--num-processes", "2", script],)
    else:
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        shell.extension_manager.load_extension("trainrun.notebook")
        start, args = shell.run_cell_magic, ("trainrun", "mpi -np 2", "1 + 1")
        sys.stdout = sys.stderr = io.StringIO()  # a kernel's streams: not descriptors 1 and 2
    sys.setprofile(profile)
    try:
        start(*args)
    except Spawned:
        pass
    finally:
        sys.setprofile(None)
        said = sys.stderr.getvalue() if isinstance(sys.stderr, io.StringIO) else ""
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    modules = list(dict.fromkeys(name.partition(":")[0] for name in entered))
    if SPAWNER not in modules:
        raise SystemExit(f"{flow}: the runner was never reached {said}")
    return {"functions": len(entered), "modules": len(modules), "module_names": modules,
            "stops": [name.replace(":", ".", 1) for name in entered]}


def measure(launcher: Path, templates: Path) -> dict:
    """Every flow in a fresh interpreter whose trainrun is `launcher`'s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(launcher), str(templates), str(ROOT)])}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    results = {}
    for flow in FLOWS:
        with tempfile.TemporaryDirectory(prefix="launcher-flow-") as workdir:
            done = subprocess.run([sys.executable, __file__, "--count", flow, "--workdir", workdir], env=env,
                                  capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"{flow}:\n{done.stdout}\n{done.stderr}")
        results[flow] = json.loads(done.stdout.splitlines()[-1])
        print(f"{flow}: {results[flow]['functions']} functions in {results[flow]['modules']} modules", flush=True)
    return results


def sizes(launcher: Path) -> dict:
    """The lines of cli.py and of runner.run_plan (its def to its last line), which the flows pass through."""
    package = launcher / "trainrun"
    runner = ast.parse((package / "runner.py").read_text())
    run_plan = next(node for node in runner.body if isinstance(node, ast.FunctionDef) and node.name == "run_plan")
    return {"cli.py": len((package / "cli.py").read_text().splitlines()),
            "runner.run_plan": run_plan.end_lineno - run_plan.lineno + 1}


def extracted_launcher(commit: str, into: str) -> Path:
    """The launcher/ of `commit`, extracted under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "launcher"], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return Path(into) / "launcher"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", help="measure this commit's launcher instead of the checkout's")
    parser.add_argument("--label", help="the row's name in the results (default: the commit, else 'checkout')")
    results_file.add_options(parser, "launcher_flow.json")
    parser.add_argument("--count", choices=FLOWS, help=argparse.SUPPRESS)  # one flow, in this interpreter
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = results_file.chosen(args, "launcher_flow.json")
    if args.count:
        result = count(args.count, args.workdir)
        print(json.dumps(result), file=sys.__stdout__)
        return
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.commit or "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="launcher-flow-src-") as src:
        launcher = extracted_launcher(args.commit, src) if args.commit else ROOT / "launcher"
        flows = measure(launcher, ROOT / "templates")
        lines = sizes(launcher)
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {
        "benchmark": "launcher flows: distinct trainrun functions (and their modules) entered from the entry point "
                     "to the launcher's spawn",
        "flows": {"%%trainrun mpi -np 2": "the cell magic, in an IPython shell, cell `1 + 1`",
                  "trainrun spark": "cli.main(['spark', '--num-processes', '2', 'train.py'])"},
        "results": {}}
    label = args.label or (args.commit if args.commit else "checkout")
    data["results"][label] = {
        "commit": commit if args.commit else f"{commit} + working tree",
        "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "flows": flows, "lines": lines}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
