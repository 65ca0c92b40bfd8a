"""The validation table (data/published_runs_validation.csv): built from its source by
data/sources/validation_runs.py, every source column and run kept, every filled cell explained."""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from scaletax import DATA_DIR
from scaletax.inputs import hardware, runs
from scaletax.model import efficiency, perf, runplan

SOURCES = DATA_DIR / "sources"


def _builder():
    spec = importlib.util.spec_from_file_location("validation_runs", SOURCES / "validation_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


def test_committed_table_is_the_builder_output():
    assert runs.VALIDATION_CSV.read_text(encoding="utf-8") == _builder().build()


def test_every_source_column_and_run_is_kept_and_only_stated_cells_change():
    src_cols, src = _csv(SOURCES / "published_runs_validation.csv")
    cols, out = _csv(runs.VALIDATION_CSV)
    assert cols[:len(src_cols)] == src_cols
    assert [r["run_id"] for r in out] == [r["run_id"] for r in src] and len(out) == 72
    fills = _builder().FILLS
    for a, b in zip(src, out):
        changed = {c for c in src_cols if a[c] != b[c]} - {"notes"}
        assert changed <= set(fills.get(a["run_id"], ({}, ""))[0]), a["run_id"]
        assert b["notes"].startswith(a["notes"])
        if a["run_id"] in fills:  # every fill says where it comes from
            assert "columns filled by data/sources/validation_runs.py: " in b["notes"]
        else:
            assert b["notes"] == a["notes"]


def test_every_row_reads_and_has_a_measurement():
    rows = runs.read_runs(runs.VALIDATION_CSV)
    plan = runplan.plan_rows(rows)
    assert all(m is not None and m > 0 for m in plan.measured)


def test_refilling_a_stated_cell_is_refused(tmp_path):
    cols, rows = _csv(SOURCES / "published_runs_validation.csv")
    rid = "mbridge26.06-KimiK2-DGX-GB300-256-MXFP8"
    path = tmp_path / "src.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols + ["recompute_modules"], lineterminator="\n")
        w.writeheader()
        w.writerows({**r, "recompute_modules": "core_attn" if r["run_id"] == rid else ""} for r in rows)
    with pytest.raises(ValueError, match=f"{rid}: column 'recompute_modules' is stated in the source"):
        _builder().build(path)


def test_the_power_limited_h100_variant():
    g = hardware.get("h100_sxm_96gb_500w")
    base = hardware.get(g.variant_of)
    # same silicon and datasheet peaks, the memory and power limit of the TorchTitan page
    assert (g.bf16_tflops, g.fp8_tflops, g.family) == (base.bf16_tflops, base.fp8_tflops, base.family)
    assert (g.hbm_tb_s, g.tdp_w) == (2.4, 500)
    assert perf.power_scale(g) == pytest.approx((500 / 700) ** (1 / 3))
    assert perf.power_scale(base) == 1.0
    # a variant does not move its family's power per FLOP (the Blackwell Ultra rule's reference)
    assert efficiency.power_per_flop("hopper") == pytest.approx(
        sum(x.tdp_w / x.bf16_tflops for x in hardware.catalog().values() if x.family == "hopper" and not x.variant_of)
        / sum(1 for x in hardware.catalog().values() if x.family == "hopper" and not x.variant_of))


def test_a_variant_of_an_unknown_or_other_family_gpu_is_refused(tmp_path):
    text = hardware.HARDWARE_CSV.read_text(encoding="utf-8").replace(",h100_sxm\n", ",b200\n")
    bad = tmp_path / "hw.csv"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(hardware.HardwareError, match="row 4, column 'variant_of': 'b200' must be a catalog GPU of "
                                                      "family 'hopper' that is not itself a variant"):
        hardware.load_catalog(bad)
