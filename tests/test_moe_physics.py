"""MoE terms of the step-time model, each against a value derived by hand from its source."""
import math

import numpy as np
import pytest

from scaletax.inputs import models
from scaletax.inputs.layout import Layout, LayoutArray
from scaletax.model import comm, efficiency, perf, runplan

from objects import as_gpu, as_recipe

# Qwen3-30B-A3B shape (Qwen Team 2025, arXiv 2505.09388; HF config: hidden 2048, 128 experts top-8,
# moe_intermediate_size 768)
QWEN30 = models.Model(name="qwen3-30b-a3b-like", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                      ffn_hidden=6144, vocab=151936, seq_len=4096, attention="gqa", moe_experts=128, moe_top_k=8,
                      moe_ffn_hidden=768, qk_norm=True, gated=True, tied_embeddings=False)


def test_expected_max_normal_closed_forms():
    # E[max of 2 N(0,1)] = 1/sqrt(pi); of 3: 3/(2 sqrt(pi)) (order statistics of the normal)
    e = comm.expected_max_normal([1, 2, 3])
    assert e[0] == pytest.approx(0.0, abs=1e-9)
    assert e[1] == pytest.approx(1.0 / math.sqrt(math.pi), rel=1e-7)
    assert e[2] == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-7)
    assert comm.expected_max_normal(8) == pytest.approx(1.42360, abs=1e-5)  # Harter 1961 tables


def test_rank_imbalance_two_ranks_by_hand():
    """Top-1 of 4 experts on 2 ranks, 100 tokens: a rank's load is Binomial(100, 1/2), the other
    rank holds the rest, so max = 50 + |X - 50| with E|X - 50| = 5 sqrt(2/pi) (normal limit)."""
    f = comm.moe_rank_imbalance(4, 1, 2, 100)
    assert f == pytest.approx(1.0 + 5.0 * math.sqrt(2.0 / math.pi) / 50.0, rel=1e-6)
    assert comm.moe_rank_imbalance(128, 8, 1, 4096) == 1.0  # one rank: nothing to wait for
    # more tokens even out the ranks; more ranks make the slowest one slower
    f = comm.moe_rank_imbalance(128, 8, np.array([8, 8, 64]), np.array([8 * 1024, 8 * 4096, 64 * 1024]))
    assert f[1] < f[0] < f[2]


def test_rank_imbalance_slows_expert_gemms_and_dispatch():
    lay = Layout(tp=1, pp=1, dp=8, ep=8, etp=1, mbs=1, gbs=64, recompute="none")
    inp = perf.prepare(QWEN30, lay, as_recipe("bf16"), as_gpu("h100_sxm"))
    imb = comm.moe_rank_imbalance(128, 8, 8, 8 * 4096)
    m_exp = 4096 * 8 * 8 / 128
    plain = 64 * 4096 / 8 * 48 * 3 * 2 * 8 * QWEN30.expert_params
    assert inp.flops_exp[0] == pytest.approx(plain * (1 + 64 / m_exp) * imb, rel=1e-9)
    assert 1.0 < imb < 1.02
    # dispatch elements per GPU per layer scale by the same factor (48 layers x 8 micro-batches,
    # fwd dispatch + combine + 2 bwd, 7/8 of the buffer leaves the GPU over NVLink)
    ep = inp.comm.groups["ep"]
    buf = 4096 * 8 * 2048 * imb * 2.0  # bf16 elements
    assert float(ep.nvlink_bytes[0]) == pytest.approx(48 * 8 * 4 * buf * 7 / 8, rel=1e-9)


def test_permute_bytes_alltoall_by_hand():
    """Megatron-Core alltoall dispatcher: permute (2h + 2kh), two chunk sorts (4kh each), unpermute
    (2kh + 2h) forward, the same backward: 8h(k+1) + 16kh; one local expert: no chunk sort."""
    h, k = 2048, 8
    b = perf.moe_permute_bytes(QWEN30, np.array([1, 8, 128]), 1, "alltoall")
    assert b[0] == pytest.approx(8 * h * (k + 1))        # ep 1: no all-to-all, no chunk sort
    assert b[1] == pytest.approx(8 * h * (k + 1) + 16 * k * h)
    assert b[2] == pytest.approx(8 * h * (k + 1))        # 128 ranks, one expert each
    assert perf.moe_permute_bytes(QWEN30, 8, 2, "alltoall") == pytest.approx(8 * h * (k + 1) + 32 * k * h)


