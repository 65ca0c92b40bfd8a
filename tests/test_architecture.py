"""The layering of ARCHITECTURE.md, enforced: imports point one way (inputs <- model <- fit <-
chapters <- report; render beside chapters, on the model and inputs only; the top-level utilities
``files``, ``memo`` and ``jobserver`` below everything), and notebook parameter cells take their
defaults from the scenario instead of copying it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scaletax import ROOT
from scaletax.report import chapters as toc

LIB = ROOT / "lib" / "scaletax"
#: The layer packages under lib/scaletax/; a top-level module is the util layer.
PACKAGES = ("inputs", "model", "fit", "chapters", "render", "report")
#: layer -> the layers it may import (besides itself).
ALLOWED = {"util": set(),
           "inputs": {"util"},
           "model": {"util", "inputs"},
           "fit": {"util", "inputs", "model"},
           "render": {"util", "inputs", "model"},
           "chapters": {"util", "inputs", "model", "fit", "render"},
           "report": {"util", "inputs", "model", "fit", "render", "chapters"}}


def layer_of(rel: Path) -> str:
    """The package a module is in (``inputs``, ``model``, ...), ``util`` for a top-level module."""
    return rel.parts[0] if len(rel.parts) > 1 else "util"


def _top_names(root: Path) -> set[str]:
    """What ``from scaletax import X`` may name in the util layer: top-level modules and the
    names ``scaletax/__init__.py`` defines."""
    init = ast.parse((root / "__init__.py").read_text(encoding="utf-8"))
    names = {p.stem for p in root.glob("*.py")}
    for node in init.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Try):
            names |= {t.id for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets
                      if isinstance(t, ast.Name)}
    return names


def imported_layers(path: Path, root: Path = LIB) -> dict[str, int]:
    """Layers a module imports (every import statement, function-level ones included) -> first
    line; a ``scaletax`` name that is in no layer (an old path) is the layer ``"?<name>"``."""
    rel = path.relative_to(root)
    pkg = ("scaletax", *rel.parts[:-1])
    top = _top_names(root)
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
            dep = parts[1] if parts[1] in PACKAGES else "util" if parts[1] in top else f"?{parts[1]}"
            out.setdefault(dep, node.lineno)
    return out


MODULES = sorted(p for p in LIB.rglob("*.py"))


def test_the_layers_are_what_the_tree_holds():
    assert {layer_of(p.relative_to(LIB)) for p in MODULES} == set(ALLOWED)
    assert {p.name for p in LIB.glob("*.py")} == {"__init__.py", "files.py", "escape.py", "memo.py", "jobserver.py"}
    for layer in PACKAGES:
        assert (LIB / layer / "__init__.py").exists(), layer
    assert len([p for p in MODULES if layer_of(p.relative_to(LIB)) == "model"]) > 10


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LIB)))
def test_imports_point_one_way(path):
    layer = layer_of(path.relative_to(LIB))
    bad = {dep: line for dep, line in imported_layers(path).items() if dep not in ALLOWED[layer] | {layer}}
    assert not bad, f"{path.relative_to(LIB)} ({layer}) imports {bad} (line numbers)"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    fake = tmp_path / "lib" / "scaletax"
    for layer in PACKAGES:
        (fake / layer).mkdir(parents=True)
    (fake / "__init__.py").write_text("ROOT = 1\n")
    (fake / "files.py").write_text("")
    (fake / "memo.py").write_text("from scaletax.inputs import hardware\n")
    (fake / "model" / "perf.py").write_text("def f():\n    from scaletax.chapters import decision\n"
                                            "from scaletax import ROOT, memo\nfrom scaletax import perf\n")
    (fake / "chapters" / "x.py").write_text("from ..report import cli\nfrom . import memory\n")
    (fake / "inputs" / "runs.py").write_text("from ..model import perf\nfrom .. import files\n")
    assert imported_layers(fake / "model" / "perf.py", fake) == {"chapters": 2, "util": 3, "?perf": 4}
    assert imported_layers(fake / "chapters" / "x.py", fake) == {"report": 1, "chapters": 2}
    assert imported_layers(fake / "inputs" / "runs.py", fake) == {"model": 1, "util": 2}
    assert imported_layers(fake / "memo.py", fake) == {"inputs": 1}
    # each of these breaks the layering
    for path, dep in [("model/perf.py", "chapters"), ("inputs/runs.py", "model"), ("memo.py", "inputs")]:
        layer = layer_of(Path(path))
        assert dep not in ALLOWED[layer] | {layer}


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
