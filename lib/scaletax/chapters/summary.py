"""The text of the decision chapter and the executive summary: sentences that branch on data,
table rows with text cells, and the summary's headline rows.

Every number comes from the analysis in :mod:`scaletax.chapters.decision` (plans, searches per
model x GPU, costs, waterfall, break-even, H-equivalents, the Rubin claim, sensitivity); this
module only picks from its rows and writes them out.

Public API
----------
- ``headline(plan)``: the numbers of the executive summary (cheapest Hopper and Blackwell per
  model, the speed-up between them and its largest factor); ``headline_table``.
- ``tie_sentence`` / ``tied_with_text``: what every sentence and table naming "the cheapest"
  says when GPUs tie on cost (``decision.cheapest_choice``: their cost ratio's band holds 1).
- Sentence helpers (``*_sentence``, ``*_summary``) for the prose: comparisons are computed from
  what the scenario contains and say so when they fall back on catalog GPUs.
- Display rows (``*_table``): text cells with bands (``band_text``: ``v (lo–hi)``).
- ``nvl72_tax(plan)``: the communication tax at the largest cluster with an 8- and a 72-GPU
  NVLink domain, for the summary.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from scaletax.inputs import failures, hardware, models, recipes
from scaletax.model import efficiency, ownership
from scaletax.model import plan as planning
from scaletax.render import whatif
from scaletax.render.wording import bought_text, price_basis, price_text, regime_accuracy_text, system_unit
from scaletax.fit import calibrate, validate
from scaletax.chapters.decision import (FACTORS, Plan, blackwell_ids, capacity, cheapest_choice, decision_rows,
                                        headline_cases,
                                        fastest, fitting, goodput_detail, gpu_label, gpus_for_target, hopper_ids,
                                        main_source,
                                        model_name, top_input, waterfall, waterfall_targets)


# =========================================================================================
# Sentence helpers
# =========================================================================================
#: The note a chart shows when no case of the scenario fits (``charts.figure(..., empty=...)``).
NO_CASE = "No case of this scenario fits."


def _join(items: Sequence[str], last: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


def join_labels(gpu_ids: Sequence[str]) -> str:
    """GPU labels joined for prose ("A, B and C"), announced parts marked."""
    return _join([gpu_label(g) for g in gpu_ids])


def band_text(v, lo, hi, digits: int = 3) -> str:
    """``v (lo–hi)`` with ``digits`` significant figures (tables; the CSV keeps the numbers)."""
    from scaletax.render.tables import band

    return band(v, lo, hi, digits)


def _step_text(r: dict) -> str:
    """A case's step time with its band, seconds (``plan.case``'s ``step_s``); "–" where it has none."""
    return "–" if r.get("step_s") is None else band_text(r["step_s"], r.get("step_s_low"), r.get("step_s_high"))


def _m(v, scale=1e6):
    return None if v is None else v / scale


#: Marks on a cost resting on an assumed price or on the user's own price.
PRICE_MARK = {"assumed": " *", "your input": " †"}


def row_basis(r: dict) -> str:
    return price_basis(r.get("price_basis", r.get("price_assumed", True)))


# =========================================================================================
# Sentences of the decision chapter
# =========================================================================================
def nofit_sentence(rows: list[dict], plan: Plan) -> str:
    bad = [r for r in rows if not r["fits"]]
    if not bad:
        return (f"every model fits on every GPU type of the scenario at {plan.cluster_gpus:,} GPUs")
    return "; ".join(r["message"] for r in bad)


def assumed_prices_sentence(plan: Plan, gpu_ids: Sequence[str] | None = None) -> str:
    ids = list(gpu_ids or plan.gpus)
    assumed = [g for g in ids if plan.price_basis(g) == "assumed"]
    quoted = [g for g in ids if plan.price_basis(g) == "published"]
    yours = [g for g in ids if plan.price_basis(g) == "your input"]
    parts = []
    if quoted:
        parts.append("published rental prices for " + _join(
            [f"{hardware.get(g).label} (${plan.price(g):.2f})" for g in quoted]))
    if yours:
        parts.append("your prices for " + _join([f"{hardware.get(g).label} (${plan.price(g):.2f})" for g in yours]))
    if assumed:
        parts.append("assumed prices for " + _join(
            [f"{hardware.get(g).label} (${plan.price(g):.2f})" if plan.price(g) is not None
             else f"{hardware.get(g).label} (no price)" for g in assumed]))
    return "; ".join(parts) if parts else "no prices"


def _case_brief(r: dict) -> str:
    """A case's days and cost, central values to 3 significant figures: "3.26 days, $7.26M"."""
    text = f"{band_text(r['days'], None, None)} days"
    return text if r.get("cost_usd") is None else text + f", ${band_text(r['cost_usd'] / 1e6, None, None)}M"


def tie_sentence(choice: dict[str, Any] | None, what: str) -> str:
    """What a sentence naming the cheapest ``what`` ("Blackwell", "shipping GPU") says when GPUs
    tie on cost (a :func:`scaletax.chapters.decision.cheapest_choice`): the tied GPUs, each one's
    central cost ratio over the lowest (its band holds 1; the bands and each GPU's days and cost are
    in the tables, :func:`tied_with_text`), and the one the report uses (the faster); "" when one
    GPU is cheapest beyond the band."""
    if choice is None or len(choice["tied"]) < 2:
        return ""
    low, pick = choice["lowest"], choice["row"]
    gpus = _join([r["label"] for r in choice["tied"]])
    ratios = _join([f"{choice['ratios'][r['gpu']]['ratio']:.2f}x" for r in choice["tied"][1:]])
    return (f"the cheapest {what} is a tie within the model's band between {gpus} (cost {ratios} "
            f"{low['label']}'s); the report uses the {choice['rule']}, {pick['label']}")


def tied_with_text(choice: dict[str, Any] | None) -> str:
    """For a table cell naming the cheapest GPU: ", tied on cost with GB200 NVL72 (3.95 days,
    $7.24M)" (the GPUs it ties with, :func:`tie_sentence`), or "" without a tie."""
    if choice is None or len(choice["tied"]) < 2:
        return ""
    others = [r for r in choice["tied"] if r is not choice["row"]]
    return ", tied on cost with " + _join([f"{r['label']} ({_case_brief(r)})" for r in others])


def table_sentence(rows: list[dict], plan: Plan) -> str:
    """Per model: the fastest and the cheapest shipping GPU on the scenario cluster (or the GPUs
    tied on cost, :func:`tie_sentence`)."""
    parts = []
    for mid in plan.models:
        f, choice = fastest(rows, mid), cheapest_choice(plan, rows, mid)
        if f is None:
            parts.append(f"{model_name(mid)} fits on none of the shipping GPUs at {plan.cluster_gpus:,} GPUs")
            continue
        text = (f"{model_name(mid)} trains fastest on {f['label']}, in {f['days']:.0f} days "
                f"({f['days_low']:.0f}–{f['days_high']:.0f})")
        c = choice["row"]
        if c.get("cost_usd") is not None:
            tie = tie_sentence(choice, "shipping GPU")
            text += (f", and {tie}" if tie else
                     f", and cheapest on {c['label']}, for ${c['cost_usd'] / 1e6:,.0f}M "
                     f"({c['cost_usd_low'] / 1e6:,.0f}–{c['cost_usd_high'] / 1e6:,.0f})")
        parts.append(text)
    return "; ".join(parts)


def target_sentence(rows: list[dict], plan: Plan) -> str:
    """Per model: which shipping GPUs finish within the target on the scenario cluster."""
    parts = []
    for mid in plan.models:
        ok = [r["label"] for r in fitting(rows, model=mid) if not r["announced"] and r["days"] <= plan.target_days]
        if ok:
            parts.append(f"{model_name(mid)} finishes within {plan.target_days:g} days on {_join(ok)}")
        else:
            parts.append(f"{model_name(mid)} finishes within {plan.target_days:g} days on none of the shipping GPUs")
    return "; ".join(parts)


def waterfall_sentence(rows: list[dict]) -> str:
    """Per model and target: the total speed-up over the base and its largest factor."""
    parts = []
    for key in dict.fromkeys((r["model"], r["target"]) for r in rows):
        rs = [r for r in rows if (r["model"], r["target"]) == key]
        hw = rs[len(FACTORS)]
        last = rs[-1]
        if hw["cumulative"] is None or rs[0]["tps"] is None:
            parts.append(f"{rs[0]['model_name']} on {rs[0]['target_label']}: no comparison (a case does not fit)")
            continue
        src = main_source(rs)
        text = (f"{rs[0]['model_name']} on {rs[0]['target_label']}: {hw['cumulative']:.2f}x "
                f"({hw['cumulative_low']:.2f}–{hw['cumulative_high']:.2f}) at {hw['precision'].upper()}")
        if last["precision"] != hw["precision"] and last["cumulative"] is not None:
            text += f", {last['cumulative']:.2f}x at {last['precision'].upper()}"
        if src is not None:
            text += f"; the largest factor is {src['label']} (x{src['gain']:.2f})"
        parts.append(text)
    return "; ".join(parts)


