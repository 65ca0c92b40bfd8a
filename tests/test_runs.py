"""Runs tables: reading and validation errors, memory prediction for the published runs, writing."""
import csv

import pytest

from scaletax import DATA_DIR
from scaletax.inputs import options, runs
from scaletax.model import runplan

PUBLISHED = DATA_DIR / "published_runs.csv"


@pytest.fixture(scope="module")
def published():
    return runs.read_runs(PUBLISHED)


@pytest.fixture(scope="module")
def predicted(published):
    return runplan.predict_memory(published)


def test_reads_published_table(published):
    assert len(published) == 27
    row = published[0]
    assert isinstance(row["layers"], int) and isinstance(row["measured_mfu"], float)
    assert row["vp"] == 8 and published[2]["vp"] is None  # empty cell -> None
    assert isinstance(row["notes"], str)


def test_every_published_run_fits(predicted):
    for r in predicted:
        assert r["fits"], (r["run_id"], r["memory_total_gib"], r["memory_capacity_gib"], r["recompute_assumed"])
        assert r["memory_total_gib"] <= r["memory_capacity_gib"]
        terms = sum(r[f"memory_{k}_gib"] for k in ("weights", "gradients", "optimizer", "activations", "reserve"))
        assert terms == pytest.approx(r["memory_total_gib"], abs=0.01)


def test_recompute_assumed_only_for_unknown(predicted, published):
    for r in predicted:
        if r["recompute"] in ("", "unknown"):
            assert r["recompute_assumed"] in ("none", "selective", "full")
        else:
            assert r["recompute_assumed"] == ""
    # least recompute: one level less would not fit
    for r, src in zip(predicted, published):
        level = r["recompute_assumed"]
        if level in ("selective", "full"):
            lower = "none" if level == "selective" else "selective"
            again = runplan.predict_memory([{**src, "recompute": lower}])[0]
            assert not again["fits"], r["run_id"]


def test_fsdp_rows_need_zero3(published):
    fsdp = [r for r in published if r.get("zero_stage") == 3]
    assert len(fsdp) == 2 and all("Megatron-FSDP" in r["notes"] for r in fsdp)
    for r in fsdp:
        z3 = runplan.predict_memory([{**r, "recompute": "full"}])[0]
        z1 = runplan.predict_memory([{**r, "zero_stage": 1, "recompute": "full"}])[0]
        assert z3["memory_total_gib"] < z1["memory_total_gib"]


def test_predict_is_composable_and_pure(published):
    before = [dict(r) for r in published[:3]]
    out = runplan.predict_memory(published[:3], reserve_gib=2.0)
    assert published[:3] == before  # inputs untouched
    assert all(o["memory_reserve_gib"] == 2.0 for o in out)
    assert set(runplan.MEMORY_COLUMNS) <= set(out[0]) and out[0]["run_id"] == published[0]["run_id"]
    again = runplan.predict_memory(out, reserve_gib=2.0)  # predicting on predicted rows is stable
    assert again[0]["memory_total_gib"] == out[0]["memory_total_gib"]


def test_optional_columns(published):
    r = published[0]
    base = runplan.predict_memory([r])[0]
    more = runplan.predict_memory([{**r, "reserve_gib": 10.0}])[0]
    assert more["memory_reserve_gib"] == 10.0
    no_sp = runplan.predict_memory([{**r, "sequence_parallel": "false", "recompute": "none"}])[0]
    sp = runplan.predict_memory([{**r, "recompute": "none"}])[0]
    assert no_sp["memory_activations_gib"] > sp["memory_activations_gib"]
    ds = next(x for x in published if x["attention"] == "mla" and x["recompute"] == "selective")
    core_only = runplan.predict_memory([{**ds, "recompute_modules": "core_attn"}])[0]
    default = runplan.predict_memory([ds])[0]
    assert core_only["memory_activations_gib"] > default["memory_activations_gib"]
    assert base["fits"]


