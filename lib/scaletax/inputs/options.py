"""The named choices of a training run beside its layout (``scaletax.inputs.layout``): the words a
scenario, a runs-table cell or a caller may use, and the defaults they take. What each choice does
is the model's (the module named beside each); this module only says which choices exist, so
that the inputs are checked without importing the model.
"""
from __future__ import annotations

#: ASSUMPTION: bytes per GPU kept free for the CUDA context (~0.5-1 GiB), NCCL communicator
#: buffers (~1-2 GiB at scale) and caching-allocator fragmentation. Not from a source.
RESERVE_GIB = 4.0

#: Megatron-Core ``recompute_modules`` names this model understands (transformer_config.py).
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts")
#: ASSUMPTION: what "selective" recomputes with flash attention -- the modules whose
#: recomputation needs no large GEMM: the attention core (Korthikanti 2022 §5), the norms and
#: the MLA up-projection (DeepSeek-V3 arXiv 2412.19437 §3.2.3 recomputes exactly these two),
#: and the expert activation function (Megatron-Core "moe_act").
SELECTIVE_MODULES: tuple[str, ...] = ("core_attn", "layernorm", "mla_up_proj", "moe_act")
#: "selective" with ``attention="paper"``: the paper's selective recompute (attention core).
SELECTIVE_MODULES_PAPER: tuple[str, ...] = ("core_attn",)

#: Training schedules (runs column ``schedule``); the share of the MoE all-to-all each hides is
#: ``scaletax.model.comm.SCHEDULE_EP_OVERLAP``: "1f1b" Megatron-Core's default, "ep_overlap"
#: Megatron-Core's ``overlap_moe_expert_parallel_comm``, "dualpipe" DeepSeek-V3's DualPipe,
#: "unknown" the midpoint.
SCHEDULES: tuple[str, ...] = ("unknown", "1f1b", "ep_overlap", "dualpipe")
#: Software stacks (runs column ``stack``): "megatron" (Megatron-Core / Megatron-LM / NeMo /
#: Megatron-Bridge with Transformer Engine) or "fsdp" (PyTorch FSDP2: TorchTitan, llm-foundry);
#: what each overlaps is ``scaletax.model.comm.STACK_TP_OVERLAP``.
STACKS: tuple[str, ...] = ("megatron", "fsdp")
#: How a run's routed experts run their GEMMs (runs column ``expert_gemm``): "per_expert": one GEMM
#: call per local expert (Transformer Engine's ``GroupedLinear``, whose default backend issues one
#: cuBLAS GEMM per expert over a few streams: what Megatron-Core runs); "grouped": one kernel for all
#: of them (``torch._grouped_mm`` in the FSDP stacks; Megatron-Bridge 0.5's
#: ``cutedsl_fused_grouped_mlp`` inside a full-iteration CUDA graph); "auto": the stack's (megatron
#: per_expert, fsdp grouped). ``scaletax.model.perf.expert_call_layers`` counts the calls.
EXPERT_GEMMS: tuple[str, ...] = ("auto", "per_expert", "grouped")
#: How the pipeline stages split the model (runs column ``pp_split``, ``scaletax.model.perf.pipeline_split``):
#: "even" Megatron-Core's default (``account_for_embedding_in_pipeline_split`` and
#: ``account_for_loss_in_pipeline_split`` False, megatron-core 0.19.2 transformer_config.py:130-134):
#: L / pp transformer layers per stage, the embedding on the first and the output layer with the loss
#: on the last; "account" both flags True: the embedding and the loss each take one layer's slot,
#: (L + 2) / pp slots per stage (the Megatron-Bridge 0.6.2 Llama 3.1 405B and Qwen3-MoE recipes,
#: recipes/llama/h100/llama3.py:1229-1230, recipes/qwen/h100/qwen3_moe.py:261-262; the Llama 3 paper's
#: "one Transformer layer fewer on the first and the last stage"); "balanced" a custom
#: ``pipeline_model_parallel_layout`` that gives the last stage as many fewer layers as balances its
#: output layer best in whole layers (the DeepSeek-V3 recipe's [8] x 7 + [5 + MTP + loss] on 8 stages).
#: "auto": the split Megatron-Core accepts for the layout (``scaletax.model.perf.pipeline_split``).
PP_SPLITS: tuple[str, ...] = ("auto", "even", "account", "balanced")
#: The attention kernel (runs column ``attn_kernel``): "flash" (fused, scores kept on chip; every
#: stack since FlashAttention, Dao et al. 2022, arXiv 2205.14135) or "unfused" (Megatron-LM before
#: it, e.g. Narayanan et al. 2021, Korthikanti et al. 2022: batched QK^T and PV GEMMs over the full
#: s x s score matrix, masked, with the fused scale-mask-softmax and the attention dropout as
#: memory-bound kernels over the materialized scores).
#: "fa2": FlashAttention-2 kernels (PyTorch SDPA's flash backend, flash-attn 2: TorchTitan and
#: llm-foundry on Hopper), slower than "flash" (cuDNN fused attention, Transformer Engine) on Hopper.
ATTN_KERNELS: tuple[str, ...] = ("flash", "fa2", "unfused")
#: MoE token dispatchers (runs column ``moe_dispatcher``, scenario ``training.software.moe_dispatcher``)
#: and the ``scaletax.model.perf.prepare`` ``ep_dispatch`` each runs: Megatron-Core's flex dispatcher
#: (DeepEP or HybridEP backend) deduplicates per NVLink domain as DeepEP does ("dedup"); its alltoall
#: dispatcher sends one copy per routed expert.
DISPATCHERS: dict[str, str] = {"deepep": "dedup", "flex": "dedup", "alltoall": "alltoall"}
