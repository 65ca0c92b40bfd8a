"""One value per quantity (issue 33): every table and figure CSV a book writes
(``_build/<name>/figures/*.csv``) is read, the quantities they share are found by the ids each
row is about, and each has one value across all files, for the default scenario and for one
with the user's own model and GPU:

- a case (model, GPU, GPU count, precision): its days, tokens/s per GPU, MFU, step time, cost,
  energy, GPU-hours (the decision and summary tables, the cost-time figure, the Rubin table);
- GPUs for the target of a (model, GPU, precision): the decision and summary tables;
- a published run's measured MFU: the validation figure per run, the precision chapter's best and
  worst per GPU and format, the validation table's best per family and format;
- a model's regime: the decision and summary tables;
- a cluster's facility power (GPU, GPU count): the decision chapter's power and power-budget
  tables, its fleets table (the whole fleet) and the days-against-MW and days-by-size figures;
- the goodput of a model on a count: the goodput table and figure and the figures whose days
  rest on it (cost-and-time, days by size, days against MW);
- the throughput ratio of two GPUs on the scenario's cluster (model, newer, older) and the newer
  one's break-even price per GPU-hour: the break-even and price-ratio tables.
"""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from scaletax.inputs import hardware

pytestmark = pytest.mark.book


def _num(v: str):
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


#: Columns of a case file that are not quantities (ids, text).
_NOT_QUANTITIES = {"model_id", "gpu_id", "gpus", "precision_id", "regime", "model", "gpu", "precision", "layout",
                   "bought", "label", "status", "model_name", "price", "verdict"}


