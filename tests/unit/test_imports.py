"""The package's layering, counting the imports inside functions too (a lazy import is still a
dependency): no part of ``solaris_lib`` (a subpackage or a top-level module) reaches itself
through the parts it imports, and no module reaches itself through its imports."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "solaris_lib"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, name: str) -> set[str]:
    """Every module name ``path`` imports (absolute; ``from x import y`` gives x and x.y)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _part(module: str) -> str:
    """``solaris_lib.cache.publish`` -> ``solaris_lib.cache``; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def module_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: (_imported(path, name) & set(modules)) - {name}
            for name, path in modules.items()}


def part_graph() -> dict[str, set[str]]:
    """{part: the other parts it imports} (the package's own ``__init__`` left out)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, targets in module_graph().items():
        for target in targets:
            if _part(target) not in (_part(name), "solaris_lib"):
                graph[_part(name)].add(_part(target))
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_part_of_the_package_reaches_itself_through_other_parts():
    """Directly (a imports b, b imports a) or around a longer loop (the lookup client once
    reached speculation through the fallback package's batch inference, and speculation
    reached the client through evaluation)."""
    graph = part_graph()
    assert "solaris_lib.client" in graph["solaris_lib.evaluation"]  # the graph is not empty
    cycles = [cycle for part in sorted(graph) if (cycle := _cycle_through(graph, part))]
    assert cycles == []


def test_no_module_reaches_itself_through_its_imports():
    graph = module_graph()
    assert "solaris_lib.config" in graph["solaris_lib.model.contract"]
    cycles = [cycle for name in sorted(graph) if (cycle := _cycle_through(graph, name))]
    assert cycles == []


def test_the_checks_see_a_cycle():
    assert _cycle_through({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert _cycle_through({"a": {"b"}, "b": set()}, "a") is None


def test_the_executors_log_reader_imports_no_pydantic():
    """Every Spark job's Python workers import ``logs.reader`` (its ``mapInArrow`` function);
    the settings' pydantic (0.3 s a process) stays out of them."""
    import subprocess
    import sys

    code = "import sys, solaris_lib.logs.reader; print(sorted(m for m in sys.modules " \
           "if m.split('.')[0] in ('pydantic', 'pydantic_settings')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT.parent)
    assert done.stdout.strip() == "[]"
