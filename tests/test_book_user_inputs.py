"""End to end: a planner's own 1.8T MoE and a GB200 variant with 800 Gb/s NICs, from a scenario
file, build a book without touching data/, marked as theirs; a price change re-executes only the
chapters that read prices."""
import json

import pytest
import yaml

from conftest import run_cli
from scaletax.report.provenance import data_hashes
from scaletax.report.scenario import DEFAULT_SCENARIO

pytestmark = pytest.mark.book

SCENARIO = {
    "name": "mine",
    "title": "My 1.8T MoE on GB200 with 800G NICs",
    "question": "What does my own 1.8T MoE cost on a GB200 variant with 800 Gb/s NICs?",
    "models": [{"id": "moe_1p8t", "name": "My MoE 1.8T", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 8,
                "ffn_hidden": 49152, "vocab": 128256, "seq_len": 8192, "moe_experts": 16, "moe_top_k": 2,
                "moe_ffn_hidden": 31232, "published_total_params_b": 1800}],
    "gpus": ["h100_sxm", {"id": "gb200_800g", "base": "gb200", "nic_gbit_s": 800}],
    "training": {"tokens": 15.0e12, "tokens_source": "my plan", "global_batch_tokens": 16777216,
                 "precision": "fp8", "precisions": ["bf16", "fp8"]},
    "cluster": {"sizes": [4096, 8192], "gpus": 8192, "target_days": 90},
    "economics": {"prices": {"h100_sxm": {"usd_per_gpu_hour": 2.35, "assumption": False, "source": "my contract"},
                             "gb200_800g": {"usd_per_gpu_hour": 4.6, "assumption": False, "source": "vendor quote"}},
                  "energy": {"pue": 1.2, "system_overhead": 1.7, "utilization": 0.9, "source": "defaults"},
                  "usd_per_mwh": 80, "usd_per_mwh_source": "my utility"},
    "precision": {"seed": 1, "experiment_seeds": 1, "experiment_steps": 20},
    # the decision chapter's reference GPUs: the default scenario's
    "comparisons": yaml.safe_load(DEFAULT_SCENARIO.read_text())["comparisons"],
}


def test_own_model_and_gpu_build_marked_and_a_price_change_reruns_only_price_readers(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    before = data_hashes()
    build = tmp_path / "build"
    proc = run_cli(["build", "--scenario", str(path), "--no-pdf", "--jobs", "2", "--name", "mine"], build)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert data_hashes() == before  # data/ untouched
    html = build / "mine" / "html"
    hw = (html / "hardware.html").read_text(encoding="utf-8")
    assert "GB200 NVL72 (yours)" in hw and "your input (nic_gbit_s=800)" in hw
    for page in ("memory", "decision", "summary"):
        text = (html / f"{page}.html").read_text(encoding="utf-8")
        assert "My MoE 1.8T (yours)" in text, page
    summary = (html / "summary.html").read_text(encoding="utf-8")
    assert "Your inputs" in summary  # the provenance box
    # a scenario file written before the goodput model takes its inputs from the default scenario: the
    # summary says the goodput is modelled, for which cluster, and from whose interruption rate
    assert "goodput (modelled for 8,192 GPUs)" in summary and "Llama 3 405B pre-training" in summary
    assert "racks (" in summary  # GPUs for the deadline in whole NVL72 racks
    m = json.loads((build / "mine" / "manifest.json").read_text())
    assert set(m["definitions"]["gpus"]) == {"gb200_800g"} and set(m["definitions"]["models"]) == {"moe_1p8t"}
    assert m["data_sha256"] == before
    assert any(u.startswith("GPU gb200_800g: your input") for u in m["user_inputs"])

    proc = run_cli(["build", "--scenario", str(path), "--no-pdf", "--name", "mine-price",
                    "--set", "economics.prices.h100_sxm.usd_per_gpu_hour=2.10"], build)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m2 = json.loads((build / "mine-price" / "manifest.json").read_text())
    executed = {n["chapter"] for n in m2["notebooks"] if n["status"] == "executed"}
    assert executed == {"summary", "decision"}
    text = (build / "mine-price" / "html" / "decision.html").read_text(encoding="utf-8")
    assert "$2.10 (your input)" in text and "my contract" not in text