def quantities(figures: Path) -> dict[tuple, list[tuple[float | str, str]]]:
    """(quantity, key) -> [(value, file)] over every CSV of ``figures``."""
    out: dict[tuple, list] = defaultdict(list)

    def add(q, key, value, f):
        if value is not None and value != "":
            out[(q, *key)].append((value, f))

    for path in sorted(figures.glob("*.csv")):
        f, rows = path.name, _rows(path)
        if not rows:
            continue
        cols = set(rows[0])
        for r in rows:
            if {"model_id", "gpu_id", "gpus", "precision_id"} <= cols and r["gpus"]:
                key = (r["model_id"], r["gpu_id"], int(float(r["gpus"])), r["precision_id"])
                for c in cols - _NOT_QUANTITIES:
                    if c not in ("need", "need_low", "need_high", "ratio", "ratio_low", "ratio_high", "tps_ratio",
                                 "tps_ratio_low", "tps_ratio_high", "scaling", "per_day", "per_day_low", "per_day_high",
                                 "fleet_gpus", "fleet_mw", "heq", "heq_low", "heq_high", "budget_gpus"):
                        add(c, key, _num(r[c]), f)
                if "need" in cols:
                    add("need", key[:2] + key[3:], _num(r["need"]), f)
                add("regime", (r["model_id"],), r.get("regime"), f)
            if {"model_id", "gpu_id", "precision_id", "need"} <= cols and "gpus" not in cols:  # GPUs for the target
                add("need", (r["model_id"], r["gpu_id"], r["precision_id"]), _num(r["need"]), f)
            if {"model_id", "gpu", "gpus", "precision", "days"} <= cols:  # the cost-time figure
                key = (r["model_id"], r["gpu"], int(float(r["gpus"])), r["precision"])
                for c in ("days", "days_low", "days_high"):
                    add(c, key, _num(r[c]), f)
            if {"hopper_id", "blackwell_id"} <= cols:  # the summary's headline: two cases per model
                for kind in ("hopper", "blackwell"):
                    if r[f"{kind}_id"]:
                        key = (r["model_id"], r[f"{kind}_id"], int(float(r[f"{kind}_gpus"])), r[f"{kind}_precision"])
                        for c in ("days", "days_low", "days_high", "tps", "mfu"):
                            add(c, key, _num(r[f"{kind}_{c}"]), f)
                add("regime", (r["model_id"],), r.get("regime"), f)
        gpu_col = "gpu_id" if "gpu_id" in cols else "gpu"
        for r in rows:  # facility MW of a cluster: (GPU, count)
            for n_col, mw_col in (("gpus", "facility_mw"), ("ref_gpus", "ref_facility_mw"),
                                  ("top_gpus", "top_facility_mw"), ("fleet_gpus", "fleet_mw")):
                if {gpu_col, n_col, mw_col} <= cols and r[n_col]:
                    add("facility_mw", (r[gpu_col], int(float(r[n_col]))), _num(r[mw_col]), f)
            if {"model_id", "gpus", "goodput"} <= cols and r["gpus"]:  # goodput of a model on a count
                for c in ("goodput", "goodput_low", "goodput_high"):
                    if c in cols:
                        add(c, (r["model_id"], int(float(r["gpus"]))), _num(r[c]), f)
            if {"model_id", "gpu_id", "ref_id"} <= cols:  # a throughput ratio (break-even, price-ratio tables)
                for c, t in (("ratio", "tps_ratio"), ("tps_ratio", "tps_ratio"), ("breakeven_usd", "breakeven_usd"),
                             ("breakeven", "breakeven_usd")):
                    for b in ("", "_low", "_high"):
                        if c + b in cols:
                            add(t + b, (r["model_id"], r["gpu_id"], r["ref_id"]), _num(r[c + b]), f)
        if f == "fig-val-mfu.csv":  # measured MFU per run: the best and worst per GPU and format, per family
            by_gpu, by_family = defaultdict(list), defaultdict(list)
            for r in rows:
                by_gpu[(r["hardware"], r["precision"].lower())].append(float(r["mfu"]))
                by_family[(r["family"], r["precision"].lower())].append(float(r["mfu"]))
            for k, v in by_gpu.items():
                add("run_mfu_max", k, max(v), f)
                add("run_mfu_min", k, min(v), f)
            for k, v in by_family.items():
                add("family_mfu_max", k, max(v), f)
        if f == "tbl-prec-shares.csv" and "gpu" in cols:
            for r in rows:
                if r["gpu"]:
                    add("run_mfu_max", (r["gpu"], r["precision"]), _num(r["mfu_max_pct"]) / 100, f)
                    add("run_mfu_min", (r["gpu"], r["precision"]), _num(r["mfu_min_pct"]) / 100, f)
        if f == "tbl-val-mfu.csv":
            for r in rows:
                add("family_mfu_max", (r["family"], r["precision"]), _num(r["measured_mfu_max"]), f)
    return out


def contradictions(q: dict[tuple, list]) -> list[str]:
    """Every quantity stated in two files with two values (numbers: beyond 1e-6 relative)."""
    bad = []
    for key, vals in sorted(q.items()):
        if len({f for _, f in vals}) < 2:
            continue
        v0 = vals[0][0]
        for v, f in vals[1:]:
            same = (v == v0) if isinstance(v0, str) else math.isclose(v, v0, rel_tol=1e-6, abs_tol=1e-9)
            if not same:
                bad.append(f"{key}: {vals}")
                break
    return bad


def shared(q: dict[tuple, list], name: str) -> int:
    """How many keys of quantity ``name`` appear in more than one file."""
    return sum(1 for k, v in q.items() if k[0] == name and len({f for _, f in v}) > 1)


def test_the_checker_finds_a_contradiction(tmp_path):
    (tmp_path / "tbl-a.csv").write_text("model_id,gpu_id,gpus,precision_id,regime,days\nm,g,8,fp8,dense,10.0\n")
    (tmp_path / "tbl-b.csv").write_text("model_id,gpu_id,gpus,precision_id,regime,days\nm,g,8,fp8,dense,10.0\n")
    assert contradictions(quantities(tmp_path)) == [] and shared(quantities(tmp_path), "days") == 1
    (tmp_path / "tbl-b.csv").write_text("model_id,gpu_id,gpus,precision_id,regime,days\nm,g,8,fp8,moe,11.0\n")
    bad = contradictions(quantities(tmp_path))
    assert any("days" in b for b in bad) and any("regime" in b for b in bad)


