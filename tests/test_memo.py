"""Tests for scaletax.memo: results cached on disk by the hash of exactly their inputs."""
from __future__ import annotations

import pickle
import time

import numpy as np
import pytest

from scaletax import memo
from scaletax.inputs import hardware, recipes

CALLS: list[tuple] = []


@memo.cached
def _square(x, scale=1.0):
    CALLS.append((x, scale))
    return np.asarray(x, dtype=float) ** 2 * scale


@memo.cached(data=("probe.csv",))
def _reads_probe(x):
    CALLS.append(("probe", x))
    return (memo.DATA_DIR / "probe.csv").read_text() + str(x)


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    CALLS.clear()
    monkeypatch.setenv(memo.ENV, str(tmp_path / "memo"))
    return tmp_path / "memo"


def test_without_the_environment_variable_every_call_computes(monkeypatch):
    monkeypatch.delenv(memo.ENV, raising=False)
    CALLS.clear()
    _square(3)
    _square(3)
    assert len(CALLS) == 2


def test_a_second_call_reads_the_file_and_returns_the_same_value(memo_dir):
    a = _square(np.arange(5.0), scale=0.5)
    b = _square(np.arange(5.0), scale=0.5)
    assert len(CALLS) == 1
    assert np.array_equal(a, b) and a.dtype == b.dtype
    files = list((memo_dir / f"{__name__}._square").glob("*.pkl"))
    assert len(files) == 1
    status, payload = memo.read_entry(files[0])
    assert status == "hit" and np.array_equal(pickle.loads(payload), a)


@pytest.mark.parametrize("tamper", ["edited value, old record", "plain pickle, no record", "truncated", "empty"])
def test_an_entry_whose_value_does_not_match_its_record_is_computed_again(memo_dir, tamper):
    """Issue 35 item 10: an edited pickle is never used; the value is recomputed and rewritten."""
    good = _square(np.arange(4.0))
    path = next((memo_dir / f"{__name__}._square").glob("*.pkl"))
    raw = path.read_bytes()
    head, payload = raw[:raw.index(b"\n") + 1], raw[raw.index(b"\n") + 1:]
    forged = pickle.dumps(np.full(4, 123456.0))
    path.write_bytes({"edited value, old record": head + forged, "plain pickle, no record": forged,
                      "truncated": raw[:-3], "empty": b""}[tamper])
    assert memo.read_entry(path) == ("bad", None)
    CALLS.clear()
    again = _square(np.arange(4.0))
    assert np.array_equal(again, good) and len(CALLS) == 1  # computed again, not the forged value
    assert memo.read_entry(path) == ("hit", payload)  # and the file rewritten
    assert memo.STATS[f"{__name__}._square"]["bad"] >= 1


def test_arguments_are_bound_by_name_and_defaults_applied(memo_dir):
    _square(2)
    _square(2, 1.0)
    _square(x=2, scale=1.0)
    assert len(CALLS) == 1


def test_every_argument_difference_is_a_different_key(memo_dir):
    for args in [(2,), (2.0,), (2, 1.0 + 2 ** -52), (np.arange(3),), (np.arange(3.0),), ((2, 3),), ([2, 3],)]:
        _square(*args)
    assert len(CALLS) == 7


def test_declared_data_files_are_part_of_the_key(memo_dir, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "probe.csv").write_text("a")
    monkeypatch.setattr(memo, "DATA_DIR", data)
    assert _reads_probe(1) == "a1"
    assert _reads_probe(1) == "a1"
    (data / "probe.csv").write_text("b")
    assert _reads_probe(1) == "b1"
    assert len(CALLS) == 2


def test_a_gpu_argument_is_keyed_by_its_fields():
    """A hardware.csv edit changes the key of what reads the edited GPU, not of the others."""
    h100, b200 = hardware.get("h100_sxm"), hardware.get("b200")
    edited = h100.model_copy(update={"hbm_gib": h100.hbm_gib + 1})
    k = lambda g: memo.key(_square.__wrapped__, (g,), {})  # noqa: E731
    assert k(h100) == k(hardware.get("h100_sxm").model_copy())
    assert k(edited) != k(h100)
    assert k(b200) == memo.key(_square.__wrapped__, (hardware.get("b200"),), {})


