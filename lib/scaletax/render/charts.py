"""Altair theme and the book's figure renderer.

One execution gives both renderings of a chart: interactive Vega-Lite in the HTML (the
``text/html`` output, drawn by a vendored vega-embed bundle that ships in ``_static``)
and a static PNG (``image/png``, from vl-convert) that the LaTeX builder puts in the PDF.
myst-nb picks the right mime type per builder.

Each figure also lands in ``$SCALETAX_FIGURES_DIR`` (default ``./figures``) as
``<label>.png`` and ``<label>.csv`` (the plotted rows), so readers can reuse the data.

A figure's spec is serialized once without altair's schema validation (``to_dict(validate=False)``,
20-130 ms per figure); :func:`validate_spec` checks a spec against the Vega-Lite schema, and
``tests/test_render_specs.py`` runs it on every figure of a built book, so a bad spec still fails
the test suite. altair itself is imported on first use (a chapter with tables only, the
summary, never loads it).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import vl_convert as vlc

from scaletax import escape

if TYPE_CHECKING:
    import altair as alt

FIGURES_ENV = "SCALETAX_FIGURES_DIR"
#: File name of the vendored Vega/Vega-Lite/vega-embed bundle in the book's _static.
VEGA_BUNDLE = "scaletax-vega.js"
PNG_SCALE = 2.0

#: Colour per GPU id, shared by every chapter so a GPU keeps its colour across the book.
#: Okabe & Ito's colour-blind safe palette (Okabe and Ito 2008, "Color Universal Design"), with
#: two of Paul Tol's muted colours (Tol 2021, "Colour Schemes") for the GPUs past its eight; the
#: six GPUs of the default scenario stay apart under simulated deuteranopia, protanopia and
#: tritanopia (tests/test_render.py checks that).
GPU_COLORS = {
    "h100_sxm": "#0072B2",      # blue
    "h200_sxm": "#56B4E9",      # sky blue
    "b200": "#E69F00",          # orange
    "gb200": "#D55E00",         # vermillion
    "gb300": "#CC79A7",         # reddish purple
    "rubin": "#009E73",         # bluish green
    "a100_sxm_80gb": "#999999", # grey
    "h800_sxm": "#000000",      # black
    "h20": "#DDCC77",           # Tol sand
    "b300": "#882255",          # Tol wine
}

#: What-ifs (:mod:`scaletax.render.whatif`): under a chart with controls (parameters bound to
#: inputs), a line that says whether the plotted values are the scenario's or the reader's, with the
#: changed controls marked (class ``scaletax-yours``) and a button that resets them. Each drawn view
#: is kept in ``window.__scaletaxViews`` under its figure label (the browser tests read it).
WHATIF_JS = """
const whatif = (host, spec, view) => {
  const bound = (spec.params || []).filter((p) => p.bind);
  if (!bound.length) return;
  const start = {};
  bound.forEach((p) => { start[p.name] = p.value; });
  const bar = document.createElement("div");
  bar.className = "scaletax-whatif";
  const note = document.createElement("span");
  note.className = "scaletax-whatif-note";
  const reset = document.createElement("button");
  reset.type = "button";
  reset.className = "scaletax-whatif-reset";
  reset.textContent = "Reset to the scenario's values";
  const name = (p) => String(p.bind.name || p.name).trim();
  const update = () => {
    const yours = bound.filter((p) => view.signal(p.name) !== start[p.name]);
    host.classList.toggle("scaletax-whatif-yours", yours.length > 0);
    bound.forEach((p) => {
      const input = host.querySelector('.vega-bindings [name="' + p.name + '"]');
      const row = input && input.closest(".vega-bind");
      if (row) row.classList.toggle("scaletax-yours", yours.includes(p));
    });
    note.textContent = yours.length
      ? "Your values, not the scenario's: " + yours.map((p) => name(p) + " " + view.signal(p.name)).join("; ") + "."
      : "The scenario's values: move a control to try your own.";
    reset.hidden = !yours.length;
  };
  reset.addEventListener("click", () => {
    bound.forEach((p) => view.signal(p.name, start[p.name]));
    view.runAsync().then(update);
  });
  bound.forEach((p) => view.addSignalListener(p.name, update));
  bar.append(note, reset);
  host.appendChild(bar);
  update();
};
"""

_BUNDLE_SNIPPET = """
window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;
window.__scaletaxViews = window.__scaletaxViews || {};
""" + WHATIF_JS + """
const queued = Array.isArray(window.__scaletaxCharts) ? window.__scaletaxCharts : [];
const draw = (item) => vegaEmbed(item[0], item[1], {actions: false, renderer: "svg"})
  .then((res) => {
    const host = document.querySelector(item[0]);
    window.__scaletaxViews[(host && host.dataset.label) || item[0]] = res.view;
    if (host) whatif(host, item[1], res.view);
  })
  .catch((err) => console.warn("chart " + item[0] + ": " + err));
