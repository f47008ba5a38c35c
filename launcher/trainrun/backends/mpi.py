"""The mpirun line Horovod users expect (horovodrun's flags), for Open MPI and MPICH, and Horovod's Gloo
controller (horovodrun --gloo starts the ranks and hosts the rendezvous)."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..errors import MissingBackend, UsageError
from ..job import MpiJob
from ..machine import Machine
from ..plan import Plan
from ..validate import LOCAL_NAMES, HostSlots, check_capacity, key_value, positive_int

# What reaches every rank on every host besides the job's own -x variables.
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "VIRTUAL_ENV")
FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_", "CUDA_", "GLOO_", "TORCH_", "OMP_")
INSTALL_MPI = "install Open MPI (apt-get install openmpi-bin) or MPICH so that mpirun is on PATH"
INSTALL_HOROVOD = "pip install horovod built with Gloo (HOROVOD_WITH_GLOO=1), or use a trainstack image"


def user_env(option: str, specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`-x NAME` takes NAME's current value, `-x NAME=VALUE` sets it."""
    env = {}
    for spec in specs:
        if "=" in spec:
            name, value = key_value(option, spec)
        elif spec in environ:
            name, value = spec, environ[spec]
        else:
            raise UsageError(option, spec, "NAME=VALUE or the name of a variable set in the environment")
        env[name] = value
    return env


def forwarded_names(environ: Mapping[str, str], extra: Iterable[str]) -> list[str]:
    names = {n for n in environ if n in FORWARDED_NAMES or n.startswith(FORWARDED_PREFIXES)}
    return sorted(names | set(extra))


def rendezvous_env(hosts: tuple[HostSlots, ...], machine: Machine) -> dict[str, str]:
    """MASTER_ADDR/PORT for torch.distributed inside MPI or Gloo ranks: rank 0 runs on the first host."""
    first = hosts[0].name
    return {"MASTER_ADDR": "127.0.0.1" if first in LOCAL_NAMES else first, "MASTER_PORT": str(machine.free_port)}


def hosts_and_env(job: MpiJob, machine: Machine) -> tuple[tuple[HostSlots, ...], dict[str, str]]:
    """The job's hosts (this one by default), checked against -np, and the env every rank gets."""
    positive_int("-np", job.num_processes)
    hosts = job.hosts or (HostSlots("localhost", job.num_processes),)
    check_capacity("-np", job.num_processes, hosts)
    return hosts, {**rendezvous_env(hosts, machine), **user_env("-x", job.env, machine.environ)}


class MpiPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        if machine.mpi_flavor is None:
            raise MissingBackend("mpirun", INSTALL_MPI)
        hosts, env = hosts_and_env(job, machine)
        names = forwarded_names(machine.environ, env)
        host_list = ",".join(map(str, hosts))
        if machine.mpi_flavor == "openmpi":
            argv = ["mpirun"]
            if machine.is_root:
                argv.append("--allow-run-as-root")
            if max(h.slots for h in hosts) > machine.cpu_count:
                argv.append("--oversubscribe")
            argv += ["-np", str(job.num_processes), "-H", host_list,
                     "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib"]
            for name in names:
                argv += ["-x", name]
        else:
            argv = ["mpirun", "-np", str(job.num_processes), "-hosts", host_list,
                    "-bind-to", "none", "-map-by", "slot", "-genvlist", ",".join(names)]
        return Plan(f"mpi ({machine.mpi_flavor})", argv + job.program.rank_argv(machine.python), env)


class HorovodGlooPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        if machine.horovodrun is None:
            raise MissingBackend("horovodrun", INSTALL_HOROVOD)
        hosts, env = hosts_and_env(job, machine)
        argv = [machine.horovodrun, "--gloo", "-np", str(job.num_processes), "-H", ",".join(map(str, hosts))]
        return Plan("horovod-gloo", argv + job.program.rank_argv(machine.python), env)
