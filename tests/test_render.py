"""The figure and table renderers the chapters share."""
import csv
import re

import altair as alt
import pytest

from scaletax import escape
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
    assert md.startswith("~~~{list-table} Cap\\.\n:name: tbl-x\n:header-rows: 1\n:class: longtable")
    assert "a\\|b" in md and "2\\,500" in md  # every cell is MyST text (scaletax.escape.myst_cell)
    got = list(csv.DictReader(open(tmp_path / "tbl-x.csv")))
    assert got[1] == {"gpu": "gb200", "tf": "2500.0", "note": "c"}
    with pytest.raises(ValueError, match="no rows"):
        tables.table([], {"a": "A"}, label="tbl-y", caption="c")
    none = tables.table([], {"a": "A", "b": "B"}, label="tbl-z", caption="c", empty="no model fits")
    assert "* - no model fits\n  - –" in none._repr_markdown_()


def test_no_pdf_cell_is_wider_than_its_column():
    """Table 8.6 showed "8,19" for 8,192 and Table 4.1 "GB2( NVL": a column narrower than its
    widest number or word. The widths keep the author's proportions where they fit, raise a
    column to its widest piece of text, and set a table too wide for the line smaller."""
    from scaletax.render import tablefit

    head = ["Run", "GPUs", "Source"]
    rows = [["Llama 3 405B (Llama 3 paper, pre-training)", "16,384", "[arXiv:2407.21783](https://arxiv.org/x)"]]
    given = [80, 5, 15]  # the author's: far too narrow for 16,384
    assert tablefit.overflows(head, rows, tablefit.Layout(given, tablefit.NORMAL))
    fit = tablefit.layout(head, rows, given)
    assert fit.font == tablefit.NORMAL and tablefit.overflows(head, rows, fit) == []
    assert fit.widths[0] > fit.widths[2] > fit.widths[1]  # still the author's order
    # a link counts by its words, an escape by its character
    assert tablefit.visible("[arXiv:1](https://a.b/c) a\\|b") == "arXiv:1 a|b"
    # thirteen columns of 1,638,400 do not fit at the tables' font: the table is set smaller
    head, rows = [f"C{i}" for i in range(13)], [["1,638,400"] * 13]
    wide = tablefit.layout(head, rows)
    assert wide.font == tablefit.SMALL and tablefit.overflows(head, rows, wide) == []
    md = tables.markdown([{f"c{i}": 1638400 for i in range(13)}], {f"c{i}": f"C{i}" for i in range(13)},
                         label="tbl-wide", caption="Wide.")
    assert f":class: {tablefit.SMALL_CLASS}\n" in md and "ifscaletaxsmalltable" in tablefit.LATEX_TABLE_SETUP
    assert tablefit.SMALL_CLASS not in tables.markdown([{"a": 1}], {"a": "A"}, label="tbl-narrow", caption="Narrow.")


def test_link_and_citation_cells_are_markup_on_the_page_and_plain_text_in_the_csv(tmp_path, monkeypatch):
    """Only a Markup cell (made by scaletax.escape) reaches the page as MyST; text that looks like
    a link stays text. The CSV holds what each reads as."""
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    link = escape.myst_link("arXiv:2104.04473", "https://arxiv.org/abs/2104.04473")
    cite = escape.markup(escape.myst_role("cite", "narayanan2021"), ", Table 1")
    md = tables.table([{"a": link, "b": cite, "c": "[x](https://y.invalid)"}], {"a": "A", "b": "B", "c": "C"},
                      label="tbl-l", caption="c")._repr_markdown_()
    assert "* - [arXiv\\:2104\\.04473](<https://arxiv.org/abs/2104.04473>)\n" in md
    assert "  - {cite}`narayanan2021`\\, Table 1\n" in md and "  - \\[x\\]\\(https\\:\\/\\/y\\.invalid\\)\n" in md
    got = list(csv.DictReader(open(tmp_path / "tbl-l.csv", newline="")))
    assert got == [{"a": "arXiv:2104.04473 <https://arxiv.org/abs/2104.04473>", "b": "narayanan2021, Table 1",
                    "c": "[x](https://y.invalid)"}]


