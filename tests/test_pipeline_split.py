"""Issue 29: which pipeline stage sets the pace (the output layer sits on the last stage unless the
split accounts for it), the attention kernel of pre-FlashAttention Megatron-LM runs, and the 4-bit
ceiling tied to the 8-bit one."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from scaletax import DATA_DIR
from scaletax.inputs import models, options, runs
from objects import as_gpu, as_recipe
from scaletax.inputs.layout import Layout
from scaletax.model import efficiency, perf, runplan
from scaletax.fit import calibrate


def test_pipeline_split_of_the_sourced_layouts():
    """"auto" is what Megatron-Core accepts: pp x vp divides L (even), else L + 2 (account), else a
    custom layout (balanced); each case is the split its source states."""
    oss, llama, ds = models.get("gpt_oss_120b"), models.get("llama31_405b"), models.get("deepseek_v3")
    # GPT-OSS-120B on 4 stages (Megatron-Bridge sets both account flags False): 9 layers + the whole head
    n, share = perf.pipeline_split(oss, np.array([4.0]), "auto", head_layers=np.array([4.6]))
    assert (n[0], share[0]) == (9.0, 1.0)
    # Llama 3.1 405B, 126 layers on 8 stages: 16 slots; a head worth < 1 layer: a middle stage is slowest
    n, share = perf.pipeline_split(llama, np.array([8.0]), "auto", head_layers=np.array([0.66]))
    assert (n[0], share[0]) == (16.0, 0.0)
    # ... worth more than a layer (NVFP4 layers against a BF16 head): the last, 15 layers and the head
    n, share = perf.pipeline_split(llama, np.array([8.0]), "auto", head_layers=np.array([1.5]))
    assert (n[0], share[0]) == (15.0, 1.0)
    # 128 slots on 16 stages x 8 virtual: account as well
    n, _ = perf.pipeline_split(llama, np.array([16.0]), "auto", head_layers=np.array([0.5]), vp=np.array([8.0]))
    assert n[0] == 8.0
    # DeepSeek-V3, 61 layers: no Megatron-Core split without a layout; the balanced one is the
    # recipe's: 8 layers on 7 stages, 5 and the head on the last (set_deepseek_v3_pipeline_model_parallel_layout)
    n, share = perf.pipeline_split(ds, np.array([8.0]), "auto", head_layers=np.array([1.5]))
    assert (n[0], share[0]) == (8.0, 0.0)
    # the best whole-layer balance: GPT-OSS on 4 stages, 10 layers on three and 6 with the head (10.6)
    n, share = perf.pipeline_split(oss, np.array([4.0]), "balanced", head_layers=np.array([4.6]))
    assert (n[0], share[0]) == (6.0, 1.0)
    # one stage: every layer and the whole output layer, whatever the split
    for split in options.PP_SPLITS:
        n, share = perf.pipeline_split(oss, np.array([1.0]), split, head_layers=np.array([4.6]))
        assert (float(n[0]), float(np.broadcast_to(share, (1,))[0])) == (36.0, 1.0)
    with pytest.raises(ValueError, match=r"^pp_split: must be one of auto, even, account, balanced or a "
                                         r"pipeline_model_parallel_layout \(got 'x'\)$"):
        perf.pipeline_split(oss, np.array([4.0]), "x")
    # Megatron-Core's own layout string: the rank with the most layers plus the head where it has the loss;
    # the DeepSeek-V3 B200 recipe's [E + 8] [8] x 6 [5 + MTP + L] is the balanced split's 8 on a middle stage
    n, share = perf.pipeline_split(ds, np.array([8.0]), "Et*8|(t*8|)*6t*5mL", head_layers=np.array([1.5]))
    assert (n[0], share[0]) == (8.0, 0.0)
    n, share = perf.pipeline_split(ds, np.array([8.0]), "Et*8|(t*8|)*6t*5mL", head_layers=np.array([3.5]))
    assert (n[0], share[0]) == (5.0, 1.0)


def _probe(run_id):
    return next(r for r in runs.read_runs(DATA_DIR / "coverage_probes.csv") if r["run_id"] == run_id)


def _write(tmp_path, rows):
    path = tmp_path / "runs.csv"
    runs.write_runs(rows, path, list(dict.fromkeys(k for r in rows for k in r)))
    return path


def test_the_last_stage_runs_the_output_layer(tmp_path):
    """GPT-OSS-120B on 64 H100 (PP 4, Megatron-Core's even split): the last stage computes 9 layers
    and the 201k-vocabulary output layer; a balanced custom layout would move layers off it, and the
    step is faster by that work; a stated split overrides the default."""
    row = _probe("probe-gpt-oss-120b-64xh100-bf16")
    assert runs.row_pp_split(row) == "even"
    even = runplan.step_inputs([runplan.plan_row(row)])
    bal = runplan.step_inputs([runplan.plan_row({**row, "pp_split": "balanced"})])
    # even: the last stage, 9 layers and the whole head; balanced (the output layer worth ~3 layers
    # here): 10 layers on three stages, 6 and the head on the last, a middle stage the slowest
    assert float(even.flops_head[0]) > 0 and float(bal.flops_head[0]) == 0.0
    assert float(even.flops_lin[0]) < float(bal.flops_lin[0])
    assert float(even.hw_flops_per_gpu[0]) == pytest.approx(float(bal.hw_flops_per_gpu[0]), rel=1e-12)  # same work
    se, sb = perf.evaluate(even), perf.evaluate(bal)
    assert float(se.tokens_per_s_per_gpu[0]) < 0.9 * float(sb.tokens_per_s_per_gpu[0])
    assert runs.row_pp_split({**row, "pp_split": ""}) == "auto"
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(_write(tmp_path, [row, {**row, "pp_split": "zigzag"}]))
    assert str(exc.value) == ("runs.csv: 1 bad row(s): row 3, column 'pp_split': must be one of auto, even, account, "
                              "balanced, a pipeline_model_parallel_layout (Et*4|(t*4|)*14tmL) or empty (got 'zigzag')")


def test_unfused_attention_streams_the_score_matrix(tmp_path):
    """Megatron-LM before FlashAttention: the full s x s scores (not the causal half plus tiles),
    perf.UNFUSED_ATTN_BYTES per element through HBM (forward once more where recomputed), no exp."""
    held = {r["run_id"]: r for r in runs.read_runs(DATA_DIR / "heldout_runs.csv")}
    row = held["narayanan2021-1.7B"]
    assert runs.row_attn_kernel(row) == "unfused"
    plan = runplan.plan_row(row)
    un = runplan.step_inputs([plan])
    fl = runplan.step_inputs([runplan.plan_row({**row, "attn_kernel": "flash"})])
    m, lay = plan.model, plan.layout
    assert float(fl.bytes_scores[0]) == 0.0 and float(fl.attn_unfused[0]) == 0.0
    tok_gpu = lay.gbs * m.seq_len / (lay.tp * lay.cp * lay.dp)
    layers = np.ceil(m.layers / lay.pp)
    n_fwd = float(un.attn_elems_fwd[0] / un.attn_elems_bwd[0])
    want = tok_gpu * layers * m.heads * m.seq_len / lay.tp * (13.0 * n_fwd + 19.0)
    assert float(un.bytes_scores[0]) == pytest.approx(want, rel=1e-12)
    assert float(un.attn_elems_bwd[0]) == pytest.approx(tok_gpu * layers * m.heads * m.seq_len, rel=1e-12)
    assert float(un.attn_elems_fwd[0] / fl.attn_elems_fwd[0]) == pytest.approx(
        m.seq_len / ((m.seq_len + perf.FA_CAUSAL_TILE) / 2), rel=1e-12)  # full square, not the causal half
    assert perf.HBM_STREAM_EFF == pytest.approx(4.122355908262558 / 4.8)  # the measured H200 copy
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(_write(tmp_path, [row, {**row, "attn_kernel": "xformers"}]))
    assert str(exc.value) == ("runs.csv: 1 bad row(s): row 3, column 'attn_kernel': must be one of flash, fa2, unfused or "
                              "empty (got 'xformers')")


def test_the_4bit_ceiling_is_fitted_on_the_nvfp4_runs():
    """With 11 NVFP4 runs among the fitted ones the 4-bit ceiling is a parameter of its own, identified
    only by them; a fold without one takes the 8-bit ceiling x the Blackwell factor (the old tie)."""
    assert "gemm_ceiling_4bit" in calibrate.FIT_PARAMS
    rows = calibrate.load_rows()
    assert sum(str(r["precision"]).lower() == "nvfp4" for r in rows) == 11
    assert calibrate.PRIORS["gemm_ceiling_4bit"]({"gemm_ceiling_8bit": 0.7, "family_factor_blackwell": 0.9}) == \
        pytest.approx(0.63)
    raw = yaml.safe_load(efficiency.EFFICIENCY_YAML.read_text())["parameters"]["gemm_ceiling_4bit"]
    assert raw["kind"] == "calibrated" and raw["low"] < raw["value"] < raw["high"]


def test_the_slowest_stage_is_decided_by_time_not_flops():
    """Kimi K2 on 1,024 H100 at TP2 PP32 EP2: 384 experts on two ranks leave 85 tokens per local
    expert, GEMMs the measured shape penalty makes about 6x slower per FLOP; two such layers take longer
    than the 163k-vocabulary head. Costed by FLOPs the head-only last stage looked slowest and the step
    counted no expert work at all (the layout search's 2.8x "win" over NVIDIA's TP8 PP16 EP64 recipe)."""
    kimi = models.get("kimi_k2")
    lay = Layout(tp=2, pp=32, ep=2, etp=1, dp=16, mbs=1, gbs=8192, zero_stage=2, recompute="selective")
    inp = perf.prepare(kimi, [lay], as_recipe("bf16"), as_gpu("h100_sxm"))
    assert inp.flops_exp[0] > 0 and np.broadcast_to(inp.flops_head, (1,))[0] == 0  # a stage of layers, not the head, is the slowest
    # the head in layers' worth with the time proxy: under one 2-layer stage here
    flops_only = 6.0 * kimi.hidden * float(perf.padded_vocab(kimi.vocab, 2)) / (
        3.0 * 2.0 * kimi.active_params / kimi.layers)
    assert flops_only > 2.0  # what the FLOP count said: the head outweighs two layers
