"""`scaletax predict`: the calibration table and a hand-written table in, model columns out;
bad tables refused in one line with exit status 2 and nothing written."""
import csv
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

RUNS = ROOT / "data" / "published_runs.csv"
HEADER = ("run_id,model,layers,hidden,heads,kv_heads,head_dim,ffn_hidden,vocab,seq_len,attention,"
          "moe_experts,moe_top_k,moe_ffn_hidden,moe_shared_experts,moe_dense_layers,total_params_b,"
          "active_params_b,hardware,gpu_count,tp,pp,cp,ep,vp,dp,mbs,gbs,precision,recompute,"
          "measured_tokens_per_s_per_gpu,measured_model_tflops_per_gpu,measured_mfu,source_url,arch_source,notes")
# A run written by hand: Llama 3.1 70B on 256 H200, TP4 PP4 DP16, FP8.
HAND = ("my-run,Llama 3.1 70B,80,8192,64,8,128,28672,128256,8192,gqa,,,,,,70,70,h200_sxm,256,4,4,1,,5,16,1,"
        "512,fp8,unknown,,,,internal,Llama 3.1 70B config,written by hand for a test; team=infra")


def _read(path):
    return list(csv.DictReader(open(path, encoding="utf-8")))


def _predict_one(tmp_path, name, row):
    """``scaletax predict`` on a table of one row (to stdout): its output row."""
    path = tmp_path / name
    path.write_text(HEADER + "\n" + row + "\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(proc.stdout.splitlines()))[0]


def test_calibration_table_every_run_fits(tmp_path):
    out = tmp_path / "pred.csv"
    proc = run_cli(["predict", "--runs", str(RUNS), "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = _read(out)
    assert len(rows) == len(_read(RUNS))
    for r in rows:
        assert r["fits"] == "true", r["run_id"]
        total = sum(float(r[f"memory_{k}_gib"]) for k in ("weights", "gradients", "optimizer", "activations", "reserve"))
        assert total == pytest.approx(float(r["memory_total_gib"]), abs=0.01)
        assert float(r["memory_total_gib"]) <= float(r["memory_capacity_gib"])
        lo, mid, hi = (float(r[f"predicted_tokens_per_s_per_gpu{k}"]) for k in ("_low", "", "_high"))
        assert 0 < lo <= mid <= hi
        parts = sum(float(r[k]) for k in ("compute_s", "exposed_comm_s", "bubble_s", "other_s"))
        assert parts == pytest.approx(float(r["predicted_step_time_s"]), rel=1e-3)
        assert 0 < float(r["predicted_mfu"]) < 1
    errors = sorted(abs(float(r["error_vs_measured"])) for r in rows if r["error_vs_measured"])
    assert errors[len(errors) // 2] <= 0.10 and errors[-1] <= 0.25   # the accuracy targets


def test_row_without_layout_gets_a_searched_one(tmp_path):
    r = _predict_one(tmp_path, "nolayout.csv", HAND.replace(",h200_sxm,256,4,4,1,,5,16,1,", ",h200_sxm,256,,,,,,,,"))
    assert r["layout_searched"] and int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"] or 1) == 256
    assert float(r["predicted_tokens_per_s_per_gpu"]) > 0 and r["fits"] == "true"


def test_hand_written_table_with_extra_column_to_stdout(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + ",team\n" + HAND + ",infra\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(proc.stdout.splitlines()))
    assert rows[0]["team"] == "infra"                      # unknown columns pass through
    assert rows[0]["recompute_assumed"] in ("none", "selective", "full")
    assert float(rows[0]["memory_capacity_gib"]) == pytest.approx(140.4)


@pytest.mark.parametrize("mutate,expect", [
    (lambda h, r: (h.replace(",hidden,", ",hidden_size,"), r), "missing required column(s) hidden"),
    (lambda h, r: (h, r.replace(",8192,64,8,", ",eight thousand,64,8,", 1)), "row 2, column 'hidden'"),
    (lambda h, r: (h, r.replace("h200_sxm", "h300")), "row 2, column 'hardware'"),
    (lambda h, r: ("", ""), "empty file"),
    (lambda h, r: (h, ""), "no data rows"),
])
def test_bad_tables_exit_2_and_write_nothing(tmp_path, mutate, expect):
    header, row = mutate(HEADER, HAND)
    path = tmp_path / "bad.csv"
    path.write_text(header + ("\n" + row if row else "") + ("\n" if header else ""))
    out = tmp_path / "out.csv"
    proc = run_cli(["predict", "--runs", str(path), "--out", str(out)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert expect in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    assert not list(tmp_path.glob(".out.csv*"))


def test_missing_runs_file(tmp_path):
    proc = run_cli(["predict", "--runs", str(tmp_path / "none.csv")], tmp_path)
    assert proc.returncode == 2 and "runs table not found" in proc.stderr


# ---------------------------------------------------------------------------------------
# Safe reads and writes (issue 14)
# ---------------------------------------------------------------------------------------
def test_out_refuses_links_and_devices_and_replaces_regular_files(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "\n" + HAND + "\n")
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    for out, expect in ((link, "is a symbolic link"), (Path("/dev/null"), "is not a regular file"),
                        (tmp_path, "is a folder"), (tmp_path / "no" / "x.csv", "does not exist")):
        proc = run_cli(["predict", "--runs", str(path), "--out", str(out)], tmp_path)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert expect in err and len(err.splitlines()) == 1, err
    assert link.is_symlink() and target.read_text() == "keep me\n"
    assert Path("/dev/null").is_char_device()
    old = tmp_path / "old.csv"
    old.write_text("old\n")
    assert run_cli(["predict", "--runs", str(path), "--out", str(old)], tmp_path).returncode == 0
    assert _read(old)[0]["run_id"] == "my-run"
    assert not list(tmp_path.glob(".old.csv*"))


def test_out_refuses_a_book_folder_and_a_manifest_and_follows_the_umask(tmp_path):
    """--out never writes into a book under the build folder (or the cache), nor over a book's
    manifest anywhere; a new file gets the mode any file gets (0644 under umask 022)."""
    import json
    import os

    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "\n" + HAND + "\n")
    build = tmp_path / "build"
    (build / "mybook" / "figures").mkdir(parents=True)
    manifest = tmp_path / "copy" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(json.dumps({"name": "x", "scenario_sha256": "0" * 64}))
    for out, expect in (
            (build / "mybook" / "figures" / "p.csv", f"--out {build / 'mybook' / 'figures' / 'p.csv'}: inside "
                                                     f"{build / 'mybook'}, which scaletax builds and replaces; write it elsewhere"),
            (build / "mybook" / "manifest.json", f"--out {build / 'mybook' / 'manifest.json'}: inside {build / 'mybook'}, "
                                                 "which scaletax builds and replaces; write it elsewhere"),
            (manifest, f"--out {manifest}: is a book's manifest; write it elsewhere")):
        proc = run_cli(["predict", "--runs", str(path), "--out", str(out)], build)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == f"scaletax: error: {expect}"
    assert sorted(p.name for p in (build / "mybook").rglob("*")) == ["figures"]
    assert json.loads(manifest.read_text())["name"] == "x"
    out = build / "predicted.csv"  # beside the books: allowed
    proc = run_cli(["predict", "--runs", str(path), "--out", str(out)], build, preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0, proc.stderr
    assert os.stat(out).st_mode & 0o777 == 0o644


def test_duplicate_columns_are_refused_in_one_line(tmp_path):
    """csv.DictReader keeps the last of two equal columns without a word: a table with one twice
    is refused, naming it."""
    path = tmp_path / "twice.csv"
    path.write_text(HEADER + ",tp\n" + HAND + ",8\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("scaletax: error: twice.csv: row 1: duplicate column(s) 'tp'; each column may "
                                   "appear once")
    assert proc.stdout == ""


def test_formula_cells_are_neutralised_numbers_kept(tmp_path):
    path = tmp_path / "mine.csv"
    evil = HAND.replace("my-run,", '"=HYPERLINK(""http://x.invalid"",""y"")",', 1).replace(
        "written by hand for a test; team=infra", "=cmd|' /C calc'!A0")
    path.write_text(HEADER + ",team,delta\n" + evil + ",@SUM(A1),-5\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    (row,) = list(csv.DictReader(proc.stdout.splitlines()))
    assert row["run_id"] == "'=HYPERLINK(\"http://x.invalid\",\"y\")"
    assert row["notes"] == "'=cmd|' /C calc'!A0"
    assert row["team"] == "'@SUM(A1)"
    assert row["delta"] == "-5"                   # a number stays a number
    assert float(row["memory_total_gib"]) > 0     # and so do the model's columns
    for r in csv.reader(proc.stdout.splitlines()):
        for cell in r:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
            assert not cell.startswith("-") or cell.lstrip("-").replace(".", "", 1).replace("e", "", 1).isdigit(), cell


@pytest.mark.parametrize("edit,expect", [
    (lambda r: r.replace(",h200_sxm,256,4,4,1,,5,16,1,", ",h200_sxm,0,,,,,,,,"), "column 'gpu_count': must be >= 1"),
    (lambda r: r.replace(",h200_sxm,256,4,4,1,,5,16,1,", ",h200_sxm,-8,,,,,,,,"), "column 'gpu_count': must be >= 1"),
    (lambda r: r.replace(",h200_sxm,256,4,4,1,,5,16,1,", ",h200_sxm,1000000000000000,,,,,,,,"),
     "column 'gpu_count': must be >= 1 and <= 1e+06"),
    (lambda r: r.replace(",128256,8192,", ",1e30,8192,"), "column 'vocab': 1e30 is larger than 2**53"),
    (lambda r: r.replace("fp8,unknown,,,,", "fp8,unknown,-100,,,"), "column 'measured_tokens_per_s_per_gpu': must be > 0"),
    (lambda r: r.replace("fp8,unknown,,,,", "fp8,unknown,,,1.5,"), "column 'measured_mfu': must be > 0 and <= 1"),
    (lambda r: r.replace(",128256,8192,", "," + "9" * 5000 + ",8192,"), "column 'vocab': expected an integer"),
])
def test_out_of_range_rows_refused_in_one_line(tmp_path, edit, expect):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + "\n" + edit(HAND) + "\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert expect in err and len(err.splitlines()) == 1, err


def test_runs_files_refused_before_reading(tmp_path):
    import os

    from scaletax.inputs.runs import MAX_RUNS_BYTES

    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:
        fh.truncate(MAX_RUNS_BYTES + 1)
    for path, expect in (("/dev/zero", "is not a regular file"), (fifo, "is not a regular file"),
                         (big, f"the limit is {MAX_RUNS_BYTES} bytes")):
        proc = run_cli(["predict", "--runs", str(path)], tmp_path, timeout=60)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert expect in err and len(err.splitlines()) == 1, err


def test_all_moe_row_without_ffn_and_etp_and_every_bad_row_listed(tmp_path):
    # Qwen3-30B-A3B class on 8 H100, every layer MoE: ffn_hidden blank, EP4 x TP2 without etp (= 1)
    moe = ("moe,30B-A3B,48,2048,32,4,128,,151936,4096,gqa,128,8,768,,0,30.5,3.3,h100_sxm,8,2,1,,4,,,1,"
           "64,bf16,unknown,,,,internal,hand,test")
    bad_a = HAND.replace(",h200_sxm,256,4,4,", ",h200_sxm,256,4,four,")
    bad_b = HAND.replace("h200_sxm", "h300")
    r = _predict_one(tmp_path, "mixed.csv", moe)
    assert float(r["predicted_tokens_per_s_per_gpu"]) > 0 and float(r["memory_total_gib"]) > 0
    path = tmp_path / "mixed.csv"
    path.write_text("\n".join([HEADER, moe, bad_a, HAND, bad_b]) + "\n")
    out = tmp_path / "out.csv"
    proc = run_cli(["predict", "--runs", str(path), "--out", str(out)], tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert "2 bad row(s)" in err and "row 3, column 'pp'" in err and "row 5, column 'hardware'" in err
    assert not out.exists()


def test_help_documents_every_default(tmp_path):
    proc = run_cli(["predict", "--help"], tmp_path)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for col in ("ffn_hidden:", "etp: tp", "stack: megatron", "zero_stage: 1", "vp: pp = 1: 1; pp > 1: the interleaving", "mbs: 1", "gbs: one sequence per GPU",
                "recompute: unknown"):
        assert col in text, col