def breakeven_sentence(rows: list[dict], plan: Plan) -> str:
    parts = []
    for mid in plan.models:
        rs = [r for r in rows if r["model"] == mid and r["breakeven"] is not None]
        if not rs:
            parts.append(f"{model_name(mid)}: no price comparison possible")
            continue
        ref = rs[0]["ref_label"]
        pays = [r["label"] for r in rs if r["verdict"] == "pays"]
        nope = [r["label"] for r in rs if r["verdict"] == "does not pay"]
        band = [r["label"] for r in rs if r["verdict"] == "within band"]
        bits = []
        if pays:
            bits.append(f"{_join(pays)} cost less per token than {ref} at the scenario prices")
        if nope:
            bits.append(f"{_join(nope)} cost more")
        if band:
            bits.append(f"{_join(band)} within the band")
        parts.append(f"for {model_name(mid)}, " + ", ".join(bits))
    return "; ".join(parts)


def deadline_sentence(rows: list[dict], plan: Plan) -> str:
    """Whether the reference Hopper meets the target time on the scenario cluster, per model."""
    parts = []
    for mid in plan.models:
        r = next((x for x in rows if x["model"] == mid), None)
        if r is None:
            continue
        if r["ref_days"] is None:
            parts.append(f"{r['ref_label']} cannot train {model_name(mid)} on {plan.cluster_gpus:,} GPUs")
        else:
            verdict = "meets" if r["deadline_ref"] else "misses"
            parts.append(f"for {model_name(mid)} {r['ref_label']} {verdict} the {plan.target_days:g}-day target on "
                         f"{plan.cluster_gpus:,} GPUs ({r['ref_days']:.0f} days)")
    return "; ".join(parts)


def top_sentence(rows: list[dict], plan: Plan, gpu_ids: Sequence[str]) -> str:
    parts = []
    for mid in plan.models:
        for g in gpu_ids:
            r = next((x for x in rows if x["model"] == mid and x["gpu"] == g), None)
            if r is None:
                continue
            if not r.get("tps"):
                parts.append(f"{model_name(mid)} on {r['label']}: {r['message']}")
                continue
            text = (f"{model_name(mid)} on {r['label']}: {r['days']:.1f} days ({r['days_low']:.1f}–{r['days_high']:.1f}), "
                    f"{r['tokens_per_day'] / 1e9:,.0f}B tokens per day")
            if r.get("scaling"):
                text += f", each GPU at {100 * r['scaling']:.0f}% of its throughput on {plan.cluster_gpus:,} GPUs"
            parts.append(text)
    return "; ".join(parts) if parts else "no case"


def heq_sentence(rows: list[dict], hopper: Sequence[str], mode: str = "scenario") -> str:
    parts = []
    for r in rows:
        if r["mode"] != mode:
            continue
        cells = [f"{r[h]:.1f} {hardware.get(h).label}" for h in hopper if r.get(h) is not None]
        if cells:
            parts.append(f"for {r['model_name']} one {r['label']} ({r['precision'].upper()}) does the work of "
                         + _join(cells, "or"))
    return "; ".join(parts) if parts else "no comparison (a case does not fit)"


def claim_sentence(c: dict[str, Any]) -> str:
    if c["ratio"] is None:
        bad = [r for r in c["rows"] if r["gpus"] is None]
        return "no comparison: " + "; ".join(f"{r['label']}: {r['layout']}" for r in bad)
    sc, fa = c["rows"][0], c["rows"][2]
    text = (f"{c['new_label']} needs {sc['gpus']:,} GPUs and {c['old_label']} {c['rows'][1]['gpus']:,} at "
            f"{sc['precision'].upper()}, a GPU-count ratio of {c['ratio']:.2f} ({c['ratio_low']:.2f}–{c['ratio_high']:.2f}; "
            f"each {c['new_label']} GPU trains {c['tps_ratio']:.2f}x the tokens per second of a {c['old_label']} GPU)")
    if c["ratio_fastest"] is not None and fa["precision"] != sc["precision"]:
        text += (f"; at {fa['precision'].upper()} {fa['gpus']:,} against {c['rows'][3]['gpus']:,}, a GPU-count ratio of "
                 f"{c['ratio_fastest']:.2f} ({c['ratio_fastest_low']:.2f}–{c['ratio_fastest_high']:.2f})")
    verdict = ("consistent with" if c["ratio_low"] <= c["claim"] <= c["ratio_high"] else
               "more favourable to Rubin than" if c["ratio_high"] < c["claim"] else "less favourable to Rubin than")
    return text + f"; this projection is {verdict} the announced {c['claim']:.2f}"


def tornado_sentence(rows: list[dict], plan: Plan) -> str:
    """Per model: the case, and the input with the largest swing of cost and of days."""
    parts = []
    for mid in plan.models:
        c, t = top_input(rows, mid, "cost_usd"), top_input(rows, mid, "days")
        if c is None:
            continue
        text = (f"for {model_name(mid)} on {c['gpu_label']} the cost moves most with the {c['label']} "
                f"({c['low_pct']:+.0f}% / {c['high_pct']:+.0f}%)")
        if t is not None:
            text += f", the time with the {t['label']} ({t['low_pct']:+.0f}% / {t['high_pct']:+.0f}%)"
        parts.append(text)
    return "; ".join(parts) if parts else "no case fits"


# =========================================================================================
# Display rows for the tables (text cells; the notebooks only pick the columns)
# =========================================================================================
#: The ids a case row is about, written to a table's CSV (``tables.table(keys=...)``) so that
#: the same quantity is found in every file that states it (``tests/test_one_value.py``).
CASE_KEYS: tuple[str, ...] = ("model_id", "gpu_id", "gpus", "precision_id", "regime")
#: The ids a ratio of two GPUs on the scenario's cluster is about (the break-even and price-ratio tables).
RATIO_KEYS: tuple[str, ...] = ("model_id", "gpu_id", "ref_id")
#: The ids of a power row: the GPU and the two counts the table gives MW for.
POWER_KEYS: tuple[str, ...] = ("gpu_id", "ref_gpus", "top_gpus")


def case_keys(r: dict) -> dict[str, Any]:
    """:data:`CASE_KEYS` of a case row (model, GPU and precision ids, GPU count, and the model's
    regime, ``validate.model_regime_record``)."""
    return {"model_id": r["model"], "gpu_id": r["gpu"], "gpus": r["gpus"], "precision_id": r["precision"],
            "regime": validate.model_regime_record(models.get(r["model"]))["regime"]}


def time_table(rows: list[dict]) -> list[dict]:
    """Model, GPU, precision, layout, tokens/s per GPU, MFU, step time, days and GPUs for the
    target (bands; "memory": the fewest GPUs that hold the model already meet it; "batch": the
    scenario's global batch costs GPUs, :func:`batch_sentence`)."""
    out = []
    for r in rows:
        need, bought = "–", "–"
        if r.get("need"):
            need = band_text(r["need"], r["need_low"], r["need_high"]) + (
                " (memory)" if r.get("need_memory_bound") else " (batch)" if r.get("need_nearby") else "")
            bought = bought_text(r)
        elif "need" in r:
            need = r.get("need_layout") or "–"
        out.append({**case_keys(r), "model": r["model_name"], "gpu": r["label"], "precision": r["precision"].upper(),
                    "layout": r["layout"], "tps": band_text(r["tps"], r["tps_low"], r["tps_high"]),
                    "mfu": "–" if r["mfu"] is None else pct_band(r["mfu"], r["mfu_low"], r["mfu_high"]),
                    "step": _step_text(r),
                    "days": band_text(r["days"], r["days_low"], r["days_high"]), "need": need, "bought": bought})
    return out


