import io
import sys
import time

from trainrun.output import relay_needed, stamped, writes_to_descriptor


def test_line_gets_the_local_clock_time_with_milliseconds() -> None:
    now = time.mktime((2026, 11, 23, 4, 24, 29, 0, 0, -1)) + 0.0385
    assert stamped(b"[1,0]<stdout>:rank 0\n", now) == b"04:24:29.038 [1,0]<stdout>:rank 0\n"


def test_only_streams_that_are_the_process_descriptors_need_no_relay(tmp_path, monkeypatch) -> None:
    # A notebook kernel's sys.stdout is no descriptor (or another one): the ranks' output must be relayed into it.
    with open(tmp_path / "out", "w") as out:
        assert writes_to_descriptor(out, out.fileno())
        assert not writes_to_descriptor(out, out.fileno() + 1)
    assert not writes_to_descriptor(io.StringIO(), 1)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert relay_needed(timestamps=False)


def test_open_mpi_pieces_are_joined_into_whole_lines_per_rank() -> None:
    from trainrun.output import TaggedLines

    joiner = TaggedLines()
    # As Open MPI writes an unbuffered `print("rank", 0)` and rank 1's line arriving between its pieces.
    assert joiner.feed(b"[1,0]<stdout>:rank[1,1]<stdout>:rank 1\n") == [b"[1,1]<stdout>:rank 1\n"]
    assert joiner.feed(b"[1,0]<stdout>: [1,0]<stdout>:0\n") == [b"[1,0]<stdout>:rank 0\n"]
    assert joiner.feed(b"[1,0]<stderr>:a\n[1,0]<stderr>:b\n") == [b"[1,0]<stderr>:a\n", b"[1,0]<stderr>:b\n"]
    assert joiner.feed(b"mpirun noticed that ...\n") == [b"mpirun noticed that ...\n"]
    assert joiner.feed(b"[1,1]<stdout>:no newline at the end") == []
    assert joiner.flush() == [b"[1,1]<stdout>:no newline at the end\n"] and joiner.flush() == []
