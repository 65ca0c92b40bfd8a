"""Bytes per GPU: paper reference values, vectorized == scalar, monotonic properties, fit search."""
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletax.inputs import models
from scaletax.inputs.layout import Layout, LayoutArray
from scaletax.inputs.models import Model
from scaletax.model import memory as M

from objects import as_gpu, as_recipe

GIB = 2**30
ONE_T = models.get("megatron_1t")
# A GPT block stack of ~7.5B parameters: 37 layers x (12h^2 + 13h), h = 4096 (ZeRO Fig. 1 size)
ZERO_MODEL = Model(layers=37, hidden=4096, heads=32, ffn_hidden=16384, vocab=50257, seq_len=1024,
                   gated=False, bias=True, norm="layernorm", tied_embeddings=True, position_embedding="learned")


@pytest.mark.parametrize("stage, ref_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage, ref_gb):
    # Rajbhandari et al. 2020 Fig. 1: 7.5B params, 64-way DP, 2 + 2 + K(=12) bytes per parameter
    assert ZERO_MODEL.layers * ZERO_MODEL.dense_layer_params == pytest.approx(7.5e9, rel=0.01)
    mem = M.breakdown(ZERO_MODEL, Layout(dp=64, zero_stage=stage), as_recipe("bf16"), grad_bytes=2, optimizer_bytes=12,
                      include_embeddings=False, fsdp_prefetch_layers=0)
    assert mem.model_state()[0] / 1e9 == pytest.approx(ref_gb, rel=0.05)


KORTHIKANTI = dict(attention="paper", include_embeddings=False, grad_bytes=4, optimizer_bytes=12, stage="first")


def test_korthikanti_1t_model_state():
    # Korthikanti et al. 2022: 1T model, TP 8, PP 64: ~32.96 GiB of weights + grads + optimizer per GPU
    mem = M.breakdown(ONE_T, Layout(tp=8, pp=64, dp=1, zero_stage=0), as_recipe("fp16"), **KORTHIKANTI)
    assert mem.model_state()[0] / GIB == pytest.approx(32.96, rel=0.05)


def test_korthikanti_1t_activations():
    tp_only = Layout(tp=8, pp=64, dp=1, zero_stage=0, sequence_parallel=False)
    mem = M.breakdown(ONE_T, tp_only, as_recipe("fp16"), **KORTHIKANTI)
    assert mem.activations[0] / GIB == pytest.approx(131.25, rel=0.05)
    sp_sel = Layout(tp=8, pp=64, dp=1, zero_stage=0, sequence_parallel=True, recompute="selective")
    mem = M.breakdown(ONE_T, sp_sel, as_recipe("fp16"), **KORTHIKANTI)
    assert mem.activations[0] / GIB == pytest.approx(26.56, rel=0.05)


def test_korthikanti_per_layer_formulas_exactly():
    # §4: s b h (34 + 5 a s / h) without parallelism; TP: s b h (10 + 24/t + 5as/(ht));
    # TP+SP: s b h / t (34 + 5as/h); selective drops 5as/h; pp=1 holds one micro-batch
    m = Model(layers=1, hidden=1024, heads=16, ffn_hidden=4096, vocab=1000, seq_len=512, gated=False)
    s, b, h, a, t = 512, 2, 1024, 16, 4
    kw = dict(attention="paper", include_embeddings=False)

    def act(**lay):
        return M.breakdown(m, Layout(mbs=b, dp=1, **lay), as_recipe("bf16"), **kw).activations[0]

    assert act(tp=1) == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert act(tp=t, sequence_parallel=False) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act(tp=t) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))
    assert act(tp=t, recompute="selective") == pytest.approx(s * b * h / t * 34)


def test_interleaved_first_stage_factor():
    # Korthikanti §4.2.3: interleaving multiplies the first stage by 1 + (p - 1) / (p v)
    m = Model(layers=32, hidden=1024, heads=16, ffn_hidden=4096, vocab=1000, seq_len=512, gated=False)
    base = dict(tp=1, pp=4, dp=1, gbs=64)
    one = M.breakdown(m, Layout(**base), as_recipe("bf16"), include_embeddings=False, stage="first").activations[0]
    two = M.breakdown(m, Layout(**base, vp=2), as_recipe("bf16"), include_embeddings=False, stage="first").activations[0]
    assert two / one == pytest.approx(1 + 3 / 8)


def test_flash_attention_default_drops_scores():
    lay = Layout(tp=8, pp=64, dp=1)
    paper = M.breakdown(ONE_T, lay, as_recipe("bf16"), attention="paper").activations[0]
    flash = M.breakdown(ONE_T, lay, as_recipe("bf16")).activations[0]
    assert flash < 0.6 * paper


def _random_layouts(n, seed=0):
    rng = np.random.default_rng(seed)
    tp = 2 ** rng.integers(0, 4, n)
    return LayoutArray.from_arrays(tp=tp, pp=2 ** rng.integers(0, 5, n), cp=rng.integers(1, 3, n),
                                   dp=rng.integers(1, 64, n), ep=2 ** rng.integers(0, 6, n),
                                   etp=np.where(rng.random(n) < 0.5, 1, tp), vp=rng.integers(1, 3, n),
                                   mbs=rng.integers(1, 4, n), sp=rng.integers(0, 2, n),
                                   zero_stage=rng.integers(0, 4, n), recompute=rng.integers(0, 3, n))


