"""`scaletax predict`: the calibration table and a hand-written table in, model columns out;
bad tables refused in one line with exit status 2 and nothing written."""
import csv

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
    row = HAND.replace(",h200_sxm,256,4,4,1,,5,16,1,", ",h200_sxm,256,,,,,,,,")
    path = tmp_path / "nolayout.csv"
    path.write_text(HEADER + "\n" + row + "\n")
    proc = run_cli(["predict", "--runs", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    r = list(csv.DictReader(proc.stdout.splitlines()))[0]
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
    assert proc.returncode == 2 and "cannot read runs table" in proc.stderr
