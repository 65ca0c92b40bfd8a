"""What real tables carry (issue 34, item 7): Megatron-Core's pipeline_model_parallel_layout in
``pp_split``, the ``flex`` dispatcher in ``moe_dispatcher``, and the memory columns a paper's
setting needs (``dropout``, ``grad_reduce_in_fp32``, ``include_embeddings``)."""
import csv

import numpy as np
import pytest

from scaletax import DATA_DIR
from scaletax.inputs import pipeline_layout, runs
from scaletax.model import memory, perf, runplan
from scaletax.report.predict import predict_rows

from objects import as_recipe

BF16 = as_recipe("bf16")

TABLES = ("published_runs.csv", "heldout_runs.csv", "coverage_probes.csv", "production_moe_recipes.csv")
DSV3_GB200 = "mbridge26.04.01-DeepSeek-V3671B-DGX-GB200-256-MXFP8"


def _row(run_id, table="published_runs.csv"):
    return next(r for r in runs.read_runs(DATA_DIR / table) if r["run_id"] == run_id)


def _write(tmp_path, rows):
    path = tmp_path / "t.csv"
    runs.write_runs(rows, path, list(dict.fromkeys(k for r in rows for k in r)))
    return path


def _error(tmp_path, rows) -> str:
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(_write(tmp_path, rows))
    assert "\n" not in str(exc.value)
    return str(exc.value)


# --- pp_split: a pipeline_model_parallel_layout ---------------------------------------------

def test_layout_rows_carry_the_recipes_string():
    """Every row of data/ with a layout string has the string its Megatron-Bridge recipe sets
    (data/bridge_recipes.csv), and the DeepSeek-V3 rows that ran a recipe's layout carry it."""
    with (DATA_DIR / "bridge_recipes.csv").open(encoding="utf-8") as f:
        recipes = {r["recipe"]: r for r in csv.DictReader(f)}
    seen = 0
    for name in TABLES:
        for row in runs.read_runs(DATA_DIR / name):
            split = runs.row_pp_split(row)
            if not pipeline_layout.is_layout(split):
                continue
            seen += 1
            rec = recipes.get(row.get("recipe")) or recipes[
                {DSV3_GB200: "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config",
                 "mbridge26.04.01-DeepSeek-V3671B-DGX-B200-256-MXFP8": "deepseek_v3_pretrain_256gpu_b200_fp8mx_config"}
                [row["run_id"]]]
            assert split == rec["pipeline_model_parallel_layout"], row["run_id"]
    assert seen == 10
    assert runs.row_pp_split(_row(DSV3_GB200)) == "Et*4|(t*4|)*14tmL"
    prod = {r["run_id"]: r for r in runs.read_runs(DATA_DIR / "production_moe_recipes.csv")}
    assert runs.row_pp_split(prod["recipe-deepseek-v3-1024xh100-bf16"]) == "Et|(tt|)*30mL"


def test_prediction_unchanged_where_the_string_is_what_auto_chose(monkeypatch):
    """The same row with its layout string and with pp_split blank ("auto"): where the string's
    slowest rank has the layers and output layer auto's split gives, the step time is the same
    to the last bit; only the first and last stage's memory changes (their own layers, not ceil(L/pp))."""
    rows = [r for name in TABLES for r in runs.read_runs(DATA_DIR / name)
            if pipeline_layout.is_layout(runs.row_pp_split(r))]
    same = 0
    for row in rows:
        auto = dict(row, pp_split="")
        (t_str, t_auto) = [perf.evaluate(runplan.plan_rows([r]).step_inputs()).step_s[0] for r in (row, auto)]
        calls = []
        orig = perf.pipeline_split
        monkeypatch.setattr(perf, "pipeline_split",
                            lambda *a, **k: calls.append(orig(*a, **k)) or calls[-1])
        runplan.plan_rows([row]).step_inputs()
        runplan.plan_rows([auto]).step_inputs()
        monkeypatch.setattr(perf, "pipeline_split", orig)
        s_str, s_auto = [(float(c[0][0]), float(c[1][0])) for c in (calls[0], calls[-1])]
        if s_str == s_auto:
            same += 1
            assert t_str == t_auto, row["run_id"]
        m_str, m_auto = runplan.plan_row(row).memory_gib, runplan.plan_row(auto).memory_gib
        assert m_str <= m_auto + 1e-9, row["run_id"]  # ceil(L / pp) is the upper bound
    # every DeepSeek-V3 row and the Kimi K2 rows but one: the H100 recipe's last rank holds two
    # layers and the loss (Et|(tt|)*30L), which auto modelled as one
    assert same == len(rows) - 1 == 9


