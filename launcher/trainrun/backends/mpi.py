"""The mpirun line Horovod users expect (horovodrun's flags), for Open MPI and MPICH, and Horovod's Gloo
controller (horovodrun --gloo starts the ranks and hosts the rendezvous); `trainrun mpi`'s options and the job they
describe."""
from __future__ import annotations

import argparse
import re
import shlex
from typing import Any, Iterable, Mapping

from ..arguments import add_container_options, add_job_options, add_option, connect_seconds, positive
from ..errors import MissingBackend, UsageError
from ..job import MpiJob
from ..machine import Machine
from ..plan import Plan, RunOptions, run_env, thread_env
from ..proctree import JOB_ID
from ..program import program_from_command
from ..rank.env import SHOW_RANKS, rank_argv
from ..engines.slurm import DEFAULT_MPI
from ..remote import (CONNECT_TIMEOUT, IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV, RemoteHosts, SshOptions, remote_hosts,
                      resolve_options)
from ..validate import (LOCAL_NAMES, HostSlots, check_capacity, key_value, parse_hostfile, parse_hosts, rank_count,
                        rank_list)

# What reaches every rank on every host besides the job's own -x variables.
FORWARDED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "VIRTUAL_ENV")
FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_", "CUDA_", "GLOO_", "TORCH_", "OMP_")
# Set to the interface of --network-interface: NCCL, Gloo (torch.distributed) and Horovod's Gloo controller.
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")
INSTALL_MPI = "install Open MPI (apt-get install openmpi-bin) or MPICH so that mpirun is on PATH"
INSTALL_HOROVOD = "pip install horovod built with Gloo (HOROVOD_WITH_GLOO=1), or use a trainstack image"
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MPICH_SSH = "Open MPI's mpirun or --gloo (MPICH's Hydra takes ssh settings from ~/.ssh/config)"


