"""Waiting in tests for what another process or thread makes true, on machines where it is scheduled late."""
from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], seconds: float, interval: float = 0.05) -> bool:
    """Whether `condition()` became true within `seconds`, polled every `interval`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True
