"""``scaletax predict`` vectorized over rows (runplan.plan_rows) against the per-row reference
(runplan.plan_row, runplan.step_inputs), on the published table and on a random table of mixed rows:
every output column equal to 1e-12 relative."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scaletax.inputs import hardware, options, runs
from scaletax.inputs.layout import LayoutArray, divisors
from scaletax.model import efficiency, memory, perf, runplan
from scaletax.report.predict import PERF_COLUMNS, predict_rows

from objects import as_gpu, as_recipe

TOL = 1e-12


def _reference(rows):
    """The per-row path: plan_row per row, memory.breakdown of its layout (the partial-full mix
    written out), step inputs one row at a time."""
    out = []
    band = efficiency.default_band()
    for row in rows:
        plan = runplan.plan_row(row)
        prec = str(row["precision"]).strip().lower()
        lay = plan.layout
        if lay.recompute == "full" and plan.recompute_fraction < 1.0:
            la = LayoutArray.from_layouts([lay.replace(recompute="selective"), lay])
            x = plan.recompute_fraction
            g = {k: float((1.0 - x) * v[0] + x * v[1]) for k, v in memory.breakdown(plan.model, la, as_recipe(prec), **plan.options).gib().items()}
        else:
            g = {k: float(v[0]) for k, v in memory.breakdown(plan.model, lay, as_recipe(prec), **plan.options).gib().items()}
        pred = perf.evaluate_band(runplan.step_inputs([plan]), band)
        v = pred.value
        p = float(v.tokens_per_s_per_gpu[0])
        cap = float(hardware.get(str(row["hardware"]).strip()).hbm_gib)
        out.append({
            "memory_weights_gib": round(g["weights"], 3), "memory_gradients_gib": round(g["gradients"], 3),
            "memory_optimizer_gib": round(g["optimizer"], 3), "memory_activations_gib": round(g["activations"], 3),
            "memory_reserve_gib": round(g["reserve"], 3), "memory_total_gib": round(g["total"], 3),
            "memory_capacity_gib": cap, "fits": bool(g["total"] <= cap), "recompute_assumed": plan.recompute_assumed,
            "predicted_tokens_per_s_per_gpu": round(p, 3),
            "predicted_tokens_per_s_per_gpu_low": round(float(pred.low.tokens_per_s_per_gpu[0]), 3),
            "predicted_tokens_per_s_per_gpu_high": round(float(pred.high.tokens_per_s_per_gpu[0]), 3),
            "predicted_model_tflops_per_gpu": round(float(v.model_tflops_per_gpu[0]), 3),
            "predicted_mfu": round(float(v.mfu[0]), 4), "predicted_step_time_s": float(v.step_s[0]),
            "compute_s": float(v.compute_s[0]), "exposed_comm_s": float(v.exposed_comm_s[0]),
            "bubble_s": float(v.bubble_s[0]), "other_s": float(v.other_s[0]),
            "recompute_modelled": plan.recompute_label, "layout_assumptions": "; ".join(plan.assumptions),
            "error_vs_measured": round(p / plan.measured - 1.0, 4) if plan.measured else None,
            "layout_searched": "",
        })
    return out


def _assert_same(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        for col, wv in w.items():
            gv = g[col]
            if isinstance(wv, float) and isinstance(gv, float):
                assert math.isclose(gv, wv, rel_tol=TOL, abs_tol=0.0) or gv == wv, (i, col, gv, wv)
            else:
                assert gv == wv, (i, col, gv, wv)


def _random_rows(n: int, seed: int = 0) -> list[dict]:
    """Rows of the published table's architectures with random GPUs, precisions, layouts,
    recompute (stated and unknown), batches, reserves and ZeRO stages; only valid rows kept."""
    rng = np.random.default_rng(seed)
    base = runs.read_runs(runs.RUNS_CSV)
    hw_ids = hardware.ids()
    out: list[dict] = []
    while len(out) < n:
        row = dict(base[rng.integers(len(base))])
        row.pop("measured_tokens_per_s_per_gpu", None) if rng.random() < 0.3 else None
        hw = hw_ids[rng.integers(len(hw_ids))]
        prec = ("bf16", "fp8", "mxfp8", "nvfp4")[rng.integers(4)]
        if not hardware.get(hw).supports(prec):
            continue
        model = runs.row_model(row)
        tp = int(rng.choice([d for d in divisors(model.heads) if model.kv_heads % d == 0 and d <= 16]))
        pp = int(rng.choice([d for d in (1, 2, 4, 8, 16) if d <= model.layers]))
        dp = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
        ep = int(rng.choice([d for d in divisors(model.moe_experts) if (tp * dp) % d == 0])) if model.is_moe else 1
        mbs = int(rng.choice([1, 2]))
        row.update(hardware=hw, precision=prec, gpu_count=tp * pp * dp, tp=tp, pp=pp, cp=1, dp=None, ep=ep,
                   vp=int(rng.choice([1, 2])) if pp > 1 else 1, mbs=mbs,
                   gbs=None if rng.random() < 0.4 else mbs * dp * int(rng.integers(1, 64)),
                   recompute=("none", "selective", "full", "unknown", "")[rng.integers(5)],
                   zero_stage=int(rng.choice([0, 1, 2, 3])),
                   reserve_gib=None if rng.random() < 0.7 else float(rng.choice([2.0, 5.5])),
                   schedule=("", *options.SCHEDULES)[rng.integers(len(options.SCHEDULES) + 1)],
                   moe_dispatcher=("", *runs.DISPATCHERS)[rng.integers(len(runs.DISPATCHERS) + 1)])
        try:
            runs._validate_row(row)
        except ValueError:
            continue
        out.append(row)
    return out


def test_published_table_same_as_per_row():
    rows = runs.read_runs(runs.RUNS_CSV)
    _assert_same(predict_rows(rows), _reference(rows))


def test_random_mixed_table_same_as_per_row():
    rows = _random_rows(150, seed=3)
    got = predict_rows(rows)
    _assert_same(got, _reference(rows))
    # the random table exercises stated and resolved recompute, partial full recompute, rows that do not fit
    assert {r["recompute_assumed"] for r in got} >= {"", "none", "full"}
    assert any(r["recompute_modelled"].startswith("full on") for r in got)
    assert {r["fits"] for r in got} == {True, False}
    # inputs come back untouched, in order, with every model column
    for r, g in zip(rows, got):
        assert all(g[k] == v for k, v in r.items())
        assert set(PERF_COLUMNS) | set(runplan.MEMORY_COLUMNS) <= set(g)


def test_plan_rows_matches_plan_row_fields():
    rows = _random_rows(60, seed=5)
    plan = runplan.plan_rows(rows)
    la = plan.layouts()
    frac = plan.recompute_fraction()
    for i, row in enumerate(rows):
        ref = runplan.plan_row(row)
        assert la.layout(i) == ref.layout
        assert frac[i] == ref.recompute_fraction
        assert plan.assumptions[i] == ref.assumptions
        assert plan.recompute_assumed[i] == ref.recompute_assumed
        assert plan.recompute_label(i) == ref.recompute_label
        assert (plan.measured[i], plan.basis[i]) == (ref.measured, ref.basis)
    assert len(plan.groups) < len(rows)  # rows of one architecture, GPU and precision share a group


def test_bad_row_named():
    rows = runs.read_runs(runs.RUNS_CSV)[:3]
    rows[2] = {**rows[2], "gbs": 7}
    with pytest.raises(runs.RunsTableError, match=r"^row 4: gbs=7 must be a multiple of mbs\*dp="):
        predict_rows(rows)


def _row_by_row(rows):
    """What runs.layout_table computes, one row at a time (the reference it must equal)."""
    vals, unknown, n_block = [], [], []
    for row in rows:
        tp, pp, cp, ep, etp, dp, vp, mbs, gbs, sp, zero, rc = runs.layout_values(row)
        vals.append((tp, pp, cp, ep, etp, dp, vp, mbs, gbs, int((True if sp is None else sp) and tp > 1), zero,
                     runs.RECOMPUTE_CODE[rc]))
        unknown.append(runs.stated_recompute(row) == "unknown")
        n_block.append(runs.block_layers(row) or 0)
    return np.array(vals, dtype=np.int64), np.array(unknown), np.array(n_block, dtype=np.int64)


def test_layout_table_same_as_row_by_row():
    """The whole-table layout columns (blank dp, gbs and vp defaulted, stated and unknown recompute,
    sequence parallelism stated or not) equal the per-row ones, element by element."""
    rows = _random_rows(200, seed=11) + runs.read_runs(runs.RUNS_CSV) + runs.read_runs(runs.DATA_DIR / "coverage_probes.csv")
    rows[0] = {**rows[0], "vp": None}
    rows[1] = {**rows[1], "sequence_parallel": "false"}
    table = runs.layout_table(rows)
    assert table is not None
    for got, want in zip(table, _row_by_row(rows)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert table[0][:, 6].max() > 1 and table[1].any() and (table[0][:, 9] == 0).any()


def test_text_cells_take_the_row_by_row_path():
    """Cells that are text (a table not from read_runs) go row by row, with the same plan."""
    rows = runs.read_runs(runs.RUNS_CSV)
    text = [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in rows]
    assert runs.layout_table(text) is None
    a, b = runplan.plan_rows(rows), runplan.plan_rows(text)
    assert a.layouts().layout(0) == b.layouts().layout(0)
    for f in ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs", "gbs", "sp", "zero_stage", "recompute"):
        assert np.array_equal(getattr(a.layouts(), f), getattr(b.layouts(), f))
    assert a.assumptions == b.assumptions and a.recompute_assumed == b.recompute_assumed


@pytest.mark.parametrize("change", [
    {"gbs": 7}, {"dp": 3}, {"tp": 0}, {"pp": None}, {"cp": -1}, {"ep": 5}, {"zero_stage": 4},
    {"recompute": "none", "recompute_num_layers": 2}, {"recompute": "full", "recompute_num_layers": 0},
    {"sequence_parallel": "maybe"}, {"recompute": "sometimes"}, {"mbs": 0}, {"gpu_count": 7},
])
def test_bad_layout_cell_same_error_as_row_by_row(change):
    """A row breaking a layout rule makes the whole-table path step aside: the error is the
    row-by-row one, with the row's number."""
    rows = runs.read_runs(runs.RUNS_CSV)[:4]
    rows[2] = {**rows[2], **change}
    with pytest.raises(ValueError) as want:
        runplan.plan_row(rows[2])
    assert runs.layout_table(rows) is None
    with pytest.raises(runs.RunsTableError) as got:
        runplan.plan_rows(rows)
    assert str(got.value) == f"row 4: {want.value}"