window.__scaletaxCharts = {push: draw};
queued.forEach(draw);
"""


def vega_bundle() -> str:
    """The JavaScript that draws every chart offline (Vega, Vega-Lite, vega-embed).

    A classic script, not an ES module: browsers refuse module scripts from ``file://``, so a
    book opened from disk would draw nothing. vl-convert's bundle has no import or export
    statements; wrapped in a strict-mode function it keeps the module's scope and semantics.
    """
    return '(function () {\n"use strict";\n' + vlc.javascript_bundle(snippet=_BUNDLE_SNIPPET) + "\n})();\n"


def _theme() -> dict:
    font = "DejaVu Sans, Helvetica, Arial, sans-serif"
    return {
        "config": {
            "font": font,
            "view": {"continuousWidth": 520, "continuousHeight": 300, "stroke": None},
            "axis": {"labelFontSize": 11, "titleFontSize": 12, "grid": True, "gridOpacity": 0.4},
            # a category axis draws no grid: its lines would cross a heat map's cells and labels
            "axisBand": {"grid": False},
            "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
            "title": {"fontSize": 13, "anchor": "start"},
            "background": "white",
        }
    }


def setup() -> None:
    """Register and enable the book theme (call once per notebook)."""
    import altair as alt

    alt.theme.register("scaletax", enable=True)(_theme)


#: Where a number written on a cell of a sequential colour scheme changes colour, as a share of
#: the way along the scheme, and its colour from there up. At that point the cell's relative
#: luminance is about 0.18, where black and white text both have a WCAG 2 contrast of 4.5 or more
#: (the AA level for text); on either side the colour used keeps 4.5 or more (tests/test_render.py
#: reads the schemes from the Vega bundle). Viridis is light at its top, the others dark.
TEXT_SWITCH: dict[str, tuple[float, str]] = {"viridis": (0.43, "black"), "orangered": (0.755, "white"),
                                             "blues": (0.74, "white")}


def text_color(scheme: str, field: str, low: float, high: float, log: bool = False) -> dict:
    """The colour of the number written on each cell of a ``scheme`` colour scale running ``low``
    to ``high`` (``log``: a log scale) from field ``field``: :data:`TEXT_SWITCH`'s."""
    import altair as alt

    at, above = TEXT_SWITCH[scheme]
    cut = low * (high / low) ** at if log else low + at * (high - low)
    below = "white" if above == "black" else "black"
    return alt.condition(f"datum[{field!r}] >= {cut!r}", alt.value(above), alt.value(below))


def count_axis(counts: Iterable[float], min_ratio: float = 3.5) -> alt.Axis:
    """A log axis of GPU counts ticked at counts plotted, no two closer than ``min_ratio``
    (Vega's own log ticks print "3k4k" and "20k30k" where labels meet), written short:
    "1k" for 1,024, "16k" for 16,384, "100k" for 100,000."""
    import altair as alt

    ticks: list[float] = []
    for c in sorted(set(counts)):
        if not ticks or c >= ticks[-1] * min_ratio:
            ticks.append(c)
    return alt.Axis(values=ticks, labelExpr="datum.value % 1024 === 0 ? (datum.value / 1024) + 'k' : "
                                            "format(datum.value, '~s')")


def gpu_color_scale(ids: Iterable[str]) -> alt.Scale:
    import altair as alt

    ids = list(dict.fromkeys(ids))
    return alt.Scale(domain=ids, range=[GPU_COLORS.get(i, "#555555") for i in ids])


