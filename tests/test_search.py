"""Layout search: vectorized == per-layout loop, the best layout fits, candidate rules, Pareto set,
and the "does not fit" answer with the minimum GPU count."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletax.inputs import models
from scaletax.model import memory, perf, search
from scaletax.model.search import SearchSpace

from objects import as_gpu, as_recipe

SMALL = SearchSpace(tp=(1, 2, 4, 8), cp=(1, 2), vp=(1, 2), mbs=(1, 2), zero_stage=(1, 3))
SMALL_MOE = models.Model(id="small_moe", layers=8, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, vocab=32000,
                         seq_len=4096, moe_experts=16, moe_top_k=4, moe_ffn_hidden=512, moe_shared_experts=1,
                         moe_dense_layers=1)
CASES = [(models.get("llama31_8b"), "fp8", "h100_sxm", 64, 2**21),
         (models.get("llama31_70b"), "bf16", "a100_sxm_80gb", 128, 2**22),
         (SMALL_MOE, "mxfp8", "gb200", 32, 2**20)]


@pytest.mark.parametrize("model,prec,gpu,gpus,tokens", CASES, ids=["8b-h100", "70b-a100", "moe-gb200"])
def test_vectorized_search_equals_loop(model, prec, gpu, gpus, tokens):
    space = SMALL if not model.is_moe else SearchSpace(tp=(1, 2, 4), cp=(1, 2), ep=(1, 2, 4, 8, 16), vp=(1, 2),
                                                       mbs=(1, 2), zero_stage=(1, 3))
    vec = search.search(model, as_recipe(prec), as_gpu(gpu), gpus, tokens_per_step=tokens, space=space)
    loop = search.search_loop(model, as_recipe(prec), as_gpu(gpu), gpus, tokens_per_step=tokens, space=space)
    assert vec.fits and loop["best"] is not None
    assert vec.n_layouts == loop["n_layouts"] > 20
    assert vec.n_fit == loop["n_fit"]
    assert vec.best == loop["best"]
    assert vec.metrics["tokens_per_s_per_gpu"] == pytest.approx(loop["tokens_per_s_per_gpu"], rel=1e-9)
    assert vec.metrics["memory_gib"] == pytest.approx(loop["memory_gib"], rel=1e-9)
    # the best layout fits memory and is the fastest of every candidate that fits
    cap = memory.capacity_gib(as_gpu(gpu))
    assert memory.breakdown(model, vec.best, as_recipe(prec)).total[0] / memory.GIB <= cap
    assert vec.metrics["memory_gib"] + vec.metrics["headroom_gib"] == pytest.approx(cap)
    la = search.candidates(model, gpus, space, search.target_sequences(model, tokens))
    ok = memory.fits(model, la, as_gpu(cap), as_recipe(prec))
    tps = perf.step_time(model, la[ok], as_recipe(prec), as_gpu(gpu), ep_dispatch="dedup" if model.is_moe else "alltoall").tokens_per_s_per_gpu
    assert vec.metrics["tokens_per_s_per_gpu"] == pytest.approx(tps.max(), rel=1e-12)
    assert vec.metrics["tokens_per_s_per_gpu_low"] <= vec.metrics["tokens_per_s_per_gpu"] <= vec.metrics["tokens_per_s_per_gpu_high"]
    breakdown = sum(vec.metrics[k] for k in ("compute_s", "exposed_comm_s", "bubble_s", "other_s"))
    assert breakdown == pytest.approx(vec.metrics["step_s"], rel=1e-12)


def test_candidates_follow_the_rules():
    model, gpus = models.get("llama31_70b"), 256
    seqs = search.target_sequences(model, 2**22)
    space = SearchSpace()
    la = search.candidates(model, gpus, space, seqs)
    assert len(la) > 1000
    assert np.all(la.gpus == gpus) and la.valid_mask(model, gpus).all()
    assert np.all(np.abs(la.gbs - seqs) <= space.batch_tolerance * seqs)
    inter = la.vp > 1
    assert np.all(la.pp[inter] > 1) and np.all(la.n_micro[inter] % la.pp[inter] == 0)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(la), 25, replace=False):
        la.layout(int(i)).check(model)
    # no duplicates
    keys = np.stack([getattr(la, f) for f in ("tp", "pp", "cp", "ep", "etp", "vp", "mbs", "zero_stage", "recompute")])
    assert np.unique(keys, axis=1).shape[1] == len(la)


def test_moe_candidates_try_both_expert_tensor_layouts():
    la = search.candidates(models.get("kimi_k2"), 1024, SearchSpace(tp=(1, 2, 4), cp=(1,), vp=(1,), mbs=(1,),
                                                                    zero_stage=(1,), recompute=("full",)), 1024)
    assert set(np.unique(la.etp[la.tp == 4])) == {1, 4}
    assert set(np.unique(la.etp[la.tp == 1])) == {1}


def test_does_not_fit_returns_the_minimum_gpu_count():
    m = models.get("megatron_1t")
    res = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 64, tokens_per_step=2**22)
    assert not res.fits and res.best is None and res.n_layouts > 0
    want = search.min_gpus(m, as_recipe("fp8"), as_gpu("h100_sxm"), space=SearchSpace(batch_tolerance=None, objective="least_parallel"))
    assert want.fits and res.min_gpus == want.gpus[0] and res.min_gpus > 64
    # nothing fits on the count below it (whole nodes), with any batch
    below = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), res.min_gpus - 8, space=SearchSpace(batch_tolerance=None))
    assert not below.fits
    assert f"does not fit on 64 GPUs of type H100 SXM in fp8; needs at least {res.min_gpus:,}" in res.message
    # and it does fit on that many (with some batch): the answer is consistent
    ok = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), res.min_gpus, gbs=res.min_gpus)
    assert ok.fits


def test_batch_budget_errors():
    m = models.get("llama31_8b")
    with pytest.raises(ValueError, match="tokens_per_step"):
        search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 8)
    with pytest.raises(ValueError, match="less than one sequence"):
        search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 8, tokens_per_step=100)


def _brute_pareto(t, h, g):
    n = len(t)
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            ge = t[j] >= t[i] and h[j] >= h[i] and g[j] <= g[i]
            gt = t[j] > t[i] or h[j] > h[i] or g[j] < g[i]
            if ge and (gt or j < i):  # dominated, or a later duplicate
                keep[i] = False
                break
    return keep


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([8, 16, 64])), min_size=1, max_size=40))
def test_pareto_mask_matches_brute_force(points):
    t, h, g = (np.array(x, dtype=float) for x in zip(*points))
    np.testing.assert_array_equal(search.pareto_mask(t, h, g), _brute_pareto(t, h, g))


def test_pareto_over_several_cluster_sizes():
    m = models.get("llama31_8b")
    res = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), [8, 16, 32], tokens_per_step=2**21, space=SMALL)
    assert res.fits and res.pareto
    assert {r["gpus"] for r in res.pareto} <= {8, 16, 32}
    tps = [r["tokens_per_s"] for r in res.pareto]
    assert tps == sorted(tps, reverse=True)
    best_cluster = max(r["tokens_per_s"] for r in res.pareto)
    assert best_cluster >= res.metrics["tokens_per_s_per_gpu"] * res.best.gpus * (1 - 1e-12)
    for a, b in itertools.combinations(res.pareto, 2):  # no point dominates another
        assert not (a["tokens_per_s"] >= b["tokens_per_s"] and a["headroom_gib"] >= b["headroom_gib"]
                    and a["gpus"] <= b["gpus"])


# --- search spaces of the chapters ------------------------------------------------------------
def test_least_parallel_objective_equals_loop_and_brute_force():
    m = models.get("llama31_70b")
    space = SearchSpace(tp=(1, 2, 4, 8), cp=(1,), vp=(1,), mbs=(1,), zero_stage=(1,), objective="least_parallel")
    vec = search.search(m, as_recipe("bf16"), as_gpu("a100_sxm_80gb"), 64, tokens_per_step=2**22, space=space)
    loop = search.search_loop(m, as_recipe("bf16"), as_gpu("a100_sxm_80gb"), 64, tokens_per_step=2**22, space=space)
    assert vec.fits and vec.best == loop["best"]
    la = search.candidates(m, 64, space, search.target_sequences(m, 2**22), domain=8)
    ok = memory.fits(m, la, as_gpu("a100_sxm_80gb"), as_recipe("bf16"))
    mp = (la.tp * la.pp * la.cp)[ok]
    assert vec.best.tp * vec.best.pp * vec.best.cp == mp.min()
    # its step time is the step-time model's for that layout
    st = perf.step_time(m, vec.best, as_recipe("bf16"), as_gpu("a100_sxm_80gb"), ep_dispatch="alltoall")
    assert vec.metrics["step_s"] == pytest.approx(float(st.step_s[0]), rel=1e-12)
    assert vec.traffic is not None and len(vec.traffic) == 1 and len(vec.step) == 1


def test_tp_groups_sit_in_whole_domains():
    m = models.get("llama31_70b")
    for dom, allowed in ((8, {1, 2, 4, 8, 16, 32, 64}), (72, {1, 2, 4, 8}), (36, {1, 2, 4}), (144, {1, 2, 4, 8, 16})):
        la = search.candidates(m, 1152, SearchSpace(vp=(1,), mbs=(1,), zero_stage=(1,), recompute=("none",)), 1152,
                               domain=dom)
        assert set(np.unique(la.tp)) <= allowed and 1 in set(np.unique(la.tp))
    free = search.candidates(m, 1152, SearchSpace(tp_aligned=False, vp=(1,), mbs=(1,), zero_stage=(1,),
                                                  recompute=("none",)), 1152, domain=36)
    assert 8 in set(np.unique(free.tp))


def test_domain_of_the_space_sets_the_topology():
    m = models.get("megatron_1t")
    res = search.search(m, as_recipe("fp8"), as_gpu("b200"), 4096, tokens_per_step=2**24, pareto=False, space=SearchSpace(domain=72))
    assert res.domain == 72 and 72 % res.best.tp == 0
    assert np.all(res.traffic.groups["tp"].domain == 72)


def test_no_batch_runs_pp_micro_batches():
    m = models.get("llama31_70b")
    la = search.candidates(m, 256, SearchSpace(batch_tolerance=None), None, domain=8)
    assert np.all(la.n_micro == la.pp)
    with pytest.raises(ValueError, match="objective"):
        SearchSpace(objective="cheapest")


def test_rank_key_orders_the_same_scalars_and_arrays():
    keys = dict(tp=np.array([8, 4]), pp=np.array([2, 4]), cp=np.array([1, 1]), ep=np.array([1, 1]),
                vp=np.array([1, 1]), zero_stage=np.array([1, 1]), recompute=np.array([1, 0]))
    a = search.rank_key("least_parallel", **keys)
    b = [search.rank_key("least_parallel", **{k: int(v[i]) for k, v in keys.items()}) for i in range(2)]
    assert [tuple(int(x[i]) for x in a) for i in range(2)] == b
    assert b[1] < b[0]  # same tp*pp*cp, less recompute wins


def test_min_gpus_is_the_smallest_count_that_fits():
    m = models.get(models.DENSE_1T)
    space = SearchSpace(tp=(1, 2, 4, 8), cp=(1,), vp=(1,), mbs=(1,), zero_stage=(1,), batch_tolerance=None,
                        objective="least_parallel")
    res = search.min_gpus(m, as_recipe("bf16"), as_gpu("h100_sxm"), space=space)
    assert res.fits and res.best.gpus == res.gpus[0] and res.metrics["memory_gib"] <= memory.capacity_gib(as_gpu("h100_sxm"))
    assert memory.fits(m, res.best, as_gpu("h100_sxm"), as_recipe("bf16"))[0]
    assert not search.search(m, as_recipe("bf16"), as_gpu("h100_sxm"), res.gpus[0] - 8, space=space).fits
    # more memory: fewer GPUs; a tiny limit: no answer
    assert search.min_gpus(m, as_recipe("bf16"), as_gpu("h200_sxm"), space=space).gpus[0] < res.gpus[0]
    none = search.min_gpus(m, as_recipe("bf16"), as_gpu("h100_sxm"), space=space.with_(max_gpus=64))
    assert not none.fits and none.best is None


def test_the_same_search_asked_two_ways_is_one_cache_entry(tmp_path, monkeypatch):
    """cached_search keys on what the search depends on: the GPU by value (an id or the resolved
    GPU), the NVLink domain filled in (None is the GPU's own), the token budget as the global batch
    in sequences; the result is search.search's."""
    from scaletax import memo
    from scaletax.inputs import hardware

    monkeypatch.setenv(memo.ENV, str(tmp_path))
    m = models.get("megatron_1t")
    memo.STATS.clear()
    a = search.cached_search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 1024, tokens_per_step=2**22, pareto=False)
    b = search.cached_search(m, as_recipe("fp8"), as_gpu(hardware.get("h100_sxm")), [1024], gbs=2**22 // m.seq_len, pareto=False,
                             space=SearchSpace(domain=8))
    assert memo.STATS["scaletax.model.search.search"] == {"miss": 1, "hit": 1}
    ref = search.search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 1024, tokens_per_step=2**22, pareto=False)
    assert a.best == b.best == ref.best and a.metrics == ref.metrics and a.domain == ref.domain == 8
    search.cached_search(m, as_recipe("fp8"), as_gpu("h100_sxm"), 1024, tokens_per_step=2**22, pareto=False, space=SearchSpace(domain=16))
    assert memo.STATS["scaletax.model.search.search"] == {"miss": 2, "hit": 1}  # another domain: another search
