"""The function payload of `trainrun.run`: (fn, args, kwargs) cloudpickled for the ranks, or one error
naming what cannot be pickled and how to fix it."""
from __future__ import annotations

import os
import sys
import sysconfig
from types import CodeType, FunctionType, ModuleType
from typing import Any, Callable, Iterator

from .errors import UnpicklableFunction

MAX_CHAIN = 10  # helper -> helper -> ... -> the object that fails


def pickle_payload(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> bytes:
    """Pickle `fn` with its defining module's code, so ranks need not be able to import that module
    (a test file, a notebook helper); modules it imports are still pickled by reference."""
    import cloudpickle

    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    by_value = module is not None and module.__name__ != "__main__" and not _installed(module)
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        try:
            return cloudpickle.dumps((fn, args, kwargs))
        except Exception as err:  # pickling raises whatever an object's own __reduce__ raises
            # Searched while the module is still pickled by value, as it was when dumps failed.
            raise unpicklable_error(fn, args, kwargs, err) from None
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def unpicklable_error(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
                      err: Exception) -> UnpicklableFunction:
    """One error naming the function, the argument or object it uses that fails, and the fix."""
    function = f"{getattr(fn, '__qualname__', type(fn).__qualname__)}()"
    arguments = [*((f"argument {i}", a) for i, a in enumerate(args)),
                 *((f"keyword argument {k!r}", v) for k, v in kwargs.items())]
    found = _first_unpicklable(arguments)
    if found:
        label, value, cause = found
        return UnpicklableFunction(
            f"trainrun.run cannot pickle {function} for the ranks: its {label} ({_type_name(value)}) cannot be "
            f"pickled ({_describe(cause)}); pass what it is made from instead (a path, settings) and make it "
            f"inside {function}")
    chain, value, cause = _unpicklable_chain(fn, err)
    if not chain:
        return UnpicklableFunction(
            f"trainrun.run cannot pickle {function} for the ranks ({_describe(cause)}); move imports and the "
            f"creation of objects such as locks, open files and SparkContexts inside {function}")
    helpers = [f"{name}()" for name in chain[:-1]]
    through = f" through {' -> '.join(helpers)}" if helpers else ""
    return UnpicklableFunction(
        f"trainrun.run cannot pickle {function} for the ranks: it uses `{chain[-1]}` ({_type_name(value)})"
        f"{through}, which cannot be pickled ({_describe(cause)}); move the import or creation of "
        f"`{chain[-1]}` inside {(helpers or [function])[-1]}, so that each rank makes its own")


def _unpicklable_chain(fn: Callable[..., Any], err: Exception) -> tuple[list[str], Any, Exception]:
    """Names leading from `fn` through the functions it calls to the first object that fails to pickle."""
    chain: list[str] = []
    value, cause = fn, err
    followed = {id(fn)}
    while isinstance(value, FunctionType) and len(chain) < MAX_CHAIN:
        found = _first_unpicklable([(n, v) for n, v in _references(value) if id(v) not in followed])
        if found is None:
            break
        name, value, cause = found
        chain.append(name)
        followed.add(id(value))
    return chain, value, cause


def _references(fn: FunctionType) -> list[tuple[str, Any]]:
    """What `fn` carries when pickled by value, by name: globals its code names, closure variables, defaults."""
    names: list[str] = []
    for code in _code_objects(fn.__code__):
        names += [name for name in code.co_names if name not in names]
    found = [(name, fn.__globals__[name]) for name in names if name in fn.__globals__]
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            found.append((name, cell.cell_contents))
        except ValueError:  # a closure variable not assigned yet
            continue
    positional = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    defaults = fn.__defaults__ or ()
    found += zip(positional[len(positional) - len(defaults):], defaults)
    found += (fn.__kwdefaults__ or {}).items()
    return found


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_objects(const)


def _first_unpicklable(candidates: list[tuple[str, Any]]) -> tuple[str, Any, Exception] | None:
    import cloudpickle

    for name, value in candidates:
        try:
            cloudpickle.dumps(value)
        except Exception as err:
            return name, value, err
    return None


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"a {kind.__qualname__ if kind.__module__ == 'builtins' else f'{kind.__module__}.{kind.__qualname__}'}"


def _describe(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _installed(module: ModuleType) -> bool:
    """Part of the standard library or an installed distribution, hence importable by every rank."""
    path = getattr(module, "__file__", None)
    if path is None:
        return True
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(os.path.abspath(path).startswith(os.path.abspath(root) + os.sep) for root in roots)