def energy_sentence(notes: dict[str, float]) -> str:
    """The tornado's energy sentence from :func:`decision.tornado_notes`: how far the energy inputs
    move the cost (%), and electricity's share of it; says so when no case fits."""
    if not (math.isfinite(notes["energy_swing_max"]) and math.isfinite(notes["energy_share_min"])):
        return "No case fits on the scenario's cluster, so there is no cost for the energy inputs to move."
    return (f"The energy inputs move it by at most {notes['energy_swing_max']:.1f}%, because electricity is "
            f"{pct_range_text(notes['energy_share_min'], notes['energy_share_max'])} of the cost of these cases "
            f"at the scenario's prices.")


def pct_range_text(lo: float, hi: float) -> str:
    """A range of percentages in words, to whole percents: "3 to 5%", or "4%" when both ends round
    to the same ("4 to 4%" says nothing)."""
    a, b = round(lo), round(hi)
    return f"{a:.0f}%" if a == b else f"{a:.0f} to {b:.0f}%"


def pct_band(v: float, lo: float, hi: float):
    """A share as ``v% (lo–hi)``, one decimal (MFU); the exported CSV keeps the fractions."""
    from scaletax.render.tables import Band

    return Band(f"{100 * v:.1f}% ({100 * lo:.1f}–{100 * hi:.1f})", v, lo, hi)


def measured_mfu_max() -> dict[tuple[str, str], float]:
    """The best measured MFU per (precision, GPU family) of the published runs: the validation
    chapter's (:func:`scaletax.chapters.validation.mfu_by_precision`)."""
    from scaletax.chapters.validation import mfu_by_precision

    return {(str(r["precision"]).lower(), r["family"]): r["measured_mfu_max"] for r in mfu_by_precision()}


def mfu_validity_sentence(rows: list[dict]) -> str:
    """The cases whose MFU is above every measured run of the same format on their family (or, for
    a family whose factor is tied to Blackwell's, ``calibrate.TIED_FAMILIES``, on Blackwell): their
    throughput rests on a calibration no run checks there."""
    best = measured_mfu_max()
    parts = []
    for r in rows:
        if r.get("mfu") is None:
            continue
        fam = hardware.get(r["gpu"]).family
        basis = "blackwell" if fam in calibrate.TIED_FAMILIES else fam
        top = best.get((r["precision"], basis))
        if top is None or not r["mfu"] > top:  # a NaN MFU (no fit) is above nothing
            continue
        why = ("its family factor is Blackwell's times the ratio of rated power per peak FLOP, which no run on it checks"
               if fam in calibrate.DERIVED_FAMILIES else "its family factor is Blackwell's, carried over with no run on it"
               if fam in calibrate.TIED_FAMILIES else "it is beyond every measured run of that format")
        parts.append(f"{r['model_name']} on {r['label']} runs at {100 * r['mfu']:.1f}% MFU in {r['precision'].upper()}, "
                     f"above the best measured {basis.replace('_', ' ').title()} {r['precision'].upper()} run "
                     f"({100 * top:.1f}%): {why}")
    if not parts:
        return ("No case runs above the best measured MFU of its format on its GPU family: every MFU in the table "
                "is within what a published run reached.")
    return "; ".join(parts) + ". Read these as the upper end of what the model allows, not as measured."


def batch_sentence(rows: list[dict], plan: Plan) -> str:
    """The cases whose GPUs for the target the scenario's global batch raises
    (:func:`scaletax.model.plan.gpus_for_deadline`: ``need_nearby`` at ``need_nearby_batch``)."""
    parts = []
    for r in rows:
        if not r.get("need_nearby"):
            continue
        parts.append(f"{r['model_name']} on {r['label']} needs {r['need']:,} GPUs at the scenario's global batch of "
                     f"{r['need_batch']:,} sequences where linear scaling of its throughput gives {r['need_linear']:,}: "
                     f"on the counts in between that batch does not split into micro-batches that fill the pipeline; "
                     f"with a global batch of {r['need_nearby_batch']:,} sequences "
                     f"({100 * (r['need_nearby_batch'] / r['need_batch'] - 1):+.0f}%) {r['need_nearby']:,} GPUs finish "
                     f"in {plan.target_days:g} days")
    return ("; ".join(parts) + ".") if parts else (
        "On every case the scenario's global batch splits well on the count found: the GPUs for the target are "
        "what linear scaling of its throughput gives, to the count resolution.")


def goodput_phrase(plan: Plan, gpus: int | None = None) -> str:
    """"91% goodput (modelled for 16,384 GPUs)", "90–91% goodput (...)" over the scenario's
    models, "the modelled goodput of each count" without ``gpus``, or "95% goodput (your input)"
    when the planner set ``cluster.goodput``."""
    if plan.goodput is not None:
        return f"{100 * plan.goodput:.0f}% goodput (your input)"
    if gpus is None:
        return "the modelled goodput of each count"
    vals = sorted(round(100 * float(plan.goodput_at(m, gpus))) for m in plan.models)
    share = f"{vals[0]}%" if vals[0] == vals[-1] else f"{vals[0]}–{vals[-1]}%"
    return f"{share} goodput (modelled for {gpus:,} GPUs)"


def goodput_sentence(plan: Plan, source: str | None) -> str:
    """The goodput behind days and cost: the planner's, or the scale model at the scenario's
    smallest, reference and largest cluster."""
    if plan.goodput is not None:
        if plan.goodput >= 1:
            return "no scheduled time is lost to failures, restarts or checkpoints (your input)"
        return (f"{100 * plan.goodput:.0f}% of scheduled time trains and the rest goes to failures, restarts and "
                f"checkpoints (your input; source: {source or 'not given'})")
    mid = plan.models[0]
    sizes = sorted({min(plan.sizes), plan.cluster_gpus, plan.top})
    at = _join([f"{100 * float(plan.goodput_at(mid, n)):.0f}% on {n:,} GPUs" for n in sizes])
    rel, rep = plan.reliability, plan.failure_report()
    rate = ("your rate of unexpected interruptions" if rel.get("failures_per_gpu_hour")
            else f"the rate of unexpected interruptions of {rep.label}")
    return (f"the share of scheduled time that trains (goodput) falls as the cluster grows: {at} for "
            f"{model_name(mid)} ({rate}, {float(rel['restart_minutes']):g}-minute restarts, checkpoints written at "
            f"{float(rel['storage_tb_s']):g} TB/s at Daly's optimal interval)")


def controls_sentence(controls, plan: Plan) -> str:
    """The values the what-if controls of a figure start at (the scenario's, which the printed
    figure shows), labelled as beside the controls: "H100 SXM $/GPU-hour 2.35; ...; electricity
    $/MWh 80; goodput: each case's modelled goodput" (``controls``: :class:`scaletax.render.whatif.Control`)."""
    parts = [f"{c.label.strip()} {c.value:g}" for c in controls]
    parts.append("goodput: each case's modelled goodput" if plan.goodput is None
                 else f"goodput {100 * plan.goodput:.0f}% (your cluster.goodput)")
    return "; ".join(parts)


def system_power_sentence(plan: Plan) -> str:
    """Where each GPU's system power comes from: "DGX/HGX H100 node 10.2 kW for 8 GPUs, 1,275 W per
    GPU; ... (data/systems.csv, sourced per row)", or the planner's overhead over TDP."""
    if plan.system_overhead is not None:
        return f"TDP x {plan.system_overhead:g}, your economics.energy.system_overhead, for every GPU"
    parts = []
    for gid in plan.gpus:
        g = hardware.get(gid)
        w = plan.system_w(g)
        parts.append(f"{g.system or gpu_label(g)} {w * g.gpus_per_system / 1e3:,.4g} kW for {g.gpus_per_system} GPUs, "
                     f"{w:,.0f} W per GPU")
    return "; ".join(parts) + " (maximum system power, data/systems.csv, sourced per row)"


def power_sentence(plan: Plan) -> str:
    """Whether cost adds energy to the GPU-hour price."""
    if plan.price_includes_power or plan.usd_per_mwh == 0:
        return "the prices are all-in (they include power), so cost adds no energy term"
    return (f"the prices exclude power, so cost adds facility energy at ${plan.usd_per_mwh:g} per MWh "
            "(set economics.price_includes_power to true for all-in rental prices)")


def cost_table(rows: list[dict]) -> list[dict]:
    """Model, GPU, GPU-hours (millions), price, cost (USD millions), USD per million tokens,
    energy (MWh), each with its band."""
    return [{**case_keys(r), "model": r["model_name"], "gpu": r["label"],
             "gpu_hours": band_text(_m(r["gpu_hours"]), _m(r["gpu_hours_low"]), _m(r["gpu_hours_high"])),
             "price": price_text(r["price"], row_basis(r)),
             "cost": band_text(_m(r["cost_usd"]), _m(r["cost_usd_low"]), _m(r["cost_usd_high"])),
             "per_mtok": band_text(r["usd_per_mtok"], r["usd_per_mtok_low"], r["usd_per_mtok_high"]),
             "energy": band_text(r["energy_mwh"], r["energy_mwh_low"], r["energy_mwh_high"])} for r in rows]


