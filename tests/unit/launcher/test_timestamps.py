import time

from trainrun.timestamps import stamped


def test_line_gets_the_local_clock_time_with_milliseconds() -> None:
    now = time.mktime((2026, 11, 23, 4, 24, 29, 0, 0, -1)) + 0.0385
    assert stamped(b"[1,0]<stdout>:rank 0\n", now) == b"04:24:29.038 [1,0]<stdout>:rank 0\n"
