"""The layering of ARCHITECTURE.md, enforced: imports point one way (report -> chapters ->
model; render is used by chapters and report and uses only the model), and notebook parameter
cells take their defaults from the scenario instead of copying it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scaletax import ROOT
from scaletax.report import chapters as toc

LIB = ROOT / "lib" / "scaletax"
#: layer -> the layers it may import (besides itself).
ALLOWED = {"model": {"model"}, "render": {"model"}, "chapters": {"model", "render"},
           "report": {"model", "render", "chapters"}}


def layer_of(rel: Path) -> str:
    """``chapters``, ``render`` or ``report`` for a module in that package, else ``model``."""
    return rel.parts[0] if len(rel.parts) > 1 else "model"


def imported_layers(path: Path, root: Path = LIB) -> dict[str, int]:
    """Layers a module imports (every import statement, function-level ones included) -> first line."""
    rel = path.relative_to(root)
    pkg = ("scaletax", *rel.parts[:-1])
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(pkg[:len(pkg) - node.level + 1]) if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            names = [f"{mod}.{a.name}" for a in node.names] if mod == "scaletax" else [mod]
        for name in names:
            parts = name.split(".")
            if parts[0] != "scaletax" or len(parts) < 2:
                continue
            dep = parts[1] if parts[1] in ("chapters", "render", "report") else "model"
            out.setdefault(dep, node.lineno)
    return out


MODULES = sorted(p for p in LIB.rglob("*.py"))


def test_the_layers_are_what_the_tree_holds():
    assert {layer_of(p.relative_to(LIB)) for p in MODULES} == set(ALLOWED)
    assert len([p for p in MODULES if layer_of(p.relative_to(LIB)) == "model"]) > 10


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_imports_point_one_way(path):
    layer = layer_of(path.relative_to(LIB))
    bad = {dep: line for dep, line in imported_layers(path).items() if dep not in ALLOWED[layer] | {layer}}
    assert not bad, f"{path.relative_to(LIB)} ({layer}) imports {bad} (line numbers)"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    fake = tmp_path / "lib" / "scaletax"
    (fake / "chapters").mkdir(parents=True)
    (fake / "perf.py").write_text("def f():\n    from scaletax.chapters import decision\n")
    (fake / "chapters" / "x.py").write_text("from ..report import cli\nfrom . import memory\n")
    assert imported_layers(fake / "perf.py", fake) == {"chapters": 2}
    assert imported_layers(fake / "chapters" / "x.py", fake) == {"report": 1, "chapters": 2}


@pytest.mark.parametrize("ch", [c for c in toc.CHAPTERS if c.reads], ids=lambda c: c.slug)
def test_parameter_cells_take_the_scenario_defaults(ch):
    """A chapter's parameter cell loads the default scenario's values of what it reads; it does
    not copy them (a copy drifts from data/scenarios/default.yaml)."""
    src = ch.source.read_text(encoding="utf-8")
    cell = re.search(r":tags: \[parameters, remove-cell\]\n\n(.*?)```", src, re.S).group(1)
    assert f'globals().update(default_parameters("{ch.slug}"))' in cell
    assert not re.search(r"^[a-z_]+ = ", cell, re.M), cell
    params = toc.default_parameters(ch.slug)
    assert set(params) == {k.replace(".", "_") for k in ch.reads}
