"""The validation chapter's rows: labels, errors per hardware and against the targets, worst rows
and the recompute what-if, hold-out tables, parameters, breakdowns, MFU, the H200 GEMM
measurement beside the model, the pinned refit, and the notebook itself."""
import math
import os

import numpy as np
import pytest

from scaletax import escape
from scaletax.inputs import hardware
from scaletax.inputs import runs as runs_table
from scaletax.model import efficiency
from scaletax.fit import calibrate, validate
from scaletax.chapters import validation as vs


@pytest.fixture(scope="module")
def runs(table):
    return vs.run_rows(table, validate.load_rows())


def test_run_rows_follow_the_table(table, runs):
    assert [r["run_id"] for r in runs] == [t["run_id"] for t in table]
    assert [r["n"] for r in runs] == list(range(1, len(table) + 1))
    assert len({r["label"] for r in runs}) == len(runs)
    for r, t in zip(runs, table):
        assert r["run"].startswith(f"#{r['n']} ")
        assert r["error"] == pytest.approx(t["predicted"] / t["measured"] - 1.0)
        assert r["error_low"] <= r["error"] <= r["error_high"]
        assert r["error_text"] == vs.spct(t["error"])
        assert r["recompute_assumed"] == ("recompute assumed" in t["assumptions"])
        assert ("(assumed)" in r["layout_text"]) == r["recompute_assumed"]
        assert r["kind"] in vs.SOURCE_KINDS and isinstance(r["source_md"], escape.Markup)
        assert r["source_md"].startswith("[") and "](<https://" in r["source_md"]
        assert sum(r[f"{k}_share"] for k in vs.COMPONENTS) == pytest.approx(1.0)
    assert {r["arch"] for r in runs} == {"dense", "MoE"}


def test_run_rows_refuse_misaligned_inputs(table):
    rows = validate.load_rows()
    with pytest.raises(ValueError, match="run_rows"):
        vs.run_rows(table, rows[1:] + rows[:1])


def test_source_links():
    """A source is a link (escaped text, the URL inside <...>) that MyST reads as one reference."""
    from docutils import nodes
    from docutils.core import publish_doctree
    from myst_parser.parsers.docutils_ import Parser

    assert vs.source_md("https://arxiv.org/abs/2104.04473") == "[arXiv\\:2104\\.04473](<https://arxiv.org/abs/2104.04473>)"
    url = "https://github.com/mlcommons/training_results_v5.0/tree/main/NVIDIA/results/tyche_ngpu256_ngc25.04_nemo/llama31_405b"
    link = vs.source_md(url)
    assert link == f"[MLPerf Training v5\\.0 results](<{url}>)"
    refs = list(publish_doctree(link, parser=Parser()).findall(nodes.reference))
    assert [(r.astext(), r["refuri"]) for r in refs] == [("MLPerf Training v5.0 results", url)]
    assert vs.source_md("") == "–"
    with pytest.raises(ValueError, match="not an http"):
        vs.source_md("javascript:alert(1)")


def test_display_text_helpers():
    assert vs.spct(0.017) == "+1.7%" and vs.spct(-0.09) == "\u22129.0%" and vs.spct(None) == "–"


def test_caveats_keep_only_speed_relevant_clauses():
    notes = "vocab 50257 is unpadded; precision recipe: FP8 hybrid; MLPerf closed division; recompute not checked"
    assert vs.caveats(notes) == "precision recipe: FP8 hybrid; recompute not checked"
    assert vs.caveats("") == "–"


def test_hardware_rows_agree_with_error_summary(table):
    summ = validate.error_summary(table)
    rows = vs.hardware_rows(table)
    assert rows[0]["hardware"] == "all" and rows[0]["rows"] == summ["rows"]
    assert rows[0]["median_abs_error"] == pytest.approx(summ["median_abs_error"])
    assert rows[0]["median_signed_error"] == pytest.approx(summ["median_signed_error"])
    assert rows[0]["in_band"] == round(summ["band_coverage"] * summ["rows"])
    assert sum(r["rows"] for r in rows[1:]) == summ["rows"]
    for r in rows[1:]:
        ref = summ["per_hardware"][r["hardware"]]
        assert r["median_abs_error"] == pytest.approx(ref["median_abs_error"])
        assert r["max_abs_error"] == pytest.approx(ref["max_abs_error"])


