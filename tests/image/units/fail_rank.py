"""Rank 1 exits with code 3 after a moment; every other rank sleeps until it is stopped."""
import os
import sys
import time

if os.environ["RANK"] == "1":
    time.sleep(1)
    sys.exit(3)
time.sleep(600)