def test_permute_bytes_dedup_by_hand():
    """DeepEP-class dispatch: 8h(k + r), r = expected distinct ranks of a token's experts. Two ranks
    of 64 experts each, top-2: P(both on one rank) = 2 C(64,2)/C(128,2) = 63/127, r = 2 - 63/127."""
    m = QWEN30.model_copy(update={"moe_top_k": 2})
    r = 2.0 - 63.0 / 127.0
    assert perf.distinct_groups(128, 2, 2) == pytest.approx(r)
    assert perf.moe_permute_bytes(m, 2, 1, "dedup") == pytest.approx(8 * 2048 * (2 + r))
    assert perf.moe_permute_bytes(m, 1, 1, "dedup") == pytest.approx(8 * 2048 * 3)
    with pytest.raises(ValueError, match="ep_dispatch"):
        perf.moe_permute_bytes(m, 2, 1, "deepep")


def test_permute_bytes_enter_memory_bound_work():
    la = LayoutArray.from_layouts([Layout(tp=1, pp=1, dp=8, ep=8, etp=1, mbs=1, gbs=8, recompute="none")])
    a2a, _ = perf.memory_bound_bytes(QWEN30, la, as_recipe("bf16"), ep_dispatch="alltoall")
    dd, _ = perf.memory_bound_bytes(QWEN30, la, as_recipe("bf16"), ep_dispatch="dedup")
    diff = (perf.moe_permute_bytes(QWEN30, 8, 1, "alltoall") - perf.moe_permute_bytes(QWEN30, 8, 1, "dedup"))
    assert float(a2a[0] - dd[0]) == pytest.approx(4096 * 48 * float(diff), rel=1e-9)


def test_schedule_sets_the_expert_all_to_all_overlap():
    """1f1b (Megatron-Core default): the dispatcher's all-to-alls run in line, none hidden;
    dualpipe / ep_overlap: hidden up to overlap_scale x all of it; unknown: Overlap's default."""
    lay = Layout(tp=1, pp=1, dp=16, ep=16, etp=1, mbs=1, gbs=64, recompute="selective")
    eff = efficiency.default_efficiency()
    out = {s: perf.evaluate(perf.prepare(QWEN30, lay, as_recipe("bf16"), as_gpu("h100_sxm"), schedule=s), eff)
           for s in ("unknown", "1f1b", "ep_overlap", "dualpipe")}
    inp = perf.prepare(QWEN30, lay, as_recipe("bf16"), as_gpu("h100_sxm"))
    t_ep = float(inp.comm.groups["ep"].seconds[0])
    assert t_ep > 0
    assert float(out["1f1b"].comm_groups["ep"][0]) == pytest.approx(t_ep, rel=1e-12)
    s = min(1.0, eff.overlap_scale)
    assert float(out["dualpipe"].comm_groups["ep"][0]) == pytest.approx(t_ep * (1 - s), rel=1e-9)
    assert float(out["ep_overlap"].step_s[0]) == pytest.approx(float(out["dualpipe"].step_s[0]))
    base = perf.evaluate(inp, eff)  # no schedule given: comm.Overlap().ep
    assert float(out["unknown"].step_s[0]) == float(base.step_s[0])
    assert float(base.comm_groups["ep"][0]) == pytest.approx(t_ep * (1 - min(1.0, comm.Overlap().ep * s)), rel=1e-9)
    # an explicit overlap wins over the schedule
    none = perf.evaluate(perf.prepare(QWEN30, lay, as_recipe("bf16"), as_gpu("h100_sxm"), schedule="dualpipe"), eff, comm.Overlap.none())
    assert float(none.comm_groups["ep"][0]) == pytest.approx(t_ep, rel=1e-12)
    with pytest.raises(ValueError, match="schedule: must be one of unknown, 1f1b, ep_overlap, dualpipe"):
        perf.prepare(QWEN30, lay, as_recipe("bf16"), as_gpu("h100_sxm"), schedule="zb")


