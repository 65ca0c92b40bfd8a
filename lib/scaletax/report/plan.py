"""``scaletax plan``: one model on one GPU type at one cluster size, answered without a book.

The numbers are the planning module's (:mod:`scaletax.model.plan`), as every chapter's: the
fastest layout (``plan.case``: tokens/s per GPU, MFU and step time with their bands), days,
scheduled GPU-hours, energy and cost at the scenario's prices and energy factors and the goodput
of this model at this size (``plan.add_costs``; ``plan.goodput_detail``: the scale model of
:mod:`scaletax.model.goodput`, with its band over the published interruption rates and the mean
time between failures, checkpoint write and interval behind it, or the planner's
``cluster.goodput``), the cluster in whole systems (``plan.capacity``) with its IT and facility
megawatts (``plan.cluster_power``), the owned price per GPU-hour beside the rental one
(``plan.owned_price``), and the model's regime with the step-time model's out-of-sample accuracy
on it (``validate.model_regime_record``, as the executive summary states it). Nothing here comes
from a chapter.
"""
from __future__ import annotations

from typing import Any

from scaletax import unknown_id
from scaletax.inputs import hardware, models
from scaletax.inputs.layout import label
from scaletax.model import plan as planning
from scaletax.fit import validate
from scaletax.render import wording
from scaletax.report import chapters as toc

#: Quantities with a band, in the order shown: (key, label, unit scale, format).
BANDED = (("tps", "Tokens/s per GPU", 1.0, "{:,.0f}"), ("mfu", "MFU", 1.0, "{:.1%}"),
          ("days", "Days", 1.0, "{:,.1f}"), ("gpu_hours", "GPU-hours (millions)", 1e6, "{:,.2f}"),
          ("energy_mwh", "Energy (MWh)", 1.0, "{:,.0f}"), ("cost_usd", "Cost (USD millions)", 1e6, "{:,.1f}"))


class PlanError(ValueError):
    """Bad input to ``plan`` (unknown id, no fitting layout is not an error)."""


def quick_plan(scenario, model_id: str, gpu_id: str, gpus: int) -> dict[str, Any]:
    """``model_id`` on ``gpus`` GPUs of ``gpu_id`` under ``scenario`` (ids may be the scenario's own
    definitions), with the scenario's planning terms (``plan.Terms``). Raises PlanError."""
    scenario.register()
    if model_id not in models.ids():
        raise PlanError(f"--model: {unknown_id(model_id, models.ids(), 'model id')}; valid ids: {', '.join(models.ids())}")
    if gpu_id not in hardware.ids():
        raise PlanError(f"--gpu: {unknown_id(gpu_id, hardware.ids(), 'GPU id')}; valid ids: {', '.join(hardware.ids())}")
    if not 8 <= gpus <= 1_000_000:
        raise PlanError(f"--gpus: must be between 8 and 1,000,000 (got {gpus:,})")
    terms = planning.Terms.from_params(**toc.chapter("decision").parameters(scenario))
    m, g = models.get(model_id), hardware.get(gpu_id)  # the ids become objects here, once
    row = planning.case(terms, m, g, gpus)
    row.update(price=terms.price(g.id), price_basis=terms.price_basis(g.id))
    planning.add_costs([row], terms)
    row.update(planning.capacity(g, gpus))
    row.update(model_name=wording.model_name(m), label=wording.gpu_label(g),
               layout=label(row["layout"]) if row["fits"] else row["message"])
    pw = planning.cluster_power(terms, g, gpus)
    good = planning.goodput_detail(terms, m, gpus)
    own = planning.owned_price(terms, g)
    row.update(it_mw=pw["it_mw"], facility_mw=pw["facility_mw"], system_kw=pw["system_kw"], w_per_gpu=pw["w_per_gpu"],
               pue=terms.pue, goodput_yours=good["yours"], mtbf_h=good["mtbf_h"], checkpoint_s=good["checkpoint_s"],
               checkpoint_interval_s=good["interval_s"],
               owned_usd_per_gpu_hour=None if own is None else own["total"],
               rent_usd_per_gpu_hour_all_in=None if own is None else own["rent_total"])
    row.update(goodput=good["goodput"], goodput_low=good["goodput_low"], goodput_high=good["goodput_high"])
    row.update(software=wording.software_text(terms.software, with_source=False) if m.is_moe else None,
               software_source=terms.software.get("source") if m.is_moe else None)
    row.update(scenario=scenario.name, tokens=terms.tokens,
               price_includes_power=terms.price_includes_power or terms.usd_per_mwh == 0,
               usd_per_mwh=terms.usd_per_mwh, gpu_name=g.name, user_gpu=g.user_defined,
               user_model=models.user_defined(m))
    reg = validate.model_regime_record(m)  # as the summary's limits box
    row.update(regime=reg["regime"], regime_oos_runs=reg["oos_rows"], regime_oos_median=reg["oos_median"],
               regime_oos_within_25=reg["oos_within_25"])
    return row


