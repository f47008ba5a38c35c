"""Open MPI's settings in the image, for a plain `mpirun` as for trainrun: the entrypoint probes cross-memory attach
once at container start (trainrun.cma) and picks `cma` where the container allows it; where it is refused, two
copies through shared memory (the MCA file's `none`) and, for a command that starts MPI ranks, one line saying why,
never Open MPI's `Read -1` for every message. A value the user set is kept unprobed; `docker exec` (no entrypoint)
gets the MCA file's; `trainrun doctor` says which applies and why."""
from __future__ import annotations

import pytest
from open_mpi_containers import CMA_REFUSED_MESSAGE, CONTAINER_OPTIONS

from trainstack.image.openmpi_defaults import COLL_RULES_FILE, MCA_FILE, coll_rules_lines

VARIABLE = "OMPI_MCA_btl_vader_single_copy_mechanism"
# Each rank sums 8 MiB (above every eager limit, so a cross-memory-attach copy where it is on) and prints what
# single-copy mechanism its environment asks for.
ALLREDUCE = ("import os; import numpy as np; from mpi4py import MPI; b = np.ones(1 << 21, np.float32); "
             "MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, b); "
             f"print('rank sum', b.min(), b.max(), os.environ.get('{VARIABLE}', 'unset'), flush=True)")
FALLBACK_LINE = ("trainstack-entrypoint: Open MPI copies through shared memory (btl_vader_single_copy_mechanism "
                 "none): this container's seccomp profile refuses process_vm_readv (docker run --cap-add SYS_PTRACE, "
                 "or docker 23+, whose default seccomp profile allows it)")


def entrypoint_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("trainstack-entrypoint:")]


@pytest.mark.parametrize("container, mechanism, lines", [("cma allowed", "cma", []),
                                                          ("cma refused", "none", [FALLBACK_LINE])])
def test_a_plain_mpirun_gets_cma_where_the_container_allows_it_else_one_line_why(in_image, container, mechanism,
                                                                                 lines) -> None:
    output = in_image.run(["mpirun", "-np", "2", "python", "-c", ALLREDUCE], options=CONTAINER_OPTIONS[container])
    assert output.count(f"rank sum 2.0 2.0 {mechanism}") == 2, output
    assert entrypoint_lines(output) == lines and CMA_REFUSED_MESSAGE not in output, output


def test_trainrun_mpi_gets_the_same_as_a_plain_mpirun(in_image) -> None:
    output = in_image.run(["trainrun", "mpi", "-np", "2", "python", "-c", ALLREDUCE],
                          options=CONTAINER_OPTIONS["cma refused"])
    assert output.count("rank sum 2.0 2.0 none") == 2 and entrypoint_lines(output) == [FALLBACK_LINE], output
    assert CMA_REFUSED_MESSAGE not in output


def test_a_command_that_starts_no_mpi_ranks_gets_the_setting_without_a_line(in_image) -> None:
    output = in_image.run(["sh", "-c", f"echo ${VARIABLE}"], options=CONTAINER_OPTIONS["cma refused"])
    assert output == "none\n"


def test_a_value_the_user_set_is_kept_unprobed(in_image) -> None:
    output = in_image.run(["mpirun", "-np", "2", "python", "-c", ALLREDUCE], env={VARIABLE: "none"},
                          options=CONTAINER_OPTIONS["cma allowed"])
    assert output.count("rank sum 2.0 2.0 none") == 2 and entrypoint_lines(output) == [], output


def test_a_plain_mpirun_gets_the_image_mca_defaults(in_image) -> None:
    """Ranks that yield their core when waiting, and coll tuned's allreduce rules (trainstack.image.openmpi_defaults),
    from the MCA file every Open MPI process here reads; the tests above sum 8 MiB under those rules."""
    settings = in_image.run(["ompi_info", "--parsable", "--level", "9", "--param", "mpi", "all"])
    assert "mca:mpi:base:param:mpi_yield_when_idle:value:true" in settings
    assert f"mca:mpi:base:param:mpi_yield_when_idle:source:file ({MCA_FILE}" in settings
    tuned = in_image.run(["ompi_info", "--parsable", "--level", "9", "--param", "coll", "tuned"])
    assert "mca:coll:tuned:param:coll_tuned_use_dynamic_rules:value:true" in tuned
    assert f"mca:coll:tuned:param:coll_tuned_dynamic_rules_filename:value:{COLL_RULES_FILE}" in tuned
    assert in_image.run(["cat", COLL_RULES_FILE]).splitlines() == coll_rules_lines()


def test_docker_exec_gets_the_mca_file_value(docker_client, image) -> None:
    """`docker exec` starts no entrypoint: its mpirun gets the MCA file's `none`, safe wherever it runs."""
    container = docker_client.containers.run(image.id, ["sleep", "300"], detach=True,
                                             **CONTAINER_OPTIONS["cma allowed"])
    try:
        code, output = container.exec_run(["sh", "-c", f"echo ${{{VARIABLE}:-unset}}; ompi_info --parsable "
                                                       "--level 3 --param btl vader | grep single_copy_mechanism:"])
    finally:
        container.remove(force=True)
    lines = output.decode().splitlines()
    assert code == 0 and lines[0] == "unset", output
    assert "mca:btl:vader:param:btl_vader_single_copy_mechanism:value:none" in lines, output


@pytest.mark.parametrize("container, detail", [
    ("cma allowed", "btl_vader_single_copy_mechanism cma (environment): ranks on one host copy a large message once"),
    ("cma refused", "btl_vader_single_copy_mechanism none (environment): ranks on one host copy through shared "
                    "memory, since this container's seccomp profile refuses process_vm_readv"),
])
def test_trainrun_doctor_says_which_copy_applies_and_why(in_image, container, detail) -> None:
    output = in_image.run(["trainrun", "doctor"], options=CONTAINER_OPTIONS[container])
    [line] = [line for line in output.splitlines() if line.split()[1:2] == ["mpi-cma"]]
    assert line.startswith("ok") and detail in line, output