def test_schedule_column_is_read_and_checked(tmp_path):
    from scaletax.inputs import runs

    head = "layers,hidden,heads,vocab,seq_len,hardware,gpu_count,tp,pp,precision,moe_experts,moe_top_k,moe_ffn_hidden,ep,schedule\n"
    body = "48,2048,32,151936,4096,h100_sxm,8,1,1,bf16,128,8,768,8,{}\n"
    p = tmp_path / "runs.csv"
    p.write_text(head + body.format("DualPipe") + body.format(""), encoding="utf-8")
    rows = runs.read_runs(p)
    assert [runs.row_schedule(r) for r in rows] == ["dualpipe", "unknown"]
    p.write_text(head + body.format("gpipe") + body.format("zb"), encoding="utf-8")
    with pytest.raises(runs.RunsTableError, match=r"2 bad row\(s\): row 2, column 'schedule': must be one of"):
        runs.read_runs(p)


def test_gradient_copy_and_activations_share_the_peak():
    """Megatron-Core's DistributedOptimizer builds the fp32 gradient shard at the step and drops
    it at zero_grad: peak = persistent state + max(activations, copy), the copy 4 B per parameter
    of the local optimizer shard. Qwen3-30B-A3B on 8 GPUs, EP8: experts unsharded (edp 1)."""
    from scaletax.model import memory as M

    lay = Layout(tp=1, pp=1, dp=8, ep=8, etp=1, mbs=1, gbs=64, recompute="selective")
    mem = M.breakdown(QWEN30, lay, as_recipe("bf16"))
    stated = M.breakdown(QWEN30, lay, as_recipe("bf16"), optimizer_bytes=16.0)  # stated bytes: all persistent
    copy = float(stated.optimizer[0]) * 4.0 / 16.0  # 4 of the 16 B per optimizer-shard parameter
    acts = float(mem.activations[0])
    assert float(stated.total[0] - mem.total[0]) == pytest.approx(min(copy, acts), rel=1e-9)
    assert float(mem.optimizer[0]) == pytest.approx(float(stated.optimizer[0]) - copy + max(copy - acts, 0.0), rel=1e-9)
    # max_micro_batch still finds the largest batch that fits around the kink
    m = M.max_micro_batch(QWEN30, lay, 180.0, as_recipe("bf16"))[0]
    assert M.fits(QWEN30, lay.replace(mbs=int(m), gbs=int(m) * 8 * lay.n_micro), 180.0, as_recipe("bf16"))[0]
    assert not M.fits(QWEN30, lay.replace(mbs=int(m) + 1, gbs=(int(m) + 1) * 8 * lay.n_micro), 180.0, as_recipe("bf16"))[0]


def test_moe_dispatcher_column_selects_the_dispatch(tmp_path):
    from scaletax.inputs import runs

    head = ("layers,hidden,heads,kv_heads,head_dim,ffn_hidden,vocab,seq_len,hardware,gpu_count,tp,pp,precision,"
            "moe_experts,moe_top_k,moe_ffn_hidden,ep,gbs,recompute,moe_dispatcher\n")
    body = "48,2048,32,4,128,6144,151936,4096,h100_sxm,8,1,1,bf16,128,8,768,8,64,selective,{}\n"
    p = tmp_path / "runs.csv"
    p.write_text(head + body.format("") + body.format("AllToAll") + body.format("deepep"), encoding="utf-8")
    rows = runs.read_runs(p)
    assert [runs.row_dispatch(r) for r in rows] == ["dedup", "alltoall", "dedup"]
    inp = runplan.step_inputs([runplan.plan_row(r) for r in rows])
    plan = runplan.plan_row(rows[0])
    la = LayoutArray.from_layouts([plan.layout])
    a2a, _ = perf.memory_bound_bytes(plan.model, la, as_recipe("bf16"), ep_dispatch="alltoall")
    dd, _ = perf.memory_bound_bytes(plan.model, la, as_recipe("bf16"), ep_dispatch="dedup")
    np.testing.assert_allclose(inp.bytes_micro, [dd[0], a2a[0], dd[0]], rtol=1e-12)
    p.write_text(head + body.format("nccl"), encoding="utf-8")
    with pytest.raises(runs.RunsTableError, match="column 'moe_dispatcher': must be one of deepep, flex, alltoall"):
        runs.read_runs(p)
