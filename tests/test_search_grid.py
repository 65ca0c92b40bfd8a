"""The search's grid evaluation (issue 15): terms computed once per base layout and broadcast over
ZeRO stage x recompute give, bit for bit, what the same functions give on every layout."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scaletax.inputs import hardware, models
from scaletax.inputs.layout import LayoutArray, LayoutGrid
from scaletax.model import comm, memory, perf, search
from scaletax.model.perf import _dense_codes
from scaletax.model.search import SearchSpace
from scaletax.model.topology import Topology

from objects import as_gpu, as_recipe

SMALL_MOE = models.Model(id="small_moe", layers=8, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, vocab=32000,
                         seq_len=4096, moe_experts=16, moe_top_k=4, moe_ffn_hidden=512, moe_shared_experts=1,
                         moe_dense_layers=1)
# (model, precision, gpu, gpus, sequences): a dense model, an MLA MoE with dense layers, a small
# MoE; Hopper (8-GPU domain) and Blackwell NVL72
CASES = [(models.get("llama31_70b"), "bf16", "h100_sxm", 256, 1024),
         (models.get("kimi_k2"), "fp8", "gb200", 1024, 4096),
         (SMALL_MOE, "nvfp4", "gb200", 64, 256)]
IDS = ["70b-h100", "kimi-gb200", "moe-gb200"]


def _same_bits(a, b, where=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, where
    assert a.dtype == b.dtype, where
    assert a.tobytes() == b.tobytes(), where


def _grid(model, gpus, seqs, **space):
    return search.candidate_grid(model, gpus, SearchSpace(**space), seqs, int(hardware.get("gb200").nvlink_domain))


@pytest.mark.parametrize("model,prec,gpu,gpus,seqs", CASES, ids=IDS)
def test_grid_expands_to_the_candidates_and_takes_their_rows(model, prec, gpu, gpus, seqs):
    grid = _grid(model, gpus, seqs)
    la = search.candidates(model, gpus, SearchSpace(), seqs, int(hardware.get("gb200").nvlink_domain))
    full = grid.expand()
    assert len(grid) == len(la) == len(full) > 1000
    for f in ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs", "gbs", "sp", "zero_stage", "recompute"):
        _same_bits(getattr(full, f), getattr(la, f), f)
    idx = np.random.default_rng(0).choice(len(la), 500, replace=False)
    part = grid.take(idx)
    for f in ("tp", "pp", "dp", "gbs", "zero_stage", "recompute"):
        _same_bits(getattr(part, f), getattr(la, f)[idx], f)
    assert grid.shape[1:] == (4, 3)  # the default space: ZeRO 0-3 x none / selective / full


@pytest.mark.parametrize("options", [{}, {"reserve_gib": 3.5, "lowp_params": True},
                                     {"attention": "paper", "include_embeddings": False}])
@pytest.mark.parametrize("model,prec,gpu,gpus,seqs", CASES, ids=IDS)
def test_grid_memory_is_the_breakdown_total_bit_for_bit(model, prec, gpu, gpus, seqs, options):
    grid = _grid(model, gpus, seqs)
    want = memory.breakdown(model, grid.expand(), as_recipe(prec), **options).total
    _same_bits(memory.grid_total(model, grid, as_recipe(prec), **options), want)


@pytest.mark.parametrize("model,prec,gpu,gpus,seqs", CASES, ids=IDS)
def test_prepare_on_the_grid_is_prepare_per_layout_bit_for_bit(model, prec, gpu, gpus, seqs):
    g = hardware.get(gpu)
    grid = _grid(model, gpus, seqs)
    rows = np.flatnonzero(np.random.default_rng(1).random(len(grid)) < 0.6)  # a fit mask's rows
    la = grid.take(rows)
    dispatch = "dedup" if model.is_moe else "alltoall"
    a = perf.prepare(model, la, as_recipe(prec), as_gpu(g), ep_dispatch=dispatch, grid=(grid, rows))
    b = perf.prepare(model, la, as_recipe(prec), as_gpu(g), ep_dispatch=dispatch)
    for f in dataclasses.fields(perf.StepInputs):
        if f.name != "comm":
            _same_bits(np.broadcast_to(getattr(a, f.name), (len(la),)), np.broadcast_to(getattr(b, f.name), (len(la),)),
                       f.name)
    for k in comm.GROUPS:
        for f in comm.GroupTraffic._FIELDS + ("per_domain",):
            _same_bits(np.broadcast_to(getattr(a.comm.groups[k], f), (len(la),)),
                       np.broadcast_to(getattr(b.comm.groups[k], f), (len(la),)), f"{k}.{f}")
    for f in ("dp_grad_s", "dp_param_s", "dp_bucket_s", "pp_hop_s"):
        _same_bits(np.broadcast_to(getattr(a.comm, f), (len(la),)), np.broadcast_to(getattr(b.comm, f), (len(la),)), f)
    _same_bits(perf.evaluate(a).step_s, perf.evaluate(b).step_s)


def test_prepare_ignores_the_grid_where_it_cannot_use_it():
    """A recompute fraction given per layout: the per-layout path (same result as without grid)."""
    model, g = models.get("llama31_70b"), hardware.get("h100_sxm")
    grid = _grid(model, 256, 1024)
    rows = np.arange(0, len(grid), 7)
    la = grid.take(rows)
    x = np.linspace(0.0, 1.0, len(la))
    a = perf.prepare(model, la, as_recipe("bf16"), as_gpu(g), recompute_fraction=x, grid=(grid, rows))
    b = perf.prepare(model, la, as_recipe("bf16"), as_gpu(g), recompute_fraction=x)
    _same_bits(perf.evaluate(a).step_s, perf.evaluate(b).step_s)


def test_step_traffic_on_a_grid_needs_a_scalar_topology():
    model = models.get("llama31_70b")
    grid = _grid(model, 256, 1024)
    topo = Topology.from_gpu(as_gpu(hardware.get("h100_sxm")))
    with pytest.raises(ValueError, match="LayoutGrid needs a topology of scalars"):
        comm.step_traffic(model, grid, topo.replace(domain=np.full(len(grid), 8)))


def test_dense_codes_are_the_inverse_of_unique():
    rng = np.random.default_rng(2)
    for c in (rng.integers(0, 50, 10_000), rng.integers(-7, 3, 999), rng.integers(0, 2**40, 5_000),
              np.array([4, 4, 4]), np.array([5])):
        u, inv = np.unique(c, return_inverse=True)
        code, k = _dense_codes(c)
        assert k == len(u)
        _same_bits(code, inv.astype(np.int64).reshape(-1))


def test_grid_is_read_only():
    grid = LayoutGrid(LayoutArray.from_arrays(tp=[1, 2], pp=1, dp=4), [0, 1], [0, 2])
    assert grid.shape == (2, 2, 2) and len(grid) == 8
    with pytest.raises(AttributeError):
        grid.tp = np.ones(2)
    assert grid.expand().zero_stage.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert grid.expand().recompute.tolist() == [0, 2, 0, 2, 0, 2, 0, 2]


def test_a_grid_kept_for_one_gpu_gives_another_gpu_its_own_answer():
    """The candidates and their memory are kept per process by their GPU-independent inputs:
    a search of a second GPU of the same domain reuses them and still applies its own capacity."""
    model, tokens = models.get("llama31_70b"), 2**22
    space = SearchSpace(domain=8)
    search._GRIDS.clear()
    search.search(model, as_recipe("fp8"), as_gpu("h100_sxm"), 256, tokens_per_step=tokens, space=space)
    assert len(search._GRIDS) == 1
    kept = search.search(model, as_recipe("fp8"), as_gpu("h200_sxm"), 256, tokens_per_step=tokens, space=space)
    assert len(search._GRIDS) == 1  # the same entry
    search._GRIDS.clear()
    fresh = search.search(model, as_recipe("fp8"), as_gpu("h200_sxm"), 256, tokens_per_step=tokens, space=space)
    assert kept.best == fresh.best and kept.metrics == fresh.metrics and kept.pareto == fresh.pareto
    assert kept.n_fit == fresh.n_fit
    h100 = search.search(model, as_recipe("fp8"), as_gpu("h100_sxm"), 256, tokens_per_step=tokens, space=space)
    assert h100.n_fit < kept.n_fit  # 80 GB against 141 GB: fewer layouts fit
