"""Each step's times from the classic builder's stream and from BuildKit's plain progress
(trainstack.image.build_timing): recorded cold builds of the cpu image replayed chunk by chunk with the clocks'
readings as they were when each chunk arrived (fixtures/build-stream-cpu.jsonl, classic;
fixtures/buildkit-progress-cpu.jsonl with its Dockerfile, BuildKit), their records and summary lines golden; and the
odd cases by hand."""
from __future__ import annotations

import json
from pathlib import Path

from trainstack.image.build_timing import (
    COLD_BUILD_STEPS,
    REBUILD_STEPS,
    BuildKitStepTimer,
    BuildSteps,
    StepTimer,
    buildkit_steps,
    dockerfile_instructions,
    merged_phases,
    host_cpu_seconds,
    record_build_steps,
    shortened,
)

RECORDED_STREAM = Path(__file__).parent / "fixtures" / "build-stream-cpu.jsonl"


def replay(chunks: list[tuple[float, float, str]]) -> BuildSteps:
    """The steps of a stream given as (wall clock, CPU clock, chunk) as each chunk arrived; the stream ends at the
    last chunk's readings."""
    now = [0.0, 0.0]
    timer = StepTimer(lambda: now[0], lambda: now[1])
    for wall, cpu, text in chunks:
        now[:] = [wall, cpu]
        timer.observe(text)
    return BuildSteps(timer.finish())


def recorded_build() -> BuildSteps:
    lines = RECORDED_STREAM.read_text(encoding="utf-8").splitlines()
    return replay([(chunk["wall"], chunk["cpu"], chunk["stream"]) for chunk in map(json.loads, lines)])


def test_the_record_of_a_recorded_cold_build_is_golden(golden):
    golden("build-steps-cpu.json", json.dumps(recorded_build().record(), indent=2) + "\n")


def test_the_summary_line_of_a_recorded_cold_build_is_golden(golden):
    golden("build-steps-cpu-summary.txt", recorded_build().summary() + "\n")


def test_the_recorded_build_puts_every_step_in_its_stage_and_its_steps_add_up():
    steps = recorded_build()
    assert list(steps.stages) == ["runtime-os", "builder", "stage 2"]
    assert not steps.cached
    assert round(steps.wall_s, 1) == steps.record()["wall_s"]
    assert sum(placed.step.wall_s for placed in steps.critical_path()) <= steps.wall_s


SMALL_BUILD = [
    (0, 0, "Step 1/7 : FROM debian:bookworm-slim AS base"), (0, 0, "\n"), (0, 0, " ---> 1a2b\n"),
    (1, 1, "Step 2/7 : RUN apt-get update"), (1, 1, "\n"), (1, 1, " ---> Using cache\n ---> 3c4d\n"),
    (2, 2, "Step 3/7 : FROM base AS compiler\n ---> 3c4d\n"),
    (3, 3, "Step 4/7 : RUN make -j2   \\\n"), (3, 3, "sent in two chunks\n"),
    (103, 203, "Step 5/7 : FROM base\n"),
    (104, 204, "Step 6/7 : RUN useradd trainer\n"),
    (114, 214, "Step 7/7 : COPY --chown=trainer --from=1 /out /opt\n"),
    (120, 220, "Successfully built 5e6f\n"),
]


def test_each_step_ends_where_the_next_starts_or_the_stream_ends():
    steps = replay(SMALL_BUILD)
    assert [(placed.step.number, placed.step.wall_s, placed.step.cpu_s) for placed in steps.steps] == [
        (1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 100, 200), (5, 1, 1), (6, 10, 10), (7, 6, 6)]
    assert [placed.step.number for placed in steps.steps if placed.step.cached] == [2]
    assert steps.by_number[4].step.instruction == "RUN make -j2   \\"


def test_stages_are_named_as_copy_from_names_them_and_waits_follow_from_and_copy_from():
    steps = replay(SMALL_BUILD)
    assert steps.stages == {"base": [1, 2], "compiler": [3, 4], "stage 2": [5, 6, 7]}
    assert steps.by_number[7].copies_from == "compiler"
    assert steps.waits_on(steps.by_number[1]) == []
    assert steps.waits_on(steps.by_number[3]) == ["all of base (steps 1-2)"]
    assert steps.waits_on(steps.by_number[7]) == ["stage 2: steps 5-6", "all of compiler (steps 3-4)"]


