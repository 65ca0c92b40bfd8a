"""Tests for scaletax.chapters.precision: the rows, numbers and sentences of the precision chapter."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from scaletax.inputs import formats, references
from scaletax.model import lowp_training as L
from scaletax.model import precision as P
from scaletax.chapters import precision as ps
from scaletax.report import chapters

TINY = dict(vocab=32, embed_dim=16, width=32, batch=64, eval_size=256)
PRECS = ["bf16", "fp8", "mxfp8", "nvfp4"]


@pytest.fixture(scope="module")
def tiny():
    """The default recipes on a tiny task: 2 seeds, 12 steps (seconds)."""
    results, cfg = ps.run(7, 2, 12, **TINY)
    rows = ps.gap_rows(results, cfg)
    return results, cfg, rows, ps.experiment_facts(rows, results, cfg)


@pytest.fixture(scope="module")
def runs():
    return ps.read_runs()


@pytest.fixture(scope="module")
def err():
    return ps.error_rows(0)


# --- formats ---------------------------------------------------------------------------------
def test_format_rows_count_scales_in_bits():
    rows = {r["format"]: r for r in ps.format_rows()}
    assert set(rows) == set(formats.FORMATS)
    assert rows["mxfp8_e4m3"]["bits"] == 8 + 8 / 32
    assert rows["mxfp4"]["bits"] == 4 + 8 / 32
    assert rows["nvfp4"]["bits"] == 4 + 8 / 16
    assert rows["nvfp4"]["bytes"] == pytest.approx(0.5625)
    assert rows["fp8_e4m3"]["element"] == "E4M3" and rows["fp8_e4m3"]["max"] == 448
    assert rows["bf16"]["block_scale"] == "–"
    assert rows["nvfp4"]["block_scale"].startswith("16, E4M3")
    assert rows["mxfp4"]["block_scale"].startswith("32, E8M0")
    assert len({r["label"] for r in rows.values()}) == len(rows)


def test_spec_check_agrees_and_catches_a_change(tmp_path):
    ok = ps.spec_check()
    assert ok["mismatches"] == [] and ok["n_formats"] == len(formats.ELEMENT_FORMATS)
    assert ok["n_values"] >= 5 * len(formats.ELEMENT_FORMATS)
    assert "agree exactly" in ps.spec_text(ok)
    data = json.loads(ps.VECTORS_JSON.read_text())
    data["format_parameters"]["fp8_e4m3"]["max_normal"] = 480.0
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps(data))
    chk = ps.spec_check(bad)
    assert chk["mismatches"] == ["fp8_e4m3.max_normal"]
    assert "disagree" in ps.spec_text(chk)


# --- error study -----------------------------------------------------------------------------
def test_scheme_labels_unique_and_ordered_by_bits():
    labels = [ps.scheme_label(*s) for s in P.SCHEMES]
    assert len(set(labels)) == len(labels)
    order = ps.scheme_order()
    assert sorted(order) == sorted(labels)
    assert order[0] == "BF16 cast" and order[-1] == "FP4 E2M1 cast"


def test_mag_text():
    assert [ps.mag_text(m) for m in (1e-6, 1e-3, 1.0, 1e3, 0.5)] == ["1e-6", "1e-3", "1", "1e3", "0.5"]


def test_error_rows_cover_every_scheme_and_convert_shares(err):
    assert len(err) == len(P.SCHEMES) * len(P.DISTRIBUTIONS) * len(ps.MAGNITUDES)
    for r in err:
        assert r["flushed_pct"] == pytest.approx(100 * r["zero_share"])
        assert r["saturated_pct"] == pytest.approx(100 * r["sat_share"])
        assert r["snr_plot"] is None or math.isfinite(r["snr_plot"])


def test_error_facts_show_the_known_mechanisms(err):
    f = ps.error_facts(err)
    assert f["scaled_magnitude_spread_db"] < 1.0  # scaling removes the magnitude dependence
    assert f["e4m3_cast_flushed_lo"] == pytest.approx(100)  # 1e-6 is below E4M3's subnormals
    assert f["e4m3_cast_saturated_hi"] > 50
    assert f["e4m3_tensor_flushed_lo"] < 0.01
    assert 5 < f["db_per_mantissa_bit"] < 7  # ~6.02 dB per bit
    assert f["snr_nvfp4"] > f["snr_mxfp4"] > 0
    assert 0 < f["nvfp4_over_mxfp4_min"] <= f["nvfp4_over_mxfp4_max"]
    assert f["nvfp4_extra_bits"] == pytest.approx(0.25)
    assert f["mxfp4_ceil_saturated"] == 0 < f["mxfp4_ocp_saturated"]
    assert f["e4m3_1x128_outlier"] > f["e4m3_tensor_outlier"]


# --- experiment ------------------------------------------------------------------------------
def test_seeds_and_config():
    assert ps.experiment_seeds(10, 3) == [10, 11, 12]
    with pytest.raises(ValueError):
        ps.experiment_seeds(0, 0)
    cfg = ps.task_config(50, width=64)
    assert cfg.steps == 50 and cfg.width == 64 and cfg.vocab == L.TaskConfig().vocab
    # 64*128+128 + 128*128+128 + 128*64+64 for the default sizes
    assert ps.toy_parameters(L.TaskConfig()) == 33088


def test_describe_is_generated_from_the_recipe():
    assert "reference" in ps.describe("bf16")
    assert "per-tensor" in ps.describe("fp8_tensor") and "E5M2" in ps.describe("fp8_tensor")
    assert "round-up" in ps.describe("mxfp8")
    assert "none of the recipe elements" in ps.describe("nvfp4_naive")
    assert "without stochastic rounding" in ps.describe("nvfp4_no_sr")
    assert "Hadamard" in ps.describe("nvfp4")  # the one element the default recipe leaves out
    assert ps.describe("nvfp4_rht").count("without") == 0


def test_smooth_and_steps_to_reach():
    s = ps.smooth(np.array([[4.0, 2.0, 0.0, 2.0]]), 2)
    assert s[0] == pytest.approx([4.0, 3.0, 1.0, 1.0])
    assert ps.smooth(np.ones((2, 5)), 10).shape == (2, 5)
    assert ps.steps_to_reach(np.array([3.0, 2.0, 1.0]), 2.0) == 2
    assert ps.steps_to_reach(np.array([3.0, 2.0]), 1.0) is None
    assert ps.smooth_window(300) == 15 and ps.smooth_window(10) == 1


def test_gap_rows(tiny):
    results, cfg, rows, _ = tiny
    assert [r["recipe"] for r in rows] == list(L.DEFAULT_RECIPES)
    by = {r["recipe"]: r for r in rows}
    assert by["bf16"]["gap_pct"] == 0
    for name, r in by.items():
        four_bit = name not in ("bf16", "fp8_tensor", "mxfp8", "nvfp4")
        assert (r["vs_ref_pct"] is not None) == four_bit, name
        assert r["n_seeds"] == 2 and r["gap_se_pct"] == pytest.approx(r["gap_std_pct"] / math.sqrt(2))
        assert r["bf16_steps_pct"] is None or 0 < r["bf16_steps_pct"] <= 100
    d = (results["mxfp4"].final_loss - results["nvfp4"].final_loss) / results["nvfp4"].final_loss * 100
    assert by["mxfp4"]["vs_ref_pct"] == pytest.approx(d.mean())


def test_curve_rows(tiny):
    results, cfg, _, _ = tiny
    rows = ps.curve_rows(results, cfg, points=5)
    assert {r["panel"] for r in rows} == {p for p, _ in ps.PANELS}
    assert all(r["lo"] <= r["loss"] <= r["hi"] for r in rows)
    assert {r["step"] for r in rows} >= {1, cfg.steps}
    assert max(sum(1 for r in rows if r["panel"] == p and r["recipe"] == "bf16") for p, _ in ps.PANELS) <= 6
    assert all(r["uniform"] == pytest.approx(math.log(cfg.vocab)) for r in rows)


def test_facts_and_sentences(tiny):
    results, cfg, rows, facts = tiny
    d = (results["nvfp4"].final_loss - results["fp8_tensor"].final_loss) / results["fp8_tensor"].final_loss * 100
    assert facts["nvfp4_vs_fp8_pct"] == pytest.approx(d.mean())
    assert facts["steps"] == 12 and facts["n_seeds"] == 2
    pub = ps.published_numbers()
    for text in (ps.eight_bit_text(rows), ps.ablation_text(rows), ps.fp4_text(rows, facts),
                 ps.scale_text(facts, pub)):
        assert text.endswith(".") and "nan" not in text and "None" not in text
    prow = ps.published_rows(rows, facts)
    assert len(prow) == len(references.section("low_precision_training"))
    assert all(r["toy"] and r["verified"] for r in prow)


def test_one_seed_has_no_verdict():
    results, cfg = ps.run(3, 1, 10, **TINY)
    rows = ps.gap_rows(results, cfg)
    assert ps.clear(1.0, 0.0, 1) is None
    assert "one seed" in ps.eight_bit_text(rows)
    assert "one seed" in ps.ablation_text(rows)


def test_clear():
    assert ps.clear(1.0, 0.4, 3) == "up"
    assert ps.clear(-1.0, 0.4, 3) == "down"
    assert ps.clear(0.5, 0.4, 3) == "none"


def test_published_numbers_come_from_the_module():
    pub = ps.published_numbers()
    assert pub == {"fp8_vs_bf16_pct": pytest.approx(0.25), "nvfp4_vs_fp8_lo_pct": pytest.approx(1.0),
                   "nvfp4_vs_fp8_hi_pct": pytest.approx(1.5), "mxfp4_tokens_pct": pytest.approx(36.0)}


# --- what a format buys ----------------------------------------------------------------------
def test_peak_rows_show_hopper_has_no_block_formats():
    rows = {(r["gpu"], r["precision"]): r for r in ps.peak_rows(["h100_sxm", "gb200"], PRECS)}
    assert rows["h100_sxm", "nvfp4"]["native"] is False and rows["h100_sxm", "nvfp4"]["tflops"] is None
    assert rows["h100_sxm", "fp8"]["vs_bf16"] == pytest.approx(2.0, rel=1e-3)
    assert rows["gb200", "nvfp4"]["vs_fp8"] == pytest.approx(2.0)
    table = {r["gpu"]: r for r in ps.peak_table_rows(ps.peak_rows(["h100_sxm", "gb200"], PRECS), PRECS)}
    assert table["h100_sxm"]["mxfp8"] == "not native"
    assert table["gb200"]["nvfp4"].startswith("10,000")


def test_bytes_rows():
    rows = {r["precision"]: r for r in ps.bytes_rows(PRECS + ["mxfp4"], ["h100_sxm"])}
    assert rows["bf16"]["bytes"] == 2 and rows["fp8"]["bytes"] == 1
    assert rows["nvfp4"]["bytes"] == pytest.approx(4.5 / 8)
    assert rows["mxfp4"]["vs_bf16"] == pytest.approx(4.25 / 16)
    assert rows["nvfp4"]["native_on"] == "none of this scenario's GPUs"
    assert rows["fp8"]["native_on"] == "H100 SXM"


def test_share_rows(runs):
    rows = ps.share_rows(runs, ["h100_sxm", "gb200"])
    assert [r["gpu"] for r in rows][0] == "h100_sxm"
    for r in rows:
        assert r["mfu_min_pct"] <= r["mfu_median_pct"] <= r["mfu_max_pct"]
    nv = next(r for r in rows if r["gpu"] == "gb200" and r["precision"] == "nvfp4")
    # every published run, calibration and validation tables (the validation chapter's MFU figure
    # plots the same list): the Megatron-Bridge 405B and 70B rows and four MLPerf 5.1 rows
    assert nv["n_runs"] == 6
    # plan.mfu of the measured tokens/s, as the validation chapter states it (issue 33: 29.9% for the
    # Megatron-Bridge Llama 3.1 405B run on 256 GB200, not the source's own 29.6%)
    mfu = {r["run_id"]: r["mfu"] for r in ps.achieved_rows(runs, ["gb200"]) if r["precision"] == "nvfp4"}
    assert mfu["mbridge26.04.01-Llama3.1-DGX-GB200-256-NVFP4"] == pytest.approx(0.2988, abs=1e-4)
    assert nv["mfu_max_pct"] == pytest.approx(29.88, abs=0.01)
    assert nv["mfu_median_pct"] == pytest.approx(100 * float(np.median(list(mfu.values()))))
    assert ps.share_rows(runs, ["rubin"]) == []


def test_tax_on_the_megatron_bridge_gb200_rows(runs):
    tax = ps.tax_rows(runs, ["h100_sxm"])
    nv = next(r for r in tax if r["gpu"] == "gb200" and r["precision"] == "nvfp4")
    assert nv["baseline"] == "fp8" and nv["model"] == "Llama 3.1 405B" and nv["gpu_count"] == 256
    assert nv["peak_ratio"] == pytest.approx(2.0)
    assert nv["achieved_ratio"] == pytest.approx(1184 / 864)
    assert nv["tax_pct"] == pytest.approx(100 * (1 - 1184 / 864 / 2))
    assert nv["realized_pct"] == pytest.approx(100 * (1184 / 864 - 1))
    f = nv["amdahl_pct"] / 100  # Amdahl: 1 / ((1 - f) + f / P) reproduces the achieved ratio
    assert 1 / ((1 - f) + f / nv["peak_ratio"]) == pytest.approx(nv["achieved_ratio"])
    assert nv["in_scenario"] is False
    mx = next(r for r in tax if r["precision"] == "mxfp8")
    assert mx["peak_ratio"] == 1 and mx["realized_pct"] is None and mx["amdahl_pct"] is None
    assert ps.fp4_tax(tax) is nv
    text = ps.tax_text(tax)
    assert text.count("On 256 GB200 NVL72 GPUs training Llama 3.1 405B") == 1 and "1.37x" in text
    be = ps.breakeven(tax)
    assert be["margin_pct"] == pytest.approx(100 * (1184 / 864 - 1))
    assert be["mxfp4_time_ratio"] == pytest.approx(1.36 / (1184 / 864))


def _run(**kw):
    """A runs-table row (the architecture of the first published run) with the given cells."""
    from scaletax.inputs import runs as runs_table

    arch = {k: v for k, v in runs_table.read_runs(runs_table.RUNS_CSV)[0].items() if k in runs_table.MODEL_COLUMNS}
    row = {**arch, "run_id": "r", "model": "M", "hardware": "gb200", "gpu_count": 64, "seq_len": 4096, "gbs": 128,
           "precision": "fp8", "measured_tokens_per_s_per_gpu": 100.0, "measured_mfu": 0.4,
           "measured_model_tflops_per_gpu": 2000.0}
    row.update(kw)
    return row


def test_tax_rows_need_identical_setups_and_a_baseline():
    assert ps.tax_rows([_run(), _run(precision="nvfp4", gbs=256)]) == []  # different batch
    assert ps.tax_rows([_run(precision="mxfp8"), _run(precision="nvfp4")]) == []  # no FP8/BF16 baseline
    assert ps.tax_rows([_run(hardware="h100_sxm"), _run(hardware="h100_sxm", precision="nvfp4")]) == []
    rows = ps.tax_rows([_run(precision="bf16"), _run(precision="fp8", measured_tokens_per_s_per_gpu=150.0)])
    assert rows[0]["baseline"] == "bf16" and rows[0]["achieved_ratio"] == pytest.approx(1.5)
    assert rows[0]["peak_ratio"] == pytest.approx(2.0)
    rows = ps.tax_rows([_run(precision="bf16"), _run(), _run(precision="nvfp4", measured_tokens_per_s_per_gpu=130.0)])
    assert {(r["precision"], r["baseline"]) for r in rows} == {("fp8", "bf16"), ("nvfp4", "fp8")}
    assert "no pair" in ps.tax_text([]) and ps.fp4_tax([]) is None
    assert ps.breakeven([]) == {"margin_pct": None, "mxfp4_time_ratio": None}


def test_native_text_is_computed_from_the_catalog():
    assert ps.native_text(["h100_sxm"]).startswith("None of this scenario's GPUs (H100 SXM)")
    assert ps.native_text(["gb200"]).startswith("Every GPU")
    mixed = ps.native_text(["h100_sxm", "gb200"])
    assert mixed.startswith("H100 SXM has no native") and "GB200 NVL72 runs them" in mixed
    assert "No GPU" in ps.fp4_peak_text(ps.peak_rows(["h100_sxm"], PRECS))
    assert "3.0x on GB300" in ps.fp4_peak_text(ps.peak_rows(["gb300"], PRECS))


def test_generation_rows(runs):
    assert ps.generation_model(runs) == "Llama 3.1 405B"
    rows = {(r["gpu"], r["precision"]): r for r in ps.generation_rows(runs, ["h100_sxm", "gb200"], PRECS)}
    assert rows["h100_sxm", "fp8"]["peak_ratio"] == 1 and rows["h100_sxm", "fp8"]["achieved_ratio"] == 1
    assert rows["h100_sxm", "nvfp4"]["peak_ratio"] is None
    assert rows["gb200", "nvfp4"]["achieved_ratio"] == pytest.approx(1184 / 328)
    assert rows["gb200", "bf16"]["achieved_ratio"] is None
    text = ps.generation_text(list(rows.values()))
    assert text.startswith("Training Llama 3.1 405B") and "GB200 NVL72 in NVFP4" in text
    only = ps.generation_text(ps.generation_rows(runs, ["h100_sxm"], PRECS))
    assert only.startswith("No published run")


def test_guidance_rows(err, tiny, runs):
    _, _, rows, facts = tiny
    for gpus in (["h100_sxm", "gb200"], ["h100_sxm"]):
        g = ps.guidance_rows(ps.error_facts(err), rows, facts, ps.tax_rows(runs, gpus), gpus)
        assert [r["question"] for r in g] == ["Which 4-bit format", "Which layers", "Which GEMMs",
                                              "Which GPUs", "When it pays"]
        assert all(r["evidence"] and r["advice"] and "nan" not in r["evidence"] for r in g)
    assert "none of this scenario" in g[3]["evidence"]


# --- the chapter -----------------------------------------------------------------------------
def test_chapter_parameters_cover_what_it_reads():
    ch = chapters.chapter("precision")
    text = ch.source.read_text()
    assert set(chapters.default_parameters("precision")) == {k.replace(".", "_") for k in ch.reads}
    for f in ch.data:
        assert (ps.DATA_DIR / f).exists()
    keys = re.findall(r'glue\("([a-z0-9_]+)"', text) + re.findall(r'glue\(f"([a-z0-9_{}\[\]"\']+)"', text)
    assert all(k.startswith("prec_") for k in keys)


def test_budget_and_worth_text(tiny):
    _, _, rows, facts = tiny
    assert "not trained to convergence" in ps.budget_text(facts)
    assert "close to convergence" in ps.budget_text({**facts, "bf16_excess": 0.0})
    assert ps.worth_text(rows).startswith("BF16's own curve")
    none = [{**r, "bf16_steps_pct": None} for r in rows]
    assert "never" in ps.worth_text(none)


def test_experiment_results_are_the_direct_ones_and_the_cached_copies_the_same(tmp_path, monkeypatch):
    """The experiment gives lowp_training.run_experiment's results bit for bit, and a second run
    reads every training from the result cache (scaletax.memo: six files, none trained again)
    and gives the same values."""
    from scaletax import memo

    monkeypatch.delenv("SCALETAX_MEMO_DIR", raising=False)
    recipes = ("bf16", "nvfp4", "fp8_tensor")
    serial, _ = ps.run(5, 2, 6, recipes, **TINY)
    direct = L.run_experiment(recipes, [5, 6], ps.task_config(6, **TINY))
    monkeypatch.setenv("SCALETAX_MEMO_DIR", str(tmp_path))
    first, _ = ps.run(5, 2, 6, recipes, **TINY)
    assert len(list(tmp_path.rglob("*.pkl"))) == 6
    monkeypatch.setattr(memo, "_compute", lambda *a, **k: pytest.fail("trained again"))
    cached, _ = ps.run(5, 2, 6, recipes, **TINY)
    for other in (direct, first, cached):
        assert list(other) == list(serial)
        for name, r in serial.items():
            o = other[name]
            assert o.seeds == r.seeds
            assert np.array_equal(o.curves, r.curves)
            assert np.array_equal(o.final_loss, r.final_loss)
            assert np.array_equal(o.final_loss_fp32, r.final_loss_fp32)
            assert o.bayes_loss == r.bayes_loss
