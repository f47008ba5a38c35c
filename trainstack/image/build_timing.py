"""Where a build's time goes: each Dockerfile step's wall and CPU time, read from the build's output as it arrives,
and from them the stages, what each step waits on, the critical path, the slowest steps, the record
benchmarks/results/image_build.json keeps and the build's summary line.

The classic builder's stream (StepTimer): a step starts at its `Step N/M : INSTRUCTION` line and ends where the next
one starts or the stream ends; a cached step says ` ---> Using cache`. BuildKit's plain progress (BuildKitStepTimer):
a step is a vertex `#V [STAGE I/N] INSTRUCTION`, ending at `#V DONE SECONDS` (or `#V CACHED`), several at once; the
Dockerfile tells which step each is, so both builders' records number steps alike."""
from __future__ import annotations

import difflib
import json
import os
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainstack.image.matrix import REPO_ROOT

IMAGE_BUILD_RESULTS = REPO_ROOT / "benchmarks" / "results" / "image_build.json"
# The record's kinds in the results file: a build in which no step came from the cache, and any other.
COLD_BUILD_STEPS = "cold_build_steps"
REBUILD_STEPS = "rebuild_steps"
SLOWEST_SHOWN = 10
SUMMARY_SHOWN = 3
INSTRUCTION_SHOWN = 100
SHORT_INSTRUCTION = 60
CPU_TIME_SOURCE = "the host's busy CPU seconds while the step ran (/proc/stat: user, nice, system, irq, softirq)"
BUILDKIT_CPU_TIME_SOURCE = (CPU_TIME_SOURCE + ", shared equally among the steps running at the same time")

STEP_LINE = re.compile(r"Step (\d+)/\d+ : (.*)")
CACHED_LINE = "---> Using cache"
FROM_INSTRUCTION = re.compile(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)
COPY_FROM = re.compile(r"^(?:COPY|ADD)\s.*--from=(\S+)", re.IGNORECASE)
# BuildKit's plain progress: a vertex's name (a Dockerfile step is `[STAGE I/N] INSTRUCTION`), its end, its cache hit.
BUILDKIT_STEP = re.compile(r"#(\d+) \[(\S+)\s+(\d+)/(\d+)\] (.*)")
BUILDKIT_DONE = re.compile(r"#(\d+) DONE (\d+(?:\.\d+)?)s")
BUILDKIT_END = re.compile(r"#(\d+) (CACHED|ERROR)\b")
# The instructions BuildKit shows as vertices: every other one only changes the image's config.
BUILDKIT_VERTEX_INSTRUCTIONS = ("RUN", "COPY", "ADD", "WORKDIR")
_USER_HZ = os.sysconf("SC_CLK_TCK")


def host_cpu_seconds() -> float:
    """CPU seconds the whole host has spent busy since boot. The host's and not the build containers' cgroups: the
    classic builder removes each step's container as the step ends, taking its cgroup's counters with it, and the
    daemon's own work for a step (sending the context, diffing and committing the layer) is in no container. So it
    counts whatever else runs on the machine too, and means nothing when DOCKER_HOST is another machine."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = stat.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[1:8])
    return (user + nice + system + irq + softirq) / _USER_HZ


@dataclass(frozen=True)
class TimedStep:
    number: int
    instruction: str
    wall_s: float
    cpu_s: float
    cached: bool


class _LineTimer:
    """Fed the build's output chunk by chunk (observe), read line by line; its elapsed time runs from its creation."""

    def __init__(self, wall_clock: Callable[[], float], cpu_clock: Callable[[], float]):
        self._wall_clock, self._cpu_clock = wall_clock, cpu_clock
        self._pending = ""
        self._created = wall_clock()
        self.elapsed_s = 0.0

    def observe(self, text: str) -> None:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._read(line)

    def _read(self, line: str) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        if self._pending:
            self._read(self._pending)
            self._pending = ""
        self.elapsed_s = round(self._wall_clock() - self._created, 3)


