"""The figure and table renderers the chapters share."""
import csv

import altair as alt
import pytest

from scaletax.render import charts, tables


def test_fmt_significant_figures_and_missing_values():
    assert tables.fmt(989.4) == "989"
    assert tables.fmt(0.012345) == "0.0123"
    assert tables.fmt(1234567.0) == "1,234,567"
    assert tables.fmt(16384) == "16,384"
    assert tables.fmt(None) == "–" and tables.fmt(float("nan")) == "–"
    assert tables.fmt(True) == "yes"


def test_table_is_a_numbered_list_table_and_writes_csv(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    rows = [{"gpu": "h100_sxm", "tf": 989.4, "note": "a|b"}, {"gpu": "gb200", "tf": 2500.0, "note": "c"}]
    t = tables.table(rows, {"gpu": "GPU", "tf": "TFLOP/s", "note": "Note"}, label="tbl-x", caption="Cap.", long=True)
    md = t._repr_markdown_()
    assert md.startswith("```{list-table} Cap.\n:name: tbl-x\n:header-rows: 1\n:class: longtable")
    assert "a\\|b" in md and "2,500" in md
    got = list(csv.DictReader(open(tmp_path / "tbl-x.csv")))
    assert got[1] == {"gpu": "gb200", "tf": "2500.0", "note": "c"}
    with pytest.raises(ValueError, match="no rows"):
        tables.table([], {"a": "A"}, label="tbl-y", caption="c")
    none = tables.table([], {"a": "A", "b": "B"}, label="tbl-z", caption="c", empty="no model fits")
    assert "* - no model fits\n  - –" in none._repr_markdown_()


def test_figure_has_html_and_png_and_saves_png_csv(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    charts.setup()
    rows = [{"x": 1, "y": 2.0}, {"x": 2, "y": 3.5}]
    chart = alt.Chart(charts.data(rows)).mark_line().encode(x="x:Q", y="y:Q")
    bundle = charts.figure("fig-test", chart, rows)
    mime = bundle._repr_mimebundle_()
    assert mime["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    html = mime["text/html"]
    assert 'class="scaletax-chart"' in html and "http" not in html  # no $schema URL, no CDN
    assert (tmp_path / "fig-test.png").read_bytes() == bundle.png
    assert list(csv.DictReader(open(tmp_path / "fig-test.csv")))[1] == {"x": "2", "y": "3.5"}


def test_vega_bundle_is_self_contained():
    js = charts.vega_bundle()
    assert "window.vegaEmbed" in js and "__scaletaxCharts" in js
    assert "import " not in js[:200]


def test_figure_without_rows_shows_a_note(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    chart = alt.Chart(charts.data([])).mark_line().encode(x="x:Q", y="y:Q")
    bundle = charts.figure("fig-empty", chart, [], empty="No layout fits on 8 GPUs.")
    assert bundle.png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "No layout fits on 8 GPUs." in bundle.html()
    assert list(csv.DictReader(open(tmp_path / "fig-empty.csv"))) == [{"note": "No layout fits on 8 GPUs."}]
