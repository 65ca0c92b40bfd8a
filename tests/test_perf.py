"""Step-time model: breakdown identity, monotonicity in hardware, MFU bounds, vectorized ==
per-layout, FLOP accounting, bubble formula, recompute, efficiency parameters."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaletax.inputs import hardware, models, runs
from scaletax.inputs.layout import Layout, LayoutArray
from scaletax.model import comm, efficiency, memory, perf, search
from scaletax.model.topology import Topology

from objects import as_gpu, as_recipe

LLAMA70 = models.get("llama31_70b")
KIMI = models.get("kimi_k2")
SMALL_MOE = models.Model(layers=8, hidden=1024, heads=16, kv_heads=4, ffn_hidden=4096, vocab=32000, seq_len=4096,
                         moe_experts=32, moe_top_k=4, moe_ffn_hidden=512, moe_shared_experts=1, moe_dense_layers=1)
CASES = [(LLAMA70, 256, "h100_sxm", "fp8"), (LLAMA70, 256, "gb200", "mxfp8"), (LLAMA70, 64, "a100_sxm_80gb", "bf16"),
         (SMALL_MOE, 64, "b200", "nvfp4"), (KIMI, 1024, "gb200", "fp8")]


def grid(model, gpus):
    space = search.SearchSpace(tp=(1, 2, 4, 8), cp=(1, 2), etp_tp=(True,), vp=(1, 2), mbs=(1, 2), zero_stage=(1, 3),
                               batch_tolerance=None)
    la = search.candidates(model, gpus, space, None)
    # a token budget of ~4M tokens per step, whole micro-batches
    seqs = max(1, 4_194_304 // model.seq_len)
    n_micro = np.maximum(1, np.rint(seqs / (la.mbs * la.dp)))
    return la.replace(gbs=(n_micro * la.mbs * la.dp).astype(np.int64))


@pytest.fixture(scope="module", params=range(len(CASES)), ids=[f"{c[0].id or 'moe'}-{c[2]}-{c[3]}" for c in CASES])
def case(request):
    model, gpus, gpu, prec = CASES[request.param]
    la = grid(model, gpus)
    return model, la, gpu, prec, perf.step_time(model, la, as_recipe(prec), as_gpu(gpu))


def test_breakdown_sums_to_step_time(case):
    _, la, _, _, st = case
    assert len(st) == len(la) > 10
    total = st.compute_s + st.exposed_comm_s + st.bubble_s + st.other_s
    np.testing.assert_allclose(total, st.step_s, rtol=1e-12)
    for k in ("compute_s", "exposed_comm_s", "bubble_s", "other_s"):
        assert np.all(getattr(st, k) >= 0), k
    assert np.all(st.exposed_comm_s <= st.comm_s + 1e-12)


def test_rates_are_consistent(case):
    model, la, gpu, prec, st = case
    tps = la.gbs * model.seq_len / (st.step_s * la.gpus)
    np.testing.assert_allclose(st.tokens_per_s_per_gpu, tps, rtol=1e-12)
    np.testing.assert_allclose(st.model_tflops_per_gpu * 1e12, tps * model.model_flops_per_token(), rtol=1e-12)
    np.testing.assert_allclose(st.mfu, st.model_tflops_per_gpu * 1e12 / hardware.get(gpu).peak_flops(prec), rtol=1e-12)


@pytest.mark.parametrize("corner", ["value", "high"])
def test_mfu_at_most_hfu_at_most_one(case, corner):
    model, la, gpu, prec, _ = case
    st = perf.step_time(model, la, as_recipe(prec), as_gpu(gpu), eff=getattr(efficiency.default_band(), corner))
    assert np.all(st.mfu > 0)
    assert np.all(st.mfu <= st.hfu + 1e-12)
    assert np.all(st.hfu <= 1.0)


def test_vectorized_equals_per_layout(case):
    model, la, gpu, prec, st = case
    rng = np.random.default_rng(0)
    for i in rng.choice(len(la), size=min(12, len(la)), replace=False):
        one = perf.step_time(model, la.layout(int(i)), as_recipe(prec), as_gpu(gpu))
        for k in ("step_s", "compute_s", "exposed_comm_s", "bubble_s", "other_s", "mfu"):
            assert getattr(one, k)[0] == pytest.approx(getattr(st, k)[i], rel=1e-9), (k, la.layout(int(i)))


def _faster(gpu: hardware.GPU, **factors) -> hardware.GPU:
    upd = {}
    for k, f in factors.items():
        if k == "flops":
            for col in ("bf16_tflops", "fp8_tflops", "fp6_tflops", "fp4_tflops", "tf32_tflops"):
                if getattr(gpu, col) is not None:
                    upd[col] = getattr(gpu, col) * f
        else:
            upd[k] = getattr(gpu, k) * f
    return gpu.model_copy(update=upd)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["flops", "hbm_tb_s", "nvlink_gb_s_bidir", "nic_gbit_s"]),
       factor=st.floats(1.01, 4.0), i=st.integers(0, 10_000), c=st.integers(0, len(CASES) - 1))
def test_more_bandwidth_or_peak_is_never_slower(which, factor, i, c):
    """On a fixed pipeline split ("even": the last stage's layers and the output layer); the next
    test checks the splits that choose their slowest stage, on every layout of the grids."""
    model, gpus, gpu_id, prec = CASES[c]
    la = grid(model, gpus)
    lay = la[i % len(la)]
    g = hardware.get(gpu_id)
    fast = _faster(g, **{which: factor})
    base = perf.step_time(model, lay, as_recipe(prec), as_gpu(g), Topology.from_gpu(as_gpu(g)),
                          pp_split="even").step_s[0]
    quick = perf.step_time(model, lay, as_recipe(prec), as_gpu(fast), Topology.from_gpu(as_gpu(fast)),
                           pp_split="even").step_s[0]
    assert quick <= base * (1 + 1e-12)


@pytest.mark.parametrize("which", ["flops", "hbm_tb_s", "nvlink_gb_s_bidir", "nic_gbit_s"])
def test_twice_any_resource_is_never_slower_under_the_splits_megatron_accepts(which):
    """Every layout of every case's grid, each with the pipeline split Megatron-Core accepts for it
    ("auto": even, account or balanced), the slowest stage chosen by a layer's and the output layer's
    whole time (GEMMs, attention, fixed time, memory-bound time): twice the tensor-core peak, the HBM,
    NVLink or NIC bandwidth never makes a step slower. Kimi K2 on 1,024 GB200 in FP8 at TP1 PP16 EP64
    MBS2 with full recompute (index 1496 of its grid) took 1.998 s per step and 2.303 s with twice the
    peak while the split ignored memory-bound time (found by hypothesis, 2026-12-04)."""
    for model, gpus, gpu_id, prec in CASES:
        la = grid(model, gpus)
        g = hardware.get(gpu_id)
        fast = _faster(g, **{which: 2.0})
        base = perf.step_time(model, la, as_recipe(prec), as_gpu(g), Topology.from_gpu(as_gpu(g))).step_s
        quick = perf.step_time(model, la, as_recipe(prec), as_gpu(fast), Topology.from_gpu(as_gpu(fast))).step_s
        slower = np.flatnonzero(quick > base * (1 + 1e-12))
        assert slower.size == 0, (model.id, gpu_id, [la.layout(int(k)) for k in slower[:3]])


def test_flops_per_gpu_add_up_to_the_model_count():
    """Per-GPU executed FLOPs (the mean stage's, whichever stage is slowest) x GPUs = hardware FLOPs
    per token x tokens (vocabulary already a multiple of 128 tp, dense model: the accounting is exact)."""
    m = models.get("llama31_70b")  # 80 layers, vocab 128256 = 1002 x 128
    for rc in ("none", "selective", "full"):
        lay = Layout(tp=1, pp=4, dp=8, mbs=1, gbs=64, recompute=rc)
        inp = perf.prepare(m, lay, as_recipe("bf16"), as_gpu("h100_sxm"))
        total = inp.hw_flops_per_gpu[0] * lay.gpus
        # flash attention's backward also recomputes S = QK^T: 2 d_qk more FLOPs per score element
        fa_extra = m.layers * m.heads * m.seq_len / 2 * 2 * m.qk_head_dim
        # diagonal tiles computed in full: B / 2 more score elements per query and head, each
        # 2 (d_qk + d_v) forward (twice with recompute) and 6 d_qk + 4 d_v backward
        n_fwd = 1 if rc == "none" else 2
        per_elem = n_fwd * 2 * (m.qk_head_dim + m.v_head_dim_eff) + 6 * m.qk_head_dim + 4 * m.v_head_dim_eff
        tile = m.layers * m.heads * perf.FA_CAUSAL_TILE / 2 * per_elem
        want = (m.hardware_flops_per_token(rc) + fa_extra + tile) * lay.gbs * m.seq_len
        assert total == pytest.approx(want, rel=1e-9), rc


def test_vocab_padding():
    assert perf.padded_vocab(50257, 4) == 50688  # GPT-3 on tp 4: next multiple of 512
    assert perf.padded_vocab(128256, 8) == 129024
    np.testing.assert_array_equal(perf.padded_vocab(51200, np.array([1, 8])), [51200, 51200])


def test_bubble_is_narayanan_fraction_of_busy_time():
    m = LLAMA70
    eff = efficiency.default_efficiency()
    for pp, vp, n_micro in ((4, 1, 8), (8, 2, 16), (1, 1, 4)):
        lay = Layout(tp=8, pp=pp, dp=2, vp=vp, mbs=1, gbs=2 * n_micro, recompute="full")
        inp = perf.prepare(m, lay, as_recipe("fp8"), as_gpu("h100_sxm"))
        st = perf.evaluate(inp, eff)
        micro = (eff.memory_overhead * inp.bytes_micro[0] / inp.hbm_bw[0]
                 + eff.layer_overhead_us * 1e-6 * inp.layer_passes[0])  # the fixed time per layer pass too
        assert inp.layer_passes[0] == np.ceil(m.layers / pp) * n_micro
        assert st.bubble_s[0] == pytest.approx((pp - 1) / (vp * n_micro) * (st.compute_s[0] + micro), rel=1e-12)


def test_recompute_costs_time_and_partial_recompute_interpolates():
    lay = Layout(tp=8, pp=8, cp=2, dp=4, vp=8, mbs=1, gbs=1152, recompute="none")
    m = models.get("llama31_405b")
    t = {rc: perf.step_time(m, lay.replace(recompute=rc), as_recipe("fp8"), as_gpu("h100_sxm")).compute_s[0]
         for rc in ("none", "selective", "full")}
    assert t["none"] < t["selective"] < t["full"]
    half = perf.step_time(m, lay.replace(recompute="full"), as_recipe("fp8"), as_gpu("h100_sxm"), recompute_fraction=0.5).compute_s[0]
    assert half == pytest.approx((t["selective"] + t["full"]) / 2, rel=1e-9)
    zero = perf.step_time(m, lay.replace(recompute="full"), as_recipe("fp8"), as_gpu("h100_sxm"), recompute_fraction=0.0).compute_s[0]
    assert zero == pytest.approx(t["selective"], rel=1e-12)
    with pytest.raises(ValueError, match="recompute_fraction"):
        perf.prepare(m, lay.replace(recompute="full"), as_recipe("fp8"), as_gpu("h100_sxm"), recompute_fraction=1.5)


def test_least_recompute_is_the_least_that_fits():
    m = models.get("llama31_405b")
    la = LayoutArray.from_layouts([Layout(tp=8, pp=8, cp=2, dp=d, vp=v, mbs=1, gbs=1152 if d != 19 else 1216)
                                   for d, v in ((4, 1), (16, 1), (19, 1), (4, 8))])
    code, frac, gib = perf.least_recompute(m, la, as_gpu("h100_sxm"), as_recipe("fp8"))
    cap = memory.capacity_gib(as_gpu("h100_sxm"))
    for i in range(len(la)):
        assert gib[i] <= cap + 1e-9
        if code[i] == 2:
            assert 0 < frac[i] <= 1
            per_chunk = np.ceil(m.layers / (la.pp[i] * la.vp[i]))
            r = round(frac[i] * per_chunk)
            assert frac[i] == pytest.approx(r / per_chunk)
            if r > 1:  # one layer fewer would not fit
                sel = memory.breakdown(m, la[i].replace(recompute=1), as_recipe("fp8")).total[0]
                full = memory.breakdown(m, la[i].replace(recompute=2), as_recipe("fp8")).total[0]
                assert (sel + (r - 1) / per_chunk * (full - sel)) / memory.GIB > cap
        else:
            assert frac[i] == 0
            assert memory.breakdown(m, la[i].replace(recompute=int(code[i])), as_recipe("fp8")).total[0] / memory.GIB <= cap


def test_ep_dedup_factor():
    f = perf.ep_dedup_factor(KIMI, np.array([8, 64, 384]), np.array([8, 8, 72]))
    assert f[0] == 1.0  # one domain: nothing leaves it
    assert np.all((f > 0) & (f <= 1)) and f[1] < 1
    top1 = KIMI.model_copy(update={"moe_top_k": 1})
    assert perf.ep_dedup_factor(top1, 64, 8) == pytest.approx(1.0)  # one copy per token: no duplicates
    assert perf.ep_dedup_factor(KIMI, 64, 8, "alltoall") == 1.0
    lay = Layout(tp=1, pp=4, dp=256, ep=64, etp=1, mbs=1, gbs=1024)
    plain = perf.step_time(KIMI, lay, as_recipe("fp8"), as_gpu("h100_sxm"), ep_dispatch="alltoall")
    dedup = perf.step_time(KIMI, lay, as_recipe("fp8"), as_gpu("h100_sxm"))
    assert dedup.comm_groups["ep"][0] < plain.comm_groups["ep"][0]
    assert dedup.step_s[0] <= plain.step_s[0]


def test_dedup_reproduces_comm_without_dedup():
    """With top-1 routing nothing is deduplicated: the EP re-timing keeps comm's NIC bytes, and inside
    one NVLink domain comm's NVLink bytes, timed at the HybridEP kernels' measured share of the link
    (comm.ep_link_eff) instead of NCCL's; across domains the RDMA phase binds, as in comm."""
    from scaletax.model import comm

    lay = LayoutArray.from_layouts([Layout(tp=1, pp=4, dp=256, ep=e, etp=1, mbs=1, gbs=1024) for e in (8, 64, 128)])
    topo = Topology.from_gpu(as_gpu("h100_sxm"))
    step = comm.step_traffic(KIMI, lay, topo, comm.WireFormat.for_recipe(as_recipe("fp8")))
    one = KIMI.model_copy(update={"moe_top_k": 1, "moe_experts": 384})
    g, redo = step.groups["ep"], perf._dedup_ep(step, one, topo, "dedup").groups["ep"]  # factor 1 for top-1
    np.testing.assert_allclose(redo.nic_bytes, g.nic_bytes, rtol=1e-12)
    assert float(redo.nvlink_bytes[0]) == pytest.approx(float(g.nvlink_bytes[0]), rel=1e-12)
    cnt = float(g.count[0])
    want = cnt * (topo.alpha_launch + topo.alpha_nvlink) + float(g.nvlink_bytes[0]) / (topo.nvlink_bw * comm.ep_link_eff(8))
    assert float(redo.seconds[0]) == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(redo.seconds[1:], g.seconds[1:], rtol=1e-9)


def test_dedup_across_two_nodes_runs_at_the_kernels_two_node_rate():
    """Across two 8-GPU nodes the RDMA phase of a DeepEP-class dispatch is timed at the calibrated NIC
    rate x comm.ep_rdma_factor(2) (the kernels' measured 2-node loss), across eight at the NIC rate:
    with top-1 routing (nothing deduplicated) each phase is comm's bytes over its own rate."""
    from scaletax.model import comm

    lay = LayoutArray.from_layouts([Layout(tp=1, pp=4, dp=256, ep=e, etp=1, mbs=1, gbs=1024) for e in (16, 64)])
    topo = Topology.from_gpu(as_gpu("h100_sxm"))
    step = comm.step_traffic(KIMI, lay, topo, comm.WireFormat.for_recipe(as_recipe("fp8")))
    one = KIMI.model_copy(update={"moe_top_k": 1, "moe_experts": 384})
    g, redo = step.groups["ep"], perf._dedup_ep(step, one, topo, "dedup").groups["ep"]
    for i, domains in enumerate((2, 8)):
        cnt = float(g.count[i])
        t_out = cnt * topo.alpha_nic + float(g.nic_bytes[i]) / (topo.nic_eff_bw * comm.ep_rdma_factor(domains))
        t_in = cnt * topo.alpha_nvlink + float(redo.nvlink_bytes[i]) / (topo.nvlink_bw * comm.ep_link_eff(8))
        assert t_out > t_in  # the NIC binds in both
        assert float(redo.seconds[i]) == pytest.approx(cnt * topo.alpha_launch + t_out, rel=1e-9)
    assert float(comm.ep_rdma_factor(2)) < 0.7 and float(comm.ep_rdma_factor(8)) == 1.0


def test_unsupported_precision_raises():
    with pytest.raises(hardware.UnsupportedPrecision):
        perf.prepare(LLAMA70, Layout(tp=8, pp=1, dp=1), as_recipe("nvfp4"), as_gpu("h100_sxm"))
    with pytest.raises(ValueError, match="precision"):
        perf.prepare(LLAMA70, Layout(tp=8, pp=1, dp=1), as_recipe("int8"), as_gpu("h100_sxm"))


def test_efficiency_validation():
    e = efficiency.default_efficiency()
    with pytest.raises(ValueError, match="must be in"):
        e.with_params(gemm_ceiling_8bit=1.2)
    with pytest.raises(ValueError, match="unknown efficiency parameter"):
        e.with_params(bogus=1.0)
    assert efficiency.Efficiency.from_params(e.to_params()) == e
    # Ampere has no FP8 tensor cores, so its factor may exceed 1 / (8-bit ceiling)
    # (stated with an 8-bit ceiling above the 16-bit one, so the check does not hang on the fit)
    e.with_params(gemm_ceiling_8bit=0.9, family_factor_ampere=1.0 / 0.9 + 0.01)


def test_band_orders_predictions(case):
    model, la, gpu, prec, _ = case
    p = perf.predict(model, la, as_recipe(prec), as_gpu(gpu))
    assert np.all(p.low.tokens_per_s_per_gpu <= p.value.tokens_per_s_per_gpu * (1 + 1e-12))
    assert np.all(p.value.tokens_per_s_per_gpu <= p.high.tokens_per_s_per_gpu * (1 + 1e-12))


def test_efficiency_file_is_complete_and_sourced(tmp_path):
    band = efficiency.load_efficiency()
    for name, entry in band.meta["parameters"].items():
        assert entry["low"] <= entry["value"] <= entry["high"], name
        assert len(entry["source"]) > 20, name
    bad = tmp_path / "eff.yaml"
    text = efficiency.EFFICIENCY_YAML.read_text()
    bad.write_text(text.replace('    source: "CALIBRATED on all rows: multiplier', '    sauce: "x'))
    with pytest.raises(ValueError, match="overlap_scale.*source"):
        efficiency.load_efficiency(bad)


def test_traffic_deduplication_is_exact():
    """perf evaluates comm.step_traffic once per distinct communication pattern: same numbers."""
    from scaletax.model import comm, search

    la = search.candidates(KIMI, 2048, search.SearchSpace(tp=(1, 2, 4), cp=(1, 2), vp=(1, 2), mbs=(1, 2)), 1024)
    assert len(la) >= 4096
    topo, wire = Topology.from_gpu(as_gpu("gb200")), comm.WireFormat.for_recipe(as_recipe("fp8"))
    a, b = perf._step_traffic(KIMI, la, topo, wire), comm.step_traffic(KIMI, la, topo, wire)
    n = len(la)
    for g in comm.GROUPS:
        for f in ("count", "nvlink_bytes", "nic_bytes", "seconds"):
            np.testing.assert_allclose(np.broadcast_to(getattr(a.groups[g], f), (n,)),
                                       np.broadcast_to(getattr(b.groups[g], f), (n,)), rtol=1e-12, err_msg=f"{g}.{f}")
    t = np.linspace(0.1, 10, n)
    np.testing.assert_allclose(comm.exposed_comm(a, t).seconds, comm.exposed_comm(b, t).seconds, rtol=1e-12)


def test_flash_attention_efficiency_follows_head_size_and_exp_throughput():
    """cuDNN's causal attention on one H200 (data/measured/attention_h200.csv, 4k-64k): ~0.58 of the
    989 TFLOP/s peak forward at head size 128 and ~0.46 at 64; the backward runs below the forward."""
    eff = efficiency.default_efficiency()
    f128, b128 = perf.attention_efficiency(as_gpu("h100_sxm"), 128, eff=eff)
    f64, b64 = perf.attention_efficiency(as_gpu("h100_sxm"), 64, eff=eff)
    f256, _ = perf.attention_efficiency(as_gpu("h100_sxm"), 256, eff=eff)
    assert f128 == pytest.approx(0.59, abs=0.02) and f64 == pytest.approx(0.46, abs=0.02)
    assert f64 < f128 < f256 < eff.gemm_ceiling["16bit"] * perf.ATTN_KERNEL_CONSTANTS["flash"][0]
    assert b128 < f128 and b64 < b128
    # Blackwell's cuDNN hides the forward exponential entirely (NVIDIA's GB200 / GB300 figures): the
    # forward runs at the family's GEMM rate, where Hopper's pays its exponential
    for gpu, fam in (("gb200", "blackwell"), ("gb300", "blackwell_ultra")):
        fb, _ = perf.attention_efficiency(as_gpu(gpu), 128, eff=eff)
        assert fb / (eff.gemm_ceiling["16bit"] * eff.family_factor[fam]) == pytest.approx(
            perf.ATTN_FAMILY_CONSTANTS[fam][0])
    assert f128 / eff.gemm_ceiling["16bit"] < 0.8 * perf.ATTN_KERNEL_CONSTANTS["flash"][0]


def test_attention_share_grows_with_sequence_and_cp_ring_hides_only_under_attention():
    m8 = models.get("llama31_8b")
    eff = efficiency.default_efficiency()
    shares = []
    for s in (8192, 32768, 65536):
        m = m8.model_copy(update={"seq_len": s})
        lay = Layout(tp=1, pp=1, cp=8, dp=8, mbs=1, gbs=64, recompute="none")
        inp = perf.prepare(m, lay, as_recipe("bf16"), as_gpu("h100_sxm"))
        fam = eff.family_factor["hopper"]
        attn = perf.attention_seconds(inp, inp.peak_16 * eff.gemm_ceiling["16bit"] * fam, fam)
        st = perf.evaluate(inp, eff)
        shares.append(float(attn[0] / st.compute_s[0]))
        # the ring can hide at most the attention time, never the whole step's compute
        from scaletax.model import comm
        ex = comm.exposed_comm(inp.comm, st.compute_s, eff.overlap(), windows={"cp": attn})
        full = comm.exposed_comm(inp.comm, st.compute_s, eff.overlap())
        assert ex.groups["cp"][0] >= full.groups["cp"][0] - 1e-15
        assert ex.groups["cp"][0] == pytest.approx(st.comm_groups["cp"][0], rel=1e-9)
    assert shares[0] < shares[1] < shares[2] and shares[2] > 0.5


def test_grouped_expert_gemms_pay_tile_padding():
    """Tokens per local expert padded to whole 128-row tiles: half a tile per expert on average."""
    lay = Layout(tp=1, pp=1, dp=8, ep=8, etp=1, mbs=1, gbs=64, recompute="none")
    inp = perf.prepare(SMALL_MOE, lay, as_recipe("bf16"), as_gpu("h100_sxm"))
    m_exp = SMALL_MOE.seq_len * SMALL_MOE.moe_top_k * 8 / SMALL_MOE.moe_experts  # 4096 tokens x 4 / 32 x 8 = 4096
    tok_gpu = 64 * SMALL_MOE.seq_len / 8
    moe_layers = SMALL_MOE.layers - SMALL_MOE.moe_dense_layers
    plain = tok_gpu * moe_layers * 3 * 2 * SMALL_MOE.moe_top_k * SMALL_MOE.expert_params
    # and the slowest of the 8 EP ranks sets the pace (test_moe_physics checks the factor)
    imb = comm.moe_rank_imbalance(SMALL_MOE.moe_experts, SMALL_MOE.moe_top_k, 8, 8 * SMALL_MOE.seq_len)
    assert inp.flops_exp[0] == pytest.approx(plain * (1 + 64 / m_exp) * imb, rel=1e-9)


def test_blackwell_ultra_factor_from_rated_power():
    from scaletax.fit import calibrate
    r = calibrate.power_ratio("blackwell_ultra")
    per = {f: np.mean([g.tdp_w / (g.peak_flops("bf16") / 1e12) for g in hardware.catalog().values() if g.family == f])
           for f in ("blackwell", "blackwell_ultra")}
    assert r == pytest.approx(per["blackwell_ultra"] / per["blackwell"]) and 1.05 < r < 1.25
    assert calibrate.power_ratio("rubin") == 1.0
    eff = efficiency.default_efficiency()
    assert eff.family_factor["blackwell_ultra"] == pytest.approx(eff.family_factor["blackwell"] * r, rel=2e-3)


def test_band_is_at_least_the_out_of_sample_spread_of_the_regime():
    """The band of a prediction is at least its regime's leave-one-source-out half-width (Llama 3 70B
    with ZeRO-1 is large dense, with ZeRO-3 the FSDP-stack regime), widened where the parameter
    corners are wider."""
    band = efficiency.default_band()
    assert band.spread > 0 and set(band.regime_spread) == set(runs.REGIMES)
    for zero, reg in ((1, "large dense"), (3, "FSDP stack")):
        inp = perf.prepare(LLAMA70, Layout(tp=8, pp=4, dp=8, mbs=1, gbs=256, recompute="selective", zero_stage=zero),
                           as_recipe("fp8"), as_gpu("h100_sxm"))
        assert runs.REGIMES[int(inp.regime_idx[0])] == reg
        w = band.regime_spread[reg]
        pred = perf.evaluate_band(inp, band)
        v, lo, hi = (p.tokens_per_s_per_gpu[0] for p in (pred.value, pred.low, pred.high))
        assert lo <= v / (1 + w) * (1 + 1e-12) and hi >= v * (1 + w) * (1 - 1e-12)
        for p in (pred.low, pred.high):  # the widened corners stay consistent step times
            parts = p.compute_s + p.other_s + p.bubble_s + p.exposed_comm_s
            assert parts[0] == pytest.approx(p.step_s[0], rel=1e-12)
        narrow = perf.evaluate_band(inp, replace(band, spread=0.0, regime_spread={}))
        assert narrow.low.tokens_per_s_per_gpu[0] >= lo * (1 - 1e-12) and narrow.high.tokens_per_s_per_gpu[0] <= hi * (1 + 1e-12)
    with pytest.raises(ValueError, match=r"EfficiencyBand.spread\['large dense'\] must be in \[0, 10\) \(got -0.1\)"):
        replace(band, regime_spread={"large dense": -0.1})


def test_context_parallel_merges_are_memory_bound_bytes_by_hand():
    """Transformer Engine's P2P ring merges each step's partial result after the first: 6 B per
    element (read running, read partial, write running, 16-bit) on 3/4 of the rank's rows; forward
    the output a d_v, backward dq a d_qk and dk, dv g (d_qk + d_v)."""
    m = models.get("llama31_8b")  # 32 layers, 32 heads, 8 kv heads, head 128
    base = perf.memory_bound_bytes(m, LayoutArray.from_layouts([Layout(dp=2, mbs=1, gbs=2)]), as_recipe("bf16"))[0][0]
    cp4 = perf.memory_bound_bytes(m, LayoutArray.from_layouts([Layout(cp=4, dp=2, mbs=1, gbs=2)]), as_recipe("bf16"))[0][0]
    tokens = m.seq_len / 4  # per CP rank
    per_token_layer = (4 - 1) * 0.75 * 6.0 * (32 * 128 + 32 * 128 + 8 * (128 + 128))
    assert cp4 - base / 4 == pytest.approx(tokens * m.layers * per_token_layer, rel=1e-12)
    # tensor parallelism splits the heads, so the merges too
    cp4tp2 = perf.memory_bound_bytes(m, LayoutArray.from_layouts([Layout(tp=2, cp=4, dp=1, mbs=1, gbs=1,
                                                                        sequence_parallel=True)]), as_recipe("bf16"))[0][0]
    base_tp2 = perf.memory_bound_bytes(m, LayoutArray.from_layouts([Layout(tp=2, dp=1, mbs=1, gbs=1,
                                                                           sequence_parallel=True)]), as_recipe("bf16"))[0][0]
    assert cp4tp2 - base_tp2 / 4 == pytest.approx(tokens * m.layers * per_token_layer / 2, rel=1e-12)


def test_causal_tile_adds_half_a_tile_per_query():
    """A causal kernel over s positions with B-wide key tiles computes s^2/2 + s B/2 elements."""
    m = models.get("llama31_8b")
    inp = perf.prepare(m, Layout(dp=1, mbs=1, gbs=1), as_recipe("bf16"), as_gpu("h100_sxm"))
    want = m.seq_len * m.layers * m.heads * (m.seq_len / 2 + perf.FA_CAUSAL_TILE / 2)
    assert inp.attn_elems_fwd[0] == pytest.approx(want, rel=1e-12)
    # the backward pays its measured fixed cost per query row on top: tile / 2 more elements per query
    tile = perf.ATTN_KERNEL_CONSTANTS["flash"][3]
    assert inp.attn_elems_bwd[0] == pytest.approx(want + m.seq_len * m.layers * m.heads * tile / 2, rel=1e-12)