class StepTimer(_LineTimer):
    """The classic builder's stream; gives each step's times once the stream has ended (finish)."""

    builder = "classic"
    cpu_time = CPU_TIME_SOURCE

    def __init__(self, wall_clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = host_cpu_seconds):
        super().__init__(wall_clock, cpu_clock)
        # (number, instruction, wall at its start, cpu at its start, cached)
        self._started: list[tuple[int, str, float, float, bool]] = []

    def _read(self, line: str) -> None:
        step = STEP_LINE.fullmatch(line.strip())
        if step:
            self._started.append((int(step[1]), step[2], self._wall_clock(), self._cpu_clock(), False))
        elif line.strip() == CACHED_LINE and self._started:
            self._started[-1] = (*self._started[-1][:4], True)

    def finish(self) -> list[TimedStep]:
        self._flush()
        ends = [(wall, cpu) for _, _, wall, cpu, _ in self._started[1:]] + [(self._wall_clock(), self._cpu_clock())]
        return [TimedStep(number, instruction, round(end_wall - wall, 3), round(end_cpu - cpu, 3), cached)
                for (number, instruction, wall, cpu, cached), (end_wall, end_cpu) in zip(self._started, ends)]


def dockerfile_instructions(dockerfile: str) -> list[str]:
    """A Dockerfile's instructions in order, each on one line (continuations joined; comments and blank lines
    left out): step N of a classic build is the Nth."""
    instructions: list[str] = []
    continued = False
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if continued:
            instructions[-1] += " " + stripped
        else:
            instructions.append(stripped)
        continued = instructions[-1].endswith("\\")
        if continued:
            instructions[-1] = instructions[-1][:-1].rstrip()
    return instructions


def buildkit_steps(instructions: list[str]) -> dict[tuple[str, int], int]:
    """{(BuildKit's name of a stage, the vertex's I in it): step number}: BuildKit numbers a stage's RUN, COPY, ADD
    and WORKDIR steps from 1, and its FROM first when that names an image rather than an earlier stage; a stage
    without a name is `stage-INDEX`."""
    steps: dict[tuple[str, int], int] = {}
    stage_names: set[str] = set()
    stage, index, stage_count = "", 0, 0
    for number, instruction in enumerate(instructions, start=1):
        keyword = instruction.split(maxsplit=1)[0].upper()
        from_instruction = FROM_INSTRUCTION.match(instruction)
        if from_instruction:
            stage = from_instruction[2] or f"stage-{stage_count}"
            stage_count += 1
            index = 0
            if from_instruction[1] not in stage_names:
                index = 1
                steps[(stage, index)] = number
            stage_names.add(stage)
        elif keyword in BUILDKIT_VERTEX_INSTRUCTIONS:
            index += 1
            steps[(stage, index)] = number
    return steps