def test_the_critical_path_runs_through_the_longest_wait():
    steps = replay(SMALL_BUILD)
    assert [placed.step.number for placed in steps.critical_path()] == [1, 2, 3, 4, 7]
    assert steps.record()["critical_path"] == {"wall_s": 109.0, "segments": [
        {"stage": "base", "steps": "steps 1-2", "wall_s": 2.0},
        {"stage": "compiler", "steps": "steps 3-4", "wall_s": 101.0},
        {"stage": "stage 2", "steps": "step 7", "wall_s": 6.0}]}
    assert steps.summary() == (
        "build (classic): 120 s, 120 s of steps, 220 s CPU (1 of 7 steps cached); critical path 109 s "
        "(base steps 1-2, compiler steps 3-4, "
        "stage 2 step 7); slowest steps: 4 RUN make -j2 \\: 100 s; 6 RUN useradd trainer: 10 s; "
        "7 COPY --chown=trainer --from=1 /out /opt: 6 s")


def test_a_build_with_cached_steps_is_recorded_as_a_rebuild_beside_the_other_figures(tmp_path):
    results = tmp_path / "image_build.json"
    results.write_text(json.dumps({"cpu": {"cold": {"seconds": 1058.5}}, "gpu": {"size": {"size_gb": 9.9}}}))
    record_build_steps("cpu", replay(SMALL_BUILD), results)
    cold = [(0, 0, "Step 1/1 : FROM scratch\n"), (5, 7, "Successfully built 1a2b\n")]
    record_build_steps("cpu", replay(cold), results)
    written = json.loads(results.read_text())
    assert written["gpu"] == {"size": {"size_gb": 9.9}}
    assert set(written["cpu"]) == {"cold", REBUILD_STEPS, COLD_BUILD_STEPS}
    assert written["cpu"][REBUILD_STEPS]["cached_steps"] == 1
    assert written["cpu"][COLD_BUILD_STEPS]["wall_s"] == 5.0
    assert written["cpu"][COLD_BUILD_STEPS]["machine"].endswith("cores")


def test_an_instruction_is_shown_on_one_line_cut_to_its_length():
    assert shortened("RUN a \\\n   && b") == "RUN a \\ && b"
    assert shortened("RUN " + "x" * 200, 20) == "RUN xxxxxxxxxxxxx..."


def test_the_host_cpu_clock_counts_up():
    first = host_cpu_seconds()
    sum(range(2_000_000))
    assert host_cpu_seconds() >= first > 0


SMALL_DOCKERFILE = """\
# a comment
FROM debian:bookworm-slim AS base
ENV A=1
RUN apt-get update \\
 && apt-get install -y make
FROM base AS compiler
RUN make -j2
FROM base AS tools
WORKDIR /w
RUN make tools
FROM base
COPY --from=compiler /out /opt
LABEL b=2
"""


def test_buildkit_numbers_a_stages_vertices_and_the_classic_builder_every_instruction():
    instructions = dockerfile_instructions(SMALL_DOCKERFILE)
    assert instructions[2] == "RUN apt-get update && apt-get install -y make"
    assert len(instructions) == 11
    # A FROM of an earlier stage is no vertex; an unnamed stage is stage-INDEX.
    assert buildkit_steps(instructions) == {("base", 1): 1, ("base", 2): 3, ("compiler", 1): 5, ("tools", 1): 7,
                                            ("tools", 2): 8, ("stage-3", 1): 10}


# (wall clock, CPU clock, line): compiler and tools overlap from 10 s to 40 s; BuildKit pads stage names.
SMALL_BUILDKIT = [
    (0, 0, "#1 [internal] load build definition from Dockerfile\n"),
    (0, 0, "#4 [base 1/2] FROM docker.io/library/debian:bookworm-slim\n"), (0, 0, "#4 CACHED\n"),
    (1, 1, "#5 [base 2/2] RUN apt-get update  && apt-get install -y make\n"), (9, 9, "#5 DONE 8.0s\n"),
    (10, 9, "#6 [compiler 1/1] RUN make -j2\n"), (10, 9, "#7 [tools    1/2] WORKDIR /w\n"),
    (10, 9, "#7 CACHED\n"), (10, 9, "#8 [tools    2/2] RUN make tools\n"),
    (40, 69, "#6 12.3 error: not really\n"), (40, 69, "#8 DONE 30.0s\n"), (50, 89, "#6 DONE 40.0s\n"),
    (50, 89, "#9 [stage-3 1/1] COPY --from=compiler /out /opt\n"), (51, 90, "#9 DONE 1.0s\n"),
    (53, 91, "#10 exporting to image\n"), (55, 91, "#10 DONE 2.0s\n"),
]