def _fields_equal(a, b) -> None:
    """Every array of two StepInputs (and of their per-group traffic) equal, bit for bit."""
    from dataclasses import fields

    for f in fields(a):
        if f.name == "comm":
            continue
        assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
    for k, g in a.comm.groups.items():
        for f in g._FIELDS:
            assert np.array_equal(getattr(g, f), getattr(b.comm.groups[k], f)), (k, f)
    for f in a.comm._PATH:
        assert np.array_equal(getattr(a.comm, f), getattr(b.comm, f)), f


@pytest.mark.parametrize("table", ["published", "probes", "random"])
def test_table_step_inputs_same_as_per_group(table):
    """One ``perf.prepare`` over the groups of several GPUs (one GPU per layout) gives exactly
    the inputs of one call per group, in table order."""
    rows = {"published": lambda: runs.read_runs(runs.RUNS_CSV),
            "probes": lambda: runs.read_runs(runs.DATA_DIR / "coverage_probes.csv"),
            "random": lambda: _random_rows(120, seed=17)}[table]()
    plan = runplan.plan_rows(rows)
    got = plan.step_inputs()
    want = perf.StepInputs.concat([g.step_inputs() for g in plan.groups]).take(plan._order())
    _fields_equal(got, want)
    batches = {(id(g.model), g.precision, g.ep_dispatch, g.schedule) for g in plan.groups}
    assert len(batches) < len(plan.groups)  # groups of different GPUs did share a call