class BuildKitStepTimer(_LineTimer):
    """BuildKit's plain progress, whose steps overlap: each step's wall time is the one BuildKit gives it (its
    DONE), its CPU time the host's busy CPU seconds shared equally among the steps running at each moment. Steps
    that are no vertex (ENV, LABEL, FROM of a stage, ...) take no time, and are cached as the step before them; a
    FROM of an image is never a cached step (BuildKit says CACHED for a base image it has, as the classic builder
    says nothing)."""

    builder = "buildkit"
    cpu_time = BUILDKIT_CPU_TIME_SOURCE

    def __init__(self, dockerfile: str, wall_clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = host_cpu_seconds):
        super().__init__(wall_clock, cpu_clock)
        self._instructions = dockerfile_instructions(dockerfile)
        self._steps = buildkit_steps(self._instructions)
        self._step_of_vertex: dict[int, int] = {}
        self._started: dict[int, float] = {}
        self._wall: dict[int, float] = {}
        self._cpu: dict[int, float] = {}
        self._cached: set[int] = set()
        self._running: set[int] = set()
        self._last_cpu = cpu_clock()

    def _read(self, line: str) -> None:
        cpu = self._cpu_clock()
        for number in self._running:
            self._cpu[number] = self._cpu.get(number, 0.0) + (cpu - self._last_cpu) / len(self._running)
        self._last_cpu = cpu
        started, done, ended = BUILDKIT_STEP.match(line), BUILDKIT_DONE.match(line), BUILDKIT_END.match(line)
        if started and int(started[1]) not in self._step_of_vertex:
            number = self._steps.get((started[2], int(started[3])))
            if number is not None:
                self._step_of_vertex[int(started[1])] = number
                self._started[number] = self._wall_clock()
                self._running.add(number)
        elif (done or ended) and int((done or ended)[1]) in self._step_of_vertex:
            number = self._step_of_vertex[int((done or ended)[1])]
            self._running.discard(number)
            if done:
                self._wall[number] = float(done[2])
            else:
                self._wall[number] = round(self._wall_clock() - self._started[number], 3)
                if ended[2] == "CACHED":
                    self._cached.add(number)

    def finish(self) -> list[TimedStep]:
        self._flush()
        steps: list[TimedStep] = []
        cached = False
        for number, instruction in enumerate(self._instructions, start=1):
            if number in self._started:
                cached = number in self._cached and not FROM_INSTRUCTION.match(instruction)
            steps.append(TimedStep(number, instruction, round(self._wall.get(number, 0.0), 3),
                                   round(self._cpu.get(number, 0.0), 3), cached))
        return steps


def merged_phases(dockerfile: list[str], phases: list[tuple[list[str], list[TimedStep]]]) -> list[TimedStep]:
    """The steps of a build made in phases, each phase (its Dockerfile's instructions, its timed steps) from a Dockerfile
    of its own, as the steps of `dockerfile`: a phase's step is the step of `dockerfile` with the same instruction where
    the two agree, a step run in several phases takes the sum of their times and is cached where every phase that
    spent time on it was, and a step no Dockerfile holds (a build label the classic builder adds) comes last."""
    found: dict[int, list[TimedStep]] = {}
    added: list[TimedStep] = []
    for instructions, steps in phases:
        number_in_build = {}
        for block in difflib.SequenceMatcher(None, instructions, dockerfile, autojunk=False).get_matching_blocks():
            number_in_build.update({block.a + offset + 1: block.b + offset + 1 for offset in range(block.size)})
        for step in steps:
            if step.number in number_in_build:
                found.setdefault(number_in_build[step.number], []).append(step)
            elif step.number > len(instructions):
                added.append(step)
    merged = [TimedStep(number, dockerfile[number - 1], round(sum(step.wall_s for step in steps), 3),
                        round(sum(step.cpu_s for step in steps), 3),
                        any(step.cached for step in steps) and all(step.cached or not step.wall_s for step in steps))
              for number, steps in sorted(found.items())]
    return merged + [TimedStep(len(dockerfile) + index, step.instruction, step.wall_s, step.cpu_s, step.cached)
                     for index, step in enumerate(added, start=1)]


@dataclass(frozen=True)
class StepInStage:
    step: TimedStep
    stage: str
    # The steps it directly waits on: the one before it in its stage, and the last step of each stage its FROM or
    # COPY --from names.
    after: tuple[int, ...]
    copies_from: str | None


