"""Each distribution installs as its pyproject.toml declares, from its own folder, into a fresh venv (pip's cache
and find-links serve what they hold): pooltemplates alone; trainrun alone; trainrun[notebook] beside
./templates (pooltemplates is not on PyPI), whose extension then loads in a real kernel and runs %%configure and a
%%trainrun mpi -np 2 cell; and the host tooling at the repository's root. Each step imports every module it
installed, so a module importing what its distribution does not declare fails here, not at a user's."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import requires

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[2]
KERNEL = "trainstack-fresh-venv"
# What a distribution's folder holds for pip; the root's is the host tooling's pyproject.toml and package only.
DISTRIBUTION_FILES = {".": ["pyproject.toml", "trainstack"]}
SOURCE_LEFT_OUT = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
# Entry points, which run their command when imported; `trainrun --help` and `python -m pooltemplates --help` run
# them instead.
ENTRY_POINTS = ("__main__",)
IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
failed = {}
for package in sys.argv[1:]:
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if module.name.rpartition(".")[2] in %r or module.name.startswith(%r):
            continue
        try:
            importlib.import_module(module.name)
        except Exception as exc:
            failed[module.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def clean_env(venv: Path) -> dict[str, str]:
    """This test's environment without what points into the repository or the development venv."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    dev_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *(p for p in env["PATH"].split(os.pathsep) if p != dev_bin)])
    return env


def source_copy(folder: str, into: Path) -> Path:
    """A copy of a distribution's folder to install from: pip builds inside the project (build/), which must not be
    the repository. The root's distribution is its pyproject.toml and trainstack/."""
    target = into / ("root" if folder == "." else folder)
    if not target.exists():
        for part in DISTRIBUTION_FILES.get(folder, [""]):
            source = REPO / folder / part
            if source.is_dir():
                shutil.copytree(source, target / part, ignore=SOURCE_LEFT_OUT)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target / part)
    return target


class FreshVenv:
    def __init__(self, path: Path, timings: dict[str, float]) -> None:
        self.path, self.timings = path, timings
        self.python = path / "bin" / "python"
        self.pip = [sys.executable, "-m", "pip", "--python", str(self.python), "--disable-pip-version-check"]
        # Without pip of its own (ensurepip takes seconds): this test's pip installs into it with --python.
        self._time("venv", [sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=path.parent)

    def _time(self, step: str, argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
        """Runs argv in the venv's folder, where no package of the repository's is importable by accident."""
        started = time.monotonic()
        done = subprocess.run(argv, env=clean_env(self.path), cwd=cwd or self.path, capture_output=True, text=True)
        self.timings[f"{self.path.name}: {step}"] = round(time.monotonic() - started, 1)
        assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def install(self, *folders: str) -> None:
        """pip install of the repository's folders (with an extra: `launcher[notebook]`), from copies."""
        sources = []
        for folder in folders:
            name, bracket, extra = folder.partition("[")
            sources.append(f"{source_copy(name, self.path.parent / 'sources')}{bracket}{extra}")
        self._time(f"pip install {' '.join(folders)}", [*self.pip, "install", "--quiet", *sources])

    def import_failures(self, *packages: str, skip: str = "\0") -> dict[str, str]:
        code = IMPORT_EVERY_MODULE % (ENTRY_POINTS, skip)
        done = self._time(f"import {' '.join(packages)}", [str(self.python), "-c", code, *packages])
        return json.loads(done.stdout)

    def distributions(self) -> set[str]:
        done = self._time("pip list", [*self.pip, "list", "--format", "json"])
        return {entry["name"].lower() for entry in json.loads(done.stdout)}

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return self._time(" ".join(argv), [str(self.path / "bin" / argv[0]), *argv[1:]])


@pytest.fixture(scope="module")
def timings() -> dict[str, float]:
    measured: dict[str, float] = {}
    yield measured
    print("\nfresh-venv steps (s): " + json.dumps(measured, indent=1))


def test_pooltemplates_installs_alone(tmp_path_factory, timings) -> None:
    venv = FreshVenv(tmp_path_factory.mktemp("install") / "pooltemplates", timings)
    venv.install("templates")
    assert venv.import_failures("pooltemplates") == {}
    assert "trainrun" not in venv.distributions()
    assert "local-pool" in venv.run("pooltemplates", "list").stdout


@pytest.fixture(scope="module")
def launcher_venv(tmp_path_factory, timings) -> FreshVenv:
    return FreshVenv(tmp_path_factory.mktemp("install") / "trainrun", timings)


def test_trainrun_installs_alone(launcher_venv: FreshVenv) -> None:
    launcher_venv.install("launcher")
    assert "pooltemplates" not in launcher_venv.distributions()
    # The notebook extension is the [notebook] extra's, installed next.
    assert launcher_venv.import_failures("trainrun", skip="trainrun.notebook") == {}
    assert launcher_venv.run("trainrun", "--version").stdout.startswith("trainrun ")


@requires(mpirun=True)
def test_trainrun_notebook_extra_runs_its_magics_in_a_real_kernel(launcher_venv: FreshVenv, tmp_path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    launcher_venv.install("templates", "launcher[notebook]")
    assert launcher_venv.import_failures("trainrun", "pooltemplates") == {}
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(launcher_venv.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "a fresh trainrun[notebook] venv", "language": "python"}))
    for key, value in clean_env(launcher_venv.path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cells = ["%load_ext trainrun.notebook",
             '%%configure\n{"numExecutors": 1, "executorCores": 1}',
             "%%trainrun mpi -np 2\nimport os, sys\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
             "sys.executable"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    started = time.monotonic()
    nbclient.NotebookClient(notebook, timeout=300, allow_errors=True, kernel_name=KERNEL,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    launcher_venv.timings["trainrun: kernel with 3 cells"] = round(time.monotonic() - started, 1)
    loaded, configured, ranks = (cell.outputs for cell in notebook.cells)
    errors = [output for cell in notebook.cells for output in cell.outputs if output["output_type"] == "error"]
    assert errors == []
    assert "Spark session configured" in stream(configured) and "local[1]" in stream(configured)
    assert "rank 0 of 2" in stream(ranks) and "rank 1 of 2" in stream(ranks)
    [value] = [output["data"]["text/plain"] for output in ranks if output["output_type"] == "execute_result"]
    assert value == repr(str(launcher_venv.python))


def stream(outputs: list[dict]) -> str:
    return "".join(output.get("text", "") for output in outputs if output["output_type"] == "stream")


def test_the_host_tooling_installs_from_the_root(tmp_path_factory, timings) -> None:
    venv = FreshVenv(tmp_path_factory.mktemp("install") / "trainstack", timings)
    # Its own dependencies trainrun and pooltemplates are this repository's folders.
    venv.install("templates", "launcher", ".")
    assert venv.import_failures("trainstack") == {}
    tasks = venv._time("invoke --list", [str(venv.path / "bin" / "invoke"), "--list"], cwd=REPO).stdout
    assert "pool.up" in tasks and "nodes.up" in tasks