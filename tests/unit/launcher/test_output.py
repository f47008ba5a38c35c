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