def test_first_and_last_stage_memory_hold_the_layouts_layers():
    row = _row("recipe-deepseek-v3-1024xh100-bf16", "production_moe_recipes.csv")  # Et|(tt|)*30mL on PP8
    plan = runplan.plan_row(row)
    assert plan.options["pp_layout"] == "Et|(tt|)*30mL" and plan.layout.vp == 4
    lay = plan.layout
    first, last = (memory.breakdown(plan.model, lay, BF16, stage=s, **plan.options) for s in ("first", "last"))
    ceil = {k: v for k, v in plan.options.items() if k != "pp_layout"}
    first_c = memory.breakdown(plan.model, lay, BF16, stage="first", **ceil)
    # rank 0 holds 7 of the 61 layers (E t | t t | t t | t t), not ceil(61 / 8) = 8
    assert pipeline_layout.end_stage_layers("Et|(tt|)*30mL", 8) == (7.0, 6.0)
    assert float(first.weights[0]) < float(first_c.weights[0])
    assert float(last.activations[0]) < float(memory.breakdown(plan.model, lay, BF16, stage="last", **ceil).activations[0])


def test_blank_vp_takes_the_layouts():
    row = dict(_row(DSV3_GB200), vp="")
    assert runplan.plan_row(row).layout.vp == 4 == runplan.plan_rows([row]).layouts().vp[0]  # 16 stages on PP4
    assert "vp=4 (the pp_split layout's 16 stages on pp 4)" in runplan.plan_row(row).assumptions


@pytest.mark.parametrize("cells, message", [
    ({"pp_split": "Et*4|(t*4|)*14tmx"}, "column 'pp_split': layout 'Et*4|(t*4|)*14tmx': invalid layer character 'x' "
                                         "in stage 15 ('tmx'); known: E embedding, t transformer layer, m MTP layer, "
                                         "L loss"),
    ({"pp_split": "Et*4|(t*4|)*13tmL"}, "column 'pp_split': layout 'Et*4|(t*4|)*13tmL': 15 stages (the '|'-separated "
                                         "parts) are not a multiple of pp=4"),
    ({"pp_split": "Et*4|(t*4|)*14ttmL"}, "column 'pp_split': layout 'Et*4|(t*4|)*14ttmL': places 62 transformer "
                                          "layers (t); the model has 61"),
    ({"vp": 2}, "column 'pp_split': layout 'Et*4|(t*4|)*14tmL': 16 stages on pp=4 make vp=4, but the row's vp is 2 "
                "(leave vp blank to take the layout's)"),
    ({"pp_split": "Et*4|(t*4|)*14tLm"}, "column 'pp_split': layout 'Et*4|(t*4|)*14tLm': the last layer must be L "
                                         "(loss), got 'm'"),
    ({"pp_split": "evne"}, "column 'pp_split': must be one of auto, even, account, balanced, a "
                           "pipeline_model_parallel_layout (Et*4|(t*4|)*14tmL) or empty (got 'evne')"),
    ({"tp": "", "pp": ""}, "column 'pp_split': a pipeline_model_parallel_layout needs the row's pp (tp and pp are "
                           "blank: scaletax predict searches the layout); give tp and pp or a split name"),
])
def test_a_bad_layout_is_a_one_line_error(tmp_path, cells, message):
    row = {**_row(DSV3_GB200), **cells}
    assert _error(tmp_path, [row]) == f"t.csv: 1 bad row(s): row 2, {message}"


