"""HorovodRunner's arguments: np's sign picks where ranks run; invalid values name what is valid."""
from __future__ import annotations

import pytest

from trainrun import HorovodRunner, UsageError


@pytest.mark.parametrize("np,spark,expected", [(2, None, (2, None)), (-3, None, (3, None)),
                                               (4, "local[4]", (4, "local[4]"))])
def test_np_sign_picks_process_count_and_place(np, spark, expected) -> None:
    runner = HorovodRunner(np=np, spark=spark)
    assert (runner.num_processes, runner.spark) == expected


@pytest.mark.parametrize("np", [0, True, 2.0, "2"])
def test_np_that_is_not_a_non_zero_integer_names_valid_values(np) -> None:
    with pytest.raises(UsageError, match=r"^np = .*: is invalid \(valid: N > 0 \(N processes, on Spark when spark= "
                                         r"is given, else on this host\) or -N \(N processes on this host"):
        HorovodRunner(np=np)


def test_negative_np_with_spark_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^np = -2: is invalid \(valid: N > 0 together with spark="):
        HorovodRunner(np=-2, spark="local[2]")


def test_driver_log_verbosity_takes_horovod_runners_values() -> None:
    HorovodRunner(np=2, driver_log_verbosity="log_callback_only")
    with pytest.raises(UsageError, match=r"^driver_log_verbosity = 'debug': is invalid \(valid: 'all' or "
                                         r"'log_callback_only'\)$"):
        HorovodRunner(np=2, driver_log_verbosity="debug")


def test_kwargs_are_for_functions_only() -> None:
    import trainrun

    with pytest.raises(UsageError, match=r"^kwargs = \{'lr': 0.1\}: is invalid \(valid: none for a script"):
        trainrun.run("train.py", kwargs={"lr": 0.1})