def test_targets(table):
    summ = validate.error_summary(table)
    rows = vs.target_rows(summ)
    assert [r["limit"] for r in rows] == [validate.TARGETS[k] for k in
                                          ("median_abs_error", "per_hardware_median_abs_error", "max_abs_error")]
    assert all(r["met"] == (r["achieved"] <= r["limit"]) for r in rows)
    assert rows[2]["achieved"] == pytest.approx(summ["max_abs_error"])
    text = vs.targets_met(summ)
    assert text.startswith("All") if all(r["met"] for r in rows) else text.startswith("Not met")
    strict = {k: 0.0 for k in validate.TARGETS}
    assert all(not r["met"] for r in vs.target_rows(summ, strict))


def test_worst_rows_and_recompute_whatif(runs):
    worst = vs.worst_rows(runs, 4)
    errs = [abs(r["error"]) for r in worst]
    assert errs == sorted(errs, reverse=True) and errs[0] == max(abs(r["error"]) for r in runs)
    rows = validate.load_rows()
    ids = [r["run_id"] for r in runs if r["recompute"] in ("none", "selective")][:4]
    wi = vs.recompute_whatif(rows, ids)
    by = {r["run_id"]: r for r in runs}
    for w in wi:
        r = by[w["run_id"]]
        # the mode the model used reproduces the table's prediction
        assert w[f"{r['recompute']}_error"] == pytest.approx(r["error"], rel=1e-9, abs=1e-12)
        # more recompute: slower and less memory
        assert w["none_error"] > w["selective_error"] > w["full_error"]
        assert w["none_gib"] >= w["selective_gib"] > w["full_gib"]
        fit = [w[f"{m}_error"] for m in ("none", "selective", "full") if w[f"{m}_fits"]]
        assert w["brackets"] == (bool(fit) and min(fit) <= 0 <= max(fit))
        assert w["capacity_gib"] == pytest.approx(w["capacity_gib"]) and "GiB" in w["none_text"]


@pytest.fixture(scope="module")
def cv(prepared):
    return validate.cross_validation(prepared=prepared)


def test_cross_validation_tables(cv, runs):
    schemes = vs.cv_scheme_rows(cv)
    assert [r["scheme"] for r in schemes] == list(vs.CV_SCHEMES)
    assert all(r["rows"] == len(runs) for r in schemes)  # every row tested under every scheme
    for r in schemes:
        assert r["median_abs_error"] == pytest.approx(cv[r["scheme"]]["median_abs_error"])
        assert 0 <= r["within_10"] <= r["within_25"] <= 1 and r["met"] in ("yes", "no")
    per = vs.cv_rows(runs, cv)
    assert len(per) == len(runs)
    nv = next(m for m in per if "NVFP4" in m["run_id"])
    assert nv["row_error"] is not None and "gemm_ceiling_4bit" not in nv["prior"]  # the tied ceiling predicts it
    for by in ("family", "generation", "source"):
        cats = vs.cv_category_rows(cv, by)
        assert sum(c["rows"] for c in cats) == len(runs)
        meds = sorted(abs(r["error"]) for r in cv["tables"][by])
        assert max(c["held_out_max"] for c in cats) == pytest.approx(meds[-1])
    assert {c["category"] for c in vs.cv_category_rows(cv, "source")} == {"MLPerf", "Megatron-Bridge", "papers"}
    assert {c["category"] for c in vs.cv_category_rows(cv, "generation")} == {"ampere", "hopper", "blackwell"}


def test_parameter_rows_are_the_data_file():
    band = efficiency.default_band()
    rows = vs.parameter_rows(band)
    assert [r["parameter"] for r in rows] == list(band.meta["parameters"])
    for r in rows:
        assert r["low"] <= r["value"] <= r["high"] and r["source"]
    assert {r["kind"] for r in rows} == {"measured", "calibrated", "reference", "tied", "derived"}


def test_representative_and_breakdown(runs):
    rep = vs.representative(runs)
    keys = [(r["group"], r["family"]) for r in rep]
    assert len(keys) == len(set(keys)) == len({(r["group"], r["family"]) for r in runs})
    for r in rep:
        assert r["gpus"] == max(x["gpus"] for x in runs if (x["group"], x["family"]) == (r["group"], r["family"]))
    brk = vs.breakdown_rows(rep)
    assert len(brk) == len(rep) * len(vs.COMPONENTS)
    for r in rep:
        parts = [b for b in brk if b["label"] == r["label"]]
        assert sum(b["share"] for b in parts) == pytest.approx(1.0)
        assert sum(b["seconds"] for b in parts) == pytest.approx(r["step_s"])


