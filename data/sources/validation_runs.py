"""Build data/published_runs_validation.csv from published_runs_validation.csv (this folder).

The source table (a verbatim copy of ``../shared/data/published_runs_validation.csv``: 72 published
pre-training runs, every row's ``notes`` giving its source, arithmetic and caveats) lacks the runs
schema's columns that say how a run was trained beyond its layout. This script adds them, filled
ONLY from what the row's notes or its cited source state, or from the configuration NVIDIA
publishes for exactly that benchmark (a Megatron-Bridge recipe of the same model, GPU, GPU count
and precision whose stated layout columns all equal the row's: the project's rule for
``published_runs.csv``, ``data/sources/README.md``); every other cell stays blank, which means the
documented default (``runs.COLUMN_DEFAULTS``). Each filled cell is named, with where it came from,
in a sentence appended to the row's ``notes``. Every source column and every ``run_id`` is kept.

Regenerate (stdlib only)::

    python data/sources/validation_runs.py > data/published_runs_validation.csv

``tests/test_validation_runs.py`` checks the committed file against this script.
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "published_runs_validation.csv"

#: Columns of the runs schema the source table lacks, appended in this order.
ADDED: tuple[str, ...] = ("stack", "tp_comm_overlap", "moe_dispatcher", "schedule", "etp", "pp_split",
                          "fp8_param_gather", "recompute_modules", "gated", "tied_embeddings", "bias",
                          "same_run_as", "attn_kernel", "expert_gemm")

# --- where the fills come from --------------------------------------------------------------
_BRIDGE_062 = "megatron-bridge 0.6.2 recipe {} (data/bridge_recipes.csv), layout identical"
_TT_H100 = ("hardware h100_sxm_96gb_500w: the notes' Grand Teton H100 SXM with 96 GB HBM2e (2.4 TB/s) "
            "at a 500 W power limit (data/hardware.csv)")
_FSDP_TT = "stack fsdp: TorchTitan FSDP2 (notes)"
_FA2_TT = ("attn_kernel fa2: TorchTitan's attention is PyTorch SDPA, which tries FlashAttention-2 first "
           "(its fixed backend priority; huggingface/transformers#48163), and on GPUs below compute "
           "capability 10 TorchTitan asks for exactly that backend (pytorch/torchtitan#1196, "
           "torchtitan/models/attention.py: [FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH])")
_FLEX = (" (moe_dispatcher: the recipe's flex dispatcher with the HybridEP backend; schedule ep_overlap: "
         "overlap_moe_expert_parallel_comm true)")
_FUSED_MLP = ("; expert_gemm grouped: the recipe runs the whole iteration as one CUDA graph with Transformer "
              "Engine's fused grouped MLP (_enable_hybridep_full_iteration_mxfp8: cuda_graph_impl full_iteration, "
              "NVTE_CUTEDSL_FUSED_GROUPED_MLP=1; Megatron-Bridge 0.5.0, the 26.06 release, "
              "scripts/performance/configs/qwen/qwen3_workload_base_configs.py: QWEN3_30B_A3B_PRETRAIN_CONFIG_"
              "GB200_FP8_MX_V1 and GB300_FP8_MX_V1 set cutedsl_fused_grouped_mlp=True, cuda_graph_impl='full_iteration')")
_DSV3 = ("etp 1: no expert tensor parallelism in any DeepSeek-V3 recipe (data/bridge_recipes.csv); "
         "pp_split balanced: the DeepSeek-V3 recipes' custom pipeline_model_parallel_layout "
         "(set_deepseek_v3_pipeline_model_parallel_layout)")


def _recipe(name: str, fills: dict[str, str], extra: str = "") -> tuple[dict[str, str], str]:
    """Fills taken from the 0.6.2 recipe ``name`` with the row's layout (``extra``: what a value means)."""
    return fills, ", ".join(f"{k} {v}" for k, v in fills.items()) + ": " + _BRIDGE_062.format(name) + extra


#: Per run: {column: value} and the sentence saying where each value comes from.
FILLS: dict[str, tuple[dict[str, str], str]] = {}


def _add(run_id: str, fills: dict[str, str], why: str) -> None:
    if run_id in FILLS:
        raise ValueError(f"{run_id}: filled twice")
    FILLS[run_id] = (fills, why)