@pytest.mark.parametrize("mid, precision", [("kimi_k2", "mxfp8"), ("llama31_405b", "fp8"), ("gpt3_175b", "bf16")])
def test_vectorized_equals_scalar(mid, precision):
    m = models.get(mid)
    arr = _random_layouts(40, seed=len(mid))
    if not m.is_moe:
        arr = arr.replace(ep=1)
    vec = M.breakdown(m, arr, as_recipe(precision))
    for i in range(len(arr)):
        one = M.breakdown(m, arr[i], as_recipe(precision))
        for term in (*M.TERMS, "total"):
            assert one[term][0] == pytest.approx(vec[term][i], rel=1e-12)


lay_st = st.builds(dict, tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8, 16]),
                   cp=st.sampled_from([1, 2]), dp=st.integers(1, 32), ep=st.sampled_from([1, 2, 4, 8]),
                   vp=st.sampled_from([1, 2]), mbs=st.integers(1, 3), zero=st.integers(0, 3),
                   sp=st.booleans(), precision=st.sampled_from(M.PRECISIONS),
                   mid=st.sampled_from(["deepseek_v3", "llama31_70b", "gpt3_175b"]))


@settings(max_examples=60, deadline=None)
@given(lay_st)
def test_more_tp_never_increases_weights(d):
    m = models.get(d["mid"])
    ep = d["ep"] if m.is_moe else 1
    lays = [Layout(tp=t, pp=d["pp"], cp=d["cp"], dp=d["dp"] * 8, ep=ep, etp=1, vp=d["vp"], mbs=d["mbs"],
                   zero_stage=d["zero"]) for t in (1, 2, 4, 8)]
    w = M.breakdown(m, lays, as_recipe(d["precision"]), stage="first").weights
    assert np.all(np.diff(w) <= 1e-6 * w[:-1])


@settings(max_examples=60, deadline=None)
@given(lay_st)
def test_recompute_and_zero_orderings(d):
    m = models.get(d["mid"])
    ep = d["ep"] if m.is_moe else 1
    base = Layout(tp=d["tp"], pp=d["pp"], cp=d["cp"], dp=d["dp"] * 8, ep=ep, vp=d["vp"], mbs=d["mbs"],
                  sequence_parallel=d["sp"], zero_stage=d["zero"])
    acts = M.breakdown(m, [base.replace(recompute=r) for r in ("none", "selective", "full")], as_recipe(d["precision"]),
                       stage="first").activations
    assert acts[2] <= acts[1] <= acts[0]
    states = M.breakdown(m, [base.replace(zero_stage=z) for z in range(4)], as_recipe(d["precision"]), stage="first",
                         fsdp_prefetch_layers=0).model_state()
    assert np.all(np.diff(states) <= 1e-6 * states[:-1])
    mem = M.breakdown(m, base, as_recipe(d["precision"]))
    parts = sum(mem[k] for k in M.TERMS)
    assert mem.total[0] == pytest.approx(parts[0])
    assert all(mem[k][0] >= 0 for k in M.TERMS)


def test_precision_weight_bytes():
    lay = Layout(tp=8, pp=8, dp=4)
    m = models.get("llama31_405b")
    w = {p: M.breakdown(m, lay, as_recipe(p), stage="first").weights[0] for p in M.PRECISIONS}
    assert w["bf16"] == w["fp16"] < w["nvfp4"] < w["mxfp4"] * 1.2 and w["nvfp4"] < w["fp8"] < w["mxfp8"]
    # fp8 copy: 2 extra bytes per linear weight -> about double the bf16 weights
    assert w["fp8"] / w["bf16"] == pytest.approx(2.0, rel=0.05)
    gathered = M.breakdown(m, lay, as_recipe("fp8"), stage="first", lowp_params=True).weights[0]
    assert gathered < w["fp8"]
    no_copy = M.breakdown(m, lay, as_recipe("fp8"), stage="first", lowp_weight_copy=False).weights[0]
    assert no_copy == pytest.approx(w["bf16"])


def test_sixteen_bit_gradients_follow_megatron_table():
    # Megatron distributed optimizer: 16-bit grads (the default, recipes.GRAD_BYTES) "4 + 16/d";
    # bf16 param + fp32 grads (grad_reduce_in_fp32) "6 + 12/d"
    m = models.get("llama31_8b")
    d = 8
    n = M.breakdown(m, Layout(dp=d), as_recipe("bf16"), include_embeddings=False)
    params = m.layers * m.dense_layer_params
    # persistent 4 + 12/d; the fp32 gradient-shard copy (4/d) shares its memory with the activations
    copy = 4.0 * params / d
    assert float(n.activations[0]) > copy
    assert n.model_state()[0] == pytest.approx(params * (4 + 12 / d))
    assert M.resolve_options(as_recipe("bf16"))["optimizer_bytes"] == 16.0
    g32 = M.breakdown(m, Layout(dp=d), as_recipe("bf16"), include_embeddings=False, grad_bytes=4)
    assert g32.model_state()[0] == pytest.approx(params * (6 + 12 / d))


