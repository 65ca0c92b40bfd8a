"""The fixed time of an MoE layer's expert GEMM calls: Transformer Engine's GroupedLinear (what
Megatron-Core runs) issues one cuBLAS GEMM per local expert; one grouped kernel (the FSDP stacks'
torch._grouped_mm) makes 6 calls for all of them."""
import csv

import numpy as np
import pytest

from scaletax import DATA_DIR
from scaletax.inputs import models, runs
from scaletax.inputs.layout import Layout
from scaletax.model import efficiency, perf

from objects import as_gpu, as_recipe

# Qwen3-235B-A22B shape (Qwen Team 2025, arXiv 2505.09388; HF config: 94 layers, hidden 4096,
# 64 query / 4 KV heads of 128, 128 experts top-8, moe_intermediate_size 1536), every layer MoE
QWEN235 = models.Model(name="qwen3-235b-like", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128,
                       ffn_hidden=12288, vocab=151936, seq_len=4096, attention="gqa", moe_experts=128, moe_top_k=8,
                       moe_ffn_hidden=1536, qk_norm=True, gated=True, tied_embeddings=False)


def test_extra_calls_in_dense_layers_worth():
    # 128 experts over 8-way EP: 16 local experts, FC1 and FC2 x (forward, dgrad, wgrad) = 96 calls
    # against one grouped kernel's 6: 90 more, 7.5 dense layer passes of 12 calls
    assert perf.expert_call_layers(QWEN235, 8, "megatron") == pytest.approx(90 / 12)
    assert perf.expert_call_layers(QWEN235, 32, "megatron") == pytest.approx(6 * 3 / 12)
    assert perf.expert_call_layers(QWEN235, 128, "megatron") == 0.0  # one expert a GPU: one call each
    assert perf.expert_call_layers(QWEN235, 8, "fsdp") == 0.0
    assert perf.expert_call_layers(models.get("llama31_8b"), 8, "megatron") == 0.0
    np.testing.assert_allclose(perf.expert_call_layers(QWEN235, np.array([8, 16, 64]), "megatron"),
                               [7.5, 3.5, 0.5])


def test_the_calls_cost_the_fixed_time_per_layer_pass_per_twelve():
    """8 micro-batches through all 94 layers (no pipeline): the Megatron-Core step pays 94 x 8 x 7.5
    layer passes' fixed time more than the same layout with one grouped kernel."""
    lay = Layout(ep=8, dp=8, mbs=1, gbs=64)
    args = (QWEN235, lay, as_recipe("bf16"), as_gpu("b200"))
    meg, fsdp_like = (perf.prepare(*args, stack=s) for s in ("megatron", "fsdp"))
    assert meg.layer_passes[0] == pytest.approx(8 * 94 * (1 + 7.5))
    assert fsdp_like.layer_passes[0] == pytest.approx(8 * 94)
    eff = efficiency.default_efficiency()
    no_fixed = eff.with_params(layer_overhead_us=0.0)
    extra = perf.evaluate(meg, eff).other_s[0] - perf.evaluate(meg, no_fixed).other_s[0]
    assert extra == pytest.approx(8 * 94 * 8.5 * eff.layer_overhead_us * 1e-6, rel=1e-9)


def test_the_search_times_the_calls_it_would_make():
    """The search's grid path and the row path agree on the calls (one prepare either way)."""
    lays = [Layout(pp=8, ep=ep, dp=32, mbs=1, gbs=256) for ep in (8, 32)]
    one = [perf.prepare(QWEN235, la, as_recipe("bf16"), as_gpu("gb200")).layer_passes[0] for la in lays]
    assert one[0] / one[1] == pytest.approx((1 + 7.5) / (1 + 1.5))


def test_a_run_states_how_its_experts_run():
    """The runs column ``expert_gemm``: "grouped" (one kernel, e.g. Megatron-Bridge 0.5's fused grouped MLP
    inside a full-iteration CUDA graph) pays no extra calls under Megatron-Core; "per_expert" pays them
    under FSDP too; blank takes the stack's; anything else is a one-line cell error."""
    assert perf.expert_call_layers(QWEN235, 8, "megatron", "grouped") == 0.0
    assert perf.expert_call_layers(QWEN235, 8, "fsdp", "per_expert") == pytest.approx(7.5)
    assert runs.row_expert_gemm({}) == "auto" and runs.row_expert_gemm({"expert_gemm": " Grouped "}) == "grouped"
    with pytest.raises(ValueError, match=r"^must be one of auto, per_expert, grouped or empty \(got 'fused'\)$") as exc:
        runs.row_expert_gemm({"expert_gemm": "fused"})
    assert exc.value.column == "expert_gemm"
    with pytest.raises(ValueError, match=r"expert_gemm: must be one of auto, per_expert, grouped \(got 'x'\)"):
        perf.expert_call_layers(QWEN235, 8, "megatron", "x")


def test_the_fused_grouped_mlp_runs_are_marked_from_their_recipe():
    """The two Megatron-Bridge 26.06 Qwen3-30B MXFP8 runs state grouped experts, with the recipe setting
    that says so in their notes; no other row of the validation table states the column."""
    with open(DATA_DIR / "published_runs_validation.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    stated = {r["run_id"]: r for r in rows if r["expert_gemm"]}
    assert set(stated) == {f"bridge2606_qwen3_30b_a3b_{g}x8_ep8_mxfp8" for g in ("gb200", "gb300")}
    for r in stated.values():
        assert r["expert_gemm"] == "grouped"
        assert "cutedsl_fused_grouped_mlp=True, cuda_graph_impl='full_iteration'" in r["notes"]


def test_the_pipeline_split_weighs_the_calls():
    """Kimi K2's 384 experts over 3-way EP leave 128 local experts a GPU: 762 calls more per MoE layer
    pass, 63.5 dense layer passes' fixed time, which makes every layer cost more than the 163k-vocabulary
    output layer. The slowest of 16 stages then holds 4 MoE layers (61 layers, the dense first one on
    the first stage), not the output layer alone: without the fixed time in the split the search timed
    such layouts by the head-only stage and never paid the calls."""
    lay = Layout(pp=16, ep=3, dp=9, mbs=8, gbs=4104, recompute="full")  # 57 micro-batches
    inp = perf.prepare(models.get("kimi_k2"), lay, as_recipe("fp8"), as_gpu("rubin"))
    assert perf.expert_call_layers(models.get("kimi_k2"), 3, "megatron") == pytest.approx(6 * 127 / 12)
    assert inp.layer_passes[0] == pytest.approx(57 * 4 * (1 + 63.5))
