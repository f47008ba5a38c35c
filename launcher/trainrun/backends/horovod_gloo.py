"""Horovod's Gloo controller: horovodrun --gloo starts the ranks and hosts the rendezvous."""
from __future__ import annotations

from ..envforward import user_env
from ..errors import MissingBackend
from ..job import MpiJob
from ..machine import Machine
from ..plan import Plan
from .mpi import job_hosts, rendezvous_env

INSTALL_HOROVOD = "pip install horovod built with Gloo (HOROVOD_WITH_GLOO=1), or use a trainstack image"


class HorovodGlooPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        if machine.horovodrun is None:
            raise MissingBackend("horovodrun", INSTALL_HOROVOD)
        hosts = job_hosts(job)
        env = {**rendezvous_env(hosts, machine), **user_env("-x", job.env, machine.environ)}
        argv = [machine.horovodrun, "--gloo", "-np", str(job.num_processes), "-H", ",".join(map(str, hosts))]
        return Plan("horovod-gloo", argv + job.program.rank_argv(machine.python), env)
