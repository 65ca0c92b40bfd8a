"""Two books side by side: inputs that differ, headline numbers with the change, overlaid figures."""
import json
import shutil
import subprocess

import pytest

from conftest import require_tools, run_cli
from scaletax.report import compare as cmp


def _book(root, name, scenario, headline, cost_time):
    d = root / name
    (d / "figures").mkdir(parents=True)
    (d / "figures" / "tbl-sum-headline.csv").write_text(headline)
    (d / "figures" / "fig-dec-cost-time.csv").write_text(cost_time)
    manifest = {"name": name, "scenario": scenario, "git_commit": "abc", "built_at": "2026-12-01 10:00 UTC",
                "notebooks": [{"chapter": "summary"}, {"chapter": "decision"}],
                "numbered": [{"label": "tbl-sum-headline", "kind": "table", "number": "1.1",
                              "caption": "Days and cost.", "page": "summary"},
                             {"label": "tbl-dec-cost", "kind": "table", "number": "8.2", "caption": "x",
                              "page": "decision"}]}
    (d / "manifest.json").write_text(json.dumps(manifest))


SCEN_A = {"name": "default", "cluster": {"gpus": 16384, "sizes": [1024]},
          "economics": {"prices": {"h200_sxm": {"usd_per_gpu_hour": 2.5, "source": "index"}}}}
SCEN_B = {"name": "default", "cluster": {"gpus": 32768, "sizes": [1024]},
          "economics": {"prices": {"h200_sxm": {"usd_per_gpu_hour": 2.1, "source": "index"}}}}
HEAD_A = ("model,hopper,hopper_days,hopper_days_low,hopper_days_high\n"
          "GPT 1T,H200 SXM,60.0,56.0,68.0\nKimi K2,H200 SXM,7.8,7.2,9.0\n")
HEAD_B = ("model,hopper,hopper_days,hopper_days_low,hopper_days_high\n"
          "GPT 1T,H100 SXM,45.0,42.0,51.0\nKimi K2,H200 SXM,7.8,7.2,9.0\n")
CT = ("model_name,gpu,label,days,cost_musd\nGPT 1T,h200_sxm,H200 SXM,{d},62.3\n")


@pytest.fixture
def books(tmp_path):
    _book(tmp_path, "default", SCEN_A, HEAD_A, CT.format(d=60.0))
    _book(tmp_path, "big", SCEN_B, HEAD_B, CT.format(d=45.0))
    return tmp_path


def test_inputs_that_differ_are_the_changed_resolved_keys():
    rows = cmp.input_diff(SCEN_A, SCEN_B)
    assert [r["key"] for r in rows] == ["cluster.gpus", "economics.prices.h200_sxm.usd_per_gpu_hour"]
    assert rows[0] == {"key": "cluster.gpus", "a": "16384", "b": "32768"}
    assert cmp.input_diff(SCEN_A, {**SCEN_A, "extra": [1]})[0] == {"key": "extra", "a": "(not set)", "b": "[1]"}


def test_headline_numbers_have_both_values_and_the_change(books):
    a, b = cmp.load_book(books, "default"), cmp.load_book(books, "big")
    assert cmp.headline_labels(a, b) == ["tbl-sum-headline"]  # the summary's tables only
    rows = cmp.headline_rows(a, b, "tbl-sum-headline")
    days = next(r for r in rows if r["row"] == "GPT 1T" and r["column"] == "hopper_days")
    assert days["a"] == "60.0 (56.0–68.0)" and days["b"] == "45.0 (42.0–51.0)" and days["change"] == "-25.0%"
    gpu = next(r for r in rows if r["row"] == "GPT 1T" and r["column"] == "hopper")
    assert (gpu["a"], gpu["b"], gpu["change"]) == ("H200 SXM", "H100 SXM", "changed")
    same = next(r for r in rows if r["row"] == "Kimi K2" and r["column"] == "hopper_days")
    assert same["change"] == "+0.0%"
    assert not any(r["row"] == "Kimi K2" and r["column"] == "hopper" for r in rows)  # unchanged text


def test_overlay_holds_both_books_with_gpu_names(books):
    a, b = cmp.load_book(books, "default"), cmp.load_book(books, "big")
    fig = cmp.KEY_FIGURES[0]
    rows = cmp.overlay_rows(a, b, fig)
    assert [(r["book"], r["x"]) for r in rows] == [("default", 60.0), ("big", 45.0)]
    spec = cmp.overlay_chart(fig, rows, ("default", "big"))
    import vl_convert as vlc

    svg = vlc.vegalite_to_svg(spec)
    assert "H200 SXM" in svg and "big" in svg and "default" in svg


def test_missing_book_is_a_one_line_error(books):
    with pytest.raises(cmp.CompareError, match="no built book 'nope'"):
        cmp.load_book(books, "nope")
    with pytest.raises(cmp.CompareError, match="two different books"):
        cmp.compare(books, "default", "default")