def test_figure_has_html_and_png_and_saves_png_csv(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    charts.setup()
    rows = [{"x": 1, "y": 2.0}, {"x": 2, "y": 3.5}]
    chart = alt.Chart(charts.data(rows)).mark_line().encode(x="x:Q", y="y:Q")
    bundle = charts.figure("fig-test", chart, rows)
    # the cell that draws it shows only its name: the notebook holds the renderings once, in the glue
    assert not hasattr(bundle, "_repr_mimebundle_") and repr(bundle) == "Figure fig-test"
    mime = charts.ChartBundle(bundle.label, bundle.spec, bundle.png)._repr_mimebundle_()
    assert mime["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    html = mime["text/html"]
    assert 'class="scaletax-chart"' in html and "http" not in html  # no $schema URL, no CDN
    assert (tmp_path / "fig-test.png").read_bytes() == bundle.png
    assert list(csv.DictReader(open(tmp_path / "fig-test.csv")))[1] == {"x": "2", "y": "3.5"}


def test_vega_bundle_is_self_contained():
    js = charts.vega_bundle()
    assert "window.vegaEmbed" in js and "__scaletaxCharts" in js
    assert "import " not in js[:200]


@pytest.fixture(scope="module")
def bundle():
    return charts.vega_bundle()


@pytest.mark.parametrize("scheme", sorted(charts.TEXT_SWITCH))
def test_numbers_on_heat_map_cells_reach_the_wcag_contrast_for_text(scheme, bundle):
    """Fig 7.1 had black numbers on dark cells: on each colour scheme a heat map writes numbers
    on, the colour charts.text_color picks has a WCAG 2 contrast of 4.5 or more with the cell,
    along the whole scheme, as Vega draws it (its colours read from the Vega bundle)."""
    hexes = re.search(rf'[,{{]{scheme}:"([0-9a-f]+)"', bundle, re.I).group(1)
    colours = [tuple(int(hexes[i + j:i + j + 2], 16) / 255 for j in (0, 2, 4)) for i in range(0, len(hexes), 6)]

    def luminance(t):  # Vega interpolates the scheme's samples in RGB
        x = t * (len(colours) - 1)
        i = min(int(x), len(colours) - 2)
        rgb = [a + (x - i) * (b - a) for a, b in zip(colours[i], colours[i + 1])]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    at, above = charts.TEXT_SWITCH[scheme]
    for k in range(201):
        t = k / 200
        black = (t >= at) == (above == "black")
        lum = luminance(t)
        contrast = (lum + 0.05) / 0.05 if black else 1.05 / (lum + 0.05)
        assert contrast >= 4.5, (scheme, t, "black" if black else "white", round(contrast, 2))
    lin = charts.text_color(scheme, "v", 0, 40)
    assert lin["condition"]["test"] == f"datum['v'] >= {at * 40!r}" and lin["condition"]["value"] == above
    log = charts.text_color(scheme, "v", 1, 128, log=True)
    assert log["condition"]["test"] == f"datum['v'] >= {128 ** at!r}"


def test_gpu_count_axis_ticks_never_touch():
    """Fig 6.2 printed "3k4k" where Vega's log ticks met: the axis ticks counts plotted, at least
    3.5x apart, written 1k, 16k, 100k."""
    import vl_convert as vlc

    counts = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 100000]
    axis = charts.count_axis(counts)
    assert axis.values == [1024, 4096, 16384, 65536]
    spec = alt.Chart(alt.Data(values=[{"n": c, "y": 1} for c in counts])).mark_point().encode(
        x=alt.X("n:Q", scale=alt.Scale(type="log"), axis=axis), y="y:Q").to_dict()
    svg = vlc.vegalite_to_svg(spec)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert [t for t in labels if t.endswith("k")] == ["1k", "4k", "16k", "64k"]


def test_figure_without_rows_shows_a_note(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    chart = alt.Chart(charts.data([])).mark_line().encode(x="x:Q", y="y:Q")
    bundle = charts.figure("fig-empty", chart, [], empty="No layout fits on 8 GPUs.")
    assert bundle.png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "No layout fits on 8 GPUs." in bundle.html()
    assert list(csv.DictReader(open(tmp_path / "fig-empty.csv"))) == [{"note": "No layout fits on 8 GPUs."}]


# --- colours a reader can tell apart ---------------------------------------------------
#: Machado, Oliveira and Fernandes (2009), "A physiologically-based model for simulation of
#: color vision deficiency", IEEE TVCG 15(6), Table 1 at severity 1.0 (linear RGB).
CVD = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
    "normal vision": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
}


def _lab(hex_color, matrix):
    """CIELAB (D65) of an sRGB colour as seen through a colour-vision matrix."""
    import numpy as np

    c = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    rgb = np.clip(np.array(matrix) @ lin, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def min_delta_e(colors, matrix):
    import itertools

    import numpy as np

    labs = [_lab(c, matrix) for c in colors]
    return min(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(labs, 2))


def test_default_gpus_stay_apart_under_colour_blindness():
    """Every pair of the default scenario's GPU colours differs by more than 15 CIELAB units
    (a clearly visible difference) for protanopes, deuteranopes and tritanopes. The previous
    Tableau palette gave H200 and Rubin a difference of 0.9 for deuteranopes."""
    from scaletax.report.scenario import DEFAULT_SCENARIO, resolve

    gpus = resolve(DEFAULT_SCENARIO, []).gpus
    colors = [charts.GPU_COLORS[g] for g in gpus]
    assert len(set(colors)) == len(colors)
    for vision, matrix in CVD.items():
        assert min_delta_e(colors, matrix) > 15, vision
    tableau = ["#4e79a7", "#76b7b2", "#f28e2b", "#e15759", "#b07aa1", "#59a14f"]
    assert min_delta_e(tableau, CVD["deuteranopia"]) < 2  # the check tells palettes apart


# --- GPU names and responsive width ---------------------------------------------------
def _gpu_chart(rows, **props):
    ids = [r["gpu"] for r in rows]
    return alt.Chart(charts.data(rows)).mark_point().encode(
        x="x:Q", y="y:Q", color=alt.Color("gpu:N", scale=charts.gpu_color_scale(ids), title="GPU")).properties(**props)


def test_charts_label_gpus_by_catalog_name(tmp_path, monkeypatch):
    import vl_convert as vlc

    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    rows = [{"gpu": "h100_sxm", "x": 1, "y": 2}, {"gpu": "gb200", "x": 2, "y": 3}]
    bundle = charts.figure("fig-names", _gpu_chart(rows), rows)
    expr = bundle.spec["encoding"]["color"]["legend"]["labelExpr"]
    assert '"H100 SXM"' in expr and '"GB200 NVL72"' in expr
    # the data and the colour scale keep the ids
    assert bundle.spec["encoding"]["color"]["scale"]["domain"] == ["h100_sxm", "gb200"]
    svg = vlc.vegalite_to_svg(bundle.spec)
    assert "GB200 NVL72" in svg and ">gb200<" not in svg
    # facet headers too
    facet = alt.Chart(charts.data(rows)).mark_point().encode(x="x:Q", y="y:Q").properties(width=100).facet(
        column=alt.Column("gpu:N"))
    spec = charts.name_gpus(facet.to_dict())
    assert "H100 SXM" in vlc.vegalite_to_svg(spec)
    assert charts.gpu_label("not_a_gpu") == "not_a_gpu"


def test_single_views_take_the_page_width_and_png_keeps_a_fixed_one(tmp_path, monkeypatch):
    import struct

    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    charts.setup()
    rows = [{"gpu": "h100_sxm", "x": 1, "y": 2}]
    bundle = charts.figure("fig-wide", _gpu_chart(rows), rows)
    assert bundle.spec["width"] == "container" and bundle.spec["autosize"]["type"] == "fit-x"
    width = struct.unpack(">I", bundle.png[16:20])[0] / charts.PNG_SCALE
    assert 400 < width < 800  # the PDF's image: the theme's 520 px plus axes and legend
    facet = alt.Chart(charts.data(rows)).mark_point().encode(x="x:Q", y="y:Q").properties(width=100).facet(
        column="gpu:N")
    assert "width" not in charts.responsive(facet.to_dict())  # facets scale down by CSS


# --- numeric CSV for ranges -----------------------------------------------------------
def test_band_cells_show_text_and_export_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    b = tables.band(13312.4, 12051.0, 15387.2)
    assert b == "13,312 (12,051–15,387)" and (b + " *") == "13,312 (12,051–15,387) *"
    assert (b + " *").low == 12051.0
    assert tables.band(None, 1, 2) == "–" and tables.band(1234.4, None, None) == "1,234"
    rows = [{"gpu": "H100", "days": b + " *"}, {"gpu": "B200", "days": tables.band(None, None, None)}]
    t = tables.table(rows, {"gpu": "GPU", "days": "Days"}, label="tbl-band", caption="c")
    assert escape.myst_text("13,312 (12,051–15,387) *") in t._repr_markdown_()
    got = list(csv.DictReader(open(tmp_path / "tbl-band.csv")))
    assert list(got[0]) == ["gpu", "days", "days_low", "days_high"]
    assert float(got[0]["days"]) == 13312.4 and float(got[0]["days_high"]) == 15387.2
    assert got[1] == {"gpu": "B200", "days": "", "days_low": "", "days_high": ""}