def test_mfu_rows_match_mfu_by_precision(table, runs):
    pts = vs.mfu_rows(runs)
    for g in vs.mfu_by_precision(table):
        v = [p["mfu"] for p in pts if p["precision"] == g["precision"].upper() and p["family"] == g["family"]]
        assert len(v) == g["rows"]
        assert float(np.median(v)) == pytest.approx(g["measured_mfu_median"])


def test_gemm_points_reproduce_the_fit():
    fit = calibrate.fit_gemm_measurements()
    pts = vs.gemm_points()
    summ = {s["dtype"]: s for s in vs.gemm_summary(pts)}
    assert set(summ) == set(vs.GEMM_DTYPES)
    assert summ["bf16"]["single_ceiling"] == pytest.approx(fit["ceiling_bf16"])
    assert summ["fp8_e4m3"]["single_ceiling"] == pytest.approx(fit["ceiling_fp8"])
    assert sum(s["shapes"] for k, s in summ.items() if k != "fp8_e4m3_fastaccum") == fit["points"]
    for p in pts:
        assert p["m"] >= 1024 and 0 < p["frac"] < 1
        assert p["single_fit_frac"] < p["single_ceiling"] and p["model_frac"] < p["model_ceiling"]
        if p["dtype"] == "bf16":  # the model's 16-bit ceiling is this fit (data file rounds to 4 digits)
            assert p["model_frac"] == pytest.approx(p["single_fit_frac"], rel=2e-3)
    for s in summ.values():
        assert s["q1"] <= s["median"] <= s["q3"] <= s["best"]
        assert s["model_over_measured"] == pytest.approx(s["model_ceiling"] / s["single_ceiling"])
    curves = vs.gemm_curves(list(summ.values()), pts)
    assert len({c["curve"] for c in curves}) == 4
    for name in {c["curve"] for c in curves}:
        y = [c["frac"] for c in curves if c["curve"] == name]
        assert all(a < b for a, b in zip(y, y[1:]))


def test_copy_fraction():
    f = vs.copy_fraction()
    assert 0.5 < f < 1.0
    assert f == pytest.approx(4.1223559 / 4.8, rel=1e-3)


def test_pinned_fit_holds_the_pin(prepared):
    free = calibrate.calibrate(prepared=prepared)
    pin = vs.pinned_fit(prepared, {"gemm_ceiling_8bit": 0.68})
    assert pin["params"]["gemm_ceiling_8bit"] == 0.68
    assert pin["cost"] >= free.cost - 1e-9
    assert pin["summary"]["rows"] == len(free.rows)
    # pinned at the free optimum, the fit returns to it
    same = vs.pinned_fit(prepared, {"gemm_ceiling_8bit": free.params["gemm_ceiling_8bit"]})
    assert same["cost"] == pytest.approx(free.cost, rel=1e-3)
    assert same["params"]["memory_overhead"] == pytest.approx(free.params["memory_overhead"], rel=1e-2)


def test_claim_rows(table):
    rows = vs.claim_rows(vs.b200_vs_h100(table), vs.gb300_vs_gb200(table))
    assert rows[0]["measured"] is not None and rows[0]["peak"] == pytest.approx(
        hardware.get("b200").peak_flops("fp8") / hardware.get("h100_sxm").peak_flops("fp8"))
    assert rows[1]["measured"] is None and "projection" in rows[1]["claim"]
    assert math.isfinite(rows[1]["predicted"])


def test_notebook_runs_and_glues_every_key_it_uses(tmp_path):
    jupytext = pytest.importorskip("jupytext")
    pm = pytest.importorskip("papermill")
    import re

    from scaletax import DATA_DIR

    path = DATA_DIR.parent / "notebooks" / "validation.md"
    src = jupytext.read(path)
    old = os.environ.get("SCALETAX_FIGURES_DIR")
    os.environ["SCALETAX_FIGURES_DIR"] = str(tmp_path / "figures")
    try:
        nb = pm.execute_notebook(src, str(tmp_path / "validation.ipynb"), kernel_name="python3",
                                 progress_bar=False, cwd=str(tmp_path))
    finally:
        if old is None:
            os.environ.pop("SCALETAX_FIGURES_DIR", None)
        else:
            os.environ["SCALETAX_FIGURES_DIR"] = old
    glued = {out.get("metadata", {}).get("scrapbook", {}).get("name")
             for cell in nb.cells for out in cell.get("outputs", [])}
    text = path.read_text(encoding="utf-8")
    used = set(re.findall(r"\{glue:text\}`([a-z0-9_]+)", text)) | set(re.findall(r"\{glue:figure\} (\S+)", text))
    assert used and used <= glued, sorted(used - glued)
    assert all(k.startswith(("val_", "fig-val-")) for k in glued if k)
    plain = [out["data"].get("text/plain", "") for cell in nb.cells for out in cell.get("outputs", [])
             if out.get("metadata", {}).get("scrapbook", {}).get("name", "").startswith("val_")]
    assert plain and not [t for t in plain if "np." in t]  # numpy scalars do not format in glue:text
    figs = tmp_path / "figures"
    assert {p.stem for p in figs.glob("fig-val-*.png")} == {p.stem for p in figs.glob("fig-val-*.csv")}