# Megatron-Bridge performance-table rows whose layout equals a 0.6.2 benchmark recipe
_add("mbridge26.04.01-Llama3.1-DGX-GB300-256-FP8",
     *_recipe("llama31_405b_pretrain_256gpu_gb300_fp8cs_config", {"recompute": "none", "fp8_param_gather": "true",
                                                                  "tp_comm_overlap": "true"}))
_add("mbridge26.04.01-Llama3.1-DGX-GB300-256-MXFP8",
     *_recipe("llama31_405b_pretrain_256gpu_gb300_fp8mx_config", {"recompute": "none", "fp8_param_gather": "true",
                                                                  "tp_comm_overlap": "true"}))
_add("mbridge26.04.01-Llama3.1-DGX-GB300-256-NVFP4",
     *_recipe("llama31_405b_pretrain_256gpu_gb300_nvfp4_config", {"recompute": "none", "fp8_param_gather": "false",
                                                                  "tp_comm_overlap": "false"}))
_add("mbridge26.04.01-Llama3-DGX-GB200-64-NVFP4",
     *_recipe("llama3_70b_pretrain_64gpu_gb200_nvfp4_config", {"recompute": "none", "fp8_param_gather": "false",
                                                               "tp_comm_overlap": "false"}))
_add("mbridge26.04.01-Llama3-DGX-GB300-64-FP8",
     *_recipe("llama3_70b_pretrain_64gpu_gb300_fp8cs_config", {"fp8_param_gather": "true"},
              "; recompute left unknown: the recipe recomputes nothing but offloads 20 layers' activations to the "
              "CPU (cpu_offloading, cpu_offloading_num_layers 20), which the runs schema does not state: the "
              "planner takes the least recompute that fits"))
_add("mbridge26.04.01-Llama3-DGX-GB300-64-NVFP4",
     *_recipe("llama3_70b_pretrain_64gpu_gb300_nvfp4_config", {"recompute": "none", "fp8_param_gather": "false"}))
_add("mbridge26.06-KimiK2-DGX-GB300-256-MXFP8",
     *_recipe("kimi_k2_pretrain_256gpu_gb300_fp8mx_config",
              {"recompute_modules": "mla_up_proj", "moe_dispatcher": "flex", "schedule": "1f1b", "etp": "1",
               "fp8_param_gather": "false", "pp_split": "balanced"},
              " (moe_dispatcher: the recipe's flex dispatcher with the HybridEP backend; schedule 1f1b: "
              "overlap_moe_expert_parallel_comm false; "
              "pp_split balanced: the recipe's custom pipeline layout, _get_kimi_k2_pipeline_layout)"))
_add("mbridge26.04.01-Qwen3235B-A22B-DGX-H100-256-FP8",
     *_recipe("qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config",
              {"recompute": "none", "moe_dispatcher": "alltoall", "schedule": "ep_overlap", "etp": "1",
               "fp8_param_gather": "true"}))
_add("mbridge26.04.01-Qwen3235B-A22B-DGX-B200-256-MXFP8",
     *_recipe("qwen3_235b_a22b_pretrain_256gpu_b200_fp8mx_config",
              {"vp": "3", "recompute": "none", "moe_dispatcher": "flex", "schedule": "ep_overlap", "etp": "1",
               "fp8_param_gather": "true"}, _FLEX))
for _gpu, _vp in (("GB200", "3"), ("GB300", "12")):
    _add(f"mbridge26.04.01-Qwen3235B-A22B-DGX-{_gpu}-256-MXFP8",
         *_recipe(f"qwen3_235b_a22b_pretrain_256gpu_{_gpu.lower()}_fp8mx_config",
                  {"recompute": "none", "moe_dispatcher": "flex", "schedule": "ep_overlap", "etp": "1",
                   "fp8_param_gather": "true"}, _FLEX))
_add("mbridge26.04.01-GPT-OSS120B-DGX-H100-64-BF16",
     *_recipe("gpt_oss_120b_pretrain_64gpu_h100_bf16_config",
              {"recompute_modules": "layernorm;moe_act", "moe_dispatcher": "alltoall", "schedule": "1f1b", "etp": "1"}))
_add("mbridge26.04.01-GPT-OSS120B-DGX-B200-64-BF16",
     *_recipe("gpt_oss_120b_pretrain_64gpu_b200_bf16_config",
              {"recompute_modules": "layernorm;moe_act", "moe_dispatcher": "alltoall", "schedule": "1f1b", "etp": "1"}))
