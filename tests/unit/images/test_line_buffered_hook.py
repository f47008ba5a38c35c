"""The image's site hook for whole lines (images/site-packages/trainstack_line_buffered.py): two unbuffered Pythons
printing at once into one pipe, as torchrun's local ranks do under trainrun and the patched TorchDistributor, tear
each other's lines; with TRAINRUN_LINE_BUFFERED=1 every line arrives whole. In the image, under TorchDistributor:
tests/image/test_distributors.py."""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from file_modules import load_file_module

from trainrun.output import LINE_BUFFERED

SITE_PACKAGES = Path(__file__).resolve().parents[3] / "images" / "site-packages"
PATCH = Path(__file__).resolve().parents[3] / "images" / "patches" / "pyspark-4.3.0-unbuffered-ranks.patch"
LINES_PER_RANK = 2000
# Each rank reads the hooks' folder as a site dir (its .pth files included), waits for the shared start, then prints
# as users do: several pieces, no flush.
RANK = """
import site, sys, time
site.addsitedir(sys.argv[1])
start, rank = float(sys.argv[2]), sys.argv[3]
while time.time() < start:
    pass
for step in range(%d):
    print("rank", rank, "step", step, "loss", 0.25)
""" % LINES_PER_RANK
WHOLE_LINE = re.compile(r"rank [01] step \d+ loss 0\.25")


def ranks_output(env: dict[str, str]) -> list[str]:
    """The lines of two ranks started together, both writing to one pipe."""
    start = str(time.time() + 0.5)
    read, write = os.pipe()
    # -u: PYTHONUNBUFFERED=1, which -I (isolated from this machine's site and variables) would ignore.
    ranks = [subprocess.Popen([sys.executable, "-I", "-u", "-c", RANK, str(SITE_PACKAGES), start, str(rank)],
                              stdout=write, env=env) for rank in (0, 1)]
    os.close(write)
    with os.fdopen(read) as pipe:
        lines = pipe.read().splitlines()
    assert [rank.wait(timeout=60) for rank in ranks] == [0, 0]
    return lines


def test_ranks_told_to_write_whole_lines_never_tear_each_others():
    lines = ranks_output({LINE_BUFFERED: "1"})
    assert len(lines) == 2 * LINES_PER_RANK
    assert [line for line in lines if not WHOLE_LINE.fullmatch(line)] == []


def test_without_the_variable_python_is_left_as_it_was():
    probe = "import site, sys; site.addsitedir(sys.argv[1]); print(sys.stdout.write_through, sys.stdout.line_buffering)"
    for flags, env, expected in ((["-u"], {}, "True False"), ([], {}, "False False"),
                                 (["-u"], {LINE_BUFFERED: "1"}, "False True")):
        output = subprocess.run([sys.executable, "-I", *flags, "-c", probe, str(SITE_PACKAGES)], env=env,
                                capture_output=True, text=True, check=True).stdout
        assert output.strip() == expected, (flags, env)


def test_trainrun_and_the_pyspark_patch_set_the_variable_the_hook_reads():
    hook = load_file_module(SITE_PACKAGES / "trainstack_line_buffered.py")
    assert LINE_BUFFERED == hook.LINE_BUFFERED
    assert f'"{hook.LINE_BUFFERED}": "1"' in PATCH.read_text()
