"""What-ifs in the HTML without a rebuild: controls bound to a chart as Vega-Lite parameters, and
the chart's cost and time recomputed in the browser from them.

A control is a Vega-Lite variable parameter (``alt.param``) bound to a range input
(``alt.binding_range``) or a checkbox; its value starts at the scenario's, so the PDF (drawn by
vl-convert from the same spec) and an untouched page show the scenario's numbers. The chart's
data carry what does not move with the controls; ``calculate`` transforms turn it into the
plotted fields with the formulas of :func:`scaletax.cost.run_costs`:

- with G the goodput (the reader's when they tick "use my goodput", else each case's own, the
  scale model's or the scenario's), days = days x G0 / G and scheduled GPU-hours and energy the
  same (the data carry them at G0, each case's goodput: ``days_work`` = days x G0 is the time the
  run trains); each end of the band has its own G0 (``goodput_for_low`` is the goodput at the
  low end of days, the high goodput: :func:`scaletax.model.plan.add_costs` pairs them so), and the
  reader's goodput replaces all three (theirs has no band);
- cost = GPU-hours x the price per GPU-hour of the case's GPU (a control per GPU) + MWh x the
  electricity price (a control; none when the prices include power, where the library adds no
  energy either);
- the band: the same formulas on the band's ends (low throughput gives the high end).

``tests/test_whatif.py`` evaluates these expressions in Vega's own engine (vl-convert) on a grid of
control values against :func:`scaletax.cost.run_costs`, and a browser test moves a control of a
page opened from disk. The page marks a changed value as the reader's and offers a reset
(:data:`scaletax.render.charts.WHATIF_JS`, part of the chart bundle).

Public API: :class:`Control`, :func:`params`, :func:`cost_time_data`, :func:`cost_time_transforms`,
:func:`bind_cost_time`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from scaletax import escape

if TYPE_CHECKING:
    import altair as alt

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
#: Fields of a cost-and-time row that move with goodput (at the row's goodput G0 in the data).
TIMED = ("days", "gpu_hours", "energy_mwh")
BANDS = ("", "_low", "_high")
#: The parameters of the goodput control: a checkbox ("use my goodput") and its value.
GOODPUT_YOURS, GOODPUT_VALUE = "goodput_yours", "goodput_value"


@dataclass(frozen=True)
class Control:
    """A range input: the Vega signal ``name``, the ``label`` shown beside it, the scenario's
    ``value`` (where it starts) and its range and step."""

    name: str
    label: str
    value: float
    lo: float
    hi: float
    step: float

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"control name {self.name!r}: use lowercase letters, digits and '_'")
        if not self.lo <= self.value <= self.hi or self.step <= 0:
            raise ValueError(f"control {self.name!r}: need lo <= value <= hi and step > 0 "
                             f"(got {self.lo}, {self.value}, {self.hi}, {self.step})")


def params(controls: Sequence[Control], goodput: float | None = None) -> list[alt.Parameter]:
    """The parameters of ``controls`` (range inputs), and, with ``goodput`` (the value the
    goodput slider starts at), a "use my goodput" checkbox and that slider."""
    import altair as alt

    out = [alt.param(name=c.name, value=c.value, bind=alt.binding_range(min=c.lo, max=c.hi, step=c.step, name=c.label))
           for c in controls]
    if goodput is not None:
        out.append(alt.param(name=GOODPUT_YOURS, value=False, bind=alt.binding_checkbox(name="use my goodput ")))
        out.append(alt.param(name=GOODPUT_VALUE, value=round(float(goodput), 2),
                             bind=alt.binding_range(min=0.3, max=1.0, step=0.01, name="my goodput ")))
    return out


#: The goodput each end of the band is computed at (``add_costs``: low days with high goodput).
GOODPUT_AT = {"": "goodput", "_low": "goodput_high", "_high": "goodput_low"}


def cost_time_data(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows with what the controls do not move: ``<field>_work<end>`` = field x the goodput
    of that end of the band (:data:`GOODPUT_AT`) for days, GPU-hours and energy (the time and
    resources the run trains for), and ``goodput_for<end>``; rows without a throughput are dropped."""
    out = []
    for r in rows:
        if not r.get("tps") or r.get("goodput") is None:
            continue
        row = dict(r)
        for b in BANDS:
            g = r[GOODPUT_AT[b]]
            row[f"goodput_for{b}"] = g
            for f in TIMED:
                row[f"{f}_work{b}"] = r[f + b] * g
        out.append(row)
    return out