class BuildSteps:
    """A build's timed steps placed in their stages, and what follows from their waits; `elapsed_s`: the build's own
    wall time, less than the steps' sum where they overlap."""

    def __init__(self, steps: list[TimedStep], elapsed_s: float | None = None, builder: str = StepTimer.builder,
                 cpu_time: str = CPU_TIME_SOURCE):
        self.elapsed_s = elapsed_s if elapsed_s is not None else round(sum(step.wall_s for step in steps), 3)
        self.builder, self.cpu_time = builder, cpu_time
        self.steps = _in_stages(steps)
        self.by_number = {placed.step.number: placed for placed in self.steps}
        self.stages: dict[str, list[int]] = {}
        for placed in self.steps:
            self.stages.setdefault(placed.stage, []).append(placed.step.number)

    @property
    def wall_s(self) -> float:
        return sum(placed.step.wall_s for placed in self.steps)

    @property
    def cpu_s(self) -> float:
        return sum(placed.step.cpu_s for placed in self.steps)

    @property
    def cached(self) -> int:
        return sum(placed.step.cached for placed in self.steps)

    def slowest(self, count: int = SLOWEST_SHOWN) -> list[StepInStage]:
        return sorted(self.steps, key=lambda placed: placed.step.wall_s, reverse=True)[:count]

    def waits_on(self, placed: StepInStage) -> list[str]:
        """The steps before it in its stage, and each stage it starts from or copies from."""
        numbers = self.stages[placed.stage]
        before = numbers[:numbers.index(placed.step.number)]
        if before:
            waits = [f"{placed.stage}: {_step_range(before)}"]
        else:  # its FROM: the stage it starts from, if it is one
            waits = [self._stage_wait(self.by_number[number].stage) for number in placed.after]
        return waits + ([self._stage_wait(placed.copies_from)] if placed.copies_from else [])

    def _stage_wait(self, stage: str) -> str:
        return f"all of {stage} ({_step_range(self.stages[stage])})" if stage in self.stages else f"image {stage}"

    def critical_path(self) -> list[StepInStage]:
        """The chain of steps, each waiting on the one before, with the most wall time: what the build would take if
        every step ran as soon as what it waits on was done."""
        finish: dict[int, float] = {}
        longest_before: dict[int, int | None] = {}
        for placed in self.steps:
            before = max(placed.after, key=lambda number: finish[number], default=None)
            longest_before[placed.step.number] = before
            finish[placed.step.number] = placed.step.wall_s + (finish[before] if before is not None else 0.0)
        path: list[StepInStage] = []
        number = max(finish, key=lambda number: finish[number], default=None)
        while number is not None:
            path.append(self.by_number[number])
            number = longest_before[number]
        return path[::-1]

    def record(self) -> dict[str, Any]:
        """What benchmarks/results/image_build.json keeps of the build."""
        path = self.critical_path()
        return {
            "builder": self.builder, "elapsed_s": round(self.elapsed_s, 1),
            "wall_s": round(self.wall_s, 1), "cpu_s": round(self.cpu_s, 1), "cpu_time": self.cpu_time,
            "step_count": len(self.steps), "cached_steps": self.cached,
            "stages": {stage: {"steps": _step_range(numbers), "wall_s": self._total(numbers, "wall_s"),
                               "cpu_s": self._total(numbers, "cpu_s")} for stage, numbers in self.stages.items()},
            "slowest_steps": [{**_figures(placed, INSTRUCTION_SHOWN), "waits_on": self.waits_on(placed)}
                              for placed in self.slowest()],
            "steps": [_figures(placed, SHORT_INSTRUCTION) for placed in self.steps],
            "critical_path": {"wall_s": round(sum(placed.step.wall_s for placed in path), 1),
                              "segments": [{"stage": stage, "steps": _step_range(numbers),
                                            "wall_s": self._total(numbers, "wall_s")}
                                           for stage, numbers in _segments(path)]},
        }

    def summary(self) -> str:
        """The build's last line: its totals, its critical path and its slowest steps."""
        path = self.critical_path()
        segments = ", ".join(f"{stage} {_step_range(numbers)}" for stage, numbers in _segments(path))
        slowest = "; ".join(
            f"{placed.step.number} {shortened(placed.step.instruction, SHORT_INSTRUCTION)}: {placed.step.wall_s:.0f} s"
            for placed in self.slowest(SUMMARY_SHOWN))
        cached = f" ({self.cached} of {len(self.steps)} steps cached)" if self.cached else ""
        return (f"build ({self.builder}): {self.elapsed_s:.0f} s, {self.wall_s:.0f} s of steps, {self.cpu_s:.0f} s CPU"
                f"{cached}; critical path "
                f"{sum(placed.step.wall_s for placed in path):.0f} s ({segments}); slowest steps: {slowest}")

    def _total(self, numbers: list[int], field: str) -> float:
        return round(sum(getattr(self.by_number[number].step, field) for number in numbers), 1)