_add("mbridge26.04.01-GPT-OSS120B-DGX-GB200-64-BF16",
     *_recipe("gpt_oss_120b_pretrain_64gpu_gb200_bf16_config",
              {"recompute_modules": "layernorm;moe_act", "moe_dispatcher": "alltoall", "schedule": "ep_overlap",
               "etp": "1"}))
_add("mbridge26.04.01-GPT-OSS120B-DGX-GB300-64-BF16",
     *_recipe("gpt_oss_120b_pretrain_64gpu_gb300_bf16_config",
              {"recompute": "none", "moe_dispatcher": "alltoall", "schedule": "1f1b", "etp": "1"}))
for _gpu in ("gb200", "gb300"):
    _add(f"bridge2606_qwen3_30b_a3b_{_gpu}x8_ep8_mxfp8",
         *_recipe(f"qwen3_30b_a3b_pretrain_8gpu_{_gpu}_fp8mx_config",
                  {"moe_dispatcher": "flex", "schedule": "ep_overlap", "etp": "1", "fp8_param_gather": "true",
                   "expert_gemm": "grouped"},
                  _FLEX + _FUSED_MLP))

# DeepSeek-V3 rows without an identical recipe: what the notes state, and what every recipe states
for _gpu in ("B300", "GB300"):
    _add(f"mbridge26.04.01-DeepSeek-V3671B-DGX-{_gpu}-256-MXFP8",
         {"recompute_modules": "mla_up_proj", "etp": "1", "pp_split": "balanced"},
         "recompute_modules mla_up_proj: the notes; " + _DSV3)

# papers: as data/heldout_runs.csv states the same runs
for _rid, _held in (("llama3-405b-8192gpu-cp1", "llama3-paper-405b-8k-h100-bf16"),
                    ("llama3-405b-16384gpu-cp1", "llama3-paper-405b-16k-h100-bf16"),
                    ("llama3-405b-16384gpu-cp16", "llama3-paper-405b-16k-131k-h100-bf16")):
    _add(_rid, {"mbs": "1", "pp_split": "account", "same_run_as": _held},
         f"the run of data/heldout_runs.csv {_held} (same table of the Llama 3 paper): mbs 1 (16M tokens per batch "
         "over DP ranks of one micro-batch each, as there), pp_split account (arXiv 2407.21783 Sec. 3.3.2: one layer "
         "fewer on the first and the last stage)")
_add("deepseek-v3-pretrain",
     {"gbs": "15360", "mbs": "1", "moe_dispatcher": "deepep", "schedule": "dualpipe", "etp": "1",
      "pp_split": "balanced", "same_run_as": "deepseek-v3-paper-2048-h800-fp8"},
     "the run of data/heldout_runs.csv deepseek-v3-paper-2048-h800-fp8 (same report): gbs 15360 (arXiv 2412.19437 "
     "Sec. 4.2, after the batch ramp), mbs 1 (not stated), moe_dispatcher deepep (its own all-to-all kernels, one "
     "copy per node), schedule dualpipe (Sec. 3.2.1), etp 1 (no tensor parallelism, Sec. 3.2), pp_split balanced "
     "(DualPipe puts the first and last stage on the same GPUs)")

# TorchTitan (FSDP2) rows: the stack, and the H100 variant the notes describe
_TT = {
    "tt2412_llama31_8b_h100x128_fsdp_bf16": ({}, ""),
    "tt2412_llama31_8b_h100x8_fsdp4_cp2_64k_fp8": ({}, ""),
    "tt2412_llama31_70b_h100x256_fsdp32_tp8_fp8": ({"tp_comm_overlap": "false"}, "tp_comm_overlap false: 'no async TP "
                                                   "in this row' (notes)"),
    "tt2506_llama31_70b_h100x256_fsdp32_tp8_bf16": ({"tp_comm_overlap": "false"}, "tp_comm_overlap false: vanilla "
                                                    "(non-async) TP (notes)"),
    "tt2412_llama31_405b_h100x512_fsdp8_tp8_pp8_fp8": ({"tp_comm_overlap": "true", "vp": "2", "mbs": "4"},
                                                       "tp_comm_overlap true: async TP (notes); vp 2, mbs 4: the "
                                                       "torchtitan defaults at 9dec370 the notes give (2 stages per "
                                                       "rank, 8 micro-batches), unverified there"),
    "tt2412_llama31_405b_h100x512_4d_seq32k_fp8": ({"tp_comm_overlap": "true", "mbs": "1"},
                                                   "tp_comm_overlap true: async TP (notes); mbs 1: the torchtitan "
                                                   "default the notes give (8 micro-batches), unverified there"),
}
for _rid, (_f, _why) in _TT.items():
    _add(_rid, {"hardware": "h100_sxm_96gb_500w", "stack": "fsdp", "attn_kernel": "fa2", **_f},
         "; ".join(x for x in (_TT_H100, _FSDP_TT, _FA2_TT, _why) if x))
