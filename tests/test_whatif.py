"""What-ifs in the HTML: the Vega expressions a chart recomputes its cost and time with, evaluated
in Vega's own engine (vl-convert) on a grid of control values against the library's Python
(cost.run_costs), and a page opened from disk whose control moves the plotted number to the
library's value, marks it as the reader's and resets."""
from __future__ import annotations

import itertools
import json
import math

import altair as alt
import pytest
import vl_convert as vlc

from conftest import require_tools
from scaletax.model import cost
from scaletax.chapters import decision as d
from scaletax.render import charts, whatif
from scaletax.report import chapters as toc
from scaletax.report.scenario import resolve

GPUS = ("h100_sxm", "b200", "gb200")


def _plan(*overrides):
    return d.Plan.from_params(**toc.chapter("decision").parameters(resolve(overrides=list(overrides))))


def _rows(plan):
    """Cost-and-time rows as the decision chapter makes them (decision.economics), at made-up
    throughputs: no search needed."""
    rows = []
    for mid, n in (("megatron_1t", 16384), ("kimi_k2", 100_000)):
        for i, gid in enumerate(GPUS):
            tps = 300.0 * (i + 1) * (3 if mid == "kimi_k2" else 1)
            rows.append({"model": mid, "model_name": mid, "gpu": gid, "label": gid, "gpus": n, "tps": tps,
                         "tps_low": 0.85 * tps, "tps_high": 1.1 * tps, "price": plan.price(gid),
                         "price_basis": plan.price_basis(gid), "announced": False})
    return whatif.cost_time_data(d.economics(rows, plan))


def _controls(plan):
    ctl = [whatif.Control(f"price_{g}", f"{g} $/GPU-hour ", plan.price(g), 0.5, 12.0, 0.05) for g in GPUS]
    ctl.append(whatif.Control("usd_per_mwh", "electricity $/MWh ", plan.usd_per_mwh, 0.0, 400.0, 5.0))
    return ctl


def _chart(plan, rows, electricity="usd_per_mwh"):
    pts = alt.Chart(charts.data(rows)).mark_point(filled=True).encode(x="days:Q", y="cost_musd:Q", color="gpu:N")
    return whatif.bind_cost_time(pts, _controls(plan), {g: f"price_{g}" for g in GPUS}, electricity,
                                 goodput=float(plan.goodput_at("megatron_1t", 16384)))


