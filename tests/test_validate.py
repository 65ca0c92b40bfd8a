"""Validation against the fitted runs (data/published_runs.csv and data/published_runs_validation.csv,
calibrate.FIT_TABLES): accuracy targets, hold-out, the efficiency file is the calibration's output,
measurement conversions, row conventions and the seed claims."""
from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from scaletax.inputs import hardware, models, runs
from scaletax.model import efficiency, perf, runplan
from scaletax.fit import calibrate, validate

from objects import as_gpu, as_recipe


@pytest.fixture(scope="module")
def summary(table):
    return validate.error_summary(table)


def test_every_row_is_compared(table):
    # 27 calibration rows and the 72 validation rows, less the 4 that measure a held-out run again
    assert len(table) == 27 + 72 - 4 == len(calibrate.load_rows())
    assert all(r["measured"] is not None and r["measured"] > 0 for r in table)
    assert all(r["predicted_low"] <= r["predicted"] <= r["predicted_high"] for r in table)


def test_accuracy_targets_on_the_fitted_runs(summary, table):
    """Targets (validate.TARGETS): median |error| of tokens/s per GPU <= 10% over all fitted runs,
    <= 15% for every hardware type, and no large dense run off by more than 25%."""
    t = validate.TARGETS
    assert summary["median_abs_error"] <= t["median_abs_error"], summary["median_abs_error"]
    for hw, s in summary["per_hardware"].items():
        assert s["median_abs_error"] <= t["per_hardware_median_abs_error"], (hw, s)
    large = [abs(r["error"]) for r in table if r["regime"] == "large dense"]
    assert len(large) > 40 and max(large) <= t["large_dense_max_abs_error"]
    assert set(summary["per_hardware"]) == {"h100_sxm", "h100_sxm_96gb_500w", "h200_sxm", "h800_sxm", "b200", "gb200",
                                            "b300", "gb300", "a100_sxm_80gb"}


def test_band_covers_most_measurements(summary):
    assert summary["band_coverage"] >= 0.8


@pytest.mark.parametrize("scheme", ["row", "group", "family", "generation", "source"])
def test_holdout_error_within_bound(prepared, scheme):
    """Each row predicted by a calibration that did not see it (its row, group, model family,
    GPU generation or source): median |error| within validate.HOLDOUT_TARGETS, none off by > 50%.
    A parameter no training row identifies takes its prior, never the full-table value."""
    h = validate.holdout(prepared=prepared, scheme=scheme)
    s = validate.holdout_summary(h)
    assert s["rows"] == 95  # every row is tested
    assert s["median_abs_error"] <= validate.HOLDOUT_TARGETS[scheme], s
    assert max(abs(r["error"]) for r in h if "dense" in r["regime"]) <= 0.50, s
    if scheme == "row":  # 11 NVFP4 runs: leaving one out keeps the 4-bit ceiling identified
        assert not any("gemm_ceiling_4bit" in p for _, p in s["prior"])
    if scheme == "generation":  # Blackwell held out: its factor is the prior 1, not the fit
        bw = [r for r in h if r["generation"] == "blackwell"]
        assert bw and all("family_factor_blackwell" in r["prior"] for r in bw)


def test_fold_prior_is_used_not_the_full_fit(prepared):
    inp, plans = prepared
    train = [i for i, p in enumerate(plans) if validate.row_generation(p.row) != "blackwell"]
    fold = calibrate.calibrate_fold(inp, plans, train)
    assert "family_factor_blackwell" in fold.priors
    assert fold.calibration.params["family_factor_blackwell"] == calibrate.PRIORS["family_factor_blackwell"]({})
    assert set(fold.calibration.rows) == set(train)


def test_cross_validation_headline(prepared):
    cv = validate.cross_validation(prepared=prepared)
    for k in ("in_sample", "row", "family", "generation", "source"):
        assert cv[k]["rows"] == 95 and 0 <= cv[k]["within_25"] <= 1
    assert cv["in_sample"]["median_abs_error"] <= cv["source"]["median_abs_error"]
    assert 0 < cv["band"] < 0.5
    # the bands are the 80th percentiles of the leave-one-source-out errors per regime: at least ~80%
    # of them inside (split-conformal, less the discreteness of few runs), and not far above (the
    # regimes of fewer than 8 runs take their largest error, which covers all of theirs)
    assert 0.78 <= cv["band_coverage"]["source"] <= 0.90


