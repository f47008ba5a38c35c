"""One format of bad input for the three distributions: pooltemplates.Problem, `field = value: rule (valid: ...)`
with the value cut at MAX_SHOWN; trainrun's UsageError and the host tooling's errors print exactly that."""
import pytest

from pooltemplates import MAX_SHOWN, Problem
from trainrun.errors import UsageError
from trainstack.clusters.containers import ClusterError
from trainstack.errors import TrainstackError, bad_value

LONG_VALUE = "x" * 10 * MAX_SHOWN
EXPECTED = Problem("--option", LONG_VALUE, "is too long", "a short value")


def test_problem_cuts_a_long_value_at_the_bound() -> None:
    text = str(EXPECTED)
    assert text.startswith("--option = 'xxx") and text.endswith("': is too long (valid: a short value)")
    assert "..." in text
    assert len(text) < MAX_SHOWN + 60


def test_trainrun_usage_error_prints_the_problem_format() -> None:
    # Keywords, so that the test holds whichever order UsageError's parameters take.
    error = UsageError(option="--option", value=LONG_VALUE, valid="a short value", rule="is too long")
    assert str(error) == str(EXPECTED)


@pytest.mark.parametrize("error_type", [TrainstackError, ClusterError])
def test_every_host_error_type_has_the_one_bad_option(error_type) -> None:
    error = error_type.bad_option("--option", LONG_VALUE, "is too long", "a short value")
    assert type(error) is error_type
    assert str(error) == str(EXPECTED)
    assert "bad_option" not in vars(error_type) or error_type is TrainstackError


def test_bad_value_is_the_base_errors_bad_option() -> None:
    assert str(bad_value("--option", LONG_VALUE, "is too long", "a short value")) == str(EXPECTED)