def count_x(field: str, counts: Sequence[int], title: str = "GPUs") -> alt.X:
    """A log-scale x channel over GPU counts, ticked at ``counts`` and labelled "1k", "16k", "100k"
    (the scenario's cluster sizes do not crowd the axis the way 1,024 ... 100,000 do)."""
    import altair as alt

    vals = sorted(set(int(c) for c in counts))
    return alt.X(f"{field}:Q", title=title, scale=alt.Scale(type="log", domain=[vals[0], vals[-1]], nice=False),
                 axis=alt.Axis(values=vals, labelExpr="datum.value >= 1000 ? format(datum.value / 1000, ',.0f') + 'k' "
                                                      ": format(datum.value, ',')", grid=True, labelAngle=-45,
                               labelOverlap=False))


def gpu_label(gpu_id: str) -> str:
    """The GPU's short catalog name ("H100 SXM") for charts; the id itself if not in the catalog."""
    from scaletax.inputs import hardware

    try:
        return hardware.get(gpu_id).label
    except (KeyError, ValueError):
        return gpu_id


#: Where a channel draws its values as text: axis labels, facet headers or legend labels.
#: Channels with no guide of their own (xOffset, yOffset, detail, tooltip, order, text, x2, ...)
#: are left alone: Vega-Lite's schema allows no guide property on them.
_GUIDE = {"x": "axis", "y": "axis", "row": "header", "column": "header", "facet": "header",
          **{c: "legend" for c in ("color", "fill", "stroke", "opacity", "fillOpacity", "strokeOpacity",
                                   "strokeWidth", "strokeDash", "shape", "size", "angle")}}
GPU_FIELD = "gpu"


def _label_expr(ids: Sequence[str]) -> str:
    """A Vega expression mapping each GPU id to its name (other values pass through)."""
    expr = "datum.label"
    for gid in reversed(list(ids)):
        expr = f"datum.value === {escape.expr_string(gid)} ? {escape.expr_string(gpu_label(gid))} : ({expr})"
    return expr


def name_gpus(spec: Any, ids: Sequence[str] | None = None) -> Any:
    """Label GPUs by name wherever a chart encodes the ``gpu`` id field (legends, axes, facet
    headers); the data, colours and sort orders keep the ids. Returns the changed spec."""
    if ids is None:
        ids = sorted(_gpu_values(spec))
    if not ids:
        return spec

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            enc = node.get("encoding")
            if isinstance(enc, dict):
                for channel, e in enc.items():
                    if isinstance(e, dict) and e.get("field") == GPU_FIELD and channel in _GUIDE:
                        guide = _GUIDE[channel]
                        if e.get(guide, {}) is None:  # guide switched off
                            continue
                        e[guide] = {**e.get(guide, {}), "labelExpr": _label_expr(ids)}
            facet = node.get("facet")
            if isinstance(facet, dict):
                for channel, e in ([("facet", facet)] if "field" in facet else facet.items()):
                    if isinstance(e, dict) and e.get("field") == GPU_FIELD:
                        e["header"] = {**(e.get("header") or {}), "labelExpr": _label_expr(ids)}
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec)
    return spec


def _gpu_values(spec: dict) -> set[str]:
    """GPU ids in the chart's inline data."""
    found: set[str] = set()
    sets = list((spec.get("datasets") or {}).values())
    if isinstance(spec.get("data"), dict) and "values" in spec["data"]:
        sets.append(spec["data"]["values"])
    for rows in sets:
        for r in rows:
            if isinstance(r, dict) and isinstance(r.get(GPU_FIELD), str):
                found.add(r[GPU_FIELD])
    return found


def _compound(spec: dict) -> bool:
    return any(k in spec for k in ("facet", "hconcat", "vconcat", "concat", "repeat")) or (
        "encoding" in spec and any(k in spec["encoding"] for k in ("row", "column", "facet")))


def responsive(spec: dict) -> dict:
    """The HTML variant of a chart: a single or layered view takes the page's width
    (``width: "container"``, so it fits a 375 px phone and fills a desktop column); compound
    charts keep their size and the page's CSS scales them down to fit."""
    if _compound(spec):
        return spec
    out = dict(spec)
    out["width"] = "container"
    out["autosize"] = {"type": "fit-x", "contains": "padding"}
    return out


