"""Where the job's output goes. Normally the launcher writes to trainrun's own stdout and stderr file
descriptors, and trainrun stays out of the way. It relays the output itself, line by line, when
`--timestamp-output` asks for a time prefix (`12:04:31.250 `), when Python's sys.stdout is not file
descriptor 1 (in a Jupyter kernel it is the cell's output, which a child writing to fd 1 never reaches), or when
Open MPI tags the output (TaggedLines)."""
from __future__ import annotations

import contextvars
import re
import subprocess
import sys
import threading
import time
from typing import BinaryIO, Callable, TextIO

# A rank's process that outlives the launcher can hold the pipe open; trainrun does not wait for it.
DRAIN_SECONDS = 2.0
# Set for the ranks whose output trainrun relays: in a trainstack image, the site hook
# images/site-packages/trainstack_line_buffered.py then writes each line in one piece, so that torchrun's local
# ranks, which share one pipe, never tear each other's lines (Python elsewhere ignores it).
LINE_BUFFERED = "TRAINRUN_LINE_BUFFERED"


def stamped(line: bytes, now: float) -> bytes:
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    return f"{clock}.{int(now % 1 * 1000):03d} ".encode() + line


def writes_to_descriptor(stream: TextIO, fd: int) -> bool:
    """Whether `stream` is file descriptor `fd` itself (a terminal, a file, a pipe), so a child that inherits
    `fd` writes where the stream does."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def relay_needed(timestamps: bool) -> bool:
    return timestamps or not (writes_to_descriptor(sys.stdout, 1) and writes_to_descriptor(sys.stderr, 2))


# Open MPI's --tag-output prefix: [JOB,RANK]<stdout>:, <stderr>: or <stddiag>:.
OPENMPI_TAG = re.compile(rb"\[\d+,\d+\]<std(?:out|err|diag)>:")


class TaggedLines:
    """Open MPI's --tag-output tags each piece a rank writes, not each line: a rank whose Python is unbuffered
    (PYTHONUNBUFFERED, which trainrun forwards) writes `print("rank", 0)` as four pieces, and the line arrives as
    `[1,0]<stdout>:rank[1,0]<stdout>: [1,0]<stdout>:0`, possibly with other ranks' pieces in between. This joins
    each rank's pieces into whole lines, each tagged once; text without a tag (mpirun's own) passes as it is."""

    def __init__(self) -> None:
        self._partial: dict[bytes, bytes] = {}

    def feed(self, data: bytes) -> list[bytes]:
        lines = []
        tags = list(OPENMPI_TAG.finditer(data))
        untagged = data[:tags[0].start()] if tags else data
        if untagged:
            lines.append(untagged)
        for tag, following in zip(tags, [*tags[1:], None]):
            name = tag.group()
            text = self._partial.pop(name, b"") + data[tag.end():following.start() if following else len(data)]
            *whole, rest = text.split(b"\n")
            lines += [name + line + b"\n" for line in whole]
            if rest:
                self._partial[name] = rest
        return lines

    def flush(self) -> list[bytes]:
        """The pieces of lines that never ended, each as a line of its own."""
        lines = [name + rest + b"\n" for name, rest in self._partial.items()]
        self._partial.clear()
        return lines


# Open MPI's help messages, each between two lines of dashes, that say what trainrun's one-line end says: a rank
# failed or was killed, so mpirun stopped the job.
OPENMPI_BANNER_EDGE = re.compile(rb"-{20,}\n?")
OPENMPI_RANK_END_BANNERS = (b"Primary job  terminated normally", b"mpirun detected that one or more processes exited",
                            b"mpirun noticed that process rank", b"mpirun has exited due to process rank")


class RankEndBanners:
    """Leaves out Open MPI's banners about a rank's end (OPENMPI_RANK_END_BANNERS) from mpirun's own output; its
    other banners, and the ranks' tagged lines (which never start with dashes), pass as they are."""

    def __init__(self) -> None:
        self._held: list[bytes] | None = None  # the banner being read, from its first edge

    def feed(self, line: bytes) -> list[bytes]:
        if self._held is None:
            if not OPENMPI_BANNER_EDGE.fullmatch(line):
                return [line]
            self._held = [line]
            return []
        self._held.append(line)
        if not OPENMPI_BANNER_EDGE.fullmatch(line):
            return []
        banner, self._held = self._held, None
        body = b"".join(banner[1:-1]).lstrip()
        return [] if body.startswith(OPENMPI_RANK_END_BANNERS) else banner

    def flush(self) -> list[bytes]:
        held, self._held = self._held or [], None
        return held


def start_in_callers_context(target: Callable[..., None], *args: object) -> threading.Thread:
    """A daemon thread running `target(*args)` in a copy of the caller's context variables. In a notebook kernel,
    ipykernel (7) files a stream's output under the parent message it finds in a context variable, which a new
    thread does not inherit: so the thread's lines belong to the cell that started the job, not to whichever
    message the kernel handled last."""
    thread = threading.Thread(target=contextvars.copy_context().run, args=(target, *args), daemon=True)
    thread.start()
    return thread


def _copy_lines(source: BinaryIO, target: TextIO, timestamps: bool, tagged: bool, quiet: bool) -> None:
    """Copies each line as it arrives (a rank's line reaches a notebook cell while the job runs, not at its end),
    flushing after each line, whose pieces of unfinished tagged lines come last; `quiet` leaves out Open MPI's
    banners about a rank's end."""
    joiner = TaggedLines() if tagged else None
    banners = RankEndBanners() if quiet else None
    while True:
        chunk = source.readline()
        if joiner is None:
            lines = [chunk] if chunk else []
        else:
            lines = joiner.feed(chunk) if chunk else joiner.flush()
        if banners is not None:
            lines = [kept for line in lines for kept in banners.feed(line)] + ([] if chunk else banners.flush())
        for line in lines:
            if timestamps:
                line = stamped(line, time.time())
            target.write(line.decode("utf-8", errors="replace"))
        if lines:
            target.flush()
        if not chunk:
            return


class RelayedOutput:
    """Pipes for the launcher's stdout and stderr, copied line by line to sys.stdout and sys.stderr (read when
    the job starts: a notebook cell's streams), each line whole (Open MPI's tagged pieces joined when `tagged`),
    with a time prefix when asked, and without Open MPI's banners about a rank's end when `quiet` (trainrun's
    summary line says it)."""

    popen_streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}

    def __init__(self, timestamps: bool = False, tagged: bool = False, quiet: bool = False) -> None:
        self.timestamps = timestamps
        self.tagged = tagged
        self.quiet = quiet
        self._threads: list[threading.Thread] = []

    def start(self, proc: subprocess.Popen) -> None:
        for source, target in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            self._threads.append(start_in_callers_context(_copy_lines, source, target, self.timestamps, self.tagged,
                                                          self.quiet))

    def drain(self) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