def test_row_keys():
    rows = {r["run_id"]: r for r in validate.load_rows()}
    assert validate.row_family(rows["narayanan2021-1T"]) == "Megatron GPT"
    assert validate.row_family(rows["korthikanti2022-530B"]) == "GPT-3"
    assert validate.row_source(rows["korthikanti2022-530B"]) == "papers"
    assert validate.row_source(rows["mbridge25.11-Llama3-DGX-H100-8-FP8-CS"]) == "Megatron-Bridge"
    assert validate.row_generation(rows["mbridge25.11-Llama3-DGX-H100-8-FP8-CS"]) == "hopper"
    assert validate.row_source(rows["tt2412_llama31_8b_h100x128_fsdp_bf16"]) == "TorchTitan"
    assert validate.row_source(rows["mlperf51_llama31_8b_cisco_h100x64"]) == "MLPerf"
    assert validate.row_source(rows["mzoo_qwen3_235b_a22b_h100x256_tp2_ep32_pp8_bf16"]) == "Megatron MoE model zoo"
    assert {"GPT-3", "Llama 3 / 3.1", "DeepSeek-V3", "Megatron GPT", "Qwen3", "GPT-OSS"} <= {
        validate.row_family(r) for r in rows.values()}


def test_efficiency_file_is_the_calibration_output(prepared):
    """data/efficiency.yaml equals a fresh calibration. If this fails after a model change, run
    `.venv/bin/python -m scaletax.fit.calibrate` and review."""
    ranges = calibrate.efficiency_ranges(prepared)
    raw = yaml.safe_load(efficiency.EFFICIENCY_YAML.read_text())
    data = raw["parameters"]
    from scaletax.model import comm, topology
    fit = comm.fit_calibration()  # the communication efficiencies are written there too
    for n in calibrate.COLLECTIVE_PARAMS:
        assert raw["collectives"][n]["value"] == pytest.approx(fit[n], abs=1e-4), n
    assert topology.NVLINK_EFF == raw["collectives"]["nvlink_eff"]["value"]
    fits: dict = {}
    oos = calibrate.source_predictions(prepared, fits)
    spread = calibrate.out_of_sample_spread(prepared, oos)  # the bands: leave-one-source-out errors
    assert raw["band"]["relative_half_width"] == pytest.approx(spread["relative_half_width"], abs=2e-4)
    assert raw["band"]["coverage"] == pytest.approx(spread["coverage"], abs=2e-4) and spread["coverage"] >= 0.8
    band = efficiency.default_band()
    assert band.spread == raw["band"]["relative_half_width"]
    regimes = calibrate.regime_spread(prepared, pred=oos, fits=fits)  # the out-of-sample accuracy per regime
    assert list(raw["regimes"])[1:] == list(regimes)  # after its method
    for reg, r in regimes.items():
        for k, v in r.items():
            assert raw["regimes"][reg][k] == (None if v is None else pytest.approx(v, abs=5e-5)), (reg, k)
        assert raw["regimes"][reg]["band_half_width"] == pytest.approx(spread["regimes"][reg], abs=5e-5)
        assert band.regime_spread[reg] == raw["regimes"][reg]["band_half_width"]
    assert set(data) == {k for k in ranges if not k.startswith("_")}
    for name, entry in data.items():
        for key in ("value", "low", "high"):
            assert entry[key] == pytest.approx(ranges[name][key], rel=2e-3, abs=2e-4), (name, key)


def test_calibration_is_deterministic_and_uses_few_parameters(prepared):
    a = calibrate.calibrate(prepared=prepared)
    b = calibrate.calibrate(prepared=prepared)
    assert a.params == b.params
    assert len(a.fitted) <= 8 < len(a.rows)
    entries = efficiency.default_band().meta["parameters"]
    for n in a.fitted:  # every fitted value lies inside its stated range
        assert entries[n]["low"] <= a.params[n] * (1 + 1e-3) and a.params[n] <= entries[n]["high"] * (1 + 1e-3)
        assert entries[n]["kind"] == "calibrated"


def test_gemm_measurement_fit():
    g = calibrate.fit_gemm_measurements()
    assert 0 < g["gemm_roofline"] < 3 and 0.5 < g["ceiling_bf16"] < 1 and 0.5 < g["ceiling_fp8"] < 1
    assert g["points"] > 50
    # the fitted rule reproduces a large square GEMM within the fit's scatter
    from scaletax.inputs import hardware

    h200 = hardware.get("h200_sxm")
    n = 8192
    pred = g["ceiling_bf16"] / (1 + g["gemm_roofline"] * perf.gemm_reference_size(as_gpu(h200), as_recipe("bf16")) / n)
    assert pred * h200.peak_flops("bf16") / 1e12 == pytest.approx(725, rel=0.15)


def test_paper_rows_are_converted_with_the_papers_formulas():
    rows = {r["run_id"]: r for r in validate.load_rows()}
    nar = rows["narayanan2021-1T"]
    m = models.from_row(nar)
    v, basis = validate.measured_tokens_per_s(nar, m)
    assert v == pytest.approx(163e12 / m.hardware_flops_per_token("full", causal=False), rel=1e-4)
    assert "recompute" in basis
    kor = rows["korthikanti2022-530B"]
    m = models.from_row(kor)
    v, _ = validate.measured_tokens_per_s(kor, m)
    assert v == pytest.approx(0.542 * 312e12 / m.model_flops_per_token(causal=False), rel=1e-4)
    mlp = rows["mlperf4.0-NVIDIA-eos_n64_ngc24.04_nemo-gpt3"]
    assert validate.measured_tokens_per_s(mlp)[0] == 839.2