def test_claim_b200_about_twice_h100(table):
    c = vs.b200_vs_h100(table)
    assert c["available"]
    assert 1.8 <= c["measured_ratio"] <= 2.4
    assert c["predicted_ratio"] == pytest.approx(c["measured_ratio"], rel=0.15)
    assert c["predicted_ratio"] < c["peak_ratio"]


def test_claim_gb300_vs_gb200_says_when_no_data(table):
    c = vs.gb300_vs_gb200(table)
    assert not c["available"] and "no GB300 row" in c["reason"]
    assert 1.0 < c["predicted_ratio_nvfp4_llama405b"] <= c["peak_ratio_fp4"]


def test_mfu_by_precision(table):
    rows = vs.mfu_by_precision(table)
    keys = {(r["precision"], r["family"]) for r in rows}
    assert {("fp8", "hopper"), ("fp8", "blackwell"), ("mxfp8", "blackwell"), ("nvfp4", "blackwell")} <= keys
    for r in rows:
        assert 0 < r["measured_mfu_median"] <= r["measured_mfu_max"] < 1
        assert 0 < r["predicted_mfu_median"] < 1
    hop = next(r for r in rows if r["precision"] == "fp8" and r["family"] == "hopper")
    assert hop["measured_mfu_median"] == pytest.approx(0.41, abs=0.03)


def test_coverage_counts_the_categories_the_table_lacks():
    rows = validate.load_rows()
    cov = {c["category"]: c for c in vs.coverage_rows(rows)}
    assert list(cov) == list(vs.COVERAGE)
    # issue 12: the table has no long-context, GB300/B300 or small-dense-at-large-DP row; its only
    # fine-grained MoE rows (the regime's definition, issue 33) are the three DeepSeek-V3 ones
    for k in ("long_context", "small_dense_dp", "blackwell_ultra"):
        assert cov[k]["rows"] == 0 and cov[k]["sources"] == "–", k
    fine = [r for r in rows if runs_table.row_regime(r) == "fine-grained MoE"]
    assert cov["fine_moe"]["rows"] == len(fine) == 3 and all("DeepSeek" in r["model"] for r in fine)
    assert cov["production"]["rows"] == sum(int(r["gpu_count"]) >= 2048 for r in rows) > 0
    # a row of each kind is counted: an 8B row stretched to 64k tokens, moved to GB300, spread over 512 GPUs
    l8 = next(r for r in rows if r["run_id"] == "mbridge25.11-Llama3-DGX-H100-8-FP8-CS")
    extra = [{**l8, "seq_len": 65536}, {**l8, "hardware": "gb300"}, {**l8, "gpu_count": 512, "dp": 512}]
    cov2 = {c["category"]: c["rows"] for c in vs.coverage_rows(extra)}
    assert (cov2["long_context"], cov2["blackwell_ultra"], cov2["small_dense_dp"]) == (1, 1, 1)


def test_probes_are_outside_the_table_and_interleaving_cuts_the_bubble():
    probes = vs.probe_rows()
    rows = {r["run_id"]: r for r in validate.load_rows()}
    assert {p["category"] for p in probes} == set(vs.COVERAGE) | {"memory_fit"}
    assert not set(p["run_id"] for p in probes) & set(rows)
    by = {p["run_id"]: p for p in probes}
    plain, vp8 = by["probe-llama3-405b-16k-h100-bf16"], by["probe-llama3-405b-16k-vp8-h100-bf16"]
    # Narayanan 2021 §2.2: bubble (pp - 1) / (vp m) of the busy time; pp 16, m 16 micro-batches
    assert plain["bubble_s_share"] / (1 - plain["bubble_s_share"]) > 0.5
    assert vp8["bubble_s_share"] < plain["bubble_s_share"] / 4
    assert vp8["tokens_per_s_per_gpu"] > plain["tokens_per_s_per_gpu"]


