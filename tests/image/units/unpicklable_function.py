"""trainrun.run on a function that uses a module-level lock, which cannot be pickled for the ranks."""
import threading

import trainrun

lock = threading.Lock()


def train() -> int:
    with lock:
        return 1


trainrun.run(train, backend="torch", num_processes=2)