def replay_buildkit(dockerfile: str, lines: list[tuple[float, float, str]]) -> BuildSteps:
    now = [0.0, 0.0]
    timer = BuildKitStepTimer(dockerfile, lambda: now[0], lambda: now[1])
    for wall, cpu, text in lines:
        now[:] = [wall, cpu]
        timer.observe(text)
    return BuildSteps(timer.finish(), timer.elapsed_s, timer.builder, timer.cpu_time)


def test_buildkit_steps_take_its_times_and_share_the_cpu_of_the_steps_running_at_once():
    steps = replay_buildkit(SMALL_DOCKERFILE, SMALL_BUILDKIT)
    figures = {placed.step.number: (placed.step.wall_s, placed.step.cpu_s, placed.step.cached)
               for placed in steps.steps}
    assert figures == {1: (0, 0, False), 2: (0, 0, False), 3: (8, 8, False), 4: (0, 0, False),
                       5: (40, 50, False), 6: (0, 0, False), 7: (0, 0, True), 8: (30, 30, False),
                       9: (0, 0, False), 10: (1, 1, False), 11: (0, 0, False)}
    assert steps.elapsed_s == 55 and steps.wall_s == 79
    assert [placed.step.number for placed in steps.critical_path()] == [1, 2, 3, 4, 5, 10]
    assert steps.summary().startswith("build (buildkit): 55 s, 79 s of steps, 89 s CPU (1 of 11 steps cached); ")
    assert steps.record()["cpu_time"].endswith("shared equally among the steps running at the same time")


def test_a_build_in_phases_is_numbered_as_its_whole_dockerfile():
    """BuildKit's phase (the whole Dockerfile, up to the builder) and the classic phase (the image's stages from the
    builder's image) as one build: runtime-os ran in both, so its times add up; the classic builder's build labels
    come last."""
    whole = dockerfile_instructions(SMALL_DOCKERFILE)
    image_stages = [*whole[:3], "FROM builder-image AS compiler", *whole[8:]]
    builder_phase = replay_buildkit(SMALL_DOCKERFILE, SMALL_BUILDKIT[:11] + [(50, 89, "#6 DONE 40.0s\n")])
    classic_phase = [
        (0, 0, "Step 1/7 : FROM debian:bookworm-slim AS base\n"), (0, 0, "Step 2/7 : ENV A=1\n ---> Using cache\n"),
        (0, 0, "Step 3/7 : RUN apt-get update  && apt-get install -y make\n ---> Using cache\n"),
        (0, 0, "Step 4/7 : FROM builder-image AS compiler\n"), (0, 0, "Step 5/7 : FROM base\n"),
        (0, 0, "Step 6/7 : COPY --from=compiler /out /opt\n"), (5, 6, "Step 7/7 : LABEL b=2\n"),
        (6, 7, "Step 8/8 : LABEL revision=abc\n"), (7, 8, "Successfully built 1a2b\n")]
    now = [0.0, 0.0]
    timer = StepTimer(lambda: now[0], lambda: now[1])
    for wall, cpu, text in classic_phase:
        now[:] = [wall, cpu]
        timer.observe(text)
    steps = merged_phases(whole, [(whole, [placed.step for placed in builder_phase.steps]),
                                  (image_stages, timer.finish())])
    assert [(step.number, step.wall_s, step.cached) for step in steps] == [
        (1, 0, False), (2, 0, True), (3, 8, False), (4, 0, False), (5, 40, False), (6, 0, False), (7, 0, True),
        (8, 30, False), (9, 0, False), (10, 5, False), (11, 1, False), (12, 1, False)]
    assert steps[-1].instruction == "LABEL revision=abc"
