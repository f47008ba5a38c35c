"""The launcher's modules import one another without a circle, counting the imports under `if TYPE_CHECKING:` too:
the plan sits below every backend and knows a stage only by its protocol (trainrun.plan.Stage).

Imports inside a function body are left out: they run when the function is called, not when the module loads
(the package's lazy `trainrun.run`, a stage's driver code), and make no circle at import time."""
from __future__ import annotations

import ast
from pathlib import Path

import trainrun
from trainrun.backends.spark import BarrierStage
from trainrun.plan import Stage

PACKAGE = Path(trainrun.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The module's imports outside function bodies, including those under `if`/`try` (TYPE_CHECKING)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
            for target in candidates:
                while target not in files and "." in target:
                    target = target.rpartition(".")[0]
                if target in files and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each module that can reach itself, with the path it takes back (one per circle's first module)."""
    found, seen = [], set()
    for start in sorted(graph):
        stack = [(start, [start])]
        visited: set[str] = set()
        while stack:
            node, path = stack.pop()
            for target in sorted(graph[node]):
                if target == start and not set(path) & seen:
                    found.append(path + [start])
                    seen.update(path)
                elif target not in visited:
                    visited.add(target)
                    stack.append((target, path + [target]))
    return found


def test_the_graph_sees_the_launcher():
    graph = import_graph()
    assert "trainrun.backends.srun" in graph["trainrun.backends"]
    assert "trainrun.plan" in graph["trainrun.backends.spark"]


def test_the_launcher_has_no_import_circle():
    assert circles(import_graph()) == []


def test_the_plan_names_no_backend():
    assert not {target for target in import_graph()["trainrun.plan"] if target.startswith("trainrun.backends")}


def test_a_planted_circle_is_found():
    graph = import_graph()
    graph["trainrun.plan"] = graph["trainrun.plan"] | {"trainrun.backends.spark"}  # the type-only import it had
    found = circles(graph)
    assert any({"trainrun.plan", "trainrun.backends.spark"} <= set(circle) for circle in found), found


def test_the_spark_stage_is_a_plan_stage():
    """BarrierStage has every method of the protocol, with the same parameters."""
    import inspect

    for method in ("run", "to_dict", "to_text"):
        assert list(inspect.signature(getattr(BarrierStage, method)).parameters) == \
            list(inspect.signature(getattr(Stage, method)).parameters), method
