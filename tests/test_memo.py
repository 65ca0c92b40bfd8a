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
    assert np.array_equal(pickle.loads(files[0].read_bytes()), a)


def test_peek_reads_a_cached_result_and_computes_nothing(memo_dir, monkeypatch):
    assert _square.peek(4) == (False, None)
    assert CALLS == [] and not memo_dir.exists()  # a miss computes, locks and writes nothing
    value = _square(4, scale=2.0)
    hit, got = _square.peek(x=4, scale=2.0)  # bound like a call: same key
    assert hit and np.array_equal(got, value) and len(CALLS) == 1
    assert memo.STATS[f"{__name__}._square"]["hit"] >= 1
    monkeypatch.delenv(memo.ENV)
    assert _square.peek(4, scale=2.0) == (False, None)  # no cache in use: nothing to read


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


def test_an_argument_without_canonical_form_is_refused(memo_dir):
    with pytest.raises(TypeError, match="memo: no canonical form for an argument of type object"):
        _square(object())


def test_a_corrupt_cache_file_is_recomputed(memo_dir):
    _square(4)
    (f,) = (memo_dir / f"{__name__}._square").glob("*.pkl")
    f.write_bytes(b"not a pickle")
    assert _square(4) == 16
    assert len(CALLS) == 2
    assert pickle.loads(f.read_bytes()) == 16


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


def test_a_call_waiting_for_another_process_to_compute_lends_its_job_slot(memo_dir, tmp_path, monkeypatch):
    """While another process holds a result's lock (computing it), a build's caller waits with
    its job slot given back (scaletax.jobserver), then reads the result and holds a slot again."""
    import fcntl
    import threading

    from scaletax import jobserver

    server = jobserver.Server(tmp_path / "slots", 1)
    monkeypatch.setenv(jobserver.ENV, str(server.path))
    assert server.take()  # the calling chapter's slot
    digest = memo.key(_square.__wrapped__, (6,), {}, (), f"{__name__}._square")
    folder = memo_dir / f"{__name__}._square"
    folder.mkdir(parents=True)
    lock = open(folder / f"{digest}.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" computes _square(6)
    out = []
    t = threading.Thread(target=lambda: out.append(_square(6)))
    t.start()
    deadline = time.monotonic() + 5
    while not server.take():  # the waiting caller's slot becomes free
        assert time.monotonic() < deadline, "the waiting caller kept its slot"
        time.sleep(0.02)
    (folder / f"{digest}.pkl").write_bytes(pickle.dumps(np.float64(36.0)))
    server.give()
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()
    t.join(5)
    assert out == [36.0] and CALLS == []  # read, not computed again
    assert not server.take()  # the caller holds its slot again
    server.close()


def test_warm_hashes_the_code_of_every_cached_functions_module():
    """What the prefork server does once for the build: every module with a cached function
    (the search, the precision experiment's training) gets its code hash computed."""
    from scaletax.model import search  # noqa: F401  (registers search's cached functions)
    from scaletax.chapters import precision  # noqa: F401  (registers the training)

    assert {"scaletax.model.search", "scaletax.model.lowp_training"} <= memo._MODULES
    memo.code_hash.cache_clear()
    memo.warm()
    assert memo.code_hash.cache_info().currsize == len(memo._MODULES)
    assert memo.code_hash.cache_info().hits == 0
    h = memo.code_hash("scaletax.model.search")
    assert memo.code_hash.cache_info().hits == 1 and len(h) == 64
