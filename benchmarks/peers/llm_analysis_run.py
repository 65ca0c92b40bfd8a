"""llm-analysis 0.2.2, run by benchmarks/run.py in its own venv.

    python llm_analysis_run.py search  '{"procs": 4096, "batch": 8192}'
    python llm_analysis_run.py layouts '{"procs": 4096, "layouts": [{...}, ...]}'

Megatron-1T (128 layers, hidden 25,600, 160 heads, FFN 102,400, vocab 51,200, sequence 2,048)
on H100 SXM 80 GB, weights/activations/embeddings in 16 bits (``w16a16e16``), flash attention,
its logger at WARNING. ``search``: ``LLMAnalysis(...).training(...)`` for every (tp, pp, mbs,
recompute, ZeRO stage) a 4,096-GPU Megatron search would try, counted as configurations
(``training`` returned or raised); prints CPU seconds of this process. ``layouts``: step time
(``latency_per_iter``) and memory per GPU of given layouts.
"""
import json
import logging
import sys
import time

from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name

MODEL = ModelConfig(name="megatron-1t", num_layers=128, n_head=160, hidden_dim=25600, vocab_size=51200,
                    max_seq_len=2048, ffn_embed_dim=102400)
GPU = get_gpu_config_by_name("h100-sxm-80gb")
DTYPE = get_dtype_config_by_name("w16a16e16")
RECOMPUTE = {"none": ActivationRecomputation.NONE, "selective": ActivationRecomputation.SELECTIVE,
             "full": ActivationRecomputation.FULL}
ZERO = {0: DSZeRO.NONE, 1: DSZeRO.STAGE_1, 2: DSZeRO.STAGE_2, 3: DSZeRO.STAGE_3}


def _quiet():
    logging.getLogger("llm_analysis").setLevel(logging.WARNING)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("llm_analysis"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from llm_analysis import logger as mod

    mod.logger.setLevel(logging.WARNING)


def _one(tp, pp, dp, mbs, batch, recompute, zero):
    a = LLMAnalysis(MODEL, GPU, DTYPE, ParallelismConfig(tp_size=tp, pp_size=pp, dp_size=dp), flops_efficiency=0.5,
                    hbm_memory_efficiency=0.9)
    return a.training(batch_size_per_gpu=mbs, global_batch_size=batch, seq_len=2048,
                      activation_recomputation=RECOMPUTE[recompute], ds_zero=ZERO[zero])


def search(cfg):
    _quiet()
    procs, batch = int(cfg["procs"]), int(cfg["batch"])
    combos = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16, 32, 64, 128):
            if procs % (tp * pp):
                continue
            dp = procs // (tp * pp)
            for mbs in (1, 2, 4, 8):
                if batch % (mbs * dp):
                    continue
                for rc in RECOMPUTE:
                    for z in (0, 1, 2, 3):
                        combos.append((tp, pp, dp, mbs, batch, rc, z))
    t0, w0 = time.process_time(), time.perf_counter()
    ok = failed = 0
    best = None
    for c in combos:
        try:
            s = _one(*c)
            ok += 1
            if s["memory_left_per_gpu"] >= 0 and (best is None or s["latency_per_iter"] < best[0]):
                best = (s["latency_per_iter"], c)
        except Exception:  # noqa: BLE001 - the tool raises on layouts it cannot evaluate
            failed += 1
    out = {"cpu_s": time.process_time() - t0, "wall_s": time.perf_counter() - w0,
           "configurations": ok + failed, "evaluated": ok, "raised": failed}
    if best:
        out["best"] = {"latency_per_iter_s": best[0], "tp": best[1][0], "pp": best[1][1], "dp": best[1][2],
                       "mbs": best[1][3], "recompute": best[1][5], "zero": best[1][6]}
    return out


def layouts(cfg):
    _quiet()
    rows = []
    for lay in cfg["layouts"]:
        try:
            s = _one(lay["tp"], lay["pp"], lay["dp"], lay["mbs"], lay["gbs"], lay["recompute"], lay["zero"])
            rows.append({"step_s": s["latency_per_iter"],
                         "memory_gib": s["(weight+op_state+grad+act)_memory_per_gpu"] / 2**30})
        except Exception as exc:  # noqa: BLE001
            rows.append({"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]})
    return {"rows": rows}


if __name__ == "__main__":
    mode, cfg = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"search": search, "layouts": layouts}[mode](cfg)))