def test_layout_defaults():
    row = {"tp": 2, "pp": 2, "gpu_count": 16, "cp": None, "vp": "", "mbs": None, "dp": None, "gbs": None,
           "recompute": "unknown"}
    lay = runs.row_layout(row)
    # gbs blank: one sequence per GPU (16) in whole micro-batches of mbs*dp = 4; etp blank: tp (Megatron-Core)
    assert (lay.cp, lay.vp, lay.mbs, lay.dp, lay.gbs, lay.zero_stage, lay.recompute, lay.etp) == (1, 1, 1, 4, 16, 1, "none", 2)
    assert lay.sequence_parallel
    assert runs.default_gbs(10, 1, 4) == 8 and runs.default_gbs(3, 2, 4) == 8  # rounded, at least one step
    assert runs.row_layout({**row, "gbs": 24}).gbs == 24


def _moe_row(**cells):
    """A Qwen3-30B-A3B-class all-MoE row (48 layers, 128 experts top-8, expert FFN 768) on 8 GPUs."""
    base = {"run_id": "x", "layers": "48", "hidden": "2048", "heads": "32", "kv_heads": "4", "head_dim": "128",
            "ffn_hidden": "", "vocab": "151936", "seq_len": "4096", "attention": "gqa", "moe_experts": "128",
            "moe_top_k": "8", "moe_ffn_hidden": "768", "moe_shared_experts": "", "moe_dense_layers": "0",
            "hardware": "h100_sxm", "gpu_count": "8", "tp": "1", "pp": "1", "cp": "", "ep": "8", "vp": "",
            "dp": "", "mbs": "1", "gbs": "", "precision": "bf16", "recompute": "unknown"}
    base.update(cells)
    return base


def test_all_moe_row_without_ffn_hidden_and_etp(tmp_path):
    row = _moe_row()
    header = list(row)
    p = _write(tmp_path, header, [list(row.values()), list(_moe_row(tp="2", ep="4").values())])
    got = runs.read_runs(p)
    lay = runs.row_layout(got[1])
    assert (lay.tp, lay.ep, lay.etp, lay.dp) == (2, 4, 2, 4)  # etp blank: tp; ep*etp = 8 divides tp*dp = 8
    model = runs.row_model(got[0])
    assert model.n_dense_layers == 0 and model.moe_experts == 128
    # the blank width is unused: the same row with any ffn_hidden gives the same parameters
    other = runs.row_model({**got[0], "ffn_hidden": 99999})
    assert model.total_params == other.total_params
    # a blank ffn_hidden is refused where dense layers need it
    msg = _error(tmp_path, header, [list(_moe_row(moe_dense_layers="1").values())])
    assert "row 2, column 'ffn_hidden'" in msg


def test_every_bad_row_listed_in_one_line(tmp_path):
    header, rows = _good()
    good = [list(r) for r in rows]
    bad1 = list(rows[0]); bad1[header.index("tp")] = "four"; bad1[header.index("pp")] = "x"
    bad2 = list(rows[1]); bad2[header.index("hardware")] = "h100_pcie"
    bad3 = list(rows[0]); bad3[header.index("gpu_count")] = "1000"
    msg = _error(tmp_path, header, [good[0], bad1, good[1], bad2, bad3])
    assert msg.startswith("t.csv: 3 bad row(s): ")
    for part in ("row 3, column 'tp'", "row 3, column 'pp'", "row 5, column 'hardware'", "row 6, column 'gpu_count'"):
        assert part in msg, part
    assert "row 2," not in msg and "row 4," not in msg


def test_precision_the_gpu_cannot_run_is_a_bad_row(tmp_path):
    header, rows = _good()
    rows[0][header.index("hardware")] = "a100_sxm_80gb"
    rows[0][header.index("precision")] = "fp8"
    msg = _error(tmp_path, header, rows)
    assert "row 2, column 'precision'" in msg and "a100_sxm_80gb" in msg


def test_one_plan_for_calibration_and_predict(published):
    from scaletax.fit import validate
    for r in published:
        plan, su = runplan.plan_row(r), validate.row_setup(r)
        assert plan.layout == su.layout and plan.recompute_fraction == su.recompute_fraction
        assert plan.memory_gib == su.memory_gib


def test_schema_text_lists_every_default():
    text = runs.schema_text()
    for col in runs.COLUMN_DEFAULTS:
        assert f"  {col}: " in text
    assert "etp: tp" in text and "zero_stage: 1" in text and "stack: megatron" in text


def _write(tmp_path, header, rows, name="t.csv"):
    p = tmp_path / name
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return p


def _good():
    with open(PUBLISHED, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:3]


