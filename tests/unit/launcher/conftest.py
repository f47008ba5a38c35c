"""A fixed machine so plans do not depend on the host that runs the tests."""
from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from trainrun.backends import plan_job
from trainrun.arguments import build_parser, job_from_args
from trainrun.machine import Machine
from trainrun.plan import Plan

ENVIRON = {
    "PATH": "/opt/venv/bin:/usr/bin",
    "PYTHONPATH": "/work/src",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "eth0",
    "HOME": "/root",
    "SECRET_TOKEN": "not-forwarded",
    "FOO": "from-environ",
}

BASE_MACHINE = Machine(
    is_root=False, cpu_count=8, environ=ENVIRON, python="/usr/bin/python3", free_port=29400,
    mpi_flavor="openmpi", has_torch=True, has_pyspark=True, has_java=True,
    horovodrun="/usr/local/bin/horovodrun", spark_home="/opt/spark", gpu_count=0, interfaces=("lo", "eth0"),
)


def make_machine(**changes: object) -> Machine:
    return dataclasses.replace(BASE_MACHINE, **changes)


def _plan_for(argv: list[str], **machine_changes: object) -> Plan:
    """The plan `trainrun ARGV` makes, the way cli.main makes it, on the fixed test machine."""
    return plan_job(job_from_args(build_parser().parse_args(argv)), make_machine(**machine_changes))


@pytest.fixture
def plan_for():
    """plan_for(argv, **machine_changes) -> Plan on the fixed test machine."""
    return _plan_for


@pytest.fixture
def machine():
    """machine(**changes) -> the fixed test machine with some facts changed."""
    return make_machine


class FakeTemplate:
    def __init__(self, name: str, overrides: dict[str, str]) -> None:
        self.name = name
        self.overrides = overrides
        self.gpu = types.SimpleNamespace(placeholders=False)

    def spark_conf(self) -> dict[str, str]:
        conf = {"spark.executor.instances": self.overrides.get("executor.instances", "2"),
                "spark.executor.cores": "2", "spark.task.resource.gpu.amount": "1",
                "spark.executor.resource.gpu.amount": "2"}
        if self.name == "cpu-pool":
            conf = {key: value for key, value in conf.items() if ".resource.gpu." not in key}
        return conf


class FakeTemplateError(ValueError):
    pass


@pytest.fixture
def fake_pooltemplates(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The pooltemplates interface trainrun relies on, without the real package's templates."""
    module = types.ModuleType("pooltemplates")
    module.TemplateError = FakeTemplateError
    module.checked = []

    def load_template(name: str, overrides: dict[str, str] | None = None) -> FakeTemplate:
        if name == "missing":
            raise FakeTemplateError("template 'missing' not found")
        return FakeTemplate(name, dict(overrides or {}))

    def check_barrier_job(template: FakeTemplate, num_processes: int, use_gpu: bool) -> None:
        module.checked.append((template.name, num_processes, use_gpu))
        if num_processes > 8:
            raise FakeTemplateError(f"{num_processes} processes need more task slots than the pool's 8")

    module.load_template = load_template
    module.check_barrier_job = check_barrier_job
    monkeypatch.setitem(sys.modules, "pooltemplates", module)
    return module