class Figure:
    """A drawn figure: its label, the Vega-Lite spec the page draws and the PNG. A cell that ends
    with one shows only its name (text/plain): the page shows the figure once, through
    :class:`ChartBundle` (glue), and the notebook holds its renderings once."""

    def __init__(self, label: str, spec: dict, png: bytes):
        self.label = label
        self.spec = spec
        self.png = png

    def html(self) -> str:
        div = f"scaletax-{self.label}"
        spec = {k: v for k, v in self.spec.items() if k != "$schema"}  # no URL in the page
        return (
            f'<div id="{escape.html_text(div)}" class="scaletax-chart" data-label="{escape.html_text(self.label)}"></div>'
            f"<script>(window.__scaletaxCharts = window.__scaletaxCharts || [])"
            f'.push([{escape.script_json("#" + div)}, {escape.script_json(spec)}]);</script>'
        )

    def __repr__(self) -> str:  # stable text/plain (no memory address)
        return f"Figure {self.label}"


class ChartBundle(Figure):
    """A figure with both renderings as its display (``_repr_mimebundle_``), what :func:`figure`
    glues: myst-nb puts the HTML in the web page and the PNG in the PDF."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "image/png": self.png}


def _figures_dir() -> Path:
    path = Path(os.environ.get(FIGURES_ENV, "figures"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    """Rows (dicts with the same keys) to CSV, column order from the first row. Text cells (and
    headers) that a spreadsheet would read as a formula are neutralized (:func:`scaletax.escape.csv_cell`);
    a :class:`~scaletax.escape.Markup` cell (a link, a citation) is written as its plain text."""
    if not rows:
        raise ValueError(f"{path.name}: no rows to write")
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="", encoding="utf-8") as fh:
        fh.write(escape.csv_line([escape.csv_cell(c) for c in cols]))
        for r in rows:
            fh.write(escape.csv_line([_plain(r.get(c)) for c in cols]))


def _plain(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        return repr(round(v, 10))
    if hasattr(v, "item"):  # numpy scalar
        return _plain(v.item())
    if isinstance(v, str):  # a link or citation cell as its plain text, no text as a formula
        return escape.csv_cell(escape.plain(v))
    return v


def figure(label: str, chart: alt.TopLevelMixin, rows: Sequence[dict], *,
           empty: str = "Nothing to plot for this scenario.") -> Figure:
    """Render ``chart`` (built on ``rows``), save PNG + CSV, and glue it under ``label``.

    With no rows (nothing applies to the scenario), the figure holds the ``empty`` note, so
    the numbered figure and its caption stay in place.

    In the page, place it with a ``{glue:figure}`` directive naming ``label``; the
    directive's ``:name:`` makes it a numbered, referencable figure.
    """
    import altair as alt
    from myst_nb import glue

    if not rows:  # a scenario where nothing applies: say so in place of the chart
        rows = [{"note": empty}]
        chart = alt.Chart(data(rows)).mark_text(fontSize=14).encode(text="note:N").properties(
            width=520, height=60)
    spec = name_gpus(chart.to_dict(validate=False))  # validated by tests (validate_spec)
    png = vlc.vegalite_to_png(spec, scale=PNG_SCALE)  # fixed width: the PDF page and the export
    out = _figures_dir()
    (out / f"{label}.png").write_bytes(png)
    write_csv(out / f"{label}.csv", [{k: _plain(v) for k, v in r.items()} for r in rows])
    drawn = Figure(label, responsive(spec), png)
    glue(label, ChartBundle(drawn.label, drawn.spec, drawn.png), display=False)
    return drawn


def data(rows: Sequence[dict]) -> alt.Data:
    """Inline chart data from plain rows (numpy scalars converted)."""
    import altair as alt

    return alt.Data(values=[{k: _plain_json(v) for k, v in r.items()} for r in rows])


def _plain_json(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v


def validate_spec(spec: dict) -> None:
    """Check a chart's Vega-Lite spec (``to_dict`` output) against the Vega-Lite schema altair
    ships; raises ``jsonschema.ValidationError`` (via altair) naming the first bad property."""
    import altair as alt

    alt.TopLevelSpec.validate(spec)