def _goodput_expr(with_control: bool, end: str = "") -> str:
    own = f"datum.goodput_for{end}"
    return f"({GOODPUT_YOURS} ? {GOODPUT_VALUE} : {own})" if with_control else own


def _price_expr(prices: Mapping[str, str]) -> str:
    """The price per GPU-hour of the row's GPU: its control, else the row's scenario price."""
    expr = "datum.price"
    for gid, name in reversed(list(prices.items())):
        expr = f"(datum.gpu === {escape.expr_string(gid)} ? {name} : {expr})"
    return expr


def cost_time_transforms(prices: Mapping[str, str], electricity: str | None, goodput: bool = True,
                         cost_scale: float = 1e6, costs: bool = True) -> list[dict[str, str]]:
    """``calculate`` transforms (Vega-Lite dicts) that recompute days, GPU-hours, energy and cost
    (and their band ends) from :func:`cost_time_data`'s fields and the controls: ``prices`` maps
    GPU id -> price parameter, ``electricity`` the electricity-price parameter (None: the prices
    include power, no energy cost), ``goodput`` whether the goodput controls exist. Also
    ``cost_musd``, ``cost_low`` and ``cost_high``: cost / ``cost_scale`` (the cost-and-time
    figure's $ millions). Without ``costs`` (a time chart), days, GPU-hours and energy only."""
    out = [{"calculate": _goodput_expr(goodput, b), "as": f"goodput_plotted{b}"} for b in BANDS]
    for b in BANDS:
        for f in TIMED:
            out.append({"calculate": f"datum.{f}_work{b} / datum.goodput_plotted{b}", "as": f + b})
    if not costs:
        return out
    out.append({"calculate": _price_expr(prices), "as": "price_plotted"})
    for b in BANDS:
        energy = f" + datum.energy_mwh{b} * {electricity}" if electricity else ""
        out.append({"calculate": f"datum.gpu_hours{b} * datum.price_plotted{energy}", "as": f"cost_usd{b}"})
    out += [{"calculate": f"datum.cost_usd / {cost_scale!r}", "as": "cost_musd"},
            {"calculate": f"datum.cost_usd_low / {cost_scale!r}", "as": "cost_low"},
            {"calculate": f"datum.cost_usd_high / {cost_scale!r}", "as": "cost_high"}]
    return out


def bind_cost_time(chart: alt.TopLevelMixin, controls: Sequence[Control], prices: Mapping[str, str],
                   electricity: str | None, goodput: float | None, costs: bool = True) -> alt.TopLevelMixin:
    """``chart`` (built on :func:`cost_time_data` rows) with the controls' parameters and the
    transforms of :func:`cost_time_transforms` (on a faceted chart, at its top, so every panel
    uses them); ``costs`` False for a chart of time only."""
    known = {c.name for c in controls}
    missing = [n for n in [*prices.values(), *([electricity] if electricity else [])] if n not in known]
    if missing:
        raise ValueError(f"no control named {', '.join(missing)}")
    chart = chart.add_params(*params(controls, goodput))
    return chart.transform_calculate(**{t["as"]: t["calculate"] for t in
                                        cost_time_transforms(prices, electricity, goodput is not None,
                                                             costs=costs)})


__all__ = ["BANDS", "Control", "GOODPUT_AT", "GOODPUT_VALUE", "GOODPUT_YOURS", "TIMED", "bind_cost_time", "cost_time_data",
           "cost_time_transforms", "params"]