def test_the_checker_finds_two_megawatts_for_one_cluster(tmp_path):
    """The power table's MW for 16,384 GB200 and a figure's for the same cluster are one quantity."""
    (tmp_path / "tbl-p.csv").write_text("gpu_id,ref_gpus,top_gpus,ref_facility_mw,top_facility_mw\n"
                                        "gb200,16384,100000,36.1,220.0\n")
    (tmp_path / "fig-p.csv").write_text("model_id,gpu,gpus,goodput,facility_mw\nm,gb200,16384,0.9,36.1\n")
    q = quantities(tmp_path)
    assert contradictions(q) == [] and shared(q, "facility_mw") == 1
    (tmp_path / "fig-p.csv").write_text("model_id,gpu,gpus,goodput,facility_mw\nm,gb200,16384,0.9,30.0\n")
    assert any("facility_mw" in b for b in contradictions(quantities(tmp_path)))


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """The default book and one with the user's own model and GPU (tests/test_book_user_inputs.py's
    scenario), HTML only."""
    from test_book_user_inputs import SCENARIO

    build = tmp_path_factory.mktemp("one-value")
    scen = build / "mine.yaml"
    scen.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    out = {}
    for name, args in (("default", []), ("mine", ["--scenario", str(scen)])):
        proc = run_cli(["build", *args, "--no-pdf", "--jobs", "2", "--name", name], build)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = build / name / "figures"
    return out


@pytest.mark.parametrize("name", ["default", "mine"])
def test_one_value_per_quantity(books, name):
    q = quantities(books[name])
    assert contradictions(q) == []
    # the quantities the issue names are found in two files or more: the check is not vacuous
    for quantity in ("days", "tps", "mfu", "need", "regime", "facility_mw", "goodput"):
        assert shared(q, quantity) > 0, quantity
    if name == "default":
        assert shared(q, "run_mfu_max") > 0 and shared(q, "family_mfu_max") > 0 and shared(q, "tps_ratio") > 0
        assert shared(q, "breakeven_usd") > 0
        fams = {k[1] for k in q if k[0] == "family_mfu_max"}
        assert fams <= {g.family for g in hardware.catalog().values()}


@pytest.mark.parametrize("name", ["default", "mine"])
def test_every_number_column_has_its_unit(books, name):
    """Every number column of every exported CSV says its unit in the CSV's metadata
    (``report/units.py``), e.g. ``t_step`` in s."""
    import json

    missing, metas = [], sorted(books[name].glob("*.csv-metadata.json"))
    assert len(metas) == len(list(books[name].glob("*.csv")))
    for meta in metas:
        for col in json.loads(meta.read_text())["tableSchema"]["columns"]:
            if col["datatype"] == "number" and not col.get("scaletax:unit"):
                missing.append(f"{meta.name.removesuffix('.csv-metadata.json')}: {col['name']}")
    assert missing == []


@pytest.mark.parametrize("name", ["default", "mine"])
def test_no_pdf_table_cell_is_wider_than_its_column(books, name):
    """Tables 8.6, 8.21-8.22 and 4.1 showed "8,19", "16,3", "131,(" and "GB2( NVL": every table
    of the book has each column as wide as its widest number or word (render/tablefit.py)."""
    from book_tables import shown_tables
    from scaletax.render import tablefit

    found = list(shown_tables(books[name].parent))
    assert len(found) > 20
    bad = {t.label: tablefit.overflows(t.headers, t.rows, t.fit)[:3] for t in found}
    assert {k: v for k, v in bad.items() if v} == {}