def test_compare_page_html_and_pdf(books):
    require_tools("xelatex", "latexmk", "pdftotext")
    result = cmp.compare(books, "default", "big", pdf=True)
    out = books / "compare-default-vs-big"
    assert result["pdf"] == "built" and (out / "compare-default-vs-big.pdf").stat().st_size > 5000
    html = (out / "html" / "index.html").read_text()
    assert "cluster.gpus" in html and "32768" in html and "-25.0%" in html
    assert "fig-dec-cost-time-overlay.png" in html and (out / "figures" / "fig-dec-cost-time-overlay.png").exists()
    text = subprocess.run(["pdftotext", str(out / "compare-default-vs-big.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    assert "Inputs that differ" in text and "-25.0%" in text
    data = json.loads((out / "comparison.json").read_text())
    assert data["inputs"][0]["key"] == "cluster.gpus" and data["headline"]
    assert not list(books.glob(".stage-*"))


@pytest.mark.book
def test_compare_command_builds_b_from_a_with_set(built_book):
    """`scaletax compare small --set ...` builds B (A's scenario plus the override) and the page."""
    proc = run_cli(["compare", "small", "--set", "economics.usd_per_mwh=120", "--no-pdf", "--jobs", "2"],
                   built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    outs = [p for p in built_book["build_dir"].iterdir() if p.name.startswith("compare-small-vs-")]
    assert len(outs) == 1
    data = json.loads((outs[0] / "comparison.json").read_text())
    keys = [r["key"] for r in data["inputs"]]  # the price, and its source now labelled as the user's
    assert "economics.usd_per_mwh" in keys and all(k.startswith("economics.usd_per_mwh") for k in keys)
    assert data["headline"], "the summary's table is compared"
    assert any(r.get("value_a") != r.get("value_b") for r in data["headline"] if "value_a" in r)
    assert (outs[0] / "html" / "index.html").exists()
    bad = run_cli(["compare", "small", "no-such-book", "--no-pdf"], built_book["build_dir"])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no built book 'no-such-book'" in bad.stderr


# ---------------------------------------------------------------------------------------
# The comparison is a door too (issue 35): names, manifests and CSV cells are text
# ---------------------------------------------------------------------------------------
def test_names_are_names_and_folders_stay_inside_the_build_root(books, tmp_path):
    for name in ("probe/../other", "/etc", "..", "default/..", "x\n", "", "A"):
        with pytest.raises(cmp.CompareError, match="is not a book name"):
            cmp.load_book(books, name)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    shutil.copytree(books / "default", outside)
    (books / "linked").symlink_to(outside)
    with pytest.raises(cmp.CompareError, match="a link, not a book folder"):
        cmp.load_book(books, "linked")


def test_a_manifest_label_cannot_name_a_file(books):
    m = json.loads((books / "big" / "manifest.json").read_text())
    m["numbered"][0]["label"] = "../../../../etc/passwd"
    (books / "big" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(cmp.CompareError, match="a numbered entry without a valid label"):
        cmp.load_book(books, "big")


def test_the_page_shows_what_each_side_holds_as_text(books):
    """Scenario values, captions, commits and CSV cells of the books, each a hostile payload, reach
    the page as text: the page parsed as the book parses it (raw HTML and file insertion on) has
    tables, a figure and headings of its own and nothing from the payloads."""
    from docutils import nodes

    from test_fuzz_doors import MARKUP_NODES, PAYLOADS, _doctree, _flat

    payloads = [p for p in PAYLOADS if "\r" not in p]
    for name, offset in (("default", 0), ("big", 5)):
        m = json.loads((books / name / "manifest.json").read_text())
        m["scenario"]["title"] = payloads[offset]
        m["scenario"]["question"] = payloads[offset + 1]
        m["git_commit"], m["built_at"] = payloads[offset + 2], payloads[offset + 3]
        m["numbered"][0]["caption"] = payloads[offset + 4]
        (books / name / "manifest.json").write_text(json.dumps(m))
        rows = [{"model": p, "hopper": payloads[(i + offset) % len(payloads)], "hopper_days": 60.0 + i}
                for i, p in enumerate(payloads)]
        with (books / name / "figures" / "tbl-sum-headline.csv").open("w", newline="", encoding="utf-8") as fh:
            from scaletax import escape

            fh.writelines(escape.csv_line([escape.csv_cell(c) for c in r]) for r in
                          [list(rows[0])] + [list(map(str, r.values())) for r in rows])
    a, b = cmp.load_book(books, "default"), cmp.load_book(books, "big")
    text, images, headline = cmp.page(a, b)
    tree = _doctree(text)
    assert [t.astext() for t in tree.findall(nodes.title)][:2] == ["Comparison: default vs big", "Inputs that differ"]
    assert len(list(tree.findall(nodes.table))) == 2 and len(list(tree.findall(nodes.figure))) == 1
    for table in tree.findall(nodes.table):
        assert not [n for n in table.findall() if isinstance(n, MARKUP_NODES) and not isinstance(n, nodes.title)]
    assert not list(tree.findall(nodes.raw)) and not list(tree.findall(nodes.reference))
    cells = {_flat(e.astext()) for e in tree.findall(nodes.entry)}
    assert {_flat(p) for p in payloads} <= cells  # every payload shown, as typed (rows are read back unneutralized)
    assert headline and any(r["row"] == payloads[0] for r in headline)


def test_the_comparison_gets_the_same_docutils_conf_and_myst_extensions(books, monkeypatch):
    from scaletax.report import book

    seen = {}

    def record(src, out, logs, *args, **kw):
        seen["docutils"] = (src / "docutils.conf").read_text()
        seen["conf"] = (src / "conf.py").read_text()
        raise book.BuildError("stop here")

    monkeypatch.setattr(book, "build_html", record)
    with pytest.raises(book.BuildError, match="stop here"):
        cmp.compare(books, "default", "big", pdf=False)
    assert seen["docutils"] == book.DOCUTILS_CONF
    assert "myst_enable_extensions = ['colon_fence', 'dollarmath', 'amsmath', 'deflist', 'substitution']" in seen["conf"]
    assert "myst_url_schemes = ['http', 'https', 'mailto']" in seen["conf"]
    assert not list(books.glob(".stage-*"))