_add("tt_trainy2506_llama31_8b_h200x64_fsdp_fp8", {"stack": "fsdp", "attn_kernel": "fa2"},
     "stack fsdp: TorchTitan FSDP2 (notes; stock H200 SXM, no power cap stated); " + _FA2_TT)

# llm-foundry (Composer / PyTorch FSDP FULL_SHARD) rows
for _rid in ("mpt70b_h100x512_fsdp_bf16", "mpt7b_h100x512_fsdp_bf16", "mpt70b_a100x64_fsdp_bf16"):
    _add(_rid, {"stack": "fsdp", "gated": "false", "tied_embeddings": "true", "bias": "false"},
         "stack fsdp: Composer / PyTorch FSDP FULL_SHARD (notes); gated false, tied_embeddings true, bias false: "
         "'MPT = MHA, GELU 4h MLP (non-gated), tied embeddings, no biases' (notes)")

# MLPerf GPT-3 and Llama 3.1 8B rows that state FP8 parameters
for _rid in ("mlperf41_gpt3_oracle_h100x1536", "mlperf51_llama31_8b_cisco_h100x64"):
    _add(_rid, {"fp8_param_gather": "true"}, "fp8_param_gather true: FP8_PARAMS in the submission's config (notes)")

# FlagPerf Mixtral: Megatron-Core 0.6 with EP 1 (the README's layout)
_add("flagperf_mixtral_8x7b_h100x32_tp8_pp2_bf16", {"moe_dispatcher": "alltoall"},
     "moe_dispatcher alltoall: Megatron-Core 0.6 token dispatcher with EP 1 (notes), no DeepEP")

# NeMo AutoModel (FSDP2 + EP with DeepEP)
for _rid in ("automodel_qwen3_30b_a3b_h100x8_ep8_bf16", "automodel_gptoss_20b_h100x8_ep8_bf16",
             "automodel_deepseek_v3_671b_h100x256_pp4_ep64_bf16"):
    _add(_rid, {"stack": "fsdp", "moe_dispatcher": "deepep", "etp": "1"},
         "stack fsdp: NeMo AutoModel's PyTorch FSDP2 (notes); moe_dispatcher deepep: DeepEP dispatcher (notes); etp 1: "
         "experts not tensor-parallel (no TP in the layout)")

# Megatron MoE model zoo
_add("mzoo_qwen3_235b_a22b_h100x256_tp2_ep32_pp8_bf16",
     {"moe_dispatcher": "deepep", "schedule": "ep_overlap", "etp": "1", "recompute_modules": "layernorm;moe_act"},
     "moe_dispatcher deepep, schedule ep_overlap ('EP A2A/1F1B overlap'), etp 1, recompute_modules layernorm;moe_act "
     "('norm+act'): the notes")


def build(source: Path = SOURCE) -> str:
    """The text of data/published_runs_validation.csv."""
    with source.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    missing = set(FILLS) - {r["run_id"] for r in rows}
    if missing:
        raise ValueError(f"fills for runs not in {source.name}: {sorted(missing)}")
    out_cols = header + [c for c in ADDED if c not in header]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=out_cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        new = {c: r.get(c, "") for c in out_cols}
        fills, why = FILLS.get(r["run_id"], ({}, ""))
        for col, val in fills.items():
            if col not in out_cols:
                raise ValueError(f"{r['run_id']}: unknown column {col!r}")
            if new[col] not in ("", "unknown") and col not in ("hardware",):
                raise ValueError(f"{r['run_id']}: column {col!r} is stated in the source ({new[col]!r}); not refilled")
            new[col] = val
        if why:
            new["notes"] = f"{new['notes']}; columns filled by data/sources/validation_runs.py: {why}"
        w.writerow(new)
    return buf.getvalue()


if __name__ == "__main__":
    sys.stdout.write(build())
