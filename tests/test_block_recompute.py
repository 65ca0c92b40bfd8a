"""Megatron-Core block recompute (``recompute_method=block``, ``recompute_num_layers`` N), the
runs-table column ``recompute_num_layers``: the first N layers of each virtual pipeline chunk are
fully recomputed and the others not at all (Megatron-LM ``TransformerBlock._checkpointed_forward``),
as NVIDIA's Llama 3 8B H100 FP8 benchmark recipes state it (data/bridge_recipes.csv)."""
import csv
import io

import numpy as np
import pytest

from scaletax.inputs import runs
from scaletax.inputs.layout import Layout, LayoutArray
from scaletax.model import memory, perf, runplan

from objects import as_gpu, as_recipe

LLAMA3_8B = {"model": "Llama 3 8B", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
             "ffn_hidden": 14336, "vocab": 128256, "seq_len": 8192, "hardware": "h100_sxm", "gpu_count": 8,
             "tp": 1, "pp": 1, "mbs": 1, "gbs": 128, "precision": "fp8"}


def _table(tmp_path, rows):
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    p = tmp_path / "runs.csv"
    p.write_text(buf.getvalue())
    return p


def test_block_fraction_is_n_of_each_chunk():
    # llama3_8b_pretrain_8gpu_h100_fp8cs_config: 32 layers, pp 1, recompute_num_layers 5 -> 5 of 32
    assert runplan.block_fraction(32, 1, 1, 5) == pytest.approx(5 / 32)
    # Llama 3 70B with pp 4, vp 5: chunks of 4 layers; N >= 4 recomputes every layer
    assert runplan.block_fraction(80, 4, 5, 5) == 1.0
    assert runplan.block_fraction(80, 4, 5, 1) == pytest.approx(0.25)
    # an uneven split counts the largest chunk, ceil(61 / 8) = 8 layers (as perf.least_recompute does)
    assert runplan.block_fraction(61, 8, 1, 2) == pytest.approx(2 / 8)


def test_plan_row_block_recompute_mixes_full_and_none():
    row = {**LLAMA3_8B, "recompute": "full", "recompute_num_layers": 5}
    plan = runplan.plan_row(row)
    assert plan.recompute_fraction == pytest.approx(5 / 32) and plan.recompute_rest == "none"
    assert plan.recompute_label == "full on 16% of layers, none on the rest"
    model, lay = plan.model, plan.layout
    tot = memory.breakdown(model, LayoutArray.from_layouts([lay.replace(recompute="none"), lay]), as_recipe("fp8")).total
    x = 5 / 32
    assert plan.memory_gib == pytest.approx(float((1 - x) * tot[0] + x * tot[1]) / memory.GIB, rel=1e-12)
    # activations are stored per layer: the block mix lies strictly between none and full
    assert float(tot[1]) / memory.GIB < plan.memory_gib < float(tot[0]) / memory.GIB


def test_block_recompute_flops_are_the_layer_mix_of_none_and_full():
    """Each layer either recomputes its whole forward or nothing: executed FLOPs and memory-bound
    bytes are exactly (1 - x) none + x full, with no selective recompute in the rest."""
    row = {**LLAMA3_8B, "recompute": "full", "recompute_num_layers": 5}
    plan = runplan.plan_row(row)
    lay, x = plan.layout, plan.recompute_fraction
    block = runplan.step_inputs([plan])
    none = perf.prepare(plan.model, lay.replace(recompute="none"), as_recipe("fp8"), as_gpu("h100_sxm"))
    full = perf.prepare(plan.model, lay, as_recipe("fp8"), as_gpu("h100_sxm"))
    for k in ("flops_lin", "flops_attn", "attn_elems_fwd", "bytes_micro"):
        mix = (1 - x) * getattr(none, k)[0] + x * getattr(full, k)[0]
        assert getattr(block, k)[0] == pytest.approx(mix, rel=1e-12), k
    # the selective rest (perf.least_recompute's mix) costs more than the block method's none
    sel_rest = perf.prepare(plan.model, lay, as_recipe("fp8"), as_gpu("h100_sxm"), recompute_fraction=x)
    assert sel_rest.flops_attn[0] > block.flops_attn[0]
    with pytest.raises(ValueError, match="recompute_rest"):
        perf.prepare(plan.model, lay, as_recipe("fp8"), as_gpu("h100_sxm"), recompute_fraction=x, recompute_rest=2)


def test_plan_rows_matches_plan_row_with_block_recompute():
    rows = [{**LLAMA3_8B, "recompute": "full", "recompute_num_layers": n} for n in (1, 5, 40)]
    rows += [{**LLAMA3_8B, "recompute": "unknown"}, {**LLAMA3_8B, "recompute": "full"}]
    table = runplan.plan_rows(rows)
    frac = table.recompute_fraction()
    g = table.memory_gib()
    st = table.step_inputs()
    for i, row in enumerate(rows):
        ref = runplan.plan_row(row)
        assert frac[i] == pytest.approx(ref.recompute_fraction, rel=1e-15)
        assert table.recompute_label(i) == ref.recompute_label
        assert g["total"][i] == pytest.approx(ref.memory_gib, rel=1e-12)
        one = runplan.step_inputs([ref])
        assert st.flops_lin[i] == pytest.approx(one.flops_lin[0], rel=1e-12)
        assert st.bytes_micro[i] == pytest.approx(one.bytes_micro[0], rel=1e-12)
    assert table.recompute_label(2) == "full"  # N past the chunk: every layer


def test_recompute_num_layers_errors(tmp_path):
    bad = [{**LLAMA3_8B, "recompute": "selective", "recompute_num_layers": 5},
           {**LLAMA3_8B, "recompute": "full", "recompute_num_layers": 0},
           {**LLAMA3_8B, "recompute": "full", "recompute_num_layers": "2.5"}]
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(_table(tmp_path, bad))
    msg = str(exc.value)
    assert "3 bad row(s)" in msg
    assert ("row 2, column 'recompute_num_layers': needs recompute full (got 'selective'): Megatron-Core "
            "recompute_method=block recomputes whole layers") in msg
    assert "row 3, column 'recompute_num_layers': must be >= 1 (got 0)" in msg
    assert "row 4, column 'recompute_num_layers': expected an integer, got '2.5'" in msg
    assert "recompute_num_layers" in runs.schema_text()


def test_layout_override_ignores_the_rows_block_setting():
    row = {**LLAMA3_8B, "recompute": "full", "recompute_num_layers": 5}
    plan = runplan.plan_row(row, layout=Layout(tp=1, pp=1, dp=8, mbs=1, gbs=128, recompute="full"))
    assert plan.recompute_fraction == 1.0 and plan.recompute_rest == "selective"
    assert np.isfinite(plan.memory_gib)
