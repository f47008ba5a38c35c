"""The payload of trainrun.run: what cannot be pickled is named in one error, with the fix."""
from __future__ import annotations

import os
import threading

import cloudpickle
import pytest

from trainrun import UnpicklableFunction
from trainrun.payload import pickle_payload

lock = threading.Lock()
log_file = open(os.devnull, "w")  # noqa: SIM115 - an open file at module level is the point


class DriverOnly:
    """Pickles the way a SparkContext does: its __reduce__ refuses, with a long message."""

    def __reduce__(self):
        raise RuntimeError("It appears that you are attempting to reference SparkContext from a broadcast variable.\n"
                           "SparkContext can only be used on the driver.")


spark_context = DriverOnly()


def uses_lock() -> int:
    with lock:
        return 1


def writes_log() -> None:
    log_file.write("x")


def train() -> None:
    writes_log()


def uses_context() -> int:
    return id(spark_context)


def test_a_picklable_function_round_trips_with_args_and_kwargs() -> None:
    def add(a: int, b: int = 0) -> int:
        return a + b

    fn, args, kwargs = cloudpickle.loads(pickle_payload(add, (1,), {"b": 2}))
    assert fn(*args, **kwargs) == 3


def test_module_level_lock_is_named_with_the_fix() -> None:
    with pytest.raises(UnpicklableFunction) as raised:
        pickle_payload(uses_lock, (), {})
    assert str(raised.value) == (
        "trainrun.run cannot pickle uses_lock() for the ranks: it uses `lock` (a _thread.lock), which cannot be "
        "pickled (TypeError: cannot pickle '_thread.lock' object); move the import or creation of `lock` inside "
        "uses_lock(), so that each rank makes its own")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_object_reached_through_a_helper_names_the_helper() -> None:
    with pytest.raises(UnpicklableFunction, match=r"cannot pickle train\(\) for the ranks: it uses `log_file` "
                                                  r"\(a _io.TextIOWrapper\) through writes_log\(\), which cannot be "
                                                  r"pickled .* move the import or creation of `log_file` inside writes_log\(\)"):
        pickle_payload(train, (), {})


def test_driver_only_object_names_it_and_the_first_line_of_its_error() -> None:
    with pytest.raises(UnpicklableFunction, match=r"it uses `spark_context` \(a test_payload.DriverOnly\), which "
                                                  r"cannot be pickled \(RuntimeError: It appears that you are "
                                                  r"attempting to reference SparkContext from a broadcast variable.\);"):
        pickle_payload(uses_context, (), {})


def test_closure_variable_and_default_are_named() -> None:
    held = threading.RLock()

    def closure() -> None:
        with held:
            pass

    def default(guard=threading.Lock()) -> None:  # noqa: B008 - a default created once is the point
        pass

    with pytest.raises(UnpicklableFunction, match=r"cannot pickle .*closure\(\) .*: it uses `held` \(a _thread.RLock\)"):
        pickle_payload(closure, (), {})
    with pytest.raises(UnpicklableFunction, match=r"cannot pickle .*default\(\) .*: it uses `guard` \(a _thread.lock\)"):
        pickle_payload(default, (), {})


@pytest.mark.parametrize("args,kwargs,label", [((1, lock), {}, "argument 1"), ((), {"out": log_file},
                                                                                 "keyword argument 'out'")])
def test_unpicklable_argument_is_named(args, kwargs, label) -> None:
    with pytest.raises(UnpicklableFunction, match=rf"cannot pickle print\(\) for the ranks: its {label} \(a .*\) "
                                                  r"cannot be pickled \(\w+Error: .*\); pass what it is made from"):
        pickle_payload(print, args, kwargs)
