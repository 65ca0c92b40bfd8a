"""Issue 35 item 10 end to end: a tampered result cache never reaches a book.

After a price rebuild (its searches read from ``_build/.cache/memo``), every cached search is
edited (``tokens_per_s_per_gpu=123456``: once re-pickled with its old record, once as a bare
pickle). A second price rebuild executes the same chapters again: it must compute the searches
again, so everything that does not depend on the price is what the untampered rebuild published.
"""
from __future__ import annotations

import json
import pickle
import re
from dataclasses import replace

import pytest

from conftest import SMALL, run_cli
from scaletax import memo

pytestmark = pytest.mark.book

FORGED_TPS = 123456.0


def _entry_figures(build_dir, name, chapter):
    manifest = json.loads((build_dir / name / "manifest.json").read_text())
    (key,) = [n["content_sha256"] for n in manifest["notebooks"] if n["chapter"] == chapter]
    return build_dir / ".cache" / key / "figures"


def _tamper(build_dir) -> int:
    cache = build_dir / ".cache" / "memo"
    searches = sorted(p for d in cache.glob("*search*") for p in d.glob("*.pkl"))
    for i, path in enumerate(searches):
        status, payload = memo.read_entry(path)
        assert status == "hit", path
        res = pickle.loads(payload)
        if hasattr(res, "metrics"):
            res = replace(res, metrics={**res.metrics, "tokens_per_s_per_gpu": FORGED_TPS})
        forged = pickle.dumps(res)
        raw = path.read_bytes()
        head = raw[:raw.index(b"\n") + 1]
        path.write_bytes(head + forged if i % 2 else forged)  # its old record kept, or none
    return len(searches)


def test_edited_search_pickles_are_computed_again(built_book, tmp_path):
    build_dir = built_book["build_dir"]
    price = "economics.prices.h100_sxm.usd_per_gpu_hour={}"
    first = run_cli(["build", *SMALL, "--set", price.format(2.6), "--name", "untampered", "--no-pdf"], build_dir)
    assert first.returncode == 0, first.stderr[-2000:]
    assert _tamper(build_dir) >= 10
    log = tmp_path / "memo.jsonl"
    second = run_cli(["build", *SMALL, "--set", price.format(2.7), "--name", "tampered", "--no-pdf"], build_dir,
                     env_extra={"SCALETAX_MEMO_LOG": str(log)})
    assert second.returncode == 0, second.stderr[-2000:]
    manifest = json.loads((build_dir / "tampered" / "manifest.json").read_text())
    assert {n["chapter"] for n in manifest["notebooks"] if n["status"] == "executed"} == {"summary", "decision"}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    searches = [c for c in calls if ".search" in c["fn"]]
    assert any(c["what"] == "bad" for c in searches)  # found, then computed again
    computed = {c["key"] for c in searches if c["what"] == "miss"}
    assert {c["key"] for c in searches if c["what"] == "hit"} <= computed  # only what this build rewrote
    # no number of the forged searches anywhere in the book
    html = "".join(p.read_text(encoding="utf-8") for p in (build_dir / "tampered" / "html").glob("*.html"))
    assert not re.search(r"123,?456", html)
    for csv in (build_dir / "tampered" / "figures").glob("*.csv"):
        assert "123456" not in csv.read_text(encoding="utf-8"), csv.name
    # every figure that does not show the price is the untampered drawing, byte for byte
    same = 0
    for chapter in ("summary", "decision"):
        before, after = _entry_figures(build_dir, "untampered", chapter), _entry_figures(build_dir, "tampered", chapter)
        for png in sorted(after.glob("*.png")):
            rows = png.with_suffix(".csv")
            if rows.exists() and rows.read_bytes() == (before / rows.name).read_bytes():
                assert png.read_bytes() == (before / png.name).read_bytes(), png.name
                same += 1
    assert same >= 1  # the small book has two such figures
