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


EDGE = b"-" * 74 + b"\n"


def test_open_mpis_banners_about_a_rank_end_are_left_out_and_its_others_kept() -> None:
    from trainrun.output import RankEndBanners

    banners = RankEndBanners()
    rank_end = [EDGE, b"Primary job  terminated normally, but 1 process returned\n", b"a non-zero exit code.\n", EDGE,
                EDGE, b"mpirun detected that one or more processes exited with non-zero status, thus causing\n",
                b"\n", b"  Exit code:    1\n", EDGE]
    assert [kept for line in rank_end for kept in banners.feed(line)] == []
    other = [EDGE, b"There are not enough slots available in the system\n", EDGE]
    assert [kept for line in other for kept in banners.feed(line)] == other
    assert banners.feed(b"[1,1]<stderr>:ValueError: boom\n") == [b"[1,1]<stderr>:ValueError: boom\n"]
    assert banners.feed(EDGE) == [] and banners.feed(b"cut short\n") == []
    assert banners.flush() == [EDGE, b"cut short\n"] and banners.flush() == []


def test_relay_copies_each_line_as_it_arrives_without_the_rank_end_banner() -> None:
    import os
    import threading

    from trainrun.output import _copy_lines

    read_end, write_end = os.pipe()
    target = io.StringIO()
    with open(read_end, "rb") as source:
        copier = threading.Thread(target=_copy_lines, args=(source, target, False, True, True))
        copier.start()
        os.write(write_end, b"[1,0]<stdout>:first\n")
        deadline = time.monotonic() + 5
        while not target.getvalue() and time.monotonic() < deadline:  # copied before the pipe ends
            time.sleep(0.01)
        assert target.getvalue() == "[1,0]<stdout>:first\n"
        os.write(write_end, EDGE + b"mpirun noticed that process rank 1 with PID 0 exited on signal 9\n" + EDGE)
        os.close(write_end)
        copier.join(5)
    assert target.getvalue() == "[1,0]<stdout>:first\n"


def test_torchruns_records_of_a_rank_end_are_left_out() -> None:
    import logging

    from trainrun.torchrun import shown_record

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("torch.distributed.elastic.multiprocessing.api", logging.ERROR, "api.py", 1002, msg,
                                 (), None)

    assert not shown_record(record("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s"))
    assert not shown_record(record("Sending process %s closing signal %s"))
    assert shown_record(record("Process %s did not exit after %s within %ss; abandoning and continuing teardown."))