def _figures(placed: StepInStage, instruction_length: int) -> dict[str, Any]:
    return {"step": placed.step.number, "stage": placed.stage,
            "instruction": shortened(placed.step.instruction, instruction_length),
            "wall_s": round(placed.step.wall_s, 1), "cpu_s": round(placed.step.cpu_s, 1), "cached": placed.step.cached}


def _in_stages(steps: list[TimedStep]) -> list[StepInStage]:
    placed: list[StepInStage] = []
    last_of: dict[str, int] = {}  # each stage's last step so far, by its name and by its index
    stage, aliases, stage_count = "", (), 0
    for step in steps:
        from_instruction = FROM_INSTRUCTION.match(step.instruction)
        copy_from = COPY_FROM.match(step.instruction)
        if from_instruction:
            # COPY --from=INDEX names an unnamed stage by its index.
            stage = from_instruction[2] or f"stage {stage_count}"
            aliases = (stage, str(stage_count))
            stage_count += 1
            after = (last_of[from_instruction[1]],) if from_instruction[1] in last_of else ()
        else:
            after = (last_of[stage],) if stage in last_of else ()
            if copy_from and copy_from[1] in last_of:
                after += (last_of[copy_from[1]],)
        placed.append(StepInStage(step, stage, after, _stage_of(copy_from[1], placed) if copy_from else None))
        for alias in aliases:
            last_of[alias] = step.number
    return placed


def _stage_of(reference: str, placed: list[StepInStage]) -> str:
    """The stage COPY --from names, by name or by index; an image that is no stage is named as it is."""
    stages = list(dict.fromkeys(step.stage for step in placed))
    if reference.isdigit() and int(reference) < len(stages):
        return stages[int(reference)]
    return reference


def _segments(path: list[StepInStage]) -> list[tuple[str, list[int]]]:
    segments: list[tuple[str, list[int]]] = []
    for placed in path:
        if segments and segments[-1][0] == placed.stage:
            segments[-1][1].append(placed.step.number)
        else:
            segments.append((placed.stage, [placed.step.number]))
    return segments


def _step_range(numbers: list[int]) -> str:
    return f"step {numbers[0]}" if len(numbers) == 1 else f"steps {numbers[0]}-{numbers[-1]}"


def shortened(instruction: str, length: int = INSTRUCTION_SHOWN) -> str:
    """The instruction on one line, its whitespace collapsed, cut to `length` characters."""
    flat = " ".join(instruction.split())
    return flat if len(flat) <= length else flat[:length - 3] + "..."


def record_result(flavor: str, kind: str, figures: dict[str, Any], results: Path = IMAGE_BUILD_RESULTS) -> dict:
    """Merges one kind of figures of a flavor into the results file, with when and where they were measured; keeps
    every other kind and flavor. Returns the figures as written."""
    figures = {**figures, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    written = json.loads(results.read_text()) if results.exists() else {}
    written.setdefault(flavor, {})[kind] = figures
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    return figures


def record_build_steps(flavor: str, steps: BuildSteps, results: Path = IMAGE_BUILD_RESULTS) -> None:
    """The build's step record, as its flavor's cold build (no step from the cache) or rebuild."""
    record_result(flavor, REBUILD_STEPS if steps.cached else COLD_BUILD_STEPS, steps.record(), results)