def test_expert_state_sharded_over_expert_data_parallel():
    m = models.get("deepseek_v3")
    lay = Layout(tp=1, pp=8, ep=32, dp=64, gbs=4096)
    opt = M.breakdown(m, lay, as_recipe("bf16"), stage="last").optimizer[0]
    lay2 = lay.replace(ep=64)  # twice the experts split; edp halves
    opt2 = M.breakdown(m, lay2, as_recipe("bf16"), stage="last").optimizer[0]
    assert opt2 == pytest.approx(opt, rel=0.05)  # ep*edp constant: expert optimizer state per GPU unchanged
    w, w2 = (M.breakdown(m, x, as_recipe("bf16"), stage="last").weights[0] for x in (lay, lay2))
    expert_bytes = 2 * 8 * m.moe_experts * m.expert_params / 32  # last stage: 8 MoE layers, bf16
    assert w - w2 == pytest.approx(expert_bytes / 2)


def test_stage_selection_and_embeddings():
    m = models.get("llama31_70b")
    lay = Layout(tp=4, pp=8, dp=2, gbs=256)
    first, last = (M.breakdown(m, lay, as_recipe("fp8"), stage=s) for s in ("first", "last"))
    both = M.breakdown(m, lay, as_recipe("fp8"))
    assert both.total[0] == max(first.total[0], last.total[0])
    assert both.stage[0] == int(last.total[0] > first.total[0])
    no_emb = M.breakdown(m, lay, as_recipe("fp8"), stage="last", include_embeddings=False)
    assert no_emb.activations[0] < last.activations[0]  # logits on the last stage


def test_capacity_and_fits():
    m = models.get("llama31_8b")
    lay = Layout(dp=8)
    total = M.breakdown(m, lay, as_recipe("bf16")).total[0] / GIB
    assert M.fits(m, lay, as_gpu(total + 0.01), as_recipe("bf16"))[0] and not M.fits(m, lay, as_gpu(total - 0.01), as_recipe("bf16"))[0]
    assert M.capacity_gib(as_gpu(SimpleNamespace(hbm_gib=79.6))) == 79.6
    assert M.capacity_gib(as_gpu("h100_sxm")) == pytest.approx(79.6, abs=1.0)
    with pytest.raises(ValueError):
        M.capacity_gib(as_gpu(-1))
    with pytest.raises(TypeError):
        M.capacity_gib(as_gpu([80]))
    with pytest.raises(ValueError, match="precision"):
        M.breakdown(m, lay, as_recipe("int4"))
    with pytest.raises(ValueError, match="selective_modules"):
        M.breakdown(m, lay, as_recipe("bf16"), selective_modules=("everything",))


def test_least_recompute_and_max_micro_batch():
    m = models.get("llama31_70b")
    arr = LayoutArray.from_layouts([Layout(tp=4, pp=8, dp=2, gbs=256), Layout(tp=1, dp=64, gbs=256),
                                    Layout(tp=8, pp=1, dp=1, gbs=8)])
    codes = M.least_recompute(m, arr, 80.0, as_recipe("fp8"))
    assert codes.tolist()[1] == -1  # 70B replicated on every GPU cannot fit
    for i, c in enumerate(codes):
        if c >= 0:
            assert M.fits(m, arr[i].replace(recompute=c), 80.0, as_recipe("fp8"))[0]
            if c > 0:
                assert not M.fits(m, arr[i].replace(recompute=c - 1), 80.0, as_recipe("fp8"))[0]
    lay = Layout(tp=8, pp=4, dp=1, gbs=64, recompute="full")
    mb = int(M.max_micro_batch(m, lay, 80.0, as_recipe("bf16"))[0])
    assert mb >= 1
    nm = lay.n_micro
    assert M.fits(m, lay.replace(mbs=mb, gbs=mb * nm), 80.0, as_recipe("bf16"))[0]
    assert not M.fits(m, lay.replace(mbs=mb + 1, gbs=(mb + 1) * nm), 80.0, as_recipe("bf16"))[0]
    assert M.max_micro_batch(m, Layout(tp=1, dp=64), 80.0, as_recipe("bf16"))[0] == 0


def test_activation_items_paper_constants():
    items = M.activation_items(ONE_T, as_recipe("fp16"), "paper", dropout=True)
    h, a, s = ONE_T.hidden, ONE_T.heads, ONE_T.seq_len
    rep = sum(b for _, b, p, k, _ in items if p == "rep" and k in ("all", "dense"))
    split = sum(b for n, b, p, k, _ in items if p == "split" and k in ("all", "dense") and n != "attn_core")
    core = sum(b for n, b, *_ in items if n == "attn_core")
    assert (rep, split, core) == (10 * h, 24 * h, 5 * a * s)