def test_heldout_runs_are_outside_the_table_and_predicted_as_scaletax_predict_does():
    from scaletax.inputs import runs as runs_mod
    from scaletax.report.predict import predict_rows

    held = vs.heldout_rows()
    table_ids = {r["run_id"] for r in validate.load_rows()}
    probe_ids = {p["run_id"] for p in vs.probe_rows()}
    assert len(held) >= 13 and not {h["run_id"] for h in held} & (table_ids | probe_ids)
    assert {vs.heldout_group(h["run_id"]) for h in held} == {"production", "scaling series"}
    # one answer: the chapter's prediction and error are scaletax predict's for the same file
    cli = {r["run_id"]: r for r in predict_rows(runs_mod.read_runs(vs.HELDOUT_CSV))}
    for h in held:
        c = cli[h["run_id"]]
        assert round(h["predicted"], 3) == c["predicted_tokens_per_s_per_gpu"]
        assert round(h["error"], 4) == c["error_vs_measured"]
        assert (round(h["low"], 3), round(h["high"], 3)) == (c["predicted_tokens_per_s_per_gpu_low"],
                                                             c["predicted_tokens_per_s_per_gpu_high"])
        assert h["fits"] and c["fits"] is True, h["run_id"]


def test_heldout_measurements_are_what_the_papers_report():
    from scaletax.inputs import runs as runs_mod

    held = {h["run_id"]: h for h in vs.heldout_rows()}
    # DeepSeek-V3 (arXiv 2412.19437 §1): 180K H800 GPU-hours per trillion tokens
    ds = held["deepseek-v3-paper-2048-h800-fp8"]
    assert ds["measured"] == pytest.approx(1e12 / (180e3 * 3600), abs=0.05)
    assert ds["basis"] == "tokens/s per GPU (reported)" and ds["gpus"] == 2048
    # Llama 3 (arXiv 2407.21783 Table 4): 430 / 400 / 380 TFLOP/s per GPU over the model's causal FLOPs per token
    rows = {r["run_id"]: r for r in runs_mod.read_runs(vs.HELDOUT_CSV)}
    for rid, tf in (("llama3-paper-405b-8k-h100-bf16", 430), ("llama3-paper-405b-16k-h100-bf16", 400),
                    ("llama3-paper-405b-16k-131k-h100-bf16", 380)):
        model = runs_mod.row_model(rows[rid])
        assert held[rid]["measured"] == pytest.approx(tf * 1e12 / model.model_flops_per_token(), rel=1e-12)
        assert held[rid]["basis"].startswith("model TFLOP/s")


def test_heldout_runs_lie_in_the_band_and_the_summary_counts_them():
    held = vs.heldout_rows()
    # the model's stated out-of-sample band (data/efficiency.yaml) must hold runs it never saw
    for h in held:
        assert h["low"] <= h["measured"] <= h["high"], (h["run_id"], h["error"])
        assert abs(h["error"]) <= 0.25, h["run_id"]
    s = vs.heldout_summary(held)
    err = sorted(abs(h["error"]) for h in held)
    assert s["n"] == len(held) and s["max_abs_error"] == err[-1]
    assert s["median_abs_error"] == pytest.approx(float(np.median(err)))
    assert s["in_band"] == 1.0 and s["within_25"] == 1.0
    prod, series = vs.heldout_summary(held, "production"), vs.heldout_summary(held, "scaling series")
    assert prod["n"] + series["n"] == len(held) and prod["n"] >= 4


def test_heldout_scaling_series_reads_the_papers_formula_and_unhidden_dp_only_slows():
    held = {h["run_id"]: h for h in vs.heldout_rows()}
    s17 = held["narayanan2021-1.7B"]
    # Narayanan 2021 eq. 3 with full recompute: tokens/s = TFLOP/s / (96 l h^2 (1 + s/6h + V/16lh))
    l, h, s, V = 24, 2304, 2048, 51200
    assert s17["measured"] == pytest.approx(137e12 / (96 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), rel=1e-12)
    assert s17["basis"].startswith("TFLOP/s incl. recompute / Narayanan 2021 eq. 3")
    for rid, h in held.items():  # hiding less communication can only slow a step down
        assert h["error_dp_unhidden"] <= h["error"] + 1e-12, rid
    assert any(h["error_dp_unhidden"] < h["error"] - 0.01 for h in held.values())
