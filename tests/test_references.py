"""data/references.yaml: every published value carries its source; sections are copies."""
from __future__ import annotations

import pytest

from scaletax.inputs import references
from scaletax.chapters import memory as ms


def test_low_precision_training_points():
    pts = references.section("low_precision_training")
    text = " ".join(f"{p['figure']} {p['source']} {p['verified']}" for p in pts)
    assert "0.25%" in text and "2412.19437" in text
    assert "1% to 1.5%" in text and "36%" in text and "2509.25149" in text
    assert all(p["source"] and p["verified"] for p in pts)
    assert any("abstract/figures" in p["verified"] for p in pts)
    pts[0]["figure"] = "changed"
    assert references.section("low_precision_training")[0]["figure"] != "changed"


def test_memory_references_and_claims_are_sourced():
    mem = references.section("memory")
    assert [r["key"] for r in mem] == [r.key for r in ms.REFERENCES]
    assert {r["cite"] for r in mem} == {"rajbhandari2020", "korthikanti2022"}
    assert next(r for r in mem if r["key"] == "zero0")["value"] == 120.0  # ZeRO Fig. 1: (2 + 2 + 12) x 7.5B
    c = references.claim("rubin_moe_gpus")
    assert (c["new"], c["old"], c["value"], c["cite"]) == ("rubin", "gb200", 0.25, "nvidiarubin")
    with pytest.raises(KeyError, match="no claim 'x'"):
        references.claim("x")
    with pytest.raises(KeyError, match="no reference section 'x'"):
        references.section("x")
