"""End to end: a small scenario built into HTML and PDF, reuse, overrides, failures."""
import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, SMALL, run_cli

pytestmark = pytest.mark.book


def test_outputs_exist(built_book):
    book = built_book["dir"]
    assert (book / "html" / "index.html").is_file()
    m = built_book["manifest"]
    assert m["name"] == "small"
    assert "up_to_date" not in m  # a fresh book's manifest does not read as stale (issue 33)
    if shutil.which("xelatex") and shutil.which("latexmk"):
        assert m["pdf"] == "built" and (book / "small.pdf").stat().st_size > 10_000
    else:
        assert m["pdf"] == "skipped (xelatex not installed)"
    assert len(m["scenario_sha256"]) == 64 and m["git_commit"]
    assert m["packages"]["jupyter-book"].startswith("1.")
    chapters = {n["chapter"] for n in m["notebooks"]}
    assert "hardware" in chapters
    for n in m["notebooks"]:
        assert len(n["content_sha256"]) == 64 and n["status"] in ("executed", "reused")
    # every figure has its PNG and its CSV
    figs = {p.stem for p in (book / "figures").glob("fig-*.png")}
    assert figs and figs == {p.stem for p in (book / "figures").glob("fig-*.csv")}
    assert not list(book.parent.glob(".stage-*")), "staging folders must be cleaned up"


def test_each_figure_is_held_once_in_its_notebook(built_book):
    """A figure's PNG and HTML sit in the notebook once, in its glue record: the cell that draws it
    shows only its name (its renderings twice would double what every later step reads)."""
    book = built_book["dir"]
    figs = {p.stem for p in (book / "figures").glob("fig-*.png")}
    glued, shown = set(), []
    for path in (book / "html" / "_sources").glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "application/papermill.record/image/png" in data:
                    glued.add(out["metadata"]["scrapbook"]["name"])
                if "image/png" in data or "text/html" in data and "scaletax-chart" in "".join(data["text/html"]):
                    shown.append(path.stem)
    assert glued == figs and not shown


def test_html_needs_no_network(built_book):
    html_dir = built_book["dir"] / "html"
    pattern = re.compile(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["'](?:https?:)?//""", re.I)
    for page in html_dir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not pattern.search(text), f"{page.name} loads something from the network"
        assert "@import url(http" not in text
    for css in html_dir.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?https?://", css.read_text(encoding="utf-8", errors="replace")), css.name
    assert (html_dir / "_static" / "scaletax-vega.js").stat().st_size > 100_000
    assert (html_dir / "_static" / "mathjax" / "tex-svg.js").is_file()




def test_second_build_reuses_every_notebook(built_book):
    """The same scenario under another name: a new book (the book's own inputs differ: its name), every
    chapter reused from the cache. (Under the same name without TeX, the build finds the book up to
    date and rebuilds nothing, so it would not show the reuse.)"""
    proc = run_cli(["build", *SMALL, "--name", "small-again", "--no-pdf"], built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((built_book["build_dir"] / "small-again" / "manifest.json").read_text())
    assert {n["status"] for n in m["notebooks"]} == {"reused"}
    assert "reused" in proc.stderr


def test_override_builds_a_second_book_and_leaves_the_first(built_book):
    first = (built_book["dir"] / "figures" / "tbl-hw-catalog.csv").read_text()
    proc = run_cli(["build", *SMALL, "--set", "gpus=[h100_sxm]", "--no-pdf"], built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    others = [p for p in built_book["build_dir"].iterdir() if p.name.startswith("default-")]
    assert len(others) == 1
    second = (others[0] / "figures" / "tbl-hw-catalog.csv").read_text()
    assert "GB200" in first and "GB200" not in second
    assert (built_book["dir"] / "figures" / "tbl-hw-catalog.csv").read_text() == first
    m2 = json.loads((others[0] / "manifest.json").read_text())
    assert m2["scenario"]["gpus"] == ["h100_sxm"]


def test_failing_notebook_keeps_previous_book_and_exits_1(built_book, tmp_path):
    build_dir = built_book["build_dir"]
    ok = run_cli(["build", *SMALL, "--name", "victim", "--no-pdf"], build_dir)
    assert ok.returncode == 0, ok.stderr[-2000:]
    before = (build_dir / "victim" / "manifest.json").read_text()
    broken = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", broken)
    src = (broken / "hardware.md").read_text()
    src = src.replace("charts.setup()", "charts.setup()\nraise RuntimeError('boom from a test')", 1)
    (broken / "hardware.md").write_text(src)
    proc = run_cli(["build", *SMALL, "--name", "victim", "--no-pdf"], build_dir,
                   env_extra={"SCALETAX_NOTEBOOKS": str(broken)})
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "chapter 'hardware' failed in cell" in last and "RuntimeError: boom from a test" in last
    log = re.search(r"traceback: (\S+\.ipynb)", last).group(1)
    assert "boom from a test" in open(log).read()
    assert (build_dir / "victim" / "manifest.json").read_text() == before
    assert not list(build_dir.glob(".stage-*"))
    assert not list((build_dir / ".cache").glob(".tmp-*"))


def test_rebuild_with_nothing_changed_is_up_to_date(built_book):
    args = ["build", *SMALL, "--name", "small"]
    first = run_cli(args, built_book["build_dir"])  # whatever earlier tests left, now current
    assert first.returncode == 0, first.stderr[-2000:]
    published = (built_book["dir"] / "manifest.json").read_bytes()
    proc = run_cli(args, built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "up to date" in proc.stderr and "executing" not in proc.stderr
    # the published manifest keeps the record of the build that really executed the book
    assert (built_book["dir"] / "manifest.json").read_bytes() == published


def test_a_model_that_does_not_fit_is_an_answer_not_a_crash(built_book):
    """Llama 3.1 405B on 64 H100 fits on no layout: the book builds and says what it needs."""
    args = ["build", "--set", "gpus=[h100_sxm]", "--set", "models=[llama31_405b]", "--set", "cluster.gpus=64",
            "--set", "cluster.sizes=[64,1024]", "--set",
            "economics.prices={h100_sxm: {usd_per_gpu_hour: 2.35, assumption: false, source: test}}",
            "--set", "precision.experiment_steps=20", "--set", "precision.experiment_seeds=1",
            "--name", "nofit", "--no-pdf"]
    proc = run_cli(args, built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = built_book["build_dir"] / "nofit" / "html"
    decision = (html / "decision.html").read_text(encoding="utf-8")
    assert re.search(r"does not fit on 64 GPUs of type H100 SXM in fp8; needs at least \d+", decision)
    assert re.search(r"does not fit on 64 H100 SXM GPUs; it needs at least \d+", (html / "memory.html").read_text())


def test_a_price_only_rebuild_computes_no_search_and_no_training(built_book, tmp_path):
    """A price change re-executes the chapters that read prices, and every search and training
    they ask for comes from the build's result cache (scaletax.memo's call log: no miss)."""
    log = tmp_path / "memo.jsonl"
    proc = run_cli(["build", *SMALL, "--set", "economics.prices.gb200.usd_per_gpu_hour=0.5", "--name", "small-price",
                    "--no-pdf"], built_book["build_dir"], env_extra={"SCALETAX_MEMO_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((built_book["build_dir"] / "small-price" / "manifest.json").read_text())
    executed = {n["chapter"] for n in m["notebooks"] if n["status"] == "executed"}
    assert {"summary", "decision"} <= executed and "precision" not in executed
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(c["fn"] == "scaletax.model.search.search" for c in calls)
    assert [c for c in calls if c["what"] != "hit"] == []
