"""trainstack.test_tiers: the image tier's pytest beside the integration and unit tiers', each line marked with its
run, the exit code a failing run's; arguments naming tests run one pytest."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def project(root: Path, failing: str) -> Path:
    for tier in ("image", "integration", "unit"):
        folder = root / "tests" / tier
        folder.mkdir(parents=True)
        body = "assert False" if tier == failing else "assert True"
        (folder / f"test_{tier}_tier.py").write_text(f"def test_{tier}():\n    {body}\n")
    return root


def tiers(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack.test_tiers", "-q", "-p", "no:cacheprovider", *args],
                          cwd=root, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO)})


def test_the_tiers_run_at_once_each_line_marked_and_a_failure_is_the_exit_code(tmp_path: Path) -> None:
    done = tiers(project(tmp_path, failing="unit"))
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith("[image] ") and "1 passed" in line for line in lines), done.stdout
    assert any(line.startswith("[integration+unit] ") and "1 failed, 1 passed" in line for line in lines), done.stdout
    assert lines[-2:] == ["[image] pytest exited 0", "[integration+unit] pytest exited 1"], done.stdout


def test_arguments_naming_tests_run_one_pytest(tmp_path: Path) -> None:
    done = tiers(project(tmp_path, failing="image"), "tests/unit")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
    assert not any(line.startswith(("[image]", "[integration+unit]")) for line in done.stdout.splitlines()), done.stdout
