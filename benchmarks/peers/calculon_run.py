"""Calculon, run by benchmarks/run.py in its own venv (PYTHONPATH = the Calculon checkout).

    python calculon_run.py search  '{"procs": 4096, "batch": 8192, "logging": "shipped", "tuples": 40}'
    python calculon_run.py layouts '{"procs": 4096, "layouts": [{...}, ...]}'

``search``: Calculon's own search loop (``OptimalExecution.search``, unmodified) over a fixed,
seeded sample of the (tp, pp, interleaving, recompute, optimizer sharding, TP comm type) tuples
its ``llm-optimal-execution`` command enumerates for Megatron-1T on H100 (float16, the bf16
stand-in of its system file). ``logging``: "shipped" (the root logger at INFO with a stdout
handler, as ``bin/calculon`` sets it; every execution builds its own DEBUG logger) or
"warning" (``logging.disable(logging.INFO)``: loggers at WARNING). Prints JSON: CPU seconds of
this process, every execution counted, and the fully evaluated ones (no ``Llm.Error``).
``layouts``: step time and memory of given layouts (Calculon's stats, unmodified).
"""
import io
import json
import logging
import os
import random
import sys
import time

import calculon
from calculon.llm import Llm
from calculon.llm.optimal_execution import OptimalExecution
from calculon.system import System
from calculon.util import arg_true_false_all

HERE = os.environ["CALCULON_DIR"]
APP = os.path.join(HERE, "models", "megatron-1T.json")
SYSTEM = os.path.join(HERE, "systems", "h100_80g_nvl8.json")
DTYPE = "float16"


def _inputs():
    app = Llm.Application(calculon.io.read_json_file(APP))
    syst = System(calculon.io.read_json_file(SYSTEM))
    return app, syst


def search(cfg):
    app, syst = _inputs()
    procs, batch = int(cfg["procs"]), int(cfg["batch"])
    params = []
    for tp in Llm.get_all_tensor_parallelisms(procs, app.hidden, app.attn_heads):
        for pp in Llm.get_all_pipeline_parallelisms(procs, tp, app.num_blocks):
            dp = Llm.get_data_parallelism(procs, tp, pp)
            for ppint in Llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                bs = OptimalExecution.get_batch_size(dp, batch)
                if bs is None:
                    continue
                for rc in ["full", "attn_only", "none"]:
                    for osh in ([True, False] if dp > 1 else [False]):
                        for tpc in ["ar", "p2p_rs_ag", "rs_ag"]:
                            params.append((False, 1, False, procs, batch, DTYPE, app, syst, tp, pp, dp, ppint,
                                           bs, rc, osh, tpc, arg_true_false_all("true"), False, True, True))
    random.Random(int(cfg.get("seed", 0))).shuffle(params)
    sample = params[: int(cfg["tuples"])]
    root = logging.getLogger()
    sink = io.StringIO()  # the shipped stdout handler, kept off the JSON on stdout
    root.addHandler(logging.StreamHandler(stream=sink))
    root.setLevel("INFO")
    if cfg["logging"] == "warning":
        logging.disable(logging.INFO)
    t0, w0 = time.process_time(), time.perf_counter()
    exe = good = 0
    best = []
    for p in sample:
        cbest, ec, gec, _bec, _tp, _pp = OptimalExecution.search(*p)
        exe += ec
        good += gec
        best = OptimalExecution.update_list(best, cbest, 1)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    logging.disable(logging.NOTSET)
    out = {"cpu_s": cpu, "wall_s": wall, "executions": exe, "fully_evaluated": good,
           "tuples": len(sample), "tuples_total": len(params)}
    if best:
        out["best_sample_rate"] = best[0][0]
        ex = best[0][1]
        out["best"] = {k: ex[k] for k in ("tensor_par", "pipeline_par", "data_par", "microbatch_size",
                                          "pipeline_interleaving", "activation_recompute",
                                          "optimizer_sharding", "tensor_par_comm_type")}
    return out


def layouts(cfg):
    app, syst = _inputs()
    rows = []
    logging.disable(logging.INFO)
    for lay in cfg["layouts"]:
        exe = {"num_procs": int(cfg["procs"]), "tensor_par": lay["tp"], "pipeline_par": lay["pp"],
               "data_par": lay["dp"], "tensor_par_net": 0, "pipeline_par_net": 1 if lay["pp"] > 1 else 0,
               "data_par_net": 1 if lay["dp"] > 1 else 0, "batch_size": lay["gbs"],
               "microbatch_size": lay["mbs"], "datatype": DTYPE, "fused_activation": True,
               "attention_type": "multihead", "activation_recompute": lay["recompute"],
               "pipeline_interleaving": lay["vp"], "optimizer_sharding": lay["zero"] >= 1,
               "tensor_par_comm_type": "rs_ag" if lay["sp"] else "ar", "tensor_par_overlap": "none",
               "seq_par_ag_redo": False, "data_par_overlap": lay["dp"] > 1, "weight_offload": False,
               "activations_offload": False, "optimizer_offload": False, "training": True}
        try:
            model = Llm(app, logging.Logger("sub"))
            model.compile(syst, Llm.Execution.from_json(exe))
            model.run(syst)
            st = model.get_stats_json(False)
            rows.append({"step_s": st["total_time"], "memory_bytes": st["proc_mem_tier1_cap_req"],
                         "sample_rate": st["sample_rate"]})
        except Llm.Error as exc:
            rows.append({"error": str(exc).splitlines()[0][:200]})
    return {"rows": rows}


if __name__ == "__main__":
    mode, cfg = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"search": search, "layouts": layouts}[mode](cfg)))
