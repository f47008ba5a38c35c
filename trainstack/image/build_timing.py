"""Where a build's time goes: each Dockerfile step's wall and CPU time, read from the classic builder's stream as it
arrives (a step starts at its `Step N/M : INSTRUCTION` line and ends where the next one starts or the stream ends;
a cached step says ` ---> Using cache`), and from them the stages, what each step waits on, the critical path, the
slowest steps, the record benchmarks/results/image_build.json keeps and the build's summary line."""
from __future__ import annotations

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

STEP_LINE = re.compile(r"Step (\d+)/\d+ : (.*)")
CACHED_LINE = "---> Using cache"
FROM_INSTRUCTION = re.compile(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)
COPY_FROM = re.compile(r"^(?:COPY|ADD)\s.*--from=(\S+)", re.IGNORECASE)
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


class StepTimer:
    """Fed the build's stream chunk by chunk (observe), gives each step's times once the stream has ended (finish)."""

    def __init__(self, wall_clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = host_cpu_seconds):
        self._wall_clock, self._cpu_clock = wall_clock, cpu_clock
        self._pending = ""
        # (number, instruction, wall at its start, cpu at its start, cached)
        self._started: list[tuple[int, str, float, float, bool]] = []

    def observe(self, text: str) -> None:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        for line in lines:
            self._read(line)

    def _read(self, line: str) -> None:
        step = STEP_LINE.fullmatch(line.strip())
        if step:
            self._started.append((int(step[1]), step[2], self._wall_clock(), self._cpu_clock(), False))
        elif line.strip() == CACHED_LINE and self._started:
            self._started[-1] = (*self._started[-1][:4], True)

    def finish(self) -> list[TimedStep]:
        if self._pending:
            self._read(self._pending)
            self._pending = ""
        ends = [(wall, cpu) for _, _, wall, cpu, _ in self._started[1:]] + [(self._wall_clock(), self._cpu_clock())]
        return [TimedStep(number, instruction, round(end_wall - wall, 3), round(end_cpu - cpu, 3), cached)
                for (number, instruction, wall, cpu, cached), (end_wall, end_cpu) in zip(self._started, ends)]


@dataclass(frozen=True)
class StepInStage:
    step: TimedStep
    stage: str
    # The steps it directly waits on: the one before it in its stage, and the last step of each stage its FROM or
    # COPY --from names.
    after: tuple[int, ...]
    copies_from: str | None


class BuildSteps:
    """A build's timed steps placed in their stages, and what follows from their waits."""

    def __init__(self, steps: list[TimedStep]):
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
            "wall_s": round(self.wall_s, 1), "cpu_s": round(self.cpu_s, 1), "cpu_time": CPU_TIME_SOURCE,
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
        return (f"build: {self.wall_s:.0f} s wall, {self.cpu_s:.0f} s CPU{cached}; critical path "
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
