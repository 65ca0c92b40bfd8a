"""Rows for the hardware chapter: the catalog as the model uses it, dense peaks and roofline
ridge points per precision, generation-over-generation ratios and bandwidth inside versus
outside the NVLink domain (plain rows; the notebook only formats them).

Everything here reads :mod:`scaletax.inputs.hardware` (SI units: FLOP/s, B/s one direction); no new
model.
"""
from __future__ import annotations

from scaletax.inputs.hardware import GPU, get


#: Precisions shown in the chapter, one per tensor-core data path.
CHAPTER_PRECISIONS = ("bf16", "fp8", "mxfp8", "nvfp4")


def peak_rows(gpu_ids: list[str], precisions=CHAPTER_PRECISIONS) -> list[dict]:
    """Dense peak TFLOP/s per GPU and precision; unsupported precisions get ``None``."""
    rows = []
    for g in map(get, gpu_ids):
        for p in precisions:
            rows.append({"gpu": g.id, "label": g.label, "precision": p, "status": g.status,
                         "tflops": g.peak_flops(p) / 1e12 if g.supports(p) else None})
    return rows


def ridge_rows(gpu_ids: list[str], precisions=CHAPTER_PRECISIONS) -> list[dict]:
    """Roofline ridge point (FLOP per HBM byte) per GPU and supported precision."""
    return [{"gpu": g.id, "precision": p, "ridge_flop_per_byte": g.ridge_point(p),
             "tflops": g.peak_flops(p) / 1e12, "hbm_tb_s": g.hbm_tb_s}
            for g in map(get, gpu_ids) for p in precisions if g.supports(p)]


def best_peak(gpu: GPU) -> tuple[str, float]:
    """The fastest native precision of a GPU and its dense FLOP/s."""
    cands = [(p, gpu.peak_flops(p)) for p in CHAPTER_PRECISIONS if gpu.supports(p)]
    return max(cands, key=lambda t: t[1])


def generation_rows(gpu_ids: list[str]) -> list[dict]:
    """Each GPU against the one before it in ``gpu_ids`` (and against the first)."""
    gpus = list(map(get, gpu_ids))
    rows = []
    for i, g in enumerate(gpus):
        prev = gpus[i - 1] if i else None
        base = gpus[0]
        row = {"gpu": g.id, "status": g.status}
        for key, fn in (("bf16", lambda x: x.peak_flops("bf16")),
                        ("best", lambda x: best_peak(x)[1]),
                        ("hbm_gib", lambda x: x.hbm_gib),
                        ("hbm_bw", lambda x: x.hbm_bw),
                        ("nvlink_bw", lambda x: x.nvlink_bw),
                        ("nic_bw", lambda x: x.nic_bw)):
            row[f"{key}_vs_prev"] = fn(g) / fn(prev) if prev else None
            row[f"{key}_vs_first"] = fn(g) / fn(base)
        row["best_precision"] = best_peak(g)[0]
        rows.append(row)
    return rows


def catalog_rows(gpu_ids: list[str]) -> list[dict]:
    """The catalog as the model uses it, with sources and verification."""
    return [{
        "gpu": g.id, "label": g.label, "name": g.name, "status": g.status, "hbm_gib": g.hbm_gib,
        "hbm_tb_s": g.hbm_tb_s, "bf16_tflops": g.bf16_tflops, "fp8_tflops": g.fp8_tflops,
        "fp4_tflops": g.fp4_tflops if g.native_mx else None, "nvlink_gb_s": g.nvlink_bw / 1e9,
        "nvlink_domain": g.nvlink_domain, "nic_gb_s": g.nic_bw / 1e9, "tdp_w": g.tdp_w,
        "verification": g.verification, "sources": g.sources, "hbm_basis": g.hbm_basis,
        "conflicts": g.conflicts, "assumptions": g.assumptions,
    } for g in map(get, gpu_ids)]


def domain_rows(gpu_ids: list[str]) -> list[dict]:
    """Bytes per second a GPU can move inside its NVLink domain vs out of it."""
    return [{"gpu": g.id, "nvlink_domain": g.nvlink_domain, "nvlink_gb_s": g.nvlink_bw / 1e9,
             "nic_gb_s": g.nic_bw / 1e9, "nvlink_over_nic": g.nvlink_bw / g.nic_bw,
             "domain_hbm_tib": g.nvlink_domain * g.hbm_gib / 1024}
            for g in map(get, gpu_ids)]


__all__ = ["CHAPTER_PRECISIONS", "best_peak", "catalog_rows", "domain_rows", "generation_rows", "peak_rows",
           "ridge_rows"]