def test_the_code_hash_covers_exactly_the_imported_library_modules():
    mods = set(memo.closure("scaletax.model.lowp_training"))
    assert {"scaletax", "scaletax.model.lowp_training", "scaletax.model.precision"} <= mods
    assert not mods & {"scaletax.model.search", "scaletax.model.perf", "scaletax.model.cost", "scaletax.inputs.hardware"}
    assert not [m for m in mods if m.startswith(("scaletax.chapters", "scaletax.report", "scaletax.render"))]
    search_mods = memo.closure("scaletax.model.search")
    assert {"scaletax.model.perf", "scaletax.model.memory", "scaletax.inputs.hardware"} <= set(search_mods)
    assert "scaletax.model.cost" not in search_mods and "scaletax.chapters.decision" not in search_mods


def _imports_by_syntax_tree(name: str, source: str) -> set[str]:
    """The scaletax modules ``name`` imports, from a walk of its whole syntax tree (the reference)."""
    import ast

    f = memo._module_file(name)
    pkg = name if f is not None and f.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out |= {base, *(f"{base}.{a.name}" for a in node.names)}
    return {m for m in out if m == "scaletax" or m.startswith("scaletax.")}


def test_the_import_scan_finds_what_the_syntax_tree_holds_in_every_library_module():
    import importlib

    root = memo._module_file("scaletax").parent
    names = sorted(".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
                   for p in root.rglob("*.py"))
    assert len(names) > 40
    for name in names:
        importlib.import_module(name)
        source = memo._module_file(name).read_text(encoding="utf-8")
        assert memo._imports(name, source) == _imports_by_syntax_tree(name, source), name
    tricky = ("from scaletax.model import (\n    perf,  # the model\n    memory)\n"
              "if TYPE_CHECKING: import scaletax.inputs.layout\n"
              "import os; from scaletax import files\n"
              "from scaletax.fit import \\\n    validate\n"
              "def f():\n    from ..inputs import hardware\n"
              "x = 'label: import scaletax.nothing'  # words in a string\n")
    found = memo._imports("scaletax.report.probe", tricky)
    assert found == _imports_by_syntax_tree("scaletax.report.probe", tricky)
    assert {"scaletax.model.perf", "scaletax.model.memory", "scaletax.inputs.layout", "scaletax.files",
            "scaletax.fit.validate", "scaletax.inputs.hardware"} <= found


def test_an_argument_without_canonical_form_is_refused(memo_dir):
    with pytest.raises(TypeError, match="memo: no canonical form for an argument of type object"):
        _square(object())


def test_memory_and_communication_chapters_search_through_the_cache(memo_dir, monkeypatch):
    """The chapters' searches are cached on disk (search.cached_search / cached_min_gpus): a second
    process (here: the per-process caches emptied) reads them, and the results are the same."""
    from scaletax.inputs import models
    from scaletax.chapters import communication as cc
    from scaletax.chapters import memory as cm

    model = models.get("llama31_405b")
    memo.STATS.clear()
    fp8 = recipes.training("fp8")
    fit1 = cm.fit(model, 1024, ["h100_sxm", "b200"], {"h100_sxm": fp8, "b200": fp8}, batch_seqs=4096)
    mg1 = cm.min_gpus(model, "b200", "fp8", batch_tokens=16 * 2**20)
    best1 = cc.best_search(model, "h100_sxm", 1024, batch_tokens=16 * 2**20)
    misses = {k: v["miss"] for k, v in memo.STATS.items()}
    assert misses["scaletax.model.search.search"] >= 3 and misses["scaletax.model.search.min_gpus"] == 1
    from scaletax.model import plan

    plan.clear_cache()
    memo.STATS.clear()
    assert cm.fit(model, 1024, ["h100_sxm", "b200"], {"h100_sxm": fp8, "b200": fp8}, batch_seqs=4096) == fit1
    assert cm.min_gpus(model, "b200", "fp8", batch_tokens=16 * 2**20) == mg1
    assert cc.best_search(model, "h100_sxm", 1024, batch_tokens=16 * 2**20).best == best1.best
    assert all(v["miss"] == 0 and v["hit"] > 0 for v in memo.STATS.values()), memo.STATS


def test_a_call_waiting_for_another_process_to_compute_reads_its_result(memo_dir):
    """While another process holds a result's lock (computing it), a caller waits, then reads
    the result instead of computing it again."""
    import fcntl
    import threading

    digest = memo.key(_square.__wrapped__, (6,), {}, (), f"{__name__}._square")
    folder = memo_dir / f"{__name__}._square"
    folder.mkdir(parents=True)
    lock = open(folder / f"{digest}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" computes _square(6)
    out = []
    t = threading.Thread(target=lambda: out.append(_square(6)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and not out  # waiting for the lock
    memo.write_entry(folder / f"{digest}.pkl", pickle.dumps(np.float64(36.0)))
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    t.join(5)
    assert out == [36.0] and CALLS == []  # read, not computed again
