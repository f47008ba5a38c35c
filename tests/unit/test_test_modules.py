"""Test modules need names unique across the tiers: pytest imports them by basename (the tiers' folders are not
packages), and a second module of the same name stops the whole run at collection."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name():
    modules = [path for path in TESTS.rglob("test_*.py")
               if not {"upstream", "node_modules"} & set(path.relative_to(TESTS).parts)]
    shared = {name for name, count in Counter(path.name for path in modules).items() if count > 1}
    assert shared == set(), sorted(str(path.relative_to(TESTS)) for path in modules if path.name in shared)
