"""Phrases two consumers print the same way: the chapters' tables and sentences and the
``scaletax plan`` table (report). One wording per quantity, so the book and the command line
read alike."""
from __future__ import annotations

from typing import Any


def model_name(model) -> str:
    """Short display name of a ``models.Model``: its name without the parenthesised note ("GPT 1T",
    "Kimi K2"); a model defined in the scenario keeps its "(yours)"."""
    from scaletax.inputs import models

    short = (model.name or model.id).split(" (")[0]
    return f"{short} (yours)" if models.user_defined(model) else short


def gpu_label(gpu) -> str:
    """Table label of a ``hardware.GPU``; announced parts are marked as projections."""
    return f"{gpu.label} (projection)" if gpu.announced else gpu.label


def price_basis(basis: str | bool) -> str:
    """A price's basis: "published", "assumed" or "your input" (a bool means assumed or not)."""
    return ("assumed" if basis else "published") if isinstance(basis, bool) else basis


def price_text(price: float | None, basis: str | bool) -> str:
    """"$2.50", "$4.00 (assumed)" or "$2.10 (your input)"."""
    if price is None:
        return "no price"
    return f"${price:.2f}" + {"assumed": " (assumed)", "your input": " (your input)"}.get(price_basis(basis), "")


def system_unit(r: dict, n: int) -> str:
    """"rack"/"racks", "node"/"nodes": the last word of the system's name."""
    word = (r.get("system") or "system").split()[-1]
    return word if n == 1 else word + "s"


def bought_text(r: dict) -> str:
    """"75 racks (5,400 GPUs)": the GPUs for the target in whole systems (``need_systems``,
    ``need_bought``, ``system`` of ``plan.capacity``)."""
    if not r.get("need_systems"):
        return "–"
    return f"{r['need_systems']:,} {system_unit(r, r['need_systems'])} ({r['need_bought']:,} GPUs)"


def regime_accuracy_text(r: dict[str, Any]) -> str:
    """A regime's out-of-sample accuracy (``oos_rows``, ``oos_median``, ``oos_within_25`` of
    ``validate.regime_accuracy``) in words: "15.2% median error over 4 runs, 75% within 25%"."""
    if r["oos_median"] is None:
        return "no published run with a measurement: not validated"
    share = "all" if r["oos_within_25"] == 1 else f"{100 * r['oos_within_25']:.0f}%"
    n = r["oos_rows"]
    return f"{100 * r['oos_median']:.1f}% median error over {n} run{'s' if n != 1 else ''}, {share} within 25%"


__all__ = ["bought_text", "gpu_label", "model_name", "price_basis", "price_text", "regime_accuracy_text", "system_unit"]


#: How a page names each training-software choice (a scenario's ``training.software``).
SOFTWARE_WORDS: dict[str, dict[str, str]] = {
    "moe_dispatcher": {"flex": "Megatron-Core's flex dispatcher (DeepEP-class: a token crosses to each NVLink domain once)",
                       "deepep": "DeepEP dispatch (a token crosses to each NVLink domain once)",
                       "alltoall": "Megatron-Core's alltoall dispatcher (one copy per routed expert)"},
    "schedule": {"unknown": "half of the expert all-to-all hidden (schedule not stated)",
                 "1f1b": "the expert all-to-all in line (1F1B)",
                 "ep_overlap": "every paired expert all-to-all hidden under another micro-batch (ep_overlap)",
                 "dualpipe": "every paired expert all-to-all hidden under another micro-batch (DualPipe)"},
    "expert_gemm": {"auto": "one GEMM call per local expert (Transformer Engine's GroupedLinear)",
                    "per_expert": "one GEMM call per local expert (Transformer Engine's GroupedLinear)",
                    "grouped": "one grouped kernel for all local experts"},
}
#: The scenario's defaults (``report.scenario.Software``).
SOFTWARE_DEFAULTS: dict[str, str] = {"moe_dispatcher": "flex", "schedule": "unknown", "expert_gemm": "auto"}


def software_text(software: dict[str, Any] | None, with_source: bool = True) -> str:
    """The training software every MoE layout is timed with, in words (a scenario's
    ``training.software``; a choice it lacks is the default), and its source."""
    sw = {**SOFTWARE_DEFAULTS, **dict(software or {})}
    words = "; ".join(SOFTWARE_WORDS[k][str(sw[k])] for k in SOFTWARE_DEFAULTS)
    src = sw.get("source")
    return f"{words} ({src})" if src and with_source else words
