"""Open MPI's defaults in every image, appended to its system MCA file so that a plain `mpirun` typed in the image
gets them as `trainrun mpi` does (benchmarks/allreduce_cpu.py measured each; docs/guides/images.md says why):

- ranks on one host copy a large message through shared memory, twice, where cross-memory attach (one copy) is
  refused or not probed; the entrypoint probes it at container start (trainrun.cma) and sets
  OMPI_MCA_btl_vader_single_copy_mechanism=cma where it works, which wins over this file;
- a rank waiting for a message yields its core, to its own training thread and the other ranks, rather than
  spinning through its time slice (Open MPI does so by itself only for more ranks than cores);
- coll tuned's allreduce runs messages of 1 MiB and more as a segmented ring in 256 KiB segments, which stay in
  the cores' caches while they are reduced: Open MPI 4.1's fixed decision runs them unsegmented, at half Gloo's
  speed per byte or worse from 32 MiB on 2 ranks. Smaller messages keep the fixed decision.
"""
from __future__ import annotations

MCA_FILE = "/etc/openmpi/openmpi-mca-params.conf"
COLL_RULES_FILE = "/etc/openmpi/trainstack-coll-tuned-rules.conf"
MCA_PARAMS = {
    "btl_vader_single_copy_mechanism": "none",
    "mpi_yield_when_idle": "1",
    "coll_tuned_use_dynamic_rules": "1",
    "coll_tuned_dynamic_rules_filename": COLL_RULES_FILE,
}
ALLREDUCE = 2  # coll tuned's number for MPI_Allreduce in a rules file
SEGMENTED_RING = 5  # coll_tuned_allreduce_algorithm 5
FIXED_DECISION = 0
# (from this message size in bytes, algorithm, segment size in bytes), for every communicator of 2 ranks or more.
ALLREDUCE_RULES = ((0, FIXED_DECISION, 0), (1 << 20, SEGMENTED_RING, 256 << 10))


def mca_lines() -> list[str]:
    """The lines appended to Open MPI's MCA file: an empty one first, since Debian's file lacks a final newline."""
    return ["", *(f"{name} = {value}" for name, value in MCA_PARAMS.items())]


def coll_rules_lines() -> list[str]:
    """coll tuned's rules file (Open MPI 4.1's format: counts, then one line per message size; `#` starts a
    comment)."""
    return [
        "# Written by trainstack (trainstack/image/openmpi_defaults.py): MPI_Allreduce's algorithm by message size.",
        "1 # collectives with rules",
        f"{ALLREDUCE} # MPI_Allreduce",
        "1 # communicator sizes",
        "2 # from 2 ranks on",
        f"{len(ALLREDUCE_RULES)} # message sizes",
        *(f"{size} {algorithm} 0 {segment} # from {size} bytes: "
          + ("the fixed decision" if algorithm == FIXED_DECISION else f"algorithm {algorithm}, {segment}-byte segments")
          for size, algorithm, segment in ALLREDUCE_RULES),
    ]
