"""Altair theme and the book's figure renderer.

One execution gives both renderings of a chart: interactive Vega-Lite in the HTML (the
``text/html`` output, drawn by a vendored vega-embed bundle that ships in ``_static``)
and a static PNG (``image/png``, from vl-convert) that the LaTeX builder puts in the PDF.
myst-nb picks the right mime type per builder.

Each figure also lands in ``$SCALETAX_FIGURES_DIR`` (default ``./figures``) as
``<label>.png`` and ``<label>.csv`` (the plotted rows), so readers can reuse the data.
"""
from __future__ import annotations

import csv
import html
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import altair as alt
import vl_convert as vlc

FIGURES_ENV = "SCALETAX_FIGURES_DIR"
#: File name of the vendored Vega/Vega-Lite/vega-embed bundle in the book's _static.
VEGA_BUNDLE = "scaletax-vega.js"
PNG_SCALE = 2.0

#: Colour per GPU id, shared by every chapter so a GPU keeps its colour across the book.
GPU_COLORS = {
    "a100_sxm_80gb": "#9e9e9e",
    "h100_sxm": "#4e79a7",
    "h200_sxm": "#76b7b2",
    "h800_sxm": "#8cd17d",
    "h20": "#b6992d",
    "b200": "#f28e2b",
    "gb200": "#e15759",
    "b300": "#ff9da7",
    "gb300": "#b07aa1",
    "rubin": "#59a14f",
}

_BUNDLE_SNIPPET = """
window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;
const queued = Array.isArray(window.__scaletaxCharts) ? window.__scaletaxCharts : [];
const draw = (item) => vegaEmbed(item[0], item[1], {actions: false, renderer: "svg"})
  .catch((err) => console.warn("chart " + item[0] + ": " + err));
window.__scaletaxCharts = {push: draw};
queued.forEach(draw);
"""


def vega_bundle() -> str:
    """The JavaScript that draws every chart offline (Vega, Vega-Lite, vega-embed)."""
    return vlc.javascript_bundle(snippet=_BUNDLE_SNIPPET)


def _theme() -> dict:
    font = "DejaVu Sans, Helvetica, Arial, sans-serif"
    return {
        "config": {
            "font": font,
            "view": {"continuousWidth": 520, "continuousHeight": 300, "stroke": None},
            "axis": {"labelFontSize": 11, "titleFontSize": 12, "grid": True, "gridOpacity": 0.4},
            "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
            "title": {"fontSize": 13, "anchor": "start"},
            "background": "white",
        }
    }


def setup() -> None:
    """Register and enable the book theme (call once per notebook)."""
    alt.theme.register("scaletax", enable=True)(_theme)


def gpu_color_scale(ids: Iterable[str]) -> alt.Scale:
    ids = list(dict.fromkeys(ids))
    return alt.Scale(domain=ids, range=[GPU_COLORS.get(i, "#555555") for i in ids])


class ChartBundle:
    """A chart with both renderings; ``_repr_mimebundle_`` feeds myst-nb's glue."""

    def __init__(self, label: str, spec: dict, png: bytes):
        self.label = label
        self.spec = spec
        self.png = png

    def html(self) -> str:
        div = f"scaletax-{self.label}"
        spec = {k: v for k, v in self.spec.items() if k != "$schema"}  # no URL in the page
        spec = json.dumps(spec, sort_keys=True).replace("</", "<\\/")
        return (
            f'<div id="{html.escape(div)}" class="scaletax-chart" data-label="{html.escape(self.label)}"></div>'
            f"<script>(window.__scaletaxCharts = window.__scaletaxCharts || [])"
            f'.push(["#{div}", {spec}]);</script>'
        )

    def __repr__(self) -> str:  # stable text/plain (no memory address)
        return f"Figure {self.label}"

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": self.html(), "image/png": self.png}


def _figures_dir() -> Path:
    path = Path(os.environ.get(FIGURES_ENV, "figures"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    """Rows (dicts with the same keys) to CSV, column order from the first row."""
    if not rows:
        raise ValueError(f"{path.name}: no rows to write")
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [k for k in r if k not in cols]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _plain(v) for k, v in r.items()})


def _plain(v: Any) -> Any:
    if isinstance(v, float):
        return repr(round(v, 10))
    if hasattr(v, "item"):  # numpy scalar
        return _plain(v.item())
    return v


def figure(label: str, chart: alt.TopLevelMixin, rows: Sequence[dict], *,
           empty: str = "Nothing to plot for this scenario.") -> ChartBundle:
    """Render ``chart`` (built on ``rows``), save PNG + CSV, and glue it under ``label``.

    With no rows (nothing applies to the scenario), the figure holds the ``empty`` note, so
    the numbered figure and its caption stay in place.

    In the page, place it with a ``{glue:figure}`` directive naming ``label``; the
    directive's ``:name:`` makes it a numbered, referencable figure.
    """
    from myst_nb import glue

    if not rows:  # a scenario where nothing applies: say so in place of the chart
        rows = [{"note": empty}]
        chart = alt.Chart(data(rows)).mark_text(fontSize=14).encode(text="note:N").properties(
            width=520, height=60)
    spec = chart.to_dict()
    png = vlc.vegalite_to_png(spec, scale=PNG_SCALE)
    out = _figures_dir()
    (out / f"{label}.png").write_bytes(png)
    write_csv(out / f"{label}.csv", [{k: _plain(v) for k, v in r.items()} for r in rows])
    bundle = ChartBundle(label, spec, png)
    glue(label, bundle, display=False)
    return bundle


def data(rows: Sequence[dict]) -> alt.Data:
    """Inline chart data from plain rows (numpy scalars converted)."""
    return alt.Data(values=[{k: _plain_json(v) for k, v in r.items()} for r in rows])


def _plain_json(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
