"""What the cross-validation shares between folds gives the same answers as fitting each alone."""
from __future__ import annotations

import numpy as np

from scaletax.fit import calibrate, validate


def test_gemm_fit_is_computed_once_and_callers_get_their_own_copy(tmp_path):
    first = calibrate.fit_gemm_measurements()
    first["ceiling_fp8"] = -1.0  # a caller changing its copy changes nobody else's
    again = calibrate.fit_gemm_measurements()
    assert again["ceiling_fp8"] > 0 and again == calibrate.fit_gemm_measurements()
    # another file (every measurement at half the rate) is another fit, not the cached one
    import csv
    rows = list(csv.DictReader(calibrate.GEMM_CSV.open(encoding="utf-8", newline="")))
    half = tmp_path / "gemm_half.csv"
    with half.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({**r, "tflops": repr(float(r["tflops"]) / 2)} for r in rows)
    slow = calibrate.fit_gemm_measurements(half)
    assert slow["gemm_roofline"] == again["gemm_roofline"] and slow["points"] == again["points"]
    assert abs(slow["ceiling_bf16"] / again["ceiling_bf16"] - 0.5) < 1e-12


def test_schemes_sharing_fold_fits_predict_what_separate_fits_predict(prepared, monkeypatch):
    inp, plans = prepared
    schemes = ("row", "family")
    alone = {s: calibrate.fold_predictions(inp, plans, validate.SCHEMES[s]) for s in schemes}
    calls = []
    fit_fold = calibrate.calibrate_fold
    monkeypatch.setattr(calibrate, "calibrate_fold", lambda *a: calls.append(1) or fit_fold(*a))
    fits: dict = {}
    shared = {s: calibrate.fold_predictions(inp, plans, validate.SCHEMES[s], fits) for s in schemes}
    for s in schemes:
        np.testing.assert_array_equal(shared[s][0], alone[s][0])
        assert shared[s][1] == alone[s][1]
    folds = sum(len({validate.SCHEMES[s](p.row) if validate.SCHEMES[s] else i for i, p in enumerate(plans)})
                for s in schemes)
    # a family with one run is that run's leave-one-row-out fold: fitted once
    assert len(calls) == len(fits) < folds