def as_json(row: dict[str, Any]) -> dict[str, Any]:
    """The row with plain JSON values (numbers stay numbers)."""
    keep = ("scenario", "model", "model_name", "gpu", "label", "gpus", "precision", "fits", "message", "layout",
            "step_s", "tokens", "goodput", "goodput_low", "goodput_high", "goodput_yours", "mtbf_h", "checkpoint_s",
            "checkpoint_interval_s", "price", "price_basis", "price_includes_power", "usd_per_mwh", "system",
            "per_system", "need_systems", "need_bought", "system_kw", "w_per_gpu", "it_mw", "pue", "facility_mw",
            "owned_usd_per_gpu_hour", "rent_usd_per_gpu_hour_all_in", "user_gpu", "user_model", "regime",
            "regime_oos_runs", "regime_oos_median", "regime_oos_within_25", "software", "software_source")
    out = {k: row.get(k) for k in keep}
    for key, *_ in BANDED:
        for suffix in ("", "_low", "_high"):
            out[key + suffix] = row.get(key + suffix)
    out["systems"], out["gpus_bought"] = out.pop("need_systems"), out.pop("need_bought")
    return out


def table(row: dict[str, Any]):
    """A rich table of the row: value and band per quantity, layout and capacity."""
    from rich.table import Table

    t = Table(title=f"{row['model_name']} on {row['gpus']:,} x {row['label']} ({row['precision'].upper()}), "
                    f"scenario {row['scenario']}", title_justify="left")
    t.add_column("Quantity")
    t.add_column("Value", justify="right")
    t.add_column("Band (low–high)", justify="right")
    t.add_row("Fastest layout", row["layout"] if row["fits"] else row["message"], "")
    if row.get("software"):
        t.add_row("Timed with", row["software"], "training.software")
    t.add_row("Bought as", wording.bought_text(row), "")
    t.add_row("Power, IT / facility", f"{row['it_mw']:,.2f} / {row['facility_mw']:,.2f} MW", f"PUE {row['pue']:g}")
    if not row["fits"]:
        return t
    for key, label_, scale, fmt in BANDED:
        v, lo, hi = row.get(key), row.get(key + "_low"), row.get(key + "_high")
        if v is None:
            t.add_row(label_, "no price" if key == "cost_usd" else "–", "")
            continue
        t.add_row(label_, fmt.format(v / scale), f"{fmt.format(lo / scale)}–{fmt.format(hi / scale)}")
    t.add_row("Step time (s)", f"{row['step_s']:.2f}", "")
    t.add_row("Price per GPU-hour", wording.price_text(row["price"], row["price_basis"]), "")
    if row["goodput_yours"]:
        t.add_row("Goodput", f"{100 * row['goodput']:.0f}% (your input)", "")
    else:
        t.add_row("Goodput", f"{100 * row['goodput']:.1f}%", f"{100 * row['goodput_low']:.1f}–{100 * row['goodput_high']:.1f}%")
        t.add_row("Failure, checkpoint", f"every {row['mtbf_h']:,.2f} h, {row['checkpoint_interval_s'] / 60:,.1f} min",
                  f"write {row['checkpoint_s']:,.1f} s")
    if row["owned_usd_per_gpu_hour"] is not None:
        rent = row["rent_usd_per_gpu_hour_all_in"]
        t.add_row("Owned / rented $/h", f"{row['owned_usd_per_gpu_hour']:.2f} / "
                  + ("no price" if rent is None else f"{rent:.2f}"), "with energy")
    t.add_row("Energy in cost", "no (all-in price)" if row["price_includes_power"] else f"yes, ${row['usd_per_mwh']:g}/MWh", "")
    t.add_row("Out of sample", f"{row['regime']}: " + wording.regime_accuracy_text(
        {"oos_rows": row["regime_oos_runs"], "oos_median": row["regime_oos_median"],
         "oos_within_25": row["regime_oos_within_25"]}), "")
    return t