def waterfall_table(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        out.append({"model": r["model_name"], "target": r["target_label"],
                    "step": r["label"], "precision": r["precision"].upper(),
                    "tps": band_text(r["tps"], r["tps_low"], r["tps_high"]),
                    "gain": "–" if r["gain"] is None else f"x{r['gain']:.2f}",
                    "cumulative": "–" if r["cumulative"] is None else (
                        f"{r['cumulative']:.2f}x ({r['cumulative_low']:.2f}–{r['cumulative_high']:.2f})"),
                    "alone": "–" if r["alone"] is None else f"x{r['alone']:.2f}"})
    return out


def breakeven_table(rows: list[dict]) -> list[dict]:
    return [{"model_id": r["model"], "gpu_id": r["gpu"], "ref_id": r["ref"],
             "model": r["model_name"], "gpu": r["label"] + ("" if r["in_scenario"] else " (catalog)"),
             "ratio": band_text(r["ratio"], r["ratio_low"], r["ratio_high"]),
             "price_ratio": "–" if r["price_ratio"] is None else f"{r['price_ratio']:.2f}",
             "per_mtok": ("–" if r["usd_per_mtok"] is None or r["ref_usd_per_mtok"] is None
                          else f"{r['usd_per_mtok']:.2f} / {r['ref_usd_per_mtok']:.2f}"),
             "breakeven": "–" if r["breakeven"] is None else band_text(r["breakeven"], r["breakeven_low"],
                                                                        r["breakeven_high"]),
             "price": price_text(r["price"], row_basis(r)), "verdict": r["verdict"]} for r in rows]


def top_table(rows: list[dict]) -> list[dict]:
    return [{**case_keys(r), "model": r["model_name"], "gpu": r["label"], "layout": r["layout"],
             "tps": band_text(r["tps"], r["tps_low"], r["tps_high"]),
             "mfu": "–" if r.get("mfu") is None else pct_band(r["mfu"], r["mfu_low"], r["mfu_high"]),
             "step": _step_text(r),
             "days": band_text(r["days"], r["days_low"], r["days_high"]),
             "per_day": band_text(_m(r["tokens_per_day"], 1e9), _m(r["tokens_per_day_low"], 1e9),
                                  _m(r["tokens_per_day_high"], 1e9)),
             "scaling": "–" if not r.get("scaling") else f"{100 * r['scaling']:.0f}%",
             "energy": band_text(r["energy_mwh"], r["energy_mwh_low"], r["energy_mwh_high"])} for r in rows]


def heq_table(rows: list[dict], hopper: Sequence[str]) -> list[dict]:
    out = []
    for r in rows:
        row = {"model": r["model_name"], "gpu": r["label"], "precision": r["precision"].upper()}
        for h in hopper:
            row[h] = ("–" if r.get(h) is None else
                      f"{r[h]:.1f} ({r[h + '_low']:.1f}–{r[h + '_high']:.1f})" + (
                          "" if r[h + "_precision"] == r["precision"] else f" [{r[h + '_precision'].upper()}]"))
        out.append(row)
    return out


def claim_table(c: dict[str, Any]) -> list[dict]:
    return [{**case_keys(r), "gpu": r["label"], "precision": r["precision"].upper(),
             "gpus": "–" if r["gpus"] is None else band_text(r["gpus"], r["gpus_low"], r["gpus_high"]),
             "layout": r["layout"], "tps": band_text(r["tps"], None, None, 4),
             "days": band_text(r["days"], None, None), "ratio": band_text(r["ratio"], r["ratio_low"], r["ratio_high"]),
             "tps_ratio": band_text(r["tps_ratio"], r["tps_ratio_low"], r["tps_ratio_high"])}
            for r in c["rows"]]


# =========================================================================================
# Power, scale, owning, fleets, price ratios (decision chapter)
# =========================================================================================
def _mw(v) -> str:
    return "–" if v is None else f"{v:,.1f}"


def power_table(rows: list[dict], plan: Plan) -> list[dict]:
    """Per GPU type (:func:`scaletax.chapters.decision.power_rows`): its system and the system's
    maximum power, the facility MW of the scenario's reference count, the whole systems and IT and
    facility MW of its largest cluster, and the largest cluster the power budget holds."""
    return [{"gpu_id": r["gpu"], "ref_gpus": r["ref_gpus"], "top_gpus": r["top_gpus"], "gpu": r["label"],
             "system": f"{r['system']} ({r['per_system']} GPUs)",
             "system_kw": r["system_kw"], "ref_facility_mw": r["ref_facility_mw"],
             "top_systems": f"{r['top_systems']:,} {system_unit(r, r['top_systems'])}", "top_it_mw": r["top_it_mw"],
             "top_facility_mw": r["top_facility_mw"], "budget_gpus": r["budget_gpus"]} for r in rows]


def mw_sentence(rows: list[dict], plan: Plan) -> str:
    """The facility megawatts of the scenario's reference count and largest cluster, lowest and
    highest GPU type (announced parts marked)."""
    def span(key, n):
        lo, hi = min(rows, key=lambda r: r[key]), max(rows, key=lambda r: r[key])
        if lo is hi or round(lo[key], 1) == round(hi[key], 1):
            return f"{lo[key]:,.1f} MW on {n:,} {lo['label']}"
        return f"from {lo[key]:,.1f} MW ({lo['label']}) to {hi[key]:,.1f} MW ({hi['label']}) on {n:,} GPUs"

    text = f"at a PUE of {plan.pue:g} the facility draws {span('ref_facility_mw', plan.cluster_gpus)}"
    if plan.top != plan.cluster_gpus:
        text += f", and {span('top_facility_mw', plan.top)}"
    return text


def budget_table(rows: list[dict], plan: Plan) -> list[dict]:
    """Per model and GPU type on the largest cluster the power budget holds: its GPUs, the count the
    layout runs on, days and cost (bands) and the facility MW of that count."""
    out = []
    for r in rows:
        runs = (f"{r['gpus']:,}" if r["gpus"] == r["budget_gpus"] else f"{r['gpus']:,} of them (batch)") \
            if r["fits"] else r["layout"]
        out.append({**case_keys(r), "model": r["model_name"], "gpu": r["label"], "budget_gpus": r["budget_gpus"],
                    "runs": runs, "days": band_text(r["days"], r["days_low"], r["days_high"]),
                    "cost": band_text(_m(r["cost_usd"]), _m(r["cost_usd_low"]), _m(r["cost_usd_high"]))
                    + PRICE_MARK.get(row_basis(r), "") if r.get("cost_usd") is not None else "–",
                    "facility_mw": r["facility_mw"] if r["fits"] else None})
    return out


def budget_sentence(rows: list[dict], plan: Plan) -> str:
    """Per model: the shipping GPU that trains fastest within the power budget, and whether a
    GPU that is faster per GPU loses to one whose smaller power lets more of it fit."""
    if not rows:
        return "the scenario sets no power budget (cluster.power_mw)"
    parts = []
    for mid in plan.models:
        ok = [r for r in rows if r["model"] == mid and r.get("days") is not None and not r["announced"]]
        if not ok:
            parts.append(f"{model_name(mid)} fits on none of the shipping GPUs within {plan.power_mw:g} MW")
            continue
        f = min(ok, key=lambda r: r["days"])
        parts.append(f"{model_name(mid)} trains fastest on {f['gpus']:,} {f['label']}, in {f['days']:.1f} days "
                     f"({f['days_low']:.1f}–{f['days_high']:.1f})")
    return "; ".join(parts)


def goodput_chart_rows(plan: Plan, sizes: Sequence[int]) -> list[dict]:
    """The goodput of each model of the scenario on each of ``sizes`` GPUs with its band
    (:func:`scaletax.chapters.decision.goodput_detail`: it depends on the count and the model's
    checkpoint, not on the GPU type or on whether a layout fits)."""
    out = []
    for mid in plan.models:
        for n in sizes:
            g = goodput_detail(plan, mid, n)
            out.append({"model_id": mid, "model_name": model_name(mid), "gpus": int(n), "goodput": float(g["goodput"]),
                        "goodput_low": float(g["goodput_low"]), "goodput_high": float(g["goodput_high"])})
    return out


def goodput_scale_sentence(plan: Plan, sizes: Sequence[int]) -> str:
    """The goodput of the first model at the smallest and the largest of ``sizes``, with its band
    (the planner's goodput: the same at every size, no band)."""
    mid = plan.models[0]
    if plan.goodput is not None:
        return f"goodput is your {100 * plan.goodput:.0f}% at every size (cluster.goodput)"
    g = goodput_chart_rows(plan, sorted({min(sizes), max(sizes)}))
    g = [r for r in g if r["model_id"] == mid]

    def one(r):
        return (f"{100 * r['goodput']:.0f}% ({100 * r['goodput_low']:.0f}–{100 * r['goodput_high']:.0f}) "
                f"on {r['gpus']:,} GPUs")

    if len(g) == 1:
        return f"for {model_name(mid)}, goodput is {one(g[0])}"
    return f"for {model_name(mid)}, goodput falls from {one(g[0])} to {one(g[-1])}"


def band_parts(rows: list[dict], plan: Plan) -> dict[str, Any]:
    """What the days band is made of at the scenario's largest cluster (scale rows there):
    ``good_low`` / ``good_high`` the goodput band over the models (%; None with the planner's
    goodput), ``tps_pct`` the widest half-width of the throughput band (%), and ``sentence``."""
    top = [r for r in rows if r["gpus"] == plan.top and r.get("tps")]
    out = {"good_low": None, "good_high": None, "tps_pct": None,
           "sentence": "the goodput is the planner's, so it adds no band"}
    if not top:
        out["sentence"] = "no case fits"
        return out
    out["tps_pct"] = 100 * max(max(r["tps_high"] / r["tps"] - 1, 1 - r["tps_low"] / r["tps"]) for r in top)
    if plan.goodput is None:
        out.update(good_low=100 * min(r["goodput_low"] for r in top), good_high=100 * max(r["goodput_high"] for r in top))
        out["sentence"] = (f"on {plan.top:,} GPUs the goodput band spans {out['good_low']:.0f}–{out['good_high']:.0f}% "
                           f"against a throughput band of at most ±{out['tps_pct']:.0f}%")
    return out


def scale_chart_rows(rows: list[dict]) -> list[dict]:
    """Days (band) against GPUs and against facility MW, per model and GPU type (fitting cases),
    with what a goodput control recomputes them from (:func:`scaletax.render.whatif.cost_time_data`)."""
    return whatif.cost_time_data([
        {"model_id": r["model"], "model_name": r["model_name"], "gpu": r["gpu"], "label": r["label"],
         "precision": r["precision"], "gpus": r["gpus"], "facility_mw": r["facility_mw"], "tps": r["tps"],
         "status": "announced (projection)" if r["announced"] else "shipping",
         **{f + b: r[f + b] for f in ("goodput", *whatif.TIMED) for b in whatif.BANDS}}
        for r in rows if r.get("days") is not None])


def goodput_table(plan: Plan, model_id: str, sizes: Sequence[int]) -> list[dict]:
    """The goodput model of ``model_id`` at ``sizes``: mean time between unexpected interruptions,
    checkpoint write time, Daly's interval and the goodput with its band
    (:func:`scaletax.chapters.decision.goodput_detail`)."""
    out = []
    for n in sizes:
        g = goodput_detail(plan, model_id, n)
        out.append({"model_id": model_id, "gpus": n, "mtbf_h": g["mtbf_h"], "checkpoint_s": g["checkpoint_s"],
                    "interval_min": None if g["interval_s"] is None else g["interval_s"] / 60,
                    "goodput": pct_band(g["goodput"], g["goodput_low"], g["goodput_high"])})
    return out


def ownership_sentence(plan: Plan) -> str:
    """The owning inputs with their sources, in one sentence."""
    o = plan.ownership
    if not o:
        return "the scenario has no ownership inputs (economics.ownership)"
    crf = ownership_crf(plan)
    return (f"systems bought at the prices in the last column and depreciated over {float(o['depreciation_years']):g} "
            f"years ({o['depreciation_source']}) at a cost of capital of {100 * float(o['cost_of_capital']):g}% "
            f"({o['cost_of_capital_source']}; capital recovery factor {crf:.3f} a year), a facility at "
            f"${float(o['facility_usd_per_mw_year']) / 1e6:,.2f}M per MW of IT power a year ({o['facility_source']}), "
            f"busy {100 * float(o['busy_share']):g}% of the year ({o['busy_source']})")


def ownership_crf(plan: Plan) -> float:
    """The capital recovery factor of the scenario's ownership inputs (:mod:`scaletax.model.ownership`)."""
    o = plan.ownership
    return ownership.capital_recovery_factor(float(o["cost_of_capital"]), float(o["depreciation_years"]))


def own_rent_table(rows: list[dict]) -> list[dict]:
    """Per headline case: rented and owned price per GPU-hour (with energy), the cost of the run
    both ways (bands), and the system price with its basis."""
    def basis(b):
        return {"assumed": " (assumed)", "your input": " (your input)"}.get(b, "")

    return [{**case_keys(r), "model": r["model_name"], "gpu": r["label"],
             "rent_hour": "no price" if r["rent_total"] is None else f"${r['rent_total']:.2f}"
             + basis(row_basis(r)),
             "own_hour": f"${r['owned']:.2f} ({r['capital']:.2f} + {r['facility']:.2f} + {r['energy']:.2f})",
             "cost": "–" if r["rented_usd"] is None else band_text(_m(r["rented_usd"]), _m(r["rented_usd_low"]),
                                                                   _m(r["rented_usd_high"])),
             "cost_owned": band_text(_m(r["owned_usd"]), _m(r["owned_usd_low"]), _m(r["owned_usd_high"])),
             "capex": f"${r['capex_per_system']:,.0f} per {system_unit(r, 1)}" + basis(r["capex_basis"])}
            for r in rows]


def own_rent_sentence(rows: list[dict], plan: Plan | None = None, case_rows: list[dict] | None = None) -> str:
    """Per headline case: owned against rented price per GPU-hour, and which is cheaper. With
    ``plan`` and the chapter's ``case_rows``, an empty ``rows`` says whether no headline case fits
    or the scenario has no system prices for their GPUs."""
    if not rows:
        if plan is not None and case_rows is not None and not any(
                h["row"] for h in headline_cases(plan, case_rows)):
            return f"no Hopper or Blackwell case fits on {plan.cluster_gpus:,} GPUs, so there is no case to own or rent"
        return "the scenario has no ownership inputs for its headline GPUs (economics.ownership)"
    parts = []
    for r in rows:
        if r["rent_total"] is None:
            parts.append(f"{r['model_name']} on {r['label']}: ${r['owned']:.2f} per GPU-hour owned, no rental price")
            continue
        cheaper = "owning" if r["owned"] < r["rent_total"] else "renting"
        parts.append(f"{r['model_name']} on {r['label']}: ${r['owned']:.2f} owned against ${r['rent_total']:.2f} "
                     f"rented per GPU-hour, so {cheaper} is cheaper")
    return "; ".join(parts)


def fleet_table(rows: list[dict]) -> list[dict]:
    """Per fleet and model: the fleet as reported, the count it runs on, days and cost (bands), its
    facility MW and its size in equivalents of the baseline GPU (band)."""
    out = []
    for r in rows:
        reported = f"{r['count']:,} {r['fleet_label']}" + (" (claimed equivalents)" if r["equivalent"] else "")
        runs = (r["layout"] if not r["fits"] else f"{r['gpus']:,}" if r["gpus"] == r["count"]
                else f"{r['gpus']:,} (batch)")
        heq = "–" if r["heq"] is None else ("as reported" if r["gpu"] == r["base"] and r["equivalent"] else
                                            band_text(r["heq"], None if r["heq_low"] == r["heq"] else r["heq_low"],
                                                      None if r["heq_high"] == r["heq"] else r["heq_high"]))
        out.append({**case_keys(r), "fleet_gpus": r["count"], "fleet": r["fleet_name"], "reported": reported,
                    "model": r["model_name"],
                    "runs": runs, "days": band_text(r["days"], r["days_low"], r["days_high"]),
                    "cost": band_text(_m(r["cost_usd"]), _m(r["cost_usd_low"]), _m(r["cost_usd_high"]))
                    + PRICE_MARK.get(row_basis(r), "") if r.get("cost_usd") is not None else "–",
                    "fleet_mw": r["fleet_facility_mw"], "heq": heq})
    return out


def fleet_sentence(rows: list[dict], plan: Plan) -> str:
    """Where the fleets come from (unverified ones named) and how claimed equivalents are taken."""
    if not rows:
        return "the scenario lists no fleets"
    fleets = {r["fleet"]: r for r in rows}.values()
    unverified = [f["fleet_name"] for f in fleets if not f["verified"]]
    eq = [f for f in fleets if f["equivalent"]]
    text = (f"{len(unverified)} of the {len(fleets)} fleets are unverified reports ({_join(unverified)})"
            if unverified else "every fleet is marked verified by the scenario")
    if eq:
        text += "".join(f"; {f['fleet_name']} is counted as the {f['count']:,} {f['fleet_label']} it is said to equal "
                        "(priced, timed and powered as that many)" for f in eq)
    return text


def price_pair_table(rows: list[dict]) -> list[dict]:
    """Per model and price pair: throughput ratio, break-even price ratio and the newer GPU's
    break-even price per GPU-hour at the older one's price (bands), the scenario's price ratio with
    its basis, the cost ratio per token there (band) and the verdict."""
    out = []
    for r in rows:
        c = r["curve"]
        if c is None:
            out.append({"model_id": r["model"], "gpu_id": r["gpu"], "ref_id": r["ref"], "model": r["model_name"],
                        "pair": r["pair"], "tps_ratio": r["message"]})
            continue
        at = c["at"]
        out.append({"model_id": r["model"], "gpu_id": r["gpu"], "ref_id": r["ref"], "model": r["model_name"],
                    "pair": r["pair"],
                    "tps_ratio": band_text(c["tps_ratio"], c["tps_ratio_low"], c["tps_ratio_high"]),
                    "breakeven_ratio": band_text(c["breakeven"], c["breakeven_low"], c["breakeven_high"]),
                    "breakeven_usd": band_text(*(c[k] * r["ref_price"] for k in
                                                 ("breakeven", "breakeven_low", "breakeven_high"))),
                    "price_ratio": "no price" if at is None else f"{at['price_ratio']:.2f} ({r['price_basis']})",
                    "cost_ratio": "–" if at is None else band_text(at["ratio"], at["ratio_low"], at["ratio_high"]),
                    "verdict": r["verdict"]})
    return out


def pairs_text(rows: list[dict]) -> str:
    """The price pairs of :func:`scaletax.chapters.decision.price_pair_rows` in words ("B200 vs H200 SXM and ...")."""
    return _join(list(dict.fromkeys(r["pair"] for r in rows))) or "none"


def price_pair_sentence(rows: list[dict]) -> str:
    """Per pair and model: the break-even price ratio (band) and the verdict at the scenario's prices."""
    parts = []
    for r in rows:
        c = r["curve"]
        if c is None:
            parts.append(f"{r['pair']} for {r['model_name']}: no comparison ({r['message']})")
            continue
        text = (f"{r['pair']} for {r['model_name']} breaks even at a price ratio of {c['breakeven']:.2f} "
                f"({c['breakeven_low']:.2f}–{c['breakeven_high']:.2f}), ${c['breakeven'] * r['ref_price']:.2f} "
                f"per GPU-hour against {r['ref_label']}'s ${r['ref_price']:.2f}")
        if c["at"] is not None:
            text += (f"; at the scenario's {c['at']['price_ratio']:.2f} ({r['price_basis']}) it "
                     + {"pays": "pays", "does not pay": "does not pay",
                        "within band": "is within the band"}[r["verdict"]])
        parts.append(text)
    return "; ".join(parts) if parts else "the scenario names no price pairs (comparisons.price_pairs)"


# =========================================================================================
# The executive summary
# =========================================================================================
def headline(plan: Plan, rows: list[dict] | None = None) -> dict[str, Any]:
    """The handful of numbers a planner quotes, computed with the functions above.

    Per model (list ``models``): the cheapest Hopper and the cheapest Blackwell on the scenario
    cluster (days, cost, bands; :func:`scaletax.chapters.decision.headline_cases`, with
    ``hopper_choice`` / ``blackwell_choice`` the ``cheapest_choice`` behind each: of GPUs tied on
    cost, the fastest), the per-GPU speed-up between them and its largest factor in the
    waterfall from H100 to that Blackwell, the achieved gain of the fastest format; plus the
    H-equivalents of the first model and the Rubin claim check.
    """
    rows = decision_rows(plan, target=False) if rows is None else rows
    out: dict[str, Any] = {"models": []}
    cases = {(c["model"], c["kind"]): c for c in headline_cases(plan, rows)}
    for mid in plan.models:
        h, b = cases[(mid, "hopper")]["row"], cases[(mid, "blackwell")]["row"]
        item = {"model": mid, "model_name": model_name(mid), "hopper": h, "blackwell": b,
                "hopper_choice": cases[(mid, "hopper")]["choice"], "blackwell_choice": cases[(mid, "blackwell")]["choice"],
                "waterfall": None,
                "source": None, "speedup": None, "speedup_low": None, "speedup_high": None,
                "precision_gain": None, "precision_from": None, "precision_to": None}
        if h and b:
            q = planning.throughput_ratio(b, h)
            item.update(speedup=q["ratio"], speedup_low=q["ratio_low"], speedup_high=q["ratio_high"])
        target = _waterfall_target_for(plan, b["gpu"] if b else None)
        if target:
            wf = waterfall(plan, mid, target, alone=False)
            item["waterfall"] = wf
            item["source"] = main_source(wf[:_run_step(wf, plan) + 1])
            p = wf[-1]
            if p["gain"] is not None:
                item.update(precision_gain=p["gain"], precision_from=wf[0]["precision"], precision_to=p["precision"],
                            precision_gpu=gpu_label(target))
        out["models"].append(item)
    return out


def _waterfall_target_for(plan: Plan, gpu_id: str | None) -> str:
    """The waterfall target of the decision chapter closest to ``gpu_id``: itself if it is
    one, else the one with the same NVLink-domain class, else the last one."""
    targets = waterfall_targets(plan)[0]
    if gpu_id in targets:
        return gpu_id
    if gpu_id is not None:
        big = hardware.get(gpu_id).nvlink_domain > 8
        same = [t for t in targets if (hardware.get(t).nvlink_domain > 8) == big]
        if same:
            return same[0]
    return targets[-1]


def _run_step(wf: list[dict], plan: Plan) -> int:
    """Index of the waterfall row that is the target GPU at its run precision: after the
    hardware factors if that is the base's precision, else the precision step."""
    return len(FACTORS) if plan.run_precision(wf[0]["target"]) == wf[0]["precision"] else len(wf) - 1


def heq_summary(rows: list[dict], hopper: Sequence[str], mode: str = "scenario") -> str:
    """Per Blackwell GPU: how many of each Hopper GPU it matches, as a range over the models."""
    parts = []
    for bw in dict.fromkeys(r["gpu"] for r in rows):
        rs = [r for r in rows if r["gpu"] == bw and r["mode"] == mode]
        cells = []
        for h in hopper:
            v = [r[h] for r in rs if r.get(h) is not None]
            if v:
                span = f"{min(v):.1f}" if len(v) == 1 or round(min(v), 1) == round(max(v), 1) else f"{min(v):.1f}–{max(v):.1f}"
                cells.append(f"{span} {hardware.get(h).label}")
        if cells:
            parts.append(f"one {gpu_label(bw)} does the work of " + _join(cells, "or"))
    if not parts:
        return "no comparison (a case does not fit)"
    models = list(dict.fromkeys(r["model_name"] for r in rows))
    tail = f" (the range spans {_join(models)})" if len(models) > 1 else ""
    return "; ".join(parts) + tail


def top_summary(rows: list[dict], plan: Plan, gpu_ids: Sequence[str]) -> str:
    """Days to train and tokens per day on the largest cluster for the first shipping and every
    announced GPU of ``gpu_ids``, and the range of the per-GPU scaling."""
    ship = [g for g in gpu_ids if not hardware.get(g).announced][:1]
    pick = ship + [g for g in gpu_ids if hardware.get(g).announced]
    parts = []
    for g in pick:
        rs = [r for r in rows if r["gpu"] == g]
        cells = [f"{r['model_name']} in {r['days']:.1f} days ({r['days_low']:.1f}–{r['days_high']:.1f}, "
                 f"{r['tokens_per_day'] / 1e9:,.0f}B tokens per day)" if r.get("tps") else f"{r['model_name']}: {r['message']}"
                 for r in rs]
        if cells:
            parts.append(f"{plan.top:,} {gpu_label(g)} GPUs train " + _join(cells))
    sc = [r["scaling"] for r in rows if r.get("scaling") and r["gpu"] in pick]
    text = "; ".join(parts) if parts else "no case"
    if sc and plan.top != plan.cluster_gpus:
        text += (f"; at the scenario's batch each GPU then runs at {100 * min(sc):.0f}–{100 * max(sc):.0f}% of its "
                 f"throughput on {plan.cluster_gpus:,} GPUs")
    return text


def summary_model_sentence(item: dict[str, Any], plan: Plan) -> str:
    """One sentence per model for the summary: days and cost on the cheapest Hopper and
    Blackwell of the scenario, the per-GPU speed-up with its main source, and where GPUs of a
    family tie on cost, which (:func:`tie_sentence`)."""
    h, b = item["hopper"], item["blackwell"]
    name = item["model_name"]

    def case(r):
        c = "" if r.get("cost_usd") is None else (
            f" for ${r['cost_usd'] / 1e6:,.0f}M ({r['cost_usd_low'] / 1e6:,.0f}–{r['cost_usd_high'] / 1e6:,.0f})"
            + {"assumed": " at an assumed price", "your input": " at your price"}.get(row_basis(r), ""))
        return f"{r['days']:.0f} days ({r['days_low']:.0f}–{r['days_high']:.0f}) on {r['label']}{c}"

    if h is None and b is None:
        return f"{name} fits on neither a Hopper nor a Blackwell GPU of this scenario at {plan.cluster_gpus:,} GPUs"
    parts = [case(r) for r in (h, b) if r is not None]
    text = f"{name} trains in " + " against ".join(parts)
    if item["speedup"] is not None:
        text += (f": {item['speedup']:.2f}x ({item['speedup_low']:.2f}–{item['speedup_high']:.2f}) the throughput "
                 f"per GPU")
    wf = item["waterfall"]
    if wf:
        end = _run_step(wf, plan)
        hw, steps = wf[end], [r for r in wf[1:end + 1] if r["gain"]]
        if hw["cumulative"] and steps:
            steps.sort(key=lambda r: -r["gain"])
            target = wf[0]["target"]
            where = "" if target in plan.gpus else ", a catalog GPU not in this scenario"
            text += (f"; the largest factor of the {hw['cumulative']:.2f}x from H100 to {wf[0]['target_label']} "
                     f"in {hw['precision'].upper()}{where} is {steps[0]['label']} (x{steps[0]['gain']:.2f})")
            if len(steps) > 1 and math.log(steps[1]["gain"]) >= 0.9 * math.log(steps[0]["gain"]):
                text += f", with {steps[1]['label']} close behind (x{steps[1]['gain']:.2f})"
    for kind, what in (("hopper", "Hopper"), ("blackwell", "Blackwell")):
        tie = tie_sentence(item.get(f"{kind}_choice"), what)
        if tie:
            text += f"; {tie}"
    return text


def precision_sentence(items: list[dict[str, Any]]) -> str:
    parts = [f"{it['model_name']} on {it['precision_gpu']}: x{it['precision_gain']:.2f} "
             f"({it['precision_from'].upper()} to {it['precision_to'].upper()})"
             for it in items if it.get("precision_gain") is not None and it["precision_from"] != it["precision_to"]]
    return "; ".join(parts) if parts else "no faster format among the scenario's precisions on these GPUs"


def breakeven_summary(rows: list[dict], gpu_ids: Sequence[str]) -> str:
    """For each GPU of ``gpu_ids``: the price per GPU-hour at which it matches the reference
    Hopper's cost per token, per model, next to the scenario's price."""
    parts = []
    for g in gpu_ids:
        rs = [r for r in rows if r["gpu"] == g and r["breakeven"] is not None]
        if not rs:
            continue
        cells = [f"${r['breakeven']:.2f} ({r['breakeven_low']:.2f}–{r['breakeven_high']:.2f}) for {r['model_name']}"
                 for r in rs]
        parts.append(f"{rs[0]['label']} matches {rs[0]['ref_label']}'s cost per token at " + _join(cells)
                     + f" (scenario price {price_text(rs[0]['price'], row_basis(rs[0]))})")
    return "; ".join(parts) if parts else "no price comparison is possible in this scenario"


def headline_table(h: dict[str, Any]) -> list[dict]:
    """Per model: the cheapest Hopper and Blackwell cases (GPU, days, cost) and the speed-up; a GPU
    tied on cost with others of its family names them with their days and cost (:func:`tied_with_text`)."""
    def cells(r):
        if r is None:
            return "none fits", "–", "–"
        c = "–" if r.get("cost_usd") is None else (band_text(_m(r["cost_usd"]), _m(r["cost_usd_low"]),
                                                             _m(r["cost_usd_high"])) + PRICE_MARK.get(row_basis(r), ""))
        return r["label"], band_text(r["days"], r["days_low"], r["days_high"]), c

    out = []
    for it in h["models"]:
        hg, hd, hc = cells(it["hopper"])
        bg, bd, bc = cells(it["blackwell"])
        hg, bg = hg + tied_with_text(it.get("hopper_choice")), bg + tied_with_text(it.get("blackwell_choice"))
        keys = {f"{kind}_{k}": (it[kind] or {}).get(src) for kind in ("hopper", "blackwell")
                for k, src in (("id", "gpu"), ("gpus", "gpus"), ("precision", "precision"), ("tps", "tps"),
                               ("mfu", "mfu"))}
        keys["regime"] = validate.model_regime_record(models.get(it["model"]))["regime"]
        out.append({"model_id": it["model"], **keys, "model": it["model_name"], "hopper": hg, "hopper_days": hd,
                    "hopper_cost": hc, "blackwell": bg,
                    "blackwell_days": bd, "blackwell_cost": bc,
                    "speedup": band_text(it["speedup"], it["speedup_low"], it["speedup_high"])})
    return out


def deadline_rows(plan: Plan, h: dict[str, Any]) -> list[dict[str, Any]]:
    """GPUs to finish in the target time for the headline cases (cheapest Hopper and Blackwell
    per model; searched as the decision chapter does), and how they are bought (whole systems)."""
    out = []
    for it in h["models"]:
        for kind in ("hopper", "blackwell"):
            r = it[kind]
            if r is None:
                continue
            t = gpus_for_target(plan, r["model"], r["gpu"], r["precision"])
            out.append({"model": r["model"], "model_name": r["model_name"], "gpu": r["gpu"], "label": r["label"],
                        "precision": r["precision"], "need": t["gpus"], "need_low": t["low"], "need_high": t["high"], "days": t["days"],
                        "need_linear": t["linear"], "need_batch": t["batch"], "need_nearby": t["nearby_gpus"],
                        "need_nearby_batch": t["nearby_batch"], "message": t["message"], **capacity(r["gpu"], t["gpus"])})
    return out


def deadline_table(rows: list[dict], plan: Plan) -> list[dict]:
    """Model, GPU, GPUs for the target (band) and the whole systems that holds them."""
    return [{"model_id": r["model"], "gpu_id": r["gpu"], "precision_id": r["precision"], "model": r["model_name"],
             "gpu": r["label"],
             "need": (band_text(r["need"], r["need_low"], r["need_high"]) + (" (batch)" if r.get("need_nearby") else ""))
             if r["need"] else r["message"],
             "bought": bought_text(r)} for r in rows]


def model_regimes(plan: Plan) -> list[dict[str, Any]]:
    """Per model of the scenario: ``model`` (id), ``name``, its ``regime`` trained on Megatron-Core
    with the distributed optimizer (``runs.model_regime`` at its own sequence length) and that
    regime's out-of-sample accuracy (``validate.regime_record``: ``oos_rows``, ``oos_median``,
    ``oos_within_25``; None without a run), with ``worst``: whether it is the regime the model
    predicts worst out of sample (``validate.worst_regime``)."""
    worst = validate.worst_regime(validate.regime_accuracy())["regime"]
    out = []
    for mid in plan.models:
        r = validate.model_regime_record(models.get(mid))
        out.append({"model": mid, "name": model_name(mid), "regime": r["regime"], "oos_rows": r["oos_rows"],
                    "oos_median": r["oos_median"], "oos_within_25": r["oos_within_25"], "worst": r["regime"] == worst})
    return out


def regime_sentence(regimes: Sequence[dict[str, Any]], band: float) -> str:
    """How well the step-time model predicts each scenario model's regime out of sample (a
    :func:`model_regimes` list), beside the band's half-width ``band`` (the spread over all
    model families)."""
    parts = []
    for r in regimes:
        what = f"{r['name']} is {'an' if r['regime'].startswith('FSDP') else 'a'} {r['regime']} model"
        if r["oos_median"] is None:
            parts.append(f"{what}, a regime with no published run that has a measurement: not validated")
            continue
        worst = ", the regime predicted worst" if r["worst"] else ""
        parts.append(f"{what}{worst}, {regime_accuracy_text(r)}")
    return ("out of sample by regime (a regime's calibration runs each predicted by a calibration without the "
            "regime, and its held-out runs): " + "; ".join(parts)
            + f"; the band (±{100 * band:.0f}%) is the spread over all model families")


def limits(plan: Plan, runs: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the model was checked against: the published runs' GPU types and cluster sizes
    (``data/published_runs.csv``), the scenario's GPUs and sizes outside them, the goodput, and
    each scenario model's regime with its out-of-sample accuracy (:func:`model_regimes`)."""
    runs = validate.load_rows() if runs is None else runs
    hw = sorted({str(r["hardware"]).strip() for r in runs})
    counts = [int(r["gpu_count"]) for r in runs]
    sizes = sorted(set(plan.sizes) | {plan.cluster_gpus})
    return {"runs": len(runs), "hardware": hw, "min_gpus": min(counts), "max_gpus": max(counts),
            "regimes": model_regimes(plan), "band": float(efficiency.default_band().spread),
            "unvalidated": [g for g in plan.gpus if g not in hw],
            "beyond": [n for n in sizes if n > max(counts)], "goodput": plan.goodput,
            "goodput_model": None if plan.goodput is not None else goodput_sentence(plan, None),
            "goodput_reports_gpus": max(r.scale_gpus for r in failures.reports()),
            "assumed_prices": [g for g in plan.gpus if plan.price_basis(g) == "assumed"],
            "your_prices": [g for g in plan.gpus if plan.price_basis(g) == "your input"]}


def limits_sentences(lim: dict[str, Any], goodput_source: str) -> dict[str, str]:
    """The limits box, one sentence per entry (validated, regimes, unvalidated, extrapolated,
    goodput, prices)."""
    names = [hardware.get(g).label for g in lim["hardware"]]
    out = {"validated": f"The step-time model is checked against {lim['runs']} published training runs on "
                        f"{_join(names)}, from {lim['min_gpus']:,} to {lim['max_gpus']:,} GPUs",
           "regimes": regime_sentence(lim["regimes"], lim["band"])}
    out["unvalidated"] = ("every GPU of this scenario has published training runs behind it" if not lim["unvalidated"]
                          else f"{_join([gpu_label(g) for g in lim['unvalidated']])} "
                               + ("has no published training run in that table: its numbers rest"
                                  if len(lim["unvalidated"]) == 1 else
                                  "have no published training run in that table: their numbers rest")
                               + " on datasheets and the calibrated efficiencies alone")
    out["beyond"] = ("no cluster size of the scenario exceeds the largest published run" if not lim["beyond"]
                     else f"cluster sizes of {_join([f'{n:,}' for n in lim['beyond']])} GPUs are extrapolations "
                          f"beyond the largest published run ({lim['max_gpus']:,} GPUs)")
    if lim["goodput"] is not None:
        out["goodput"] = (f"days and cost assume {100 * lim['goodput']:.0f}% goodput, the share of scheduled time that "
                          f"trains (your input; source: {goodput_source or 'not given'})")
    else:  # goodput_model: goodput_sentence's
        out["goodput"] = (f"{lim['goodput_model']}; the published interruption rates come from jobs and clusters of up "
                          f"to {lim['goodput_reports_gpus']:,} GPUs")
    bits = []
    if lim["assumed_prices"]:
        bits.append(f"assumed for {_join([hardware.get(g).label for g in lim['assumed_prices']])}")
    if lim["your_prices"]:
        bits.append(f"yours for {_join([hardware.get(g).label for g in lim['your_prices']])}")
    out["prices"] = ("prices are " + " and ".join(bits)) if bits else "every price of the scenario is published"
    return out


def assumptions_sentence(plan: Plan) -> str:
    """What the summary's numbers assume, in one sentence."""
    return (f"scenario {plan.name}: {plan.tokens / 1e12:g} trillion training tokens per model, a global batch of "
            f"{plan.batch_tokens / 2**20:g} Mi tokens, {plan.precision.upper()} where the GPU runs it, "
            f"{plan.cluster_gpus:,} GPUs, a {plan.target_days:g}-day horizon, {goodput_phrase(plan, plan.cluster_gpus)}; "
            + assumed_prices_sentence(plan)
            + ("; all-in prices (power included)" if plan.price_includes_power or plan.usd_per_mwh == 0
               else f"; electricity at ${plan.usd_per_mwh:g}/MWh with a PUE of {plan.pue:g}"))


def nvl72_tax(plan: Plan) -> dict[str, Any]:
    """The communication tax at the scenario's largest cluster with an 8- and a 72-GPU NVLink
    domain, per model: :func:`scaletax.model.search.search` with ``SearchSpace(domain=...)`` on the
    scenario's first GPU with a domain larger than 8 (the communication chapter's sweep GPU), in
    the precision it trains in. Pairs: model, gpus, layouts, share (exposed communication / step
    time) and speedup (step time with 8 over step time with 72), for the models that fit both.
    The searches are :func:`scaletax.model.plan.fastest` (kept on disk)."""
    from scaletax.inputs import models as catalog
    from scaletax.inputs.layout import label
    from scaletax.model import search
    from scaletax.chapters.communication import sweep_gpu

    gpu = sweep_gpu(plan.gpus)
    g = hardware.get(gpu)  # the resolved definition: the disk cache keys on its fields
    prec = recipes.training(plan.run_precision(gpu))
    pairs = []
    for mid in plan.models:
        m = catalog.get(mid)
        small, large = (planning.fastest(m, g, prec, plan.top, plan.batch_tokens, space=plan.space(search.SearchSpace(domain=dom)))
                        for dom in (8, 72))
        if small.fits and large.fits:
            a, b = small.metrics, large.metrics
            pairs.append({"model": mid, "gpus": plan.top, "layout_small": label(small.best, m),
                          "layout_large": label(large.best, m), "share_small": a["exposed_comm_s"] / a["step_s"],
                          "share_large": b["exposed_comm_s"] / b["step_s"], "speedup": a["step_s"] / b["step_s"]})
    return {"gpu": gpu, "label": hardware.get(gpu).label, "native": hardware.get(gpu).nvlink_domain > 8,
            "gpus": plan.top, "pairs": pairs}


def nvl72_sentence(t: dict[str, Any]) -> str:
    if not t["pairs"]:
        return f"no model fits on {t['gpus']:,} {t['label']} GPUs with both domain sizes"
    parts = [f"{model_name(p['model'])} {100 * p['share_small']:.0f}% with an 8-GPU domain and "
             f"{100 * p['share_large']:.0f}% with a 72-GPU one (a {p['speedup']:.2f}x faster step)" for p in t["pairs"]]
    what = "" if t["native"] else " (a what-if: this GPU has no 72-GPU domain)"
    return f"on {t['gpus']:,} {t['label']} GPUs{what}: " + "; ".join(parts)


__all__ = ["NO_CASE", "POWER_KEYS", "PRICE_MARK", "RATIO_KEYS", "assumed_prices_sentence", "batch_sentence", "controls_sentence", "deadline_rows", "deadline_table",
           "goodput_phrase", "goodput_sentence", "limits", "system_power_sentence", "limits_sentences", "model_regimes",
           "regime_sentence", "power_sentence", "row_basis", "assumptions_sentence", "band_text", "breakeven_sentence",
           "breakeven_summary", "breakeven_table", "claim_sentence", "claim_table", "cost_table",
           "deadline_sentence", "headline", "headline_table", "heq_sentence", "heq_summary", "heq_table",
           "join_labels", "nofit_sentence", "nvl72_sentence", "nvl72_tax", "mfu_validity_sentence", "pct_band", "pct_range_text", "precision_sentence",
           "summary_model_sentence", "table_sentence", "tie_sentence", "tied_with_text", "power_table", "mw_sentence", "budget_table",
           "budget_sentence", "goodput_chart_rows", "goodput_scale_sentence", "scale_chart_rows", "own_rent_table",
           "own_rent_sentence", "band_parts", "goodput_table", "ownership_sentence", "ownership_crf", "fleet_table", "fleet_sentence", "pairs_text", "price_pair_table", "price_pair_sentence", "target_sentence", "time_table", "top_sentence",
           "top_summary", "top_table", "tornado_sentence", "waterfall_sentence", "waterfall_table"]
