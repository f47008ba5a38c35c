"""trainstack.test_tiers: the image tier's pytest beside the integration and unit tiers' (with the image modules that
balance the two), each line marked with its run, the exit code a failing run's; arguments naming tests run one
pytest."""
import re
import subprocess
import sys
from pathlib import Path

from trainstack.test_tiers import IMAGE_MODULES_WITH_THE_OTHERS

REPO = Path(__file__).resolve().parents[2]


def project(root: Path, failing: str) -> Path:
    for tier in ("image", "integration", "unit"):
        folder = root / "tests" / tier
        folder.mkdir(parents=True)
        body = "assert False" if tier == failing else "assert True"
        (folder / f"test_{tier}_tier.py").write_text(f"def test_{tier}():\n    {body}\n")
    for module in IMAGE_MODULES_WITH_THE_OTHERS:
        (root / module).write_text("def test_balanced():\n    assert True\n")
    return root


def tiers(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack.test_tiers", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO)})


def test_the_tiers_run_at_once_each_line_marked_and_a_failure_is_the_exit_code(tmp_path: Path) -> None:
    done = tiers(project(tmp_path, failing="unit"))
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    others = 2 + len(IMAGE_MODULES_WITH_THE_OTHERS)
    assert any(line.startswith("[image] ") and "1 passed" in line for line in lines), done.stdout
    assert any(line.startswith("[others] ") and f"1 failed, {others - 1} passed" in line for line in lines), \
        done.stdout
    assert lines[-2:] == ["[image] pytest exited 0", "[others] pytest exited 1"], done.stdout
    assert re.fullmatch(r"\[tiers\] \d+\.\d minutes, the host's \d+ cores busy \d+% of it", lines[-3]), done.stdout


def test_arguments_naming_tests_run_one_pytest(tmp_path: Path) -> None:
    done = tiers(project(tmp_path, failing="image"), "tests/unit")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
    assert not any(line.startswith(("[image]", "[others]")) for line in done.stdout.splitlines()), done.stdout