def _evaluate(spec: dict, values: dict, fields: tuple[str, ...]) -> list[dict[str, float]]:
    """The spec's transforms run by Vega (vl-convert's engine) with its parameters at ``values``:
    each row's ``fields``, read back from a text mark at full precision."""
    params = [{"name": p["name"], "value": values.get(p["name"], p["value"])} for p in spec["params"]]
    data = spec["datasets"][spec["data"]["name"]] if "datasets" in spec else spec["data"]["values"]
    probe = {"$schema": spec["$schema"], "params": params, "data": {"values": data},
             "transform": [*spec["transform"],
                           {"calculate": "''" + "".join(f" + '|' + datum.{f}" for f in fields), "as": "probe"},
                           {"window": [{"op": "row_number", "as": "probe_row"}]}],
             "mark": "text", "encoding": {"text": {"field": "probe", "type": "nominal"},
                                          "y": {"field": "probe_row", "type": "ordinal"}}}
    texts = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("role") == "mark" and node.get("marktype") == "text":
                texts.extend(item["text"] for item in node["items"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(vlc.vegalite_to_scenegraph(probe))
    out = [dict(zip(fields, map(float, t.split("|")[1:]))) for t in texts]
    assert len(out) == len(data)
    return out


def _library(plan, row, prices, usd_per_mwh, good=None):
    """cost.run_costs for the row at these control values (the book's Python): the middle, the
    fast and the slow end, at the reader's goodput ``good`` or, without one, at the row's goodput
    of each end (plan.add_costs: high throughput with high goodput)."""
    econ = cost.Economics(usd_per_gpu_hour=prices[row["gpu"]], utilization=plan.utilization, pue=plan.pue,
                          usd_per_mwh=usd_per_mwh)
    w = plan.system_w(row["gpu"])
    return [cost.run_costs(plan.tokens, row[k], row["gpus"], w, econ, goodput=row[gk] if good is None else good)
            for k, gk in (("tps", "goodput"), ("tps_high", "goodput_high"), ("tps_low", "goodput_low"))]


FIELDS = ("days", "days_low", "days_high", "gpu_hours", "energy_mwh", "cost_usd", "cost_usd_low", "cost_usd_high",
          "cost_musd")


def test_untouched_controls_plot_the_librarys_numbers():
    """At the scenario's values (what the PDF and an untouched page show) the browser's numbers are
    the decision chapter's."""
    plan = _plan()
    rows = _rows(plan)
    got = _evaluate(_chart(plan, rows).to_dict(), {}, FIELDS)
    for r, g in zip(rows, got):
        for f in FIELDS[:-1]:
            assert g[f] == pytest.approx(r[f], rel=1e-12), f
        assert g["cost_musd"] == pytest.approx(r["cost_usd"] / 1e6, rel=1e-12)


@pytest.mark.parametrize("price_b200,usd_per_mwh,mine", list(itertools.product((0.5, 3.2, 11.0), (0.0, 80.0, 395.0),
                                                                                  (None, 0.55, 1.0))))
def test_vega_expressions_are_the_librarys_formulas_on_a_grid(price_b200, usd_per_mwh, mine):
    plan = _plan()
    rows = _rows(plan)
    values = {"price_b200": price_b200, "usd_per_mwh": usd_per_mwh, "goodput_yours": mine is not None,
              "goodput_value": mine if mine is not None else 0.9}
    got = _evaluate(_chart(plan, rows).to_dict(), values, FIELDS)
    prices = {g: plan.price(g) for g in GPUS} | {"b200": price_b200}
    for r, g in zip(rows, got):
        mid, fast, slow = _library(plan, r, prices, usd_per_mwh, mine)
        assert g["days"] == pytest.approx(mid["days"], rel=1e-12)
        assert (g["days_low"], g["days_high"]) == pytest.approx((fast["days"], slow["days"]), rel=1e-12)
        assert g["gpu_hours"] == pytest.approx(mid["gpu_hours"], rel=1e-12)
        assert g["energy_mwh"] == pytest.approx(mid["energy_mwh"], rel=1e-12)
        assert g["cost_usd"] == pytest.approx(mid["cost_usd"], rel=1e-12)
        assert (g["cost_usd_low"], g["cost_usd_high"]) == pytest.approx((fast["cost_usd"], slow["cost_usd"]), rel=1e-12)


def test_all_in_prices_have_no_electricity_control_and_add_no_energy():
    plan = _plan("economics.price_includes_power=true")
    rows = _rows(plan)
    got = _evaluate(_chart(plan, rows, electricity=None).to_dict(), {"price_gb200": 6.0}, ("cost_usd",))
    for r, g in zip(rows, got):
        econ_price = 6.0 if r["gpu"] == "gb200" else plan.price(r["gpu"])
        assert g["cost_usd"] == pytest.approx(r["gpu_hours"] * econ_price, rel=1e-12)


def test_controls_are_checked():
    with pytest.raises(ValueError, match="need lo <= value <= hi"):
        whatif.Control("price_b200", "B200", 20.0, 0.5, 12.0, 0.05)
    with pytest.raises(ValueError, match="lowercase letters"):
        whatif.Control("price-b200", "B200", 2.0, 0.5, 12.0, 0.05)
    plan = _plan()
    pts = alt.Chart(charts.data(_rows(plan))).mark_point()
    with pytest.raises(ValueError, match="no control named price_h20"):
        whatif.bind_cost_time(pts, _controls(plan), {"h20": "price_h20"}, "usd_per_mwh", None)


@pytest.mark.browser
def test_a_page_opened_from_disk_moves_the_plotted_number_marks_it_and_resets(tmp_path):
    """A chart with controls on a page opened from disk (file://): moving B200's price slider moves
    the plotted cost of the B200 case to the library's value, marks the value as the reader's,
    and the reset button brings back the scenario's."""
    require_tools("chromium")
    from playwright.sync_api import sync_playwright

    from test_browser import ARGS, CHROMIUM

    plan = _plan()
    rows = _rows(plan)
    spec = charts.name_gpus(_chart(plan, rows).to_dict(validate=False))
    fig = charts.Figure("fig-test-whatif", charts.responsive(spec), b"")
    (tmp_path / charts.VEGA_BUNDLE).write_text(charts.vega_bundle(), encoding="utf-8")
    css = (charts.__file__.rsplit("/lib/", 1)[0] + "/book/_static/scaletax.css")
    (tmp_path / "scaletax.css").write_text(open(css, encoding="utf-8").read(), encoding="utf-8")
    (tmp_path / "index.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="scaletax.css">'
        f'<script defer src="{charts.VEGA_BUNDLE}"></script></head><body>{fig.html()}</body></html>', encoding="utf-8")
    b200 = next(i for i, r in enumerate(rows) if r["gpu"] == "b200" and r["model"] == "megatron_1t")
    read = ("() => { const v = window.__scaletaxViews['fig-test-whatif']; for (let i = 0; i < 20; i++) { "
            "for (const name of ['data_' + i, 'source_' + i]) { let rows = null; try { rows = v.data(name); } "
            f"catch (e) {{ continue; }} if (rows && rows.length && 'cost_musd' in rows[0]) return rows[{b200}].cost_musd; }} }} "
            "return null; }")
    labels = ("() => [...document.querySelectorAll('div.scaletax-chart svg [aria-roledescription=point]')]"
              ".map(e => e.getAttribute('aria-label')).join('|')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto((tmp_path / "index.html").as_uri())
        page.wait_for_function("() => window.__scaletaxViews && window.__scaletaxViews['fig-test-whatif']")
        assert page.evaluate(read) == pytest.approx(rows[b200]["cost_usd"] / 1e6, rel=1e-12)
        assert "scenario's values" in page.inner_text(".scaletax-whatif-note")
        before = page.evaluate(labels)
        slider = page.locator('.vega-bindings input[name="price_b200"]')
        slider.evaluate("(el) => { el.value = '3.2'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
        page.wait_for_function(f"() => ({read})() !== {json.dumps(rows[b200]['cost_usd'] / 1e6)}")
        prices = {g: plan.price(g) for g in GPUS} | {"b200": 3.2}
        expect = _library(plan, rows[b200], prices, plan.usd_per_mwh)[0]["cost_usd"] / 1e6
        assert page.evaluate(read) == pytest.approx(expect, rel=1e-12)
        assert page.evaluate(labels) != before  # the drawn point moved
        assert page.locator(".vega-bind.scaletax-yours").count() == 1
        note = page.inner_text(".scaletax-whatif-note")
        assert note.startswith("Your values, not the scenario's") and "3.2" in note
        page.click(".scaletax-whatif-reset")
        page.wait_for_function(f"() => Math.abs(({read})() - {rows[b200]['cost_usd'] / 1e6!r}) < 1e-9")
        assert page.locator(".vega-bind.scaletax-yours").count() == 0
        assert not page.locator(".scaletax-whatif-reset").is_visible()
        page.screenshot(path=str(tmp_path / "whatif.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert math.isfinite(expect)


def test_the_decision_charts_controls_start_at_the_scenarios_values():
    """The cost-and-time figure's controls: one price per GPU at the scenario's price, the
    electricity price, the goodput of the scenario's cluster; none for electricity with all-in
    prices (the library adds no energy either)."""
    plan = _plan()
    rows = _rows(plan)
    wi = d.cost_time_controls(plan, rows)
    byname = {c.name: c for c in wi["controls"]}
    assert wi["prices"] == {g: f"price_{g}" for g in GPUS}
    for g in GPUS:
        assert byname[f"price_{g}"].value == plan.price(g)
    assert byname["usd_per_mwh"].value == plan.usd_per_mwh and wi["electricity"] == "usd_per_mwh"
    assert wi["goodput"] == pytest.approx(float(plan.goodput_at("megatron_1t", plan.cluster_gpus)))
    assert d.cost_time_controls(_plan("economics.price_includes_power=true"), rows)["electricity"] is None


@pytest.mark.parametrize("mine", [None, 0.42, 0.97])
def test_a_time_chart_recomputes_days_at_the_readers_goodput(mine):
    """The days-by-size figure carries the goodput control only: days and their band at the
    reader's goodput (or each size's own ends of the band) are the library's."""
    plan = _plan()
    rows = _rows(plan)
    chart = whatif.bind_cost_time(alt.Chart(charts.data(rows)).mark_point().encode(x="gpus:Q", y="days:Q"), [], {},
                                  None, 0.9, costs=False)
    spec = chart.to_dict()
    assert not any(t["as"].startswith("cost") for t in spec["transform"])
    got = _evaluate(spec, {"goodput_yours": mine is not None, "goodput_value": mine or 0.9},
                    ("days", "days_low", "days_high"))
    for r, g in zip(rows, got):
        mid, fast, slow = _library(plan, r, {x: plan.price(x) for x in GPUS}, plan.usd_per_mwh, mine)
        assert (g["days"], g["days_low"], g["days_high"]) == pytest.approx(
            (mid["days"], fast["days"], slow["days"]), rel=1e-12)


@pytest.mark.parametrize("penalty", [0.0, 7.0, 36.0, 60.0])
def test_the_fp4_penalty_control_is_the_librarys_time_ratio(penalty):
    """The precision chapter's FP4 figure: the point the penalty control places is
    precision.time_ratio of the published pair, evaluated by Vega."""
    from scaletax.chapters import precision as ps
    from scaletax.report.chapters import default_parameters

    tax = ps.tax_rows(ps.read_runs(), default_parameters("precision")["gpus"])
    pts = [r for r in ps.penalty_rows(tax) if r["kind"] == "point"]
    assert pts and pts[0]["time_ratio"] == pytest.approx(1 / pts[0]["achieved_ratio"])  # starts at no penalty
    c = ps.PENALTY_CONTROL
    ctl = whatif.Control(c["name"], "penalty ", c["value"], c["lo"], c["hi"], c["step"])
    chart = alt.Chart(charts.data(pts)).transform_calculate(
        time_ratio=ps.time_ratio_expr(ctl.name)).mark_point().encode(y="time_ratio:Q").add_params(*whatif.params([ctl]))
    got = _evaluate(chart.to_dict(), {ctl.name: penalty}, ("time_ratio",))
    assert got[0]["time_ratio"] == pytest.approx(ps.time_ratio(penalty, pts[0]["achieved_ratio"]), rel=1e-12)
    assert ps.time_ratio(36.0, 1.36) == pytest.approx(1.0)  # 36% more tokens at 1.36x the speed: the same time