def test_row_conventions(prepared):
    _, setups = prepared
    by = {s.row["run_id"]: s for s in setups}
    ds = by["mbridge25.09-DeepSeek-V3671B-DGX-H100-1024-FP8"]
    # the row states the recipe's expert_tensor_parallel_size=1, so no default is assumed for it
    assert ds.layout.etp == 1 and not any("etp" in a for a in ds.assumptions)
    blank = runplan.plan_row({**ds.row, "etp": None})  # blank: Megatron-Core's default, the TP size
    assert blank.layout.etp == ds.layout.tp == 2 and any("etp=2 (default: tp" in a for a in blank.assumptions)
    kor = by["korthikanti2022-530B"]
    assert kor.layout.gbs == 2240 and kor.layout.n_micro == 280  # one sequence per GPU
    nar = by["narayanan2021-1T"]
    assert nar.layout.recompute == "full" and nar.recompute_fraction == 1.0 and not nar.assumptions
    calibration = {r["run_id"] for r in runs.read_runs(runs.RUNS_CSV)}
    for s in setups:
        if s.row["run_id"] in calibration:  # every run of data/ fitting is tests/test_published_runs_fit.py's
            assert s.memory_gib <= hardware.get(s.row["hardware"]).hbm_gib + 1e-9, s.row["run_id"]
        if s.row["recompute"] == "unknown":
            assert any(a.startswith("recompute assumed") for a in s.assumptions)


def test_calibrate_on_a_subset_predicts_the_rest(prepared):
    """A simple hold-out: fit on the rows with an even index, predict the odd ones."""
    inp, setups = prepared
    train = list(range(0, len(setups), 2))
    cal = calibrate.calibrate(prepared=prepared, subset=train)
    st = perf.evaluate(inp, cal.efficiency)
    err = [abs(st.tokens_per_s_per_gpu[i] / setups[i].measured - 1) for i in range(1, len(setups), 2)]
    dense = [e for e, i in zip(err, range(1, len(setups), 2)) if not setups[i].model.is_moe]
    assert np.median(err) <= 0.12 and max(dense) <= 0.40
    assert all(math.isfinite(e) for e in err)


def test_predict_rows_adds_throughput_columns_and_searches_missing_layouts():
    from scaletax.report.predict import PERF_COLUMNS, predict_rows

    rows = validate.load_rows()
    out = predict_rows(rows[:3])
    for r in out:
        for c in PERF_COLUMNS:
            assert c in r
        parts = sum(r[k] for k in ("compute_s", "exposed_comm_s", "bubble_s", "other_s"))
        assert parts == pytest.approx(r["predicted_step_time_s"], rel=1e-9)
        assert r["predicted_tokens_per_s_per_gpu_low"] <= r["predicted_tokens_per_s_per_gpu"] <= r["predicted_tokens_per_s_per_gpu_high"]
        assert 0 < r["predicted_mfu"] < 1 and r["layout_searched"] == ""
        assert r["error_vs_measured"] == pytest.approx(r["predicted_tokens_per_s_per_gpu"] / r["measured_tokens_per_s_per_gpu"] - 1, abs=1e-3)
    blank = {**rows[17], "tp": None, "pp": None, "cp": None, "vp": None, "dp": None, "mbs": None,
             "recompute": "unknown", "run_id": "search-me"}  # Llama 3 70B on 64 H100, gbs 256
    big = {**rows[25], "tp": None, "pp": None, "dp": None, "gpu_count": 16, "precision": "fp8", "hardware": "h100_sxm",
           "gbs": None, "run_id": "too-big"}  # the 1T model on 16 H100
    found, missing = predict_rows([blank, big])
    assert found["layout_searched"].startswith("TP") and found["tp"] >= 1 and found["gbs"] == 256
    assert found["fits"] and found["predicted_tokens_per_s_per_gpu"] > 0
    assert not missing["fits"] and missing["predicted_tokens_per_s_per_gpu"] is None
    assert "does not fit on 16 GPUs of type H100 SXM" in missing["layout_searched"]
    assert "needs at least" in missing["layout_searched"]


def test_predict_rows_names_the_row_of_an_unsupported_precision():
    from scaletax.inputs import runs
    from scaletax.report.predict import predict_rows

    rows = validate.load_rows()
    bad = {**rows[10], "precision": "nvfp4"}  # Llama 405B on H100: no FP4 tensor cores
    with pytest.raises(runs.RunsTableError, match=r"row 3, column 'precision'.*nvfp4"):
        predict_rows([rows[0], bad])
