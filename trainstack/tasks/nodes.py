"""invoke tasks for multi-node jobs between containers: up, status, run, exec, down (the `nodes` collection)."""
from __future__ import annotations

import shlex
import sys

from invoke import task
from invoke.exceptions import Exit

from trainstack.clusters import nodes
from trainstack.console import reports_errors
from trainstack.errors import whole_number

NAME_HELP = f"cluster name, the prefix of its containers and network (default {nodes.DEFAULT_NODES})"


@task(help={
    "count": "worker containers (default 2)",
    "image": "image of every container (default trainstack:cpu)",
    "name": NAME_HELP,
    "slots": "ranks per worker in the hosts it prints and the launchers' hostfile (default 1)",
    "share": "a directory mounted read-only at /job in every container (the launchers' working directory)",
    "timeout": "seconds to wait for every worker's sshd (default 60)",
})
@reports_errors
def up(c, count="2", image=None, name=nodes.DEFAULT_NODES, slots="1", share=None, timeout="60"):
    """Start worker containers running trainstack-sshd on a docker network of their own; nothing is published."""
    nodes.up(whole_number("--count", count, minimum=0), image, name, whole_number("--slots", slots, minimum=0),
             share, whole_number("--timeout", timeout))
    print(nodes.status(name))


@task(help={"name": NAME_HELP})
@reports_errors
def status(c, name=nodes.DEFAULT_NODES):
    """Print the workers (state, address, sshd) and how to run a job on them."""
    print(nodes.status(name))


@task(help={"name": NAME_HELP})
@reports_errors
def run(c, name=nodes.DEFAULT_NODES):
    """Run the command after `--` in a launcher container on the cluster's network (trainrun mpi -H WORKERS)."""
    code = nodes.run(shlex.split(c.remainder), name)
    if code:
        raise Exit(code=code)


@task(name="exec", help={"name": NAME_HELP})
@reports_errors
def exec_(c, name=nodes.DEFAULT_NODES):
    """Run the command after `--` in every worker at once; {node_rank}, {nnodes}, {master_addr} are filled in."""
    code = nodes.run_on_workers(shlex.split(c.remainder), name)
    if code:
        raise Exit(code=code)


@task(help={"name": NAME_HELP})
@reports_errors
def down(c, name=nodes.DEFAULT_NODES):
    """Remove every container, the network and the keys of the cluster (found by label, from any shell)."""
    removed = nodes.down(name)
    print(f"removed {', '.join(removed)}" if removed else f"no cluster {name!r} to remove", file=sys.stderr)
