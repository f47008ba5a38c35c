"""Fixtures for real launches on this host (helpers live in launch_helpers.py)."""
from __future__ import annotations

import sys

import pytest
from fault_harness import trainrun_env
from launch_helpers import (
    CPU_POOL_TEMPLATE,
    SCRIPTS,
    Launch,
    has_pooltemplates,
    mpi_collective,
    read_reports,
    run_trainrun,
)


@pytest.fixture(scope="session")
def backend_reports(tmp_path_factory: pytest.TempPathFactory):
    """Run rank_report.py once per backend (with a real collective) and keep what each launch gave."""
    cache: dict[str, tuple[Launch, dict[int, dict]]] = {}

    def launch(backend: str) -> tuple[Launch, dict[int, dict]]:
        if backend not in cache:
            report_dir = tmp_path_factory.mktemp(f"reports-{backend}")
            script = str(SCRIPTS / "rank_report.py")
            if backend == "mpi":
                args, collective = ["mpi", "-np", "2", "--", sys.executable, script], mpi_collective()
            elif backend == "torch":
                args, collective = ["torch", "--nproc-per-node", "2", "--", script], "gloo"
            else:
                # The cluster template's conf is applied for real where the templates package is installed.
                template = ["--template", str(CPU_POOL_TEMPLATE)] if has_pooltemplates() else []
                args = ["spark", "--master", "local-cluster[2,1,1024]", *template, "--num-processes", "2",
                        "--", script]
                collective = "gloo"
            env = trainrun_env(report_dir, COLLECTIVE=collective)
            launched = run_trainrun([args[0], "--timeout", "200", *args[1:]], env)
            cache[backend] = (launched, read_reports(report_dir))
        return cache[backend]

    return launch