def test_a_layout_on_another_pp_is_read_for_that_pp():
    """One string fits every pp that divides its stages: Et|(tt|)*30mL is PP8 x VP4 or PP16 x VP2."""
    row = _row("recipe-deepseek-v3-1024xh100-bf16", "production_moe_recipes.csv")
    other = dict(row, pp=16, vp="", dp=row["dp"] // 2)
    plan = runplan.plan_row(other)
    assert (plan.layout.pp, plan.layout.vp) == (16, 2)
    assert runplan.plan_rows([row, other]).layouts().vp.tolist() == [4, 2]


# --- moe_dispatcher flex ---------------------------------------------------------------------

def test_flex_is_the_deduplicated_dispatch_of_deepep():
    """Megatron-Core's flex dispatcher (DeepEP or HybridEP backend) sends a token once per
    destination NVLink domain, as ``deepep`` does: the same step, bit for bit; ``deepep`` keeps its meaning."""
    row = _row(DSV3_GB200)
    assert row["moe_dispatcher"] == "flex" and runs.row_dispatch(row) == "dedup" == runs.row_dispatch(
        dict(row, moe_dispatcher="deepep"))
    flex, deepep, a2a = (perf.evaluate(runplan.plan_rows([dict(row, moe_dispatcher=d)]).step_inputs()).step_s[0]
                         for d in ("flex", "deepep", "alltoall"))
    assert flex == deepep != a2a


def test_unknown_dispatcher_names_flex(tmp_path):
    row = dict(_row(DSV3_GB200), moe_dispatcher="hybrid")
    assert _error(tmp_path, [row]) == ("t.csv: 1 bad row(s): row 2, column 'moe_dispatcher': must be one of deepep, "
                                       "flex, alltoall or empty (got 'hybrid')")


def test_recipe_rows_say_flex_where_the_recipe_does():
    with (DATA_DIR / "bridge_recipes.csv").open(encoding="utf-8") as f:
        recipes = {r["recipe"]: r for r in csv.DictReader(f)}
    checked = 0
    for name in ("coverage_probes.csv", "production_moe_recipes.csv"):
        for row in runs.read_runs(DATA_DIR / name):
            rec = recipes.get(row.get("recipe") or "")
            if rec and row.get("moe_experts"):
                checked += 1
                assert (row["moe_dispatcher"] == "flex") == (rec["moe_token_dispatcher_type"] == "flex"), row["run_id"]
    assert checked == 17


# --- the memory columns of a paper's setting --------------------------------------------------

def _one_t(**cells):
    row = next(r for r in runs.read_runs(DATA_DIR / "reference_runs.csv") if r["run_id"] == "korthikanti2022-1t-tp")
    return {**row, **cells}


def test_memory_columns_change_only_what_they_say():
    base = runplan.plan_row(_one_t())
    g = runplan.plan_rows([_one_t(), _one_t(grad_reduce_in_fp32="false"), _one_t(include_embeddings=""),
                        _one_t(dropout="false"), _one_t(attn_kernel="flash")]).memory_gib()
    # fp32 gradients: 4 bytes per parameter instead of 2; the optimizer's fp32 shard copy then is the gradient
    assert g["gradients"][0] == pytest.approx(2 * g["gradients"][1], rel=1e-12)
    assert g["weights"][1] == g["weights"][0] and g["activations"][1] == g["activations"][0]
    # the embedding on the first stage: its weights and the embedding dropout mask, p micro-batches of it
    emb = base.model.vocab * base.model.hidden / base.layout.tp + base.model.seq_len * base.model.hidden  # + positions
    assert (g["weights"][2] - g["weights"][0]) * memory.GIB == pytest.approx(2 * emb, rel=1e-9)
    assert (g["activations"][2] - g["activations"][0]) * memory.GIB == pytest.approx(
        base.model.hidden * base.model.seq_len * base.layout.pp, rel=1e-12)
    # no dropout: the scores' mask and dropout output (3 a s^2 b) and the two h masks go
    s, h, a, t, L = base.model.seq_len, base.model.hidden, base.model.heads, base.layout.tp, base.model.layers
    assert (g["activations"][0] - g["activations"][3]) * memory.GIB == pytest.approx(
        L * s * (3 * a * s / t + 2 * h), rel=1e-12)
    # flash attention: no scores at all (the 68.77 GiB of issue 34)
    assert round(float(g["activations"][4]), 2) < 70 < 131.25 == round(float(g["activations"][0]), 2)


def test_grad_reduce_in_fp32_sends_fp32_gradients():
    tp_row = dict(_one_t(), dp=2, gpu_count=1024, gbs=128)
    fp32, half = (runplan.plan_rows([dict(tp_row, grad_reduce_in_fp32=v)]).step_inputs().comm.groups["dp"].bytes[0]
                  for v in ("true", "false"))
    assert fp32 == pytest.approx(2 * half, rel=1e-12) and half > 0


@pytest.mark.parametrize("col", ["dropout", "grad_reduce_in_fp32", "include_embeddings"])
def test_memory_flags_are_true_or_false(tmp_path, col):
    assert _error(tmp_path, [_one_t(**{col: "maybe"})]) == (
        f"t.csv: 1 bad row(s): row 2, column {col!r}: expected true/false, got 'maybe'")


def test_predict_help_documents_every_new_column():
    text = runs.schema_text()
    for col in ("dropout", "grad_reduce_in_fp32", "include_embeddings"):
        assert f"  {col}: " in text
    assert "pipeline_model_parallel_layout" in text and "flex: Megatron-Core" in text


def test_predict_rows_with_layouts_and_flex_are_vectorized_as_row_by_row():
    from test_predict_vectorized import _assert_same, _reference

    rows = [r for name in TABLES for r in runs.read_runs(DATA_DIR / name)
            if pipeline_layout.is_layout(runs.row_pp_split(r)) or r.get("moe_dispatcher") == "flex"]
    rows += [_one_t(), _one_t(recompute="selective", sequence_parallel="true")]
    assert runs.layout_table(rows) is not None
    _assert_same(predict_rows(rows), _reference(rows))
    assert np.isfinite([float(r["predicted_step_time_s"]) for r in predict_rows(rows)]).all()