def test_prepare_one_gpu_per_layout():
    """``perf.prepare`` with one GPU per layout equals one call per GPU; a wrong count is refused."""
    model = runs.row_model(runs.read_runs(runs.RUNS_CSV)[0])
    la = LayoutArray.from_layouts([runs.row_layout(r) for r in runs.read_runs(runs.RUNS_CSV)[:2]])
    gpus = [as_gpu("h100_sxm"), as_gpu("gb200")]
    both = perf.prepare(model, LayoutArray.concat([la, la]), as_recipe("fp8"), [gpus[0]] * 2 + [gpus[1]] * 2)
    one = perf.StepInputs.concat([perf.prepare(model, la, as_recipe("fp8"), g) for g in gpus])
    _fields_equal(both, one)
    with pytest.raises(ValueError, match=r"^gpu: 3 GPUs for 4 layouts"):
        perf.prepare(model, LayoutArray.concat([la, la]), as_recipe("fp8"), gpus + gpus[:1])


@pytest.mark.parametrize("table", ["published", "random"])
def test_table_memory_same_as_per_group(table):
    """One memory breakdown over the groups of several GPUs equals one per group, bit for bit."""
    rows = runs.read_runs(runs.RUNS_CSV) if table == "published" else _random_rows(120, seed=19)
    plan = runplan.plan_rows(rows)
    got = plan.memory_gib()
    parts = [g.memory_gib() for g in plan.groups]
    for k in got:
        assert np.array_equal(got[k], plan._scatter([p[k] for p in parts])), k