def user_env(option: str, specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`-x NAME` takes NAME's current value, `-x NAME=VALUE` sets it."""
    env = {}
    for spec in specs:
        if "=" in spec:
            name, value = key_value(option, spec)
        elif spec in environ:
            name, value = spec, environ[spec]
        else:
            raise UsageError(option, spec, valid="NAME=VALUE or the name of a variable set in the environment")
        if not _VARIABLE_NAME.fullmatch(name):
            raise UsageError(option, spec, f"{name!r} is not a variable name",
                             valid="NAME=VALUE with NAME of letters, digits and _, not starting with a digit")
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
    """The job's hosts (this one by default), checked against -np, and the env every rank gets: the
    rendezvous, per-rank thread defaults, the network interface, then the job's own -x variables."""
    rank_count("-np", job.num_processes)
    hosts = job.hosts or (HostSlots("localhost", job.num_processes),)
    check_capacity("-np", job.num_processes, hosts)
    env = {**rendezvous_env(hosts, machine), **thread_env(machine, max(host.slots for host in hosts))}
    if job.network_interface:
        check_interface(job.network_interface, machine)
        env.update({name: job.network_interface for name in INTERFACE_VARIABLES})
    if job.ranks_filter is not None:
        env[SHOW_RANKS] = rank_list("--ranks-filter", job.ranks_filter, job.num_processes)
    return hosts, {**env, **run_env(job.run), **user_env("-x", job.env, machine.environ)}


def check_interface(interface: str, machine: Machine) -> None:
    """--network-interface must exist here, where mpirun (or horovodrun) itself talks over it to every host: MPI's
    own error is a 12-line banner after the launch."""
    if machine.interfaces and interface not in machine.interfaces:
        # Not the host ends of containers' links (veth*), dozens on a docker host and never a job's interface.
        named = [name for name in machine.interfaces if not name.startswith("veth")]
        raise UsageError("--network-interface", interface, "is not a network interface of this host",
                         valid=", ".join(named))


def is_this_host(host: HostSlots, machine: Machine) -> bool:
    return host.name in LOCAL_NAMES or host.name in machine.local_names


def ranks_on_this_host(num_processes: int, hosts: tuple[HostSlots, ...], machine: Machine) -> int:
    """How many of the ranks land on this host: mpirun and horovodrun fill the hosts' slots in order."""
    here, left = 0, num_processes
    for host in hosts:
        placed = min(host.slots, left)
        here += placed if is_this_host(host, machine) else 0
        left -= placed
    return here


def openmpi_binding(hosts: tuple[HostSlots, ...], machine: Machine) -> list[str]:
    """Where this host runs every rank and has several cores for each, each rank on `PE` cores of its own (the
    threads thread_env gives it); with one core per rank, mpirun's own binding (as plain mpirun binds: core for up
    to 2 ranks, else socket; an explicit binding also binds memory, which docker's seccomp profile refuses with a
    warning on every run), and a rank waiting for a message yields its core rather than spinning through its time
    slice, which the other ranks and its own training thread need (benchmarks/allreduce_cpu.py; the images' MCA
    defaults give a plain mpirun the same); elsewhere no binding, as horovodrun."""
    ranks = hosts[0].slots
    if len(hosts) == 1 and hosts[0].name in LOCAL_NAMES and ranks <= machine.cpu_count:
        cores_per_rank = machine.cpu_count // ranks
        if cores_per_rank > 1:
            return ["-map-by", f"slot:PE={cores_per_rank}", "-bind-to", "core"]
        return ["-mca", "mpi_yield_when_idle", "1"]
    return ["-bind-to", "none", "-map-by", "slot"]


def remote_access(job: MpiJob, hosts: tuple[HostSlots, ...], machine: Machine,
                  needs: str | None) -> RemoteHosts | None:
    """The job's hosts other than this one and the ssh setup that reaches them (trainrun.remote)."""
    if all(is_this_host(host, machine) for host in hosts):
        if job.ssh.given():
            resolve_options(job.ssh, {})  # still checked: a typo should not wait for the first remote job
        return None
    ssh = resolve_options(job.ssh, machine.environ)
    return remote_hosts(job.hosts_option, tuple((host.name, host.slots) for host in hosts), ssh,
                        machine.local_names, machine.python, needs)


def openmpi_ssh_args(remote: RemoteHosts) -> list[str]:
    """mpirun's ssh: trainrun's options (horovodrun passes `-p PORT -i KEY` the same way), and every daemon
    started from this host, where the key and the job's known-hosts file are (Open MPI's tree spawn would
    have daemons on the hosts ssh onwards)."""
    return ["-mca", "plm_rsh_args", " ".join(remote.options), "-mca", "plm_rsh_no_tree_spawn", "1"]


class MpiPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        if machine.mpi_flavor is None:
            raise MissingBackend("mpirun", INSTALL_MPI)
        hosts, env = hosts_and_env(job, machine)
        names = forwarded_names(machine.environ, env)
        remote = None
        host_list = ",".join(map(str, hosts))
        tag = job.tag_output and job.num_processes > 1
        if machine.mpi_flavor == "openmpi":
            argv = ["mpirun"]
            if machine.is_root:
                argv.append("--allow-run-as-root")
            if max(h.slots for h in hosts) > machine.cpu_count:
                argv.append("--oversubscribe")
            # No -mca pml/btl, unlike horovodrun: the MCA config the MPI was installed with chooses the
            # transports; Debian's excludes libfabric, and horovodrun's `btl ^openib` brought it back, at 1.2 s
            # of a 5 s Horovod job here. --mpi-args passes transports where a cluster needs them.
            argv += ["-np", str(job.num_processes), "-H", host_list, *openmpi_binding(hosts, machine)]
            remote = remote_access(job, hosts, machine, needs="orted")
            if remote:
                argv += openmpi_ssh_args(remote)
                # Ranks on other hosts carry the job id too, so the sweep after a failure finds them.
                names = sorted({*names, JOB_ID})
            if job.network_interface:
                argv += ["-mca", "btl_tcp_if_include", job.network_interface,
                         "-mca", "oob_tcp_if_include", job.network_interface]
            if tag:
                argv.append("--tag-output")
            if job.output_filename:
                argv += ["--output-filename", job.output_filename]
            for name in names:
                argv += ["-x", name]
        else:
            if job.output_filename:
                raise UsageError("--output-filename", job.output_filename,
                                 valid="Open MPI's mpirun (MPICH has no such option)")
            if job.ssh.given():
                option, value = next((name, value) for name, value in (
                    ("--ssh-port", job.ssh.port), ("--ssh-identity-file", job.ssh.identity_file),
                    ("--ssh-known-hosts", job.ssh.known_hosts)) if value is not None)
                raise UsageError(option, value, valid=MPICH_SSH)
            argv = ["mpirun", "-np", str(job.num_processes), "-hosts", host_list,
                    "-bind-to", "none", "-map-by", "slot", "-genvlist", ",".join(names)]
            if job.network_interface:
                argv += ["-iface", job.network_interface]
            if tag:
                argv.append("-prepend-rank")
        argv += [*job.launcher_args, *rank_argv(job.program, machine.python)]
        tags = ("pieces" if machine.mpi_flavor == "openmpi" else "lines") if tag else "none"
        return Plan(backend=f"mpi ({machine.mpi_flavor})", argv=argv, env=env, ranks=job.num_processes,
                    local_ranks=ranks_on_this_host(job.num_processes, hosts, machine), launcher="mpirun",
                    output_tags=tags, run=job.run, remote=remote)


class HorovodGlooPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        if machine.horovodrun is None:
            raise MissingBackend("horovodrun", INSTALL_HOROVOD)
        hosts, env = hosts_and_env(job, machine)
        argv = [machine.horovodrun, "--gloo", "-np", str(job.num_processes), "-H", ",".join(map(str, hosts))]
        # horovodrun runs ssh itself (with its own host-key handling); it takes the port and the key.
        remote = remote_access(job, hosts, machine, needs=None)
        if remote and remote.port is not None:
            argv += ["--ssh-port", str(remote.port)]
        if remote and remote.identity_file:
            argv += ["--ssh-identity-file", remote.identity_file]
        if job.network_interface:
            argv += ["--network-interface", job.network_interface]
        if job.output_filename:
            argv += ["--output-filename", job.output_filename]
        # horovodrun prefixes every line with its rank ([0]<stdout>:) itself.
        argv += [*job.launcher_args, *rank_argv(job.program, machine.python)]
        return Plan(backend="horovod-gloo", argv=argv, env=env, ranks=job.num_processes,
                    local_ranks=ranks_on_this_host(job.num_processes, hosts, machine), launcher="horovodrun",
                    output_tags="lines", run=job.run, remote=remote)


def add_parser(sub: Any) -> None:
    """`trainrun mpi` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    mpi = sub.add_parser("mpi", usage="trainrun mpi -np N [-H host:slots,... | --hostfile FILE] [-x VAR[=VALUE]] "
                         "[--ssh-port PORT] [--ssh-identity-file KEY] [--gloo] PROGRAM ...",
                         help="mpirun (Open MPI or MPICH) as horovodrun builds it, or Horovod's Gloo controller",
                         description="Starts N ranks with mpirun the way horovodrun does (or horovodrun --gloo).")
    add_option(mpi, "-np", "--num-processes", "--num-proc", dest="np", type=positive, required=True, metavar="N",
               help="the number of ranks")
    hosts = mpi.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="where ranks run, as mpirun -H and horovodrun -H (default localhost:N)")
    hosts.add_argument("--hostfile", metavar="FILE", help="a hostfile of `HOST slots=N` lines, as horovodrun's")
    mpi.add_argument("-x", dest="env", action="append", default=[], metavar="VAR[=VALUE]",
                     help="forward VAR (or set it) on every rank; repeatable")
    mpi.add_argument("--gloo", action="store_true", help="run through horovodrun --gloo instead of MPI")
    add_option(mpi, "--network-interface", metavar="IFACE",
               help="the interface for MPI, NCCL and Gloo traffic (sets NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)")
    add_option(mpi, "--output-filename", metavar="DIR", help="also write each rank's output to files under DIR")
    add_option(mpi, "--ranks-filter", metavar="RANKS", help="show only these ranks' output, e.g. 0 or 0,1")
    add_option(mpi, "--mpi-args", default="", metavar="'ARGS'",
               help="extra arguments for mpirun (or horovodrun with --gloo, or srun), split as a shell would")
    slurm = mpi.add_argument_group("inside a Slurm allocation (salloc, sbatch)", "Without -H or --hostfile, the ranks "
                                   "start on the allocation's nodes through srun, as srun's options place them.")
    add_option(slurm, "-N", "--nodes", type=positive, metavar="N", help="the nodes the ranks spread over (srun -N)")
    add_option(slurm, "--ntasks-per-node", type=positive, metavar="N", help="ranks on each node (srun's)")
    add_option(slurm, "--mpi", dest="srun_mpi", default=DEFAULT_MPI, metavar="TYPE",
               help=f"srun's MPI plugin (default {DEFAULT_MPI}, what Open MPI 4.1 speaks; trainrun doctor lists "
                    "this cluster's)")
    add_container_options(slurm)
    ssh = mpi.add_argument_group("other hosts (ssh)", "Ranks on hosts other than this one start over ssh: each host "
                                 "is checked first (it answers and takes the key), and a failed or stopped job is "
                                 "ended on every host.")
    add_option(ssh, "-p", "--ssh-port", type=positive, metavar="PORT",
               help=f"sshd's port on the hosts (default ${PORT_ENV}, else ssh's; trainstack-sshd: 2222)")
    add_option(ssh, "-i", "--ssh-identity-file", metavar="KEY",
               help=f"the private key to log in with (default ${IDENTITY_ENV}, else ssh's keys and agent)")
    add_option(ssh, "--ssh-known-hosts", metavar="FILE",
               help=f"accept only the host keys in FILE (default ${KNOWN_HOSTS_ENV}; without: a host's key is "
                    "accepted the first time the job meets it, into a known-hosts file of the job's own)")
    add_option(ssh, "--ssh-connect-timeout", type=connect_seconds, metavar="SECONDS",
               help=f"how long ssh waits for a host to answer (default {CONNECT_TIMEOUT:g})")
    add_job_options(mpi, "`python train.py`, `python -m pkg.train` or any command, as mpirun takes it")
    mpi.set_defaults(make_job=job_from_args)


def job_from_args(args: argparse.Namespace, command: list[str], run: RunOptions) -> MpiJob:
    """The job `trainrun mpi`'s options describe (trainrun.arguments.job_from_args)."""
    hosts = (parse_hosts("-H", args.hosts) if args.hosts else
             parse_hostfile("--hostfile", args.hostfile) if args.hostfile else ())
    ssh = SshOptions(args.ssh_port, args.ssh_identity_file, args.ssh_known_hosts, args.ssh_connect_timeout)
    return MpiJob(num_processes=args.np, program=program_from_command("command", command), hosts=hosts,
                  env=tuple(args.env), gloo=args.gloo, tag_output=args.tag_output,
                  network_interface=args.network_interface, output_filename=args.output_filename,
                  launcher_args=tuple(shlex.split(args.mpi_args)), ranks_filter=args.ranks_filter, ssh=ssh,
                  hosts_option="--hostfile" if args.hostfile else "-H", nodes=args.nodes,
                  ntasks_per_node=args.ntasks_per_node, srun_mpi=args.srun_mpi,
                  container_runtime=args.container_runtime, container_image=args.container_image, run=run)
