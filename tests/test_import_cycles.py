"""No import cycle among the scaletax modules: every ``import`` statement, function-level ones
included, is an edge of the module graph, and the graph has no cycle (a lazy import that closes
a loop, as ``hardware`` and ``recipes`` once had, fails here too)."""
from __future__ import annotations

import ast
from pathlib import Path

from scaletax import ROOT

LIB = ROOT / "lib" / "scaletax"


def module_name(path: Path, root: Path) -> str:
    """``scaletax.inputs.hardware`` for ``<root>/inputs/hardware.py``; a package is its ``__init__``."""
    parts = ("scaletax", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = LIB) -> dict[str, set[str]]:
    """Module -> the scaletax modules it imports (module-level and function-level statements)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                # `from pkg import mod` imports the module mod; `from mod import x` the module mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import scaletax.inputs.hardware as h` -> that module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 40 and "scaletax.inputs.hardware" in graph["scaletax.model.perf"]
    assert cycles(graph) == []


def test_the_checker_finds_a_lazy_cycle(tmp_path):
    fake = tmp_path / "scaletax"
    (fake / "inputs").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "inputs" / "__init__.py").write_text("")
    (fake / "inputs" / "hardware.py").write_text("from scaletax.inputs import recipes\n")
    (fake / "inputs" / "recipes.py").write_text("def f():\n    from . import hardware\n")
    (fake / "inputs" / "layout.py").write_text("from scaletax import inputs\nfrom .recipes import f\n")
    graph = import_graph(fake)
    assert graph["scaletax.inputs.recipes"] == {"scaletax.inputs.hardware"}
    assert graph["scaletax.inputs.layout"] == {"scaletax.inputs", "scaletax.inputs.recipes"}
    assert cycles(graph) == [["scaletax.inputs.hardware", "scaletax.inputs.recipes"]]
    (fake / "inputs" / "recipes.py").write_text("X = 1\n")
    assert cycles(import_graph(fake)) == []
