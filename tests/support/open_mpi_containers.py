"""Containers of an image in which Open MPI's cross-memory attach (process_vm_readv between ranks) works, and in
which it is refused, whatever the docker engine's own default: the image tests of the entrypoint's probe
(tests/image/test_open_mpi_settings.py) and benchmarks/allreduce_cpu.py share them."""
from __future__ import annotations

import json

# Refuses exactly the two calls of cross-memory attach, as docker 20.10's default seccomp profile, a hardened
# profile or Yama's ptrace_scope 3 do; every other call as the engine allows it.
REFUSE_CMA = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
    {"names": ["process_vm_readv", "process_vm_writev"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}
# containers.create arguments: CAP_SYS_PTRACE makes docker 20.10's default profile allow the calls (docker 23's
# allows them anyway); the engine takes a seccomp profile's JSON itself, as `docker run` sends a profile file's.
CONTAINER_OPTIONS = {
    "cma allowed": {"cap_add": ["SYS_PTRACE"]},
    "cma refused": {"security_opt": ["seccomp=" + json.dumps(REFUSE_CMA)]},
}
# What docker run's options would be, for reports.
DOCKER_RUN_OPTIONS = {"cma allowed": "--cap-add SYS_PTRACE",
                      "cma refused": "--security-opt seccomp=<a profile refusing process_vm_readv and _writev>"}
# What Open MPI prints for each copy that cross-memory attach was asked for and refused.
CMA_REFUSED_MESSAGE = "Read -1, expected"
