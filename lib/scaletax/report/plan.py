"""``scaletax plan``: one model on one GPU type at one cluster size, answered without a book.

The numbers are the decision chapter's (:func:`scaletax.chapters.decision.outcome`,
:func:`~scaletax.chapters.decision.economics`, :func:`~scaletax.chapters.decision.capacity`): the
fastest layout of ``search.search``, tokens/s per GPU, MFU, days, scheduled GPU-hours, energy
and cost with the step-time model's band, at the scenario's prices and energy factors and the
goodput of this model at this size (:meth:`~scaletax.chapters.decision.Plan.goodput_at`: the
scale model of :mod:`scaletax.model.goodput`, with its band over the published interruption rates and
the mean time between failures, checkpoint write and interval behind it; or the planner's
``cluster.goodput``), the cluster in whole systems (nodes, racks) with its IT and facility
megawatts (:func:`~scaletax.chapters.decision.cluster_power`), the owned price per GPU-hour beside
the rental one (:func:`~scaletax.chapters.decision.owned_price`), and the model's regime with the
step-time model's out-of-sample accuracy on it (``validate.regime_accuracy``, as the executive
summary states it).
"""
from __future__ import annotations

from typing import Any

from scaletax import unknown_id
from scaletax.inputs import hardware, models
from scaletax.chapters import decision as d
from scaletax.report import chapters as toc

#: Quantities with a band, in the order shown: (key, label, unit scale, format).
BANDED = (("tps", "Tokens/s per GPU", 1.0, "{:,.0f}"), ("mfu", "MFU", 1.0, "{:.1%}"),
          ("days", "Days", 1.0, "{:,.1f}"), ("gpu_hours", "GPU-hours (millions)", 1e6, "{:,.2f}"),
          ("energy_mwh", "Energy (MWh)", 1.0, "{:,.0f}"), ("cost_usd", "Cost (USD millions)", 1e6, "{:,.1f}"))


class PlanError(ValueError):
    """Bad input to ``plan`` (unknown id, no fitting layout is not an error)."""


def quick_plan(scenario, model_id: str, gpu_id: str, gpus: int) -> dict[str, Any]:
    """The decision chapter's row for ``model_id`` on ``gpus`` GPUs of ``gpu_id`` under
    ``scenario`` (ids may be the scenario's own definitions). Raises PlanError."""
    scenario.register()
    if model_id not in models.ids():
        raise PlanError(f"--model: {unknown_id(model_id, models.ids(), 'model id')}; valid ids: {', '.join(models.ids())}")
    if gpu_id not in hardware.ids():
        raise PlanError(f"--gpu: {unknown_id(gpu_id, hardware.ids(), 'GPU id')}; valid ids: {', '.join(hardware.ids())}")
    if not 8 <= gpus <= 1_000_000:
        raise PlanError(f"--gpus: must be between 8 and 1,000,000 (got {gpus:,})")
    plan = d.Plan.from_params(**toc.chapter("decision").parameters(scenario))
    row = d.economics([d.outcome(plan, model_id, gpu_id, gpus)], plan)[0]
    row.update(d.capacity(gpu_id, gpus))
    g = hardware.get(gpu_id)
    pw = d.cluster_power(plan, g, gpus)
    good = d.goodput_detail(plan, model_id, gpus)
    own = d.owned_price(plan, gpu_id)
    row.update(it_mw=pw["it_mw"], facility_mw=pw["facility_mw"], system_kw=pw["system_kw"], w_per_gpu=pw["w_per_gpu"],
               pue=plan.pue, goodput_yours=good["yours"], mtbf_h=good["mtbf_h"], checkpoint_s=good["checkpoint_s"],
               checkpoint_interval_s=good["interval_s"],
               owned_usd_per_gpu_hour=None if own is None else own["total"],
               rent_usd_per_gpu_hour_all_in=None if own is None else own["rent_total"])
    row.update(goodput=good["goodput"], goodput_low=good["goodput_low"], goodput_high=good["goodput_high"])
    row.update(scenario=scenario.name, tokens=plan.tokens,
               price_includes_power=plan.price_includes_power or plan.usd_per_mwh == 0,
               usd_per_mwh=plan.usd_per_mwh, gpu_name=g.name, user_gpu=g.user_defined,
               user_model=models.user_defined(models.get(model_id)))
    from scaletax.chapters.summary import model_regime_record

    reg = model_regime_record(model_id)  # as the summary's limits box
    row.update(regime=reg["regime"], regime_oos_runs=reg["oos_rows"], regime_oos_median=reg["oos_median"],
               regime_oos_within_25=reg["oos_within_25"])
    if row.get("mfu") is not None:  # MFU has no band of its own: scale by the throughput band
        row["mfu_low"] = row["mfu"] * row["tps_low"] / row["tps"]
        row["mfu_high"] = row["mfu"] * row["tps_high"] / row["tps"]
    return row


def as_json(row: dict[str, Any]) -> dict[str, Any]:
    """The row with plain JSON values (numbers stay numbers)."""
    keep = ("scenario", "model", "model_name", "gpu", "label", "gpus", "precision", "fits", "message", "layout",
            "tokens", "goodput", "goodput_low", "goodput_high", "goodput_yours", "mtbf_h", "checkpoint_s",
            "checkpoint_interval_s", "price", "price_basis", "price_includes_power", "usd_per_mwh", "system",
            "per_system", "need_systems", "need_bought", "system_kw", "w_per_gpu", "it_mw", "pue", "facility_mw",
            "owned_usd_per_gpu_hour", "rent_usd_per_gpu_hour_all_in", "user_gpu", "user_model", "regime",
            "regime_oos_runs", "regime_oos_median", "regime_oos_within_25")
    out = {k: row.get(k) for k in keep}
    for key, *_ in BANDED:
        for suffix in ("", "_low", "_high"):
            out[key + suffix] = row.get(key + suffix)
    out["systems"], out["gpus_bought"] = out.pop("need_systems"), out.pop("need_bought")
    return out


def table(row: dict[str, Any]):
    """A rich table of the row: value and band per quantity, layout and capacity."""
    from rich.table import Table

    from scaletax.chapters import summary as s

    t = Table(title=f"{row['model_name']} on {row['gpus']:,} x {row['label']} ({row['precision'].upper()}), "
                    f"scenario {row['scenario']}", title_justify="left")
    t.add_column("Quantity")
    t.add_column("Value", justify="right")
    t.add_column("Band (low–high)", justify="right")
    t.add_row("Fastest layout", row["layout"] if row["fits"] else row["message"], "")
    t.add_row("Bought as", s.bought_text(row), "")
    t.add_row("Power, IT / facility", f"{row['it_mw']:,.2f} / {row['facility_mw']:,.2f} MW", f"PUE {row['pue']:g}")
    if not row["fits"]:
        return t
    for key, label, scale, fmt in BANDED:
        v, lo, hi = row.get(key), row.get(key + "_low"), row.get(key + "_high")
        if v is None:
            t.add_row(label, "no price" if key == "cost_usd" else "–", "")
            continue
        t.add_row(label, fmt.format(v / scale), f"{fmt.format(lo / scale)}–{fmt.format(hi / scale)}")
    t.add_row("Price per GPU-hour", s.price_text(row["price"], row["price_basis"]), "")
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
    t.add_row("Out of sample", f"{row['regime']}: " + s.regime_accuracy_text(
        {"oos_rows": row["regime_oos_runs"], "oos_median": row["regime_oos_median"],
         "oos_within_25": row["regime_oos_within_25"]}), "")
    return t
