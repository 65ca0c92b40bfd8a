"""Every figure spec the book makes is valid Vega-Lite.

``charts.figure`` serializes a chart without altair's schema validation (it cost 20-130 ms per
figure in every build); these tests run the same schema check (``charts.validate_spec``) on the
specs of every figure of a built book, so a bad spec still fails the suite.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import altair as alt
import pytest

from scaletax.render import charts

#: The chart a page draws: ``.push(["#scaletax-<label>", <spec>]);`` (ChartBundle.html).
CHART = re.compile(r'\.push\(\["#scaletax-([^"]+)", (\{.*?\})\]\);</script>', re.S)


def page_specs(html_dir: Path) -> dict[str, dict]:
    """Label -> Vega-Lite spec of every chart in the HTML pages under ``html_dir``."""
    found: dict[str, dict] = {}
    for page in sorted(html_dir.rglob("*.html")):
        for label, spec in CHART.findall(page.read_text(encoding="utf-8")):
            found[label] = json.loads(spec)
    return found


def test_book_figure_specs_are_valid_vega_lite(built_book):
    book = built_book["dir"]
    specs = page_specs(book / "html")
    figures = {p.stem for p in (book / "figures").glob("fig-*.png")}
    assert len(figures) >= 20, sorted(figures)
    assert set(specs) == figures  # every exported figure is drawn in a page, and nothing else
    for label, spec in specs.items():
        try:
            charts.validate_spec(spec)
        except Exception as err:  # noqa: BLE001 - name the figure
            pytest.fail(f"{label}: invalid Vega-Lite spec: {err}")


def _chart(rows):
    return alt.Chart(charts.data(rows)).mark_bar().encode(x="gpus:Q", y="gpu:N", color="gpu:N")


def test_validate_spec_rejects_a_bad_encoding_and_a_bad_mark_property():
    good = _chart([{"gpu": "h100_sxm", "gpus": 8}]).to_dict(validate=False)
    charts.validate_spec(good)
    bad_type = {**good, "encoding": {**good["encoding"], "x": {"field": "gpus", "type": "quantitatve"}}}
    with pytest.raises(Exception, match="quantitatve"):
        charts.validate_spec(bad_type)
    with pytest.raises(Exception):
        charts.validate_spec({**good, "mark": {"type": "bar", "opacityy": 0.5}})


def test_figure_specs_validate_with_rows_and_as_the_empty_note(tmp_path, monkeypatch):
    monkeypatch.setenv(charts.FIGURES_ENV, str(tmp_path))
    full = charts.figure("fig-test-specs", _chart([{"gpu": "h100_sxm", "gpus": 8}]), [{"gpu": "h100_sxm", "gpus": 8}])
    empty = charts.figure("fig-test-empty", _chart([{"gpu": "h100_sxm", "gpus": 8}]), [])
    for bundle in (full, empty):
        charts.validate_spec(bundle.spec)
        assert page_specs_from(bundle.html()) == {bundle.label: json.loads(json.dumps(
            {k: v for k, v in bundle.spec.items() if k != "$schema"}))}


def page_specs_from(html: str) -> dict[str, dict]:
    return {label: json.loads(spec) for label, spec in CHART.findall(html)}


def test_gpu_names_go_only_on_channels_with_a_guide():
    """An xOffset (or tooltip, detail) on the gpu field has no legend: naming GPUs adds none there,
    so the spec stays valid; the colour legend and the x axis get the names."""
    rows = [{"gpu": "h100_sxm", "gpus": 8, "what": "a"}, {"gpu": "gb200", "gpus": 4, "what": "a"}]
    chart = alt.Chart(charts.data(rows)).mark_bar().encode(
        x="what:N", y="gpus:Q", xOffset="gpu:N", color="gpu:N", tooltip=["gpu:N", "gpus:Q"])
    spec = charts.name_gpus(chart.to_dict(validate=False))
    charts.validate_spec(spec)
    enc = spec["encoding"]
    assert "legend" not in enc["xOffset"] and all("legend" not in t for t in enc["tooltip"])
    assert '"GB200 NVL72"' in enc["color"]["legend"]["labelExpr"]
    axis = charts.name_gpus(alt.Chart(charts.data(rows)).mark_bar().encode(x="gpu:N", y="gpus:Q").to_dict())
    assert '"H100 SXM"' in axis["encoding"]["x"]["axis"]["labelExpr"]


#: A legend of a drawn chart (vl-convert's SVG): the groups after one ``role-legend`` mark.
_LEGEND = re.compile(r'class="mark-group role-legend"')
_LEGEND_LABEL = re.compile(r'role-legend-label"[^>]*>(?:<text[^>]*>([^<]*)</text>)+')


def legend_labels(svg: str) -> list[list[str]]:
    """The entry labels of each legend of a chart drawn as SVG, legend by legend."""
    return [_LEGEND_LABEL.findall(part) for part in _LEGEND.split(svg)[1:]]


def test_no_figure_draws_a_legend_twice(built_book):
    """Fig 9.3 showed its legend twice (a colour legend and a shape legend of the same entries):
    drawn as Vega draws it, no entry of a book figure appears in two legends."""
    import vl_convert as vlc

    specs = page_specs(built_book["dir"] / "html")
    twice = {}
    for label, spec in specs.items():
        seen: dict[str, int] = {}
        for i, labels in enumerate(legend_labels(vlc.vegalite_to_svg(spec))):
            for text in labels:
                if seen.setdefault(text, i) != i:
                    twice.setdefault(label, []).append(text)
    assert twice == {}


def test_legend_labels_finds_a_legend_drawn_twice():
    import vl_convert as vlc

    rows = [{"x": 1, "y": 2, "kind": "a"}, {"x": 2, "y": 3, "kind": "b"}]
    base = alt.Chart(charts.data(rows)).encode(x="x:Q", y="y:Q")
    merged = base.mark_point().encode(color="kind:N", shape="kind:N")
    split = base.mark_point().encode(color=alt.Color("kind:N", scale=alt.Scale(domain=["a", "b"])), shape="kind:N")
    assert legend_labels(vlc.vegalite_to_svg(merged.to_dict())) == [["a", "b"]]
    assert legend_labels(vlc.vegalite_to_svg(split.to_dict())) == [["a", "b"], ["a", "b"]]


#: Advance widths of DejaVu Sans (the charts' font), em; other characters 0.7 (capitals) or 0.6.
_DEJAVU = {**{d: 0.636 for d in "0123456789"}, "M": 0.863, "W": 0.989, "m": 0.974, "w": 0.818, ",": 0.318,
           ".": 0.318, " ": 0.318, "%": 0.95, "i": 0.278, "l": 0.278, "k": 0.579, "G": 0.775, "-": 0.361}
_AXIS_LABELS = re.compile(r'<g class="mark-text role-axis-label"[^>]*>(.*?)</g>', re.S)
_LABEL = re.compile(r'<text text-anchor="(\w+)" transform="translate\(([-\d.]+),([-\d.]+)\)"([^>]*)>([^<]*)</text>')


def touching_labels(svg: str, gap_px: float = 2.0) -> list[tuple[str, str]]:
    """Pairs of neighbouring labels on one line of an axis drawn in ``svg`` (vl-convert's) closer
    than ``gap_px``; labels Vega hides (opacity 0) do not count."""
    out = []
    for group in _AXIS_LABELS.findall(svg):
        lines: dict[int, list] = {}
        for anchor, x, y, attrs, text in _LABEL.findall(group):
            if 'opacity="0"' in attrs:
                continue
            size = float(re.search(r'font-size="([\d.]+)px"', attrs).group(1))
            w = size * sum(_DEJAVU.get(c, 0.7 if c.isupper() else 0.6) for c in text)
            left = float(x) - {"middle": w / 2, "end": w}.get(anchor, 0.0)
            lines.setdefault(round(float(y)), []).append((left, left + w, text, float(x)))
        for labels in lines.values():
            labels.sort()
            if len(labels) < 2 or max(a[3] for a in labels) - min(a[3] for a in labels) < 2:
                continue  # an axis Vega draws with no length
            out += [(a[2], b[2]) for a, b in zip(labels, labels[1:]) if b[0] < a[1] + gap_px]
    return out


def test_no_figure_prints_two_axis_labels_into_each_other(built_book):
    """Fig 6.2 printed "3k4k", the bus-bandwidth figure "10M100M", the loss curves "250300": on
    no axis of a book figure, drawn as Vega draws it, do two labels touch."""
    import vl_convert as vlc

    specs = page_specs(built_book["dir"] / "html")
    bad = {label: pairs for label, spec in specs.items() if (pairs := touching_labels(vlc.vegalite_to_svg(spec)))}
    assert bad == {}


def test_touching_labels_finds_vegas_own_log_ticks_meeting():
    import vl_convert as vlc

    counts = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 100000]
    rows = [{"n": c, "y": 1} for c in counts]
    x = alt.X("n:Q", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"))
    plain = alt.Chart(alt.Data(values=rows)).mark_point().encode(x=x, y="y:Q").properties(width=260)
    assert touching_labels(vlc.vegalite_to_svg(plain.to_dict())) != []  # Vega's own log ticks: "3k4k" or "50k100k"
    fixed = plain.encode(x=alt.X("n:Q", scale=alt.Scale(type="log"), axis=charts.count_axis(counts)))
    assert touching_labels(vlc.vegalite_to_svg(fixed.to_dict())) == []