def _error(tmp_path, header, rows):
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(_write(tmp_path, header, rows))
    msg = str(exc.value)
    assert "\n" not in msg and "t.csv" in msg
    return msg


def test_error_missing_column(tmp_path):
    header, rows = _good()
    i = header.index("hidden")
    msg = _error(tmp_path, header[:i] + header[i + 1:], [r[:i] + r[i + 1:] for r in rows])
    assert "missing required column" in msg and "hidden" in msg


def test_error_non_numeric_cell(tmp_path):
    header, rows = _good()
    rows[1][header.index("tp")] = "four"
    msg = _error(tmp_path, header, rows)
    assert "row 3" in msg and "'tp'" in msg and "four" in msg


def test_error_unknown_hardware(tmp_path):
    header, rows = _good()
    rows[0][header.index("hardware")] = "h100_pcie"
    msg = _error(tmp_path, header, rows)
    assert "row 2" in msg and "'hardware'" in msg and "h100_sxm" in msg


def test_error_empty_and_header_only(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("")
    with pytest.raises(runs.RunsTableError, match="empty"):
        runs.read_runs(p)
    header, _ = _good()
    assert "no data rows" in _error(tmp_path, header, [])


def test_error_layout_inconsistent(tmp_path):
    header, rows = _good()
    rows[0][header.index("gpu_count")] = "1000"
    msg = _error(tmp_path, header, rows)
    assert "row 2" in msg and "'gpu_count'" in msg
    header, rows = _good()
    rows[0][header.index("tp")] = "5"
    msg = _error(tmp_path, header, rows)
    assert "'tp'" in msg or "'gpu_count'" in msg
    header, rows = _good()
    rows[0][header.index("recompute")] = "sometimes"
    assert "'recompute'" in _error(tmp_path, header, rows)
    header, rows = _good()
    rows[0][header.index("precision")] = "int8"
    assert "'precision'" in _error(tmp_path, header, rows)


def test_write_read_roundtrip_with_extra_columns(tmp_path, predicted):
    extra = [{**r, "my_note": "kept"} for r in predicted]
    p = runs.write_runs(extra, tmp_path / "out.csv")
    back = runs.read_runs(p)
    assert len(back) == len(extra)
    assert back[0]["my_note"] == "kept" and back[0]["fits"] == "true"
    assert back[0]["memory_total_gib"] == str(extra[0]["memory_total_gib"])
    for a, b in zip(back, extra):
        assert a["measured_mfu"] == b["measured_mfu"] and a["notes"] == b["notes"]
    cols = runs.write_runs(extra[:1], tmp_path / "c.csv", columns=["run_id", "fits"])
    assert cols.read_text().splitlines() == ["run_id,fits", f"{extra[0]['run_id']},true"]


def test_reserve_default_documented(predicted):
    assert all(r["memory_reserve_gib"] == options.RESERVE_GIB for r in predicted)


def test_blank_vp_is_the_interleaving_of_the_published_recipes():
    # the constant is the median layers per virtual stage of the table's rows that state vp with pp > 1
    import statistics

    stated = [int(r["layers"]) / (int(r["pp"]) * int(r["vp"])) for r in runs.read_runs(runs.RUNS_CSV)
              if r.get("vp") and int(r["pp"]) > 1]
    assert len(stated) >= 10
    assert round(statistics.median(stated)) == runs.LAYERS_PER_VIRTUAL_STAGE == 2
    # Llama 3 405B (126 layers) on PP16 with 16 micro-batches: round(126 / 32) = 4
    assert runs.default_vp(126, 16, 16) == 4
    assert runs.default_vp(96, 8, 72) == 6 and runs.default_vp(126, 8, 72) == 8
    # Megatron's interleaved 1F1B needs the micro-batches to be a multiple of pp; pp = 1 never interleaves
    assert runs.default_vp(126, 16, 24) == 1 and runs.default_vp(32, 1, 8) == 1
    assert runs.default_vp(3, 2, 4) == 1  # round(3 / 4) = 1
    row = {"layers": 126, "tp": 8, "pp": 16, "gpu_count": 16384, "gbs": 2048, "vp": ""}
    assert runs.row_layout(row).vp == 4
    assert runs.row_layout({**row, "vp": "1"}).vp == 1  # a stated vp stands
