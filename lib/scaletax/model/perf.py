"""Step time of a training step, vectorized over layouts: compute + memory-bound work + pipeline
bubble + exposed communication; tokens/s, model TFLOP/s and MFU per GPU, each with a low/high band.

Public API
----------
The calibrated parameters it evaluates with (``Efficiency``, ``EfficiencyBand``, ``default_band``)
are in :mod:`scaletax.model.efficiency`.

- ``prepare(model, layouts, precision, gpu, topo=None, wire=None, *, recompute_fraction=None,
  ep_dispatch="dedup", fp4_bf16_layers=2) -> StepInputs``: everything that does not depend on the
  efficiencies (FLOPs by kind, GEMM shapes, bytes, per-group communication), arrays over a
  ``LayoutArray``; ``StepInputs.concat`` joins inputs of different models and GPUs.
- ``evaluate(inputs, eff=None, overlap=None) -> StepTime``: step time and its breakdown;
  ``evaluate_band(inputs, band=None) -> Prediction`` (value, low, high).
- ``step_time(model, layouts, precision, gpu, topo=None, eff=None, ...) -> StepTime`` and
  ``predict(...) -> Prediction``: prepare + evaluate.
- ``least_recompute(model, layouts, gpu, precision) -> (code, full fraction, GiB)``.
- Helpers: ``memory_bound_bytes``, ``moe_permute_bytes``, ``ep_dedup_factor``, ``distinct_groups``,
  ``gemm_reference_size``,
  ``padded_vocab``, ``compute_precision``.

Model (per GPU of the heaviest pipeline stage, per step; seconds, FLOP, bytes)
------------------------------------------------------------------------------
::

    step_s    = compute_s + other_s + bubble_s + exposed_comm_s
    compute_s = sum_k FLOP_k / (peak_k x ceiling_k) x (1 + gemm_roofline x n_ref_k x S_k)
    other_s   = memory_overhead x (bytes of all micro-batches + bytes once per step) / HBM B/s
                + moe_overhead x MoE routing bytes / HBM B/s + layer_overhead_us x layers of the stage x m
    bubble_s  = (pp - 1) / (vp m) x (compute_s + micro-batch part of other_s)
    exposed_comm_s = comm.exposed_comm(step traffic, t_compute = compute_s + micro-batch other_s,
                                       comm.Overlap() fractions x overlap_scale)

- FLOPs: linear layers 6 N per token (2 forward + 4 backward, Narayanan et al. 2021, arXiv
  2104.04473, eq. 3; N counts norm weights as ``models.active_params`` does), attention core as
  flash attention executes it: a (s + B) / 2 causal score elements per token and layer (B the
  key/value tile, :data:`FA_CAUSAL_TILE`: diagonal tiles computed in full), forward
  2 (d_qk + d_v) FLOPs each, backward 6 d_qk + 4 d_v (S recomputed; Dao 2023, arXiv 2307.08691,
  Alg. 2), timed by :func:`attention_seconds` (tensor cores plus the softmax exp on the
  special-function units, :data:`SFU_RATIO`; FlashAttention-3, arXiv 2407.08608 §3.1) with the
  kernel's constants measured on an H200 (:data:`ATTN_KERNEL_CONSTANTS`); grouped
  expert GEMMs pay half a :data:`GROUPED_TILE_M` tile of padding per local expert and run at the
  pace of the EP rank with the most routed tokens (``comm.moe_rank_imbalance``: expected max / mean
  under uniform routing); recomputation adds the forward again
  (selective: attention core and MLA up-projections, Korthikanti et al. 2022, arXiv 2205.05198,
  §5; full: every layer's forward; ``recompute_fraction`` of the layers full, the rest
  selective, or with ``recompute_rest`` 0 not recomputed: Megatron-Core's ``recompute_method=block``
  with ``recompute_num_layers``, Megatron-LM ``TransformerBlock._checkpointed_forward``). The output layer uses Megatron's padded vocabulary (:func:`padded_vocab`).
  Per GPU: tokens per step / (tp cp dp) x FLOPs per token of the heaviest stage (ceil(L/pp)
  layers; balanced routing spreads expert FLOPs evenly); embedding and output layer count 1/pp
  per stage (Megatron ``account_for_embedding/loss_in_pipeline_split``).
- Which peak: transformer linear layers run in the recipe format; the attention core (flash
  attention), the output layer and, for 4-bit recipes, the first and last layer
  (:data:`FP4_BF16_LAYERS`) run at the 16-bit peak (ASSUMPTION: Transformer Engine defaults, FP8
  dot-product attention off, output layer outside the low-precision region).
- Ceilings: ``gemm_ceiling[format class] x family_factor[family]`` (Hopper = 1; the 4-bit
  ceiling is absolute: FP4 tensor cores start with Blackwell; a fold of ``calibrate`` without a
  4-bit run takes the 8-bit ceiling x the Blackwell factor).
- GEMM shape (additive roofline, Williams et al. 2009): a GEMM M x K x N per GPU (after TP/ETP,
  CP and the MoE token split) with n = 3 / (1/M + 1/K + 1/N) takes FLOPs / (peak x ceiling) x
  (1 + k n_ref / n), n_ref = 1.5 x bytes per element x ridge point (:func:`gemm_reference_size`);
  ``S_k`` is the FLOP-weighted mean of 1/n of the GEMMs of kind k (exact for the per-GEMM rule).
  Flash attention keeps its score tiles on chip: no shape term.
- Memory-bound work (:func:`memory_bound_bytes`): norms, residual adds, rotary embedding,
  activation functions, low-precision casts, MoE routing and permutation, cross-entropy, the
  context-parallel merges of partial attention results; per step the Adam update,
  gradient-buffer reset and weight casts. A lower bound on bytes moved;
  ``memory_overhead`` turns it into time (``moe_overhead`` the MoE routing bytes').
- A fixed time per layer pass (``layer_overhead_us``, each layer's forward and backward per
  micro-batch on the slowest stage, ``StepInputs.layer_passes``): kernel gaps and tails, whatever
  the work; fitted below 12 idle GEMM calls (``calibrate.gemm_call_floor_us``). An MoE layer whose
  routed experts run one cuBLAS call each (Megatron-Core through Transformer Engine's
  ``GroupedLinear``) counts its 6 (E / ep - 1) extra calls in dense layers' worth
  (:func:`expert_call_layers`); a context-parallel ring its 2 (cp - 1) extra attention calls
  (:func:`ring_call_layers`).
- Communication: :mod:`scaletax.model.comm` per group, evaluated once per distinct pattern; the MoE
  all-to-all re-timed for per-domain deduplication (:func:`ep_dedup_factor`, DeepEP-class); the
  context-parallel ring hides only under the attention time (Ring Attention, arXiv 2310.01889).
- Family factors: Blackwell Ultra's is Blackwell's times the ratio of rated power per peak FLOP
  (``efficiency.power_per_flop``, written by ``calibrate``).
- Pipeline bubble: (pp - 1) / (vp m) of the per-micro-batch work for 1F1B and the interleaved
  schedule (Narayanan et al. 2021, §2.2).
- MFU = model FLOPs per token (no recompute, causal, unpadded vocabulary; PaLM, Chowdhery et al.
  2022, arXiv 2204.02311, App. B) x tokens/s per GPU / dense peak of the precision; HFU counts
  the FLOPs executed (recompute, padded vocabulary, heaviest stage).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

import numpy as np

from scaletax.inputs import hardware, pipeline_layout, recipes, runs
from scaletax.inputs.layout import Layout, LayoutArray, LayoutGrid
from scaletax.inputs.models import Model
from scaletax.inputs.options import ATTN_KERNELS, EXPERT_GEMMS, PP_SPLITS
from scaletax.model import comm, memory
from scaletax.model.comm import Overlap, WireFormat
from scaletax.model.efficiency import (FAMILIES, FORMAT_CLASSES, FP4_CLASS, Efficiency, EfficiencyBand, default_band,
                                       default_efficiency)
from scaletax.model.topology import Topology

#: Megatron-LM pads the vocabulary to a multiple of ``make_vocab_size_divisible_by`` (default
#: 128) times the tensor-parallel size (megatron/training/tokenizer, _vocab_size_with_padding).
VOCAB_DIVISOR = 128
#: ASSUMPTION: 4-bit recipes keep the first and the last transformer layer in BF16, Megatron-LM's
#: ``--first-last-layers-bf16`` defaults (``--num-layers-at-start-in-bf16 1``,
#: ``--num-layers-at-end-in-bf16 1``). The NVFP4 pre-training study (arXiv 2509.25149, §4.1)
#: kept ~15% of the blocks in BF16 for accuracy over 10T tokens; pass ``fp4_bf16_layers`` to
#: :func:`prepare` to model that recipe. 8- and 16-bit recipes: all layers in the recipe format.
FP4_BF16_LAYERS = 2
#: Tensor-core FLOPs per special-function (exp) operation at the 16-bit dense peak, per GPU family:
#: flash attention's softmax needs one exp per score element forward and one backward. Hopper:
#: 989 TFLOP/s of FP16 matmul against 3.9 TFLOP/s of special functions (Shah et al. 2024,
#: FlashAttention-3, arXiv 2407.08608, Sec. 3.1), ratio 256. Ampere: 16 exp per clock per SM against
#: 2048 FP16 FLOP per clock per SM (A100), 128. Blackwell: twice Hopper's tensor FLOP per clock per
#: SM with the same 16 exp per clock, 512. Blackwell Ultra: twice Blackwell's exp throughput ("2x
#: attention-layer acceleration", NVIDIA Blackwell Ultra), 256. Rubin: ASSUMPTION, Blackwell Ultra's.
SFU_RATIO: dict[str, float] = {"ampere": 128.0, "hopper": 256.0, "blackwell": 512.0, "blackwell_ultra": 256.0,
                               "rubin": 256.0}
#: Flash-attention kernels by their constants in :func:`attention_seconds`, MEASURED on one H200
#: (data/measured/attention_h200.csv, benchmarks/device/moe_kernels_h200.py: causal
#: scaled_dot_product_attention, head sizes 64 and 128, sequences 4k-64k) and fitted there by
#: ``scaletax.fit.kernels.fit_attention`` (a test holds these to a refit):
#: (tensor-core fraction of the 16-bit GEMM ceiling, share of the forward softmax exp hidden under
#: the GEMMs, backward efficiency relative to the forward's tensor-core rate, backward tile: extra
#: score elements per query x 2 that the backward pays, a fixed cost per query row).
#: "flash": cuDNN fused attention (Transformer Engine's FusedAttention, what Megatron-Core runs):
#: forward at the GEMM ceiling with almost no exp hidden (0.58 of peak at head size 128, 0.45 at 64),
#: backward 0.44-0.53 of peak from 4k to 64k. "fa2": FlashAttention-2 (PyTorch SDPA's flash backend,
#: flash-attn 2; TorchTitan's choice below compute capability 10, pytorch/torchtitan#1196), which
#: runs Ampere-style mma.sync on Hopper: 0.30-0.33 of peak. Within 9% of every measured point,
#: 2k included (out of the fit). "fa2" is a Hopper penalty: on Ampere FlashAttention-2 is the native
#: kernel and on Blackwell the stacks run cuDNN (torchtitan#1196), so elsewhere it takes "flash"'s.
ATTN_KERNEL_CONSTANTS: dict[str, tuple[float, float, float, float]] = {
    "flash": (1.046, 0.126, 0.756, 1152.0),
    "fa2": (0.464, 0.45, 0.994, 1312.0),
}
#: The GPU families where "fa2" differs from "flash" (see :data:`ATTN_KERNEL_CONSTANTS`).
FA2_FAMILIES: tuple[str, ...] = ("hopper",)
#: "flash" on Blackwell and Blackwell Ultra: NVIDIA's published cuDNN attention figures on GB200
#: and GB300 (data/kernel_benchmarks.csv, cudnn-frontend's SDPA training benchmark, causal; head
#: size 128 at 8k and 32k, DeepSeek-V3's 192 / 128 heads at 4k: the two shapes separate the
#: tensor-core fraction from the exponential's share), fitted by ``scaletax.fit.kernels.fit_published``
#: under the calibrated family factors: the forward hides its exponential entirely (the fit sits at
#: that bound; Hopper's cuDNN hides 13%) and the backward runs at about the forward's rate (Hopper
#: 0.76); within 13% of every figure fitted. At 2k, out of the fit, the forward is 20-35% fast.
#: Rubin: ASSUMPTION, Blackwell Ultra's. Other families (Ampere) take :data:`ATTN_KERNEL_CONSTANTS`.
ATTN_FAMILY_CONSTANTS: dict[str, tuple[float, float, float, float]] = {
    "blackwell": (1.018, 1.0, 1.184, 1008.0),
    "blackwell_ultra": (1.052, 1.0, 1.036, 1568.0),
    "rubin": (1.052, 1.0, 1.036, 1568.0),
}


def attention_constants(kernel: str, family: str) -> tuple[float, float, float, float]:
    """(tensor-core fraction, forward exp share hidden, backward efficiency, backward tile) of the
    attention ``kernel`` ("flash" or "fa2") on a GPU of ``family``."""
    if kernel == "fa2" and family in FA2_FAMILIES:
        return ATTN_KERNEL_CONSTANTS["fa2"]
    return ATTN_FAMILY_CONSTANTS.get(family, ATTN_KERNEL_CONSTANTS["flash"])
#: Key/value tile width of a causal flash-attention kernel: tiles crossing the diagonal are computed
#: in full and masked, so a causal kernel over s positions computes s^2 / 2 + s B / 2 score elements,
#: B / 2 per query beyond the causal count (FlashAttention-3 hopper/tile_size.h: 128 x 128 tiles for
#: causal hdim 64-128; ASSUMPTION: cuDNN's fused attention the same). With context parallelism the
#: load-balanced split keeps one causal kernel per rank, over its two chunks: B / 2 per query too.
FA_CAUSAL_TILE = 128
#: ASSUMPTION: row tile of the grouped expert GEMM (CUTLASS / cuBLAS grouped GEMM on Hopper and
#: Blackwell: 128-row tiles). Each local expert's token count is padded to whole tiles; with
#: ragged counts the expected padding is half a tile per expert and GEMM (tile quantization).
GROUPED_TILE_M = 128
#: Adam step per parameter of the local optimizer shard: read fp32 grad, master, m, v (16 B),
#: write master, m, v (12 B) and the 16-bit parameter (2 B) (Megatron distributed optimizer).
ADAM_BYTES = 30.0
#: Main-gradient buffer reset once per step, per local parameter (Megatron DDP grad buffer, in the
#: recipe's gradient dtype: ``recipes.GRAD_BYTES``).
GRAD_ZERO_BYTES = recipes.GRAD_BYTES
#: HBM bytes per element of one context-parallel partial-result merge: read the running result,
#: read the step's partial result, write the running result, 16-bit each (Transformer Engine
#: ``AttnFuncWithCPAndKVP2P``, attention/dot_product_attention/context_parallel.py: forward
#: ``flash_attn_fwd_out_correction`` of ``out`` per step, backward ``dq.add_`` and ``dkv.add_``).
CP_MERGE_BYTES = 6.0
#: Share of a rank's tokens a context-parallel step after the first works on, averaged over ranks:
#: with the load-balanced split into 2 cp chunks, rank r's steps from earlier ranks (r of them) use
#: all its queries against half the received K/V, the later ones (cp - 1 - r) half its queries against
#: all of it (Megatron-Core / TE causal load balancing): the merged results are 1 (full) or 1/2 (half)
#: of the rank's rows, on average 3/4.
CP_STEP_SHARE = 0.75
ACT = 2.0  # bytes per 16-bit activation element


# =========================================================================================
# Helpers
# =========================================================================================


def compute_precision(precision: recipes.Recipe) -> recipes.Recipe:
    """The 16-bit recipe whose peak runs the 16-bit parts (attention, output layer)."""
    return precision.half_recipe


def padded_vocab(vocab, tp):
    """Megatron's padded vocabulary: the next multiple of 128 * tp (vectorized)."""
    div = VOCAB_DIVISOR * np.asarray(tp, dtype=np.int64)
    return (-(-np.asarray(vocab, dtype=np.int64) // div)) * div


def gemm_reference_size(gpu: hardware.GPU, precision: recipes.Recipe) -> float:
    """GEMM harmonic-mean size n_ref (elements) at which operand traffic equals math time.

    A GEMM M x K x N moves b (MK + KN + MN) bytes for 2 MKN FLOPs: intensity 2 n / (3 b) FLOP/B
    with n = 3 / (1/M + 1/K + 1/N). Its time at peak P and HBM bandwidth B, math plus traffic
    (Williams et al. 2009, roofline, additive form), is FLOPs / P x (1 + n_ref / n) with
    n_ref = 1.5 b P / B = 1.5 b x ridge point. The calibrated ``gemm_roofline`` scales n_ref
    (1: operand traffic not overlapped at all; < 1: partly hidden by on-chip reuse).
    """
    return 1.5 * precision.operand_bytes * gpu.peak_flops(precision) / gpu.hbm_bw


def power_scale(gpu: hardware.GPU) -> float:
    """Sustained tensor-core clock of a power-limited variant (``hardware.GPU.variant_of``) relative to
    its base part: min(1, rated power / the base part's rated power)^(1/3); 1 for a part of its own.

    Under heavy GEMM load a Hopper or Blackwell GPU runs at its power limit, and dynamic power is
    P = C V^2 f. Two bounds: the voltage falls with the clock (P ~ f^3, the rule used here: Meta's
    500 W H100 SXM, ``h100_sxm_96gb_500w``, sustains (500 / 700)^(1/3) = 0.89 of the stock clock),
    or the voltage sits at its floor (P ~ f, 0.71). ASSUMPTION, chosen on the measurements: with the
    attention kernels measured (``ATTN_KERNEL_CONSTANTS``; TorchTitan runs FlashAttention-2 on
    Hopper), refitted, the seven TorchTitan rows come out +2% to +13% fast out of sample (leave one
    source out) with P ~ f^3 and -8% to -13% slow with P ~ f, and the validation table's median
    error is 7.1% against 8.2%. (Before the attention kernels were measured, the linear rule won:
    it stood in for TorchTitan's slower attention.) Blackwell Ultra against Blackwell is another
    rule (``efficiency.power_per_flop``): same silicon, more power per peak FLOP."""
    g = hardware.check(gpu)
    if not g.variant_of:
        return 1.0
    return min(1.0, g.tdp_w / hardware.get(g.variant_of).tdp_w) ** (1.0 / 3.0)


@lru_cache(maxsize=256)
def _topology(gpu: hardware.GPU) -> Topology:
    """``Topology.from_gpu(gpu)``, built once per GPU (a frozen, hashable record)."""
    return Topology.from_gpu(gpu)


@dataclass(frozen=True)
class _GPUTerms:
    """What :func:`prepare` reads of the GPU: dense peaks of the recipe format and of 16 bits
    (FLOP/s), the topology, :data:`SFU_RATIO`, the family's index in :data:`FAMILIES`, the GEMM
    reference sizes (:func:`gemm_reference_size`) and HBM B/s; scalars for one GPU, per-layout
    arrays (and a topology of arrays) for one GPU per layout."""

    peak_fmt: Any
    peak_16: Any
    topo: Topology
    sfu_ratio: Any
    fam_idx: Any
    n_ref_fmt: Any
    n_ref_16: Any
    hbm_bw: Any
    clock: Any = 1.0

    @classmethod
    def one(cls, gpu: hardware.GPU, precision: recipes.Recipe) -> "_GPUTerms":
        g = hardware.check(gpu)
        half = compute_precision(precision)
        return cls(peak_fmt=g.peak_flops(precision), peak_16=g.peak_flops(half), topo=_topology(g),
                   sfu_ratio=SFU_RATIO[g.family], fam_idx=FAMILIES.index(g.family),
                   n_ref_fmt=gemm_reference_size(g, precision), n_ref_16=gemm_reference_size(g, half), hbm_bw=g.hbm_bw,
                   clock=power_scale(g))


#: Topology fields :func:`_gpu_terms` gathers per layout.
_TOPO_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Topology) if f.name != "name")


def _gpu_terms(gpu, precision: recipes.Recipe, n: int) -> _GPUTerms:
    """:class:`_GPUTerms` of ``gpu``: one ``hardware.GPU``, or a sequence of ``n``, one per layout
    (each distinct GPU's terms computed once; the values gathered per layout, so every formula of
    :func:`prepare` runs elementwise as it does for one GPU)."""
    if not isinstance(gpu, (list, tuple)):
        return _GPUTerms.one(gpu, precision)
    if len(gpu) != n:
        raise ValueError(f"gpu: {len(gpu)} GPUs for {n} layouts (give one GPU, or one per layout)")
    codes: dict = {}
    inv = np.array([codes.setdefault(id(x), len(codes)) for x in gpu], dtype=np.int64)
    first: dict = {}
    for x in gpu:
        first.setdefault(id(x), x)
    terms = [_GPUTerms.one(x, precision) for x in first.values()]
    if len(terms) == 1:
        return terms[0]

    def per_layout(values) -> np.ndarray:
        return np.asarray(values)[inv]

    topo = Topology(**{f: per_layout([getattr(t.topo, f) for t in terms]) for f in _TOPO_FIELDS})
    return _GPUTerms(topo=topo, **{f.name: per_layout([getattr(t, f.name) for t in terms])
                                   for f in fields(_GPUTerms) if f.name != "topo"})


def _as_array(layouts) -> LayoutArray:
    if isinstance(layouts, LayoutArray):
        return layouts
    if isinstance(layouts, Layout):
        return LayoutArray.from_layouts([layouts])
    return LayoutArray.from_layouts(list(layouts))


def _hm(*dims):
    """Harmonic-mean size 3 / (1/M + 1/K + 1/N) of a GEMM (arrays)."""
    return len(dims) / sum(1.0 / np.maximum(np.asarray(d, dtype=np.float64), 1.0) for d in dims)


# =========================================================================================
# Efficiency-independent inputs
# =========================================================================================
@dataclass(frozen=True)
class StepInputs:
    """What a step costs before efficiencies, per GPU of the heaviest stage (float64 arrays,
    one entry per layout; inputs of different models and GPUs concatenate with :meth:`concat`).

    flops_lin / flops_exp / flops_attn / flops_head: FLOPs per step of the transformer linear
    layers (non-expert), routed-expert GEMMs, attention core (executed, flash attention) and output
    layer; attn_elems_fwd / attn_elems_bwd: causal score elements per step through the forward
    (recompute included) and the backward; attn_fwd_fpe / attn_bwd_fpe: tensor-core FLOPs per
    score element forward / backward; sfu_ratio: :data:`SFU_RATIO` of the GPU family; s_lin / s_exp /
    s_head: FLOP-weighted mean of 1/n (n: GEMM harmonic-mean size, elements); n_ref_fmt /
    n_ref_16: the GEMM size at which operand traffic takes as long as the math at the peak,
    1.5 x bytes per element x ridge point (:func:`gemm_reference_size`); lowp_share: share of the
    linear and expert FLOPs run in the recipe format (the rest at the 16-bit peak);
    bytes_micro / bytes_step: memory-bound bytes of all micro-batches (MoE routing apart) / once per
    step; bytes_route: the MoE routing bytes of all micro-batches (router, token permutations);
    bubble: (pp - 1) / (vp m); tokens_per_step: gbs x seq_len; model_flops_per_token (MFU
    numerator); hw_flops_per_gpu (executed per step by the mean stage: HFU, whatever stage is slowest); peak_fmt / peak_16: dense FLOP/s of the
    recipe format and of 16 bits; hbm_bw: B/s; fmt_idx / fam_idx: index into ``FORMAT_CLASSES``
    / ``FAMILIES``; clock_scale: the GPU's sustained clock relative to its family's (:func:`power_scale`); regime_idx:
    the run's regime, an index into ``runs.REGIMES`` (``runs.regime_of``: the band's half-width); ep_overlap: base share of the MoE all-to-all the schedule can hide
    (``comm.SCHEDULE_EP_OVERLAP``); tp_overlap: base share of the TP collectives the software
    stack can hide (``comm.STACK_TP_OVERLAP``); attn_tc / attn_exp_hidden / attn_bwd_eff: the attention
    kernel's constants (:data:`ATTN_KERNEL_CONSTANTS`; 1 / 0 / 1 unfused); attn_unfused: 1 where the attention is unfused
    (:data:`ATTN_KERNELS`: its batched GEMMs at the 16-bit rate, the score traffic in bytes_scores, no
    exp), 0 for flash attention (scores on chip, the softmax exp on the SFUs); bytes_scores: HBM bytes of the unfused attention's
    score kernels per step (:data:`UNFUSED_ATTN_BYTES`), at :data:`HBM_STREAM_EFF`; layer_passes: transformer layers
    of the slowest stage x micro-batches per step (each a forward and a backward: the fitted ``layer_overhead_us``
    is charged per pass); comm: :class:`comm.StepComm` (with its ``layouts``).
    """

    flops_lin: np.ndarray
    flops_exp: np.ndarray
    flops_attn: np.ndarray
    attn_elems_fwd: np.ndarray
    attn_elems_bwd: np.ndarray
    attn_fwd_fpe: np.ndarray
    attn_bwd_fpe: np.ndarray
    sfu_ratio: np.ndarray
    flops_head: np.ndarray
    s_lin: np.ndarray
    s_exp: np.ndarray
    s_head: np.ndarray
    n_ref_fmt: np.ndarray
    n_ref_16: np.ndarray
    lowp_share: np.ndarray
    bytes_micro: np.ndarray
    bytes_route: np.ndarray
    bytes_step: np.ndarray
    bubble: np.ndarray
    tokens_per_step: np.ndarray
    gpus: np.ndarray
    model_flops_per_token: np.ndarray
    hw_flops_per_gpu: np.ndarray
    peak_fmt: np.ndarray
    peak_16: np.ndarray
    hbm_bw: np.ndarray
    fmt_idx: np.ndarray
    fam_idx: np.ndarray
    clock_scale: np.ndarray
    regime_idx: np.ndarray
    ep_overlap: np.ndarray
    tp_overlap: np.ndarray
    attn_unfused: np.ndarray
    attn_tc: np.ndarray
    attn_exp_hidden: np.ndarray
    attn_bwd_eff: np.ndarray
    bytes_scores: np.ndarray
    layer_passes: np.ndarray
    comm: comm.StepComm

    def __len__(self) -> int:
        return int(self.flops_lin.shape[0])

    @property
    def layouts(self) -> LayoutArray:
        return self.comm.layouts

    @staticmethod
    def concat(parts: list["StepInputs"]) -> "StepInputs":
        """One ``StepInputs`` holding every entry of ``parts`` in order."""
        lengths = [len(p) for p in parts]
        arrays = {f: np.concatenate([_full(getattr(p, f), k) for p, k in zip(parts, lengths)]) for f in _ARRAY_FIELDS}
        return StepInputs(comm=comm.StepComm.concat([p.comm for p in parts]), **arrays)

    def take(self, idx) -> "StepInputs":
        """The entries at ``idx`` (index array or boolean mask)."""
        n = len(self)
        arrays = {f: _full(getattr(self, f), n)[idx] for f in _ARRAY_FIELDS}
        return StepInputs(comm=self.comm.take(idx), **arrays)


#: The array fields of :class:`StepInputs` (all but ``comm``).
_ARRAY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StepInputs) if f.name != "comm")


def _full(a, n: int) -> np.ndarray:
    """``a`` as an array of ``n`` entries (broadcast only when it is not one already)."""
    return a if type(a) is np.ndarray and a.shape == (n,) else np.broadcast_to(a, (n,))


def _layer_linear_flops(model: Model) -> dict[str, float]:
    """Forward FLOPs per token of one layer's GEMMs (2 x parameters multiplied)."""
    # norm weights count 2 FLOPs each as in models.active_params (PaLM's 6N convention)
    return {"attn": 2.0 * (model.attn_params + model.norm_params), "dense_mlp": 2.0 * model.dense_mlp_params,
            "moe_shared": 2.0 * (model.router_params + model.shared_expert_params),
            "moe_routed": 2.0 * model.moe_top_k * model.expert_params,
            "mla_up": 2.0 * model.mla_up_proj_params}


def _gemms(model: Model, M, tp, ep, etp):
    """(weight, harmonic size) of every GEMM per GPU: lists for attention, dense MLP, the
    non-routed part of an MoE layer (router, shared experts) and the routed experts.

    weight = forward FLOPs per token of the GEMM (2 K N of the full matrix); M, K, N per GPU
    after TP / ETP and the MoE token split (tokens per local expert per micro-batch
    M k ep etp / (tp E) with balanced routing).
    """
    h, a, g = model.hidden, model.heads, model.kv_heads
    dqk, dv = model.qk_head_dim, model.v_head_dim_eff
    attn = []
    if model.attention == "mla":
        ql, kl, r = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
        if ql:
            attn.append((2.0 * h * ql, _hm(M, h, ql)))
            attn.append((2.0 * ql * a * dqk, _hm(M, ql, a * dqk / tp)))
        else:
            attn.append((2.0 * h * a * dqk, _hm(M, h, a * dqk / tp)))
        attn.append((2.0 * h * (kl + r), _hm(M, h, kl + r)))
        attn.append((2.0 * kl * a * (model.qk_nope_head_dim + dv), _hm(M, kl, a * (model.qk_nope_head_dim + dv) / tp)))
    else:
        attn.append((2.0 * h * (a + 2 * g) * dqk, _hm(M, h, (a + 2 * g) * dqk / tp)))
    attn.append((2.0 * a * dv * h, _hm(M, a * dv / tp, h)))
    mult = 2 if model.gated else 1

    def mlp(width, m_tok, split):
        return [(2.0 * h * mult * width, _hm(m_tok, h, mult * width / split)),
                (2.0 * width * h, _hm(m_tok, width / split, h))]

    dense = mlp(model.ffn_hidden, M, tp)
    shared, routed = [], []
    if model.is_moe:
        k, E, fe = model.moe_top_k, model.moe_experts, model.moe_ffn_hidden
        shared.append((2.0 * h * E, _hm(M / tp, h, E)))  # router: replicated weights, SP-split tokens
        if model.moe_shared_experts:
            shared += mlp(fe * model.moe_shared_experts, M, tp)
        m_exp = M * k * ep * etp / (tp * E)
        routed = [(k * w, n) for w, n in mlp(fe, m_exp, etp)]
    return attn, dense, shared, routed


def _wsum(items):
    if not items:
        return 0.0, 0.0
    return sum(w for w, _ in items), sum(w / n for w, n in items)


def _full_fraction(la: LayoutArray, recompute_fraction=None) -> np.ndarray:
    """Fraction of layers fully recomputed: 0 unless recompute is "full" (then the given one)."""
    full = la.recompute == 2
    if recompute_fraction is None:
        return full.astype(np.float64)
    x = np.broadcast_to(np.asarray(recompute_fraction, dtype=np.float64), full.shape)
    if np.any((x < 0) | (x > 1)):
        raise ValueError("recompute_fraction: must be in [0, 1]")
    return np.where(full, x, 0.0)


def _selective_share(la: LayoutArray, xf: np.ndarray, recompute_rest=None) -> np.ndarray:
    """Fraction of layers under selective recompute: every layer with "selective"; with "full",
    the layers not fully recomputed (1 - ``xf``) when ``recompute_rest`` is 1 (selective, the
    default: :func:`least_recompute`'s mix) and none when it is 0 (Megatron-Core
    ``recompute_method=block``: the layers past ``recompute_num_layers`` of each chunk run without
    recompute, Megatron-LM ``TransformerBlock._checkpointed_forward``); 0 otherwise."""
    rest = 1.0 if recompute_rest is None else np.broadcast_to(np.asarray(recompute_rest, dtype=np.float64),
                                                              la.recompute.shape)
    if np.any((np.asarray(rest) != 0) & (np.asarray(rest) != 1)):
        raise ValueError("recompute_rest: must be 0 (none) or 1 (selective)")
    return np.where(la.recompute == 1, 1.0, np.where(la.recompute == 2, (1.0 - xf) * rest, 0.0))


#: HBM bytes per score element of the unfused attention, forward / backward: the 16-bit score,
#: softmax output and dropout output (2 B each) and the 1-byte dropout mask that Korthikanti et al.
#: 2022 (arXiv 2205.05198, Table 2: 2as^2b + 2as^2b + as^2b of the 5as^2b + ... per layer) store,
#: forward each written once and read once by the next kernel (scores -> softmax -> dropout -> PV:
#: 7 written + 6 read = 13); backward the stored 5 read, and the gradients dP, of the dropout and of
#: the softmax each written once and read once more (2 + 2 + 2 written, 2 + 2 + 4 read: the two
#: GEMMs read dS) = 19.
UNFUSED_ATTN_BYTES: tuple[float, float] = (13.0, 19.0)
#: Share of the HBM bandwidth a streaming kernel over large tensors sustains: the 2 GiB
#: device-to-device copy of data/measured/gemm_h200.csv, 4.122 TB/s of the H200's 4.8 TB/s. The
#: unfused attention's score kernels (softmax, dropout over s x s tensors) stream like it; the
#: calibrated ``memory_overhead`` is for the many small elementwise kernels of a layer instead.
HBM_STREAM_EFF = 4.122355908262558 / 4.8


def pipeline_split(model: Model, pp, split: str, head_layers=0.0, vp=1) -> tuple[np.ndarray, np.ndarray]:
    """(transformer layers, share of the output layer) of the pipeline stage that takes longest,
    per layout, under ``split`` (:data:`PP_SPLITS`). ``head_layers``: the output layer's work per
    token in transformer layers' worth (it decides, with "account", whether the last stage, one
    layer fewer plus the output layer, or a middle stage is the slowest). One stage (pp 1): every
    layer and the whole output layer. Layer counts round up (an upper bound where L does not divide).

    "auto" takes, per layout, the split Megatron-Core accepts without an explicit layout: "even"
    where pp x vp divides L, else "account" where it divides L + 2, else "balanced" (a custom
    ``pipeline_model_parallel_layout`` is then required). It gives every split the sources state:
    GPT-OSS-120B 36 layers on 4 stages even, Llama 3.1 405B's 126 and Qwen3-235B's 94 layers
    account, DeepSeek-V3's and Kimi K2's 61 custom.

    ``split`` may also be Megatron-Core's ``pipeline_model_parallel_layout`` string itself (runs
    column ``pp_split``, :mod:`scaletax.inputs.pipeline_layout`): the rank whose transformer layers
    plus ``head_layers`` for the loss stage are the most (``pipeline_layout.slowest_stage``)."""
    if split not in PP_SPLITS:
        if not pipeline_layout.is_layout(split):
            raise ValueError(f"pp_split: must be one of {', '.join(PP_SPLITS)} or a pipeline_model_parallel_layout "
                             f"(got {split!r})")
        return pipeline_layout.slowest_stage(split, pp, head_layers)
    pp = np.asarray(pp, dtype=np.float64)
    L = float(model.layers)
    if split == "auto":
        chunks = pp * np.asarray(vp, dtype=np.float64)
        parts = {k: pipeline_split(model, pp, k, head_layers) for k in ("even", "account", "balanced")}
        even, account = np.mod(L, chunks) == 0, np.mod(L + 2.0, chunks) == 0
        pick = [np.where(even, parts["even"][j], np.where(account, parts["account"][j], parts["balanced"][j]))
                for j in (0, 1)]
        return pick[0], pick[1]
    h = np.asarray(head_layers, dtype=np.float64)
    if split == "balanced":  # the best whole-layer layout: b layers and the head on the last stage
        rest = np.maximum(pp - 1.0, 1.0)
        b0 = np.clip(np.floor((L + h) / pp - h), 0.0, L)  # the continuous optimum, rounded down
        b1 = np.minimum(b0 + 1.0, L)
        other0, other1 = np.ceil((L - b0) / rest), np.ceil((L - b1) / rest)
        b = np.where(np.maximum(other1, b1 + h) < np.maximum(other0, b0 + h), b1, b0)
        other = np.ceil((L - b) / rest)
        last = b + h > other  # the last stage is the slowest
        one = pp == 1
        return np.where(one, L, np.where(last, b, other)), np.where(one | last, 1.0, 0.0)
    if split == "even":  # the last stage: its layers and the output layer
        return np.ceil(L / pp), np.ones_like(pp)
    slots = np.ceil((L + 2.0) / pp)
    middle = (pp >= 3) & (np.asarray(head_layers) < 1.0)  # a middle stage's extra layer outweighs the head
    one = pp == 1
    n = np.where(one, L, np.where(middle, slots, slots - 1.0))
    return n, np.where(one | ~middle, 1.0, 0.0)


def _stage_layers(model: Model, pp, layers_stage=None):
    """(layers, dense layers, MoE layers) of the stage with the most FLOPs per token.

    The stage holds ``layers_stage`` layers (default ceil(L / pp), an upper bound for uneven
    splits; :func:`pipeline_split` gives it per split); the first holds the leading dense layers
    (Megatron), a later one as many MoE layers as the split allows (min(ceil(n_moe / pp), layers),
    as ``comm``'s step traffic). The heavier of the two is the one with more of the layer kind with
    more MLP FLOPs per token.
    """
    pp = np.asarray(pp, dtype=np.float64)
    layers_stage = np.ceil(model.layers / pp) if layers_stage is None else np.asarray(layers_stage, dtype=np.float64)
    if not model.is_moe:
        return layers_stage, layers_stage, np.zeros_like(layers_stage)
    moe_other = np.minimum(np.ceil(model.n_moe_layers / pp), layers_stage)
    dense_first = np.minimum(float(model.n_dense_layers), layers_stage)
    f_dense = model.dense_mlp_params
    f_moe = model.router_params + model.shared_expert_params + model.moe_top_k * model.expert_params
    moe_stage = layers_stage - dense_first if f_dense > f_moe else moe_other
    return layers_stage, layers_stage - moe_stage, moe_stage


def _stage_params(model: Model, la: LayoutArray):
    """(non-expert params, routed-expert params, linear weights per GPU) of the heaviest stage;
    the embedding and output layer count 1/pp per stage."""
    f64 = np.float64
    tp, pp, ep, etp = (getattr(la, k).astype(f64) for k in ("tp", "pp", "ep", "etp"))
    _, dense_stage, moe_stage = _stage_layers(model, pp)
    moe_nonexp = model.attn_params + model.norm_params + model.router_params + model.shared_expert_params
    edge = (model.embedding_params + model.output_params) / pp
    dense = dense_stage * model.dense_layer_params + moe_stage * moe_nonexp + edge
    experts = moe_stage * model.moe_experts * model.expert_params
    lin = ((dense_stage * (model.attn_params + model.dense_mlp_params)
            + moe_stage * (model.attn_params + model.shared_expert_params)) / tp
           + experts / (ep * etp))
    return dense, experts, lin


def moe_permute_bytes(model: Model, ep, etp=1, ep_dispatch: str = "dedup"):
    """HBM bytes per token per MoE layer of the token permutations around the expert all-to-all,
    forward and backward (16-bit tokens of ``hidden`` elements, k = top-k), vectorized over ep, etp.

    Megatron-Core ``MoEAlltoAllTokenDispatcher`` (``ep_dispatch="alltoall"``, fused TE permute):
    forward, ``permute`` reads each token once and writes its k copies (2h + 2kh bytes); after
    the all-to-all, with more than one local expert, ``sort_chunks_by_idxs`` regroups the received
    copies from rank-major to expert-major order (read + write 4kh, on the etp-gathered tokens)
    and, after the experts, back (4kh); ``unpermute`` reads the k copies and writes the sum
    (2kh + 2h). The backward runs each pass's mirror with the same bytes. Total
    8h(k + 1) + 16kh etp [local experts > 1].
    DeepEP-class dispatch (``ep_dispatch="dedup"``, Megatron-Core ``MoEFlexTokenDispatcher``): the
    dispatch kernel reads the tokens itself and delivers one copy per destination rank; a permute
    expands each received copy to its local experts (read 2h per copy, write 2kh in all) and an
    unpermute reduces them before the combine kernel (read 2kh, write 2h per copy), fwd and bwd:
    8h(k + r) etp, r the expected distinct EP ranks of a token's k experts
    (:func:`distinct_groups`). The all-to-all's own send and receive buffers are communication
    (:mod:`scaletax.model.comm`), not counted here.
    """
    if ep_dispatch not in ("dedup", "alltoall"):
        raise ValueError(f"ep_dispatch: must be 'dedup' or 'alltoall' (got {ep_dispatch!r})")
    ep, etp = np.asarray(ep, dtype=np.float64), np.asarray(etp, dtype=np.float64)
    if not model.is_moe:
        return np.zeros(np.broadcast_shapes(ep.shape, etp.shape))
    h, k, E = float(model.hidden), float(model.moe_top_k), float(model.moe_experts)
    if ep_dispatch == "alltoall":
        sort = np.where((ep > 1) & (E / ep > 1), 16.0 * k * h * etp, 0.0)
        return 8.0 * h * (k + 1.0) + sort
    r = distinct_groups(model.moe_experts, model.moe_top_k, ep)
    return 8.0 * h * (k + r) * etp


def distinct_groups(experts: int, top_k: int, groups):
    """Expected number of the ``groups`` equal groups of ``experts`` experts that a token's
    ``top_k`` distinct uniformly routed experts fall in: D (1 - P0), P0 = C(E - E/D, k) / C(E, k)
    the chance that a given group gets none (vectorized over groups; 1 for one group)."""
    D = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    E, k = float(experts), int(top_k)
    per = E / D
    p0 = np.ones_like(D)
    for i in range(k):
        p0 = p0 * np.clip((E - per - i) / (E - i), 0.0, 1.0)
    return np.where(D > 1.0, D * (1.0 - p0), 1.0)


def memory_bound_bytes(model: Model, la: LayoutArray, precision: recipes.Recipe,
                       recompute_fraction=None, ep_dispatch: str = "dedup",
                       recompute_rest=None, stage=None, routing: bool = False):
    """(bytes of all micro-batches of a step, bytes once per step) of memory-bound kernels, per GPU.

    Per token of a micro-batch on this CP rank, per layer (16-bit elements; "rep" items are
    divided by tp only with sequence parallelism, "split" items by tp):
    two norms, 10 h bytes each (forward read + write, backward read x and dy, write dx) [rep];
    two residual adds, 12 h bytes each (forward and backward) [rep]; rotary embedding on q and k,
    8 (a + g) d_qk bytes (MLA: the rope part, 8 (a + 1) d_rope, plus the latent norms) [split];
    activation function, SwiGLU 16 f / GELU 10 f bytes [split]; low-precision casts,
    the recipe's ``cast_bytes`` per element of every GEMM input forward (x) and backward (dy); MoE: router
    logits and top-k 24 E bytes, token permutations around the all-to-all forward and backward
    (:func:`moe_permute_bytes` of ``ep_dispatch``) [rep], expert activation 16 k f_e [split];
    output layer (1/pp per stage, or the share of it ``stage`` gives: ``(layers, output share)`` of
    the slowest stage, :func:`pipeline_split`; default ceil(L / pp) layers and 1/pp):
    cross-entropy over fp32 logits 16 V / tp, final norm 10 h, embedding gather / scatter 8 h.
    Per step, per parameter on this GPU: Adam on the local optimizer shard (``ADAM_BYTES``),
    gradient-buffer reset (``GRAD_ZERO_BYTES``), casts of the linear weights (``cast_bytes``: once
    per step, every micro-batch with ZeRO-3). Recompute repeats the forward share of the
    recomputed work (full: a third of the per-layer bytes; selective: 5%; with full on part of the
    layers, the others selective or none as ``recompute_rest`` says, :func:`_selective_share`).
    Context parallelism (Transformer Engine's P2P ring): each of the cp - 1 steps after the first
    merges its partial result into the running one, :data:`CP_MERGE_BYTES` per element on
    :data:`CP_STEP_SHARE` of the rank's rows: forward the output, a d_v (again when attention is
    recomputed), backward dq, a d_qk, and dk, dv, g (d_qk + d_v) [split].
    """
    f64 = np.float64
    tp, pp, cp, ep, etp, dp = (getattr(la, k).astype(f64) for k in ("tp", "pp", "cp", "ep", "etp", "dp"))
    xf = _full_fraction(la, recompute_fraction)
    xs = _selective_share(la, xf, recompute_rest)
    t = token_bytes(model, la, precision, ep_dispatch, xf, xs)
    n_stage, head_share = (None, 1.0 / pp) if stage is None else stage
    _, dense_stage, moe_stage = _stage_layers(model, pp, n_stage)
    layer_bytes = dense_stage * t["dense"] + moe_stage * t["moe"]
    tokens_mb = la.mbs.astype(f64) * model.seq_len / cp
    n_micro = np.maximum(la.n_micro, 1).astype(f64)
    per_micro = tokens_mb * (layer_bytes + t["head"] * head_share) * n_micro
    dense_params, expert_params, lin_params = _stage_params(model, la)
    zero = la.zero_stage
    edp = np.maximum((tp * cp * dp) / (ep * etp), 1.0)
    local_d, local_e = dense_params / tp, expert_params / (ep * etp)
    adam = ADAM_BYTES * (local_d / np.where(zero >= 1, dp * cp, 1.0) + local_e / np.where(zero >= 1, edp, 1.0))
    zero_buf = GRAD_ZERO_BYTES * (local_d / np.where(zero >= 2, dp * cp, 1.0) + local_e / np.where(zero >= 2, edp, 1.0))
    casts = precision.cast_bytes * lin_params * np.where(zero == 3, n_micro, 1.0)
    if routing:
        return per_micro, adam + zero_buf + casts, tokens_mb * n_micro * moe_stage * t["route"]
    return per_micro, adam + zero_buf + casts


def token_bytes(model: Model, la: LayoutArray, precision: recipes.Recipe, ep_dispatch: str = "dedup",
                xf=0.0, xs=0.0) -> dict[str, np.ndarray]:
    """Memory-bound bytes per token of a micro-batch on one GPU (:func:`memory_bound_bytes`' items):
    "dense" and "moe" per layer of each kind (recompute and the context-parallel merges included),
    "head" the whole output layer's (cross-entropy, final norm, embedding gather and scatter), "route"
    an MoE layer's routing and permutations. ``xf`` / ``xs``: the full and selective recompute shares."""
    f64 = np.float64
    tp, cp, ep, etp = (getattr(la, k).astype(f64) for k in ("tp", "cp", "ep", "etp"))
    rep = np.where(la.sp.astype(bool), tp, 1.0)
    h, a, g = float(model.hidden), float(model.heads), float(model.kv_heads)
    dqk, dv = float(model.qk_head_dim), float(model.v_head_dim_eff)
    cb = precision.cast_bytes
    mult = 2.0 if model.gated else 1.0
    act_fn = 16.0 if model.gated else 10.0
    common_rep = 20.0 * h + 24.0 * h
    if model.attention == "mla":
        ql, kl, r = float(model.q_lora_rank), float(model.kv_lora_rank), float(model.qk_rope_head_dim)
        rope = 8.0 * (a + 1.0) * r
        # latent norms; casts of the latent GEMM inputs and of the down-projection output grads
        common_rep = common_rep + 10.0 * (ql + kl) + cb * (h + ql + kl + ql + kl + r)
        cast_split = cb * (a * dv + a * dqk + a * (model.qk_nope_head_dim + dv))
        cast_rep = cb * h  # output-projection output grad
    else:
        rope = 8.0 * (a + g) * dqk
        cast_rep = cb * (h + h)  # qkv input, output-projection output grad
        cast_split = cb * (a * dv + (a + 2 * g) * dqk)
    attn_rep, attn_split = common_rep + cast_rep, rope + cast_split
    f = float(model.ffn_hidden)
    per_tok_dense = (attn_rep + cb * 2 * h) / rep + (attn_split + act_fn * f + cb * (f + mult * f)) / tp
    if model.is_moe:
        k, E, fe = float(model.moe_top_k), float(model.moe_experts), float(model.moe_ffn_hidden)
        fs = fe * model.moe_shared_experts
        route_tok = 24.0 * E + moe_permute_bytes(model, ep, etp, ep_dispatch)
        moe_rep = route_tok + (cb * 2 * h if fs else 0.0)
        moe_split = act_fn * fs + cb * (fs + mult * fs) + act_fn * k * fe + cb * k * (fe + mult * fe)
        routed_etp = cb * k * 2 * h  # expert fc1 input and fc2 output grad, gathered over etp
        per_tok_moe = (attn_rep + moe_rep) / rep + (attn_split + moe_split) / tp + routed_etp * etp / tp
    else:
        per_tok_moe = route_tok = 0.0
    redo = 1.0 + np.asarray(xf, dtype=f64) / 3.0 + 0.05 * np.asarray(xs, dtype=f64)
    # context parallelism: each ring step after the first merges its partial attention result into
    # the running one, forward (out, again when attention is recomputed) and backward (dq, dkv)
    n_fwd = 1.0 + np.asarray(xf, dtype=f64) + np.asarray(xs, dtype=f64)
    merges = (cp - 1.0) * CP_STEP_SHARE * CP_MERGE_BYTES / tp * (n_fwd * a * dv + a * dqk + g * (dqk + dv))
    vpad = padded_vocab(model.vocab, la.tp).astype(f64)
    return {"dense": per_tok_dense * redo + merges, "moe": per_tok_moe * redo + merges,
            "head": 16.0 * vpad / tp + 18.0 * h / rep, "route": route_tok / rep * redo}


def ep_dedup_factor(model: Model, ep, n_in, ep_dispatch: str = "dedup"):
    """Scale-out bytes of the MoE all-to-all with per-domain deduplication / without, in (0, 1].

    A token routed to k of E experts spread over D = ep / n_in NVLink domains (E / D experts
    each) sends k (D-1)/D copies off its domain without deduplication (``comm``'s all-to-all);
    a DeepEP-class dispatcher sends it once per destination domain and fans it out over NVLink
    (DeepSeek-V3, arXiv 2412.19437, §3.2.2; the combine reduces per domain the same way): the
    expected distinct remote domains are (D-1) (1 - P0), P0 = C(E - E/D, k) / C(E, k) for
    uniform routing (no node-limited routing assumed). ``ep_dispatch="alltoall"``: 1.
    """
    if ep_dispatch not in ("dedup", "alltoall"):
        raise ValueError(f"ep_dispatch: must be 'dedup' or 'alltoall' (got {ep_dispatch!r})")
    ep = np.asarray(ep, dtype=np.float64)
    if ep_dispatch == "alltoall" or not model.is_moe:
        return np.ones_like(ep)
    D = np.maximum(ep / np.maximum(np.asarray(n_in, dtype=np.float64), 1.0), 1.0)
    r = distinct_groups(model.moe_experts, model.moe_top_k, D)
    return np.where(D > 1.0, np.clip(r / model.moe_top_k, 0.0, 1.0), 1.0)


def _dedup_ep(step: comm.StepComm, model: Model, topo: Topology, ep_dispatch: str) -> comm.StepComm:
    """``step`` with the EP group re-timed for DeepEP-class dispatch (``ep_dispatch="dedup"``).

    A DeepEP / HybridEP kernel sends a token once per destination rank, not once per expert
    (deepseek-ai/DeepEP README: the dispatch's "NVLink bottleneck bandwidth" counts the bytes a
    rank receives), and across NVLink domains once per destination domain over RDMA, to the rank
    of the same local index, which forwards it over NVLink to the token's other ranks there
    (DeepSeek-V3, arXiv 2412.19437, §3.2.2). Per token of the group's all-to-all send buffer m
    (k copies): NIC bytes (n - n_in)/n m x :func:`ep_dedup_factor` (distinct remote domains),
    NVLink bytes m r / k x (n_in - 1) / n_in (r = :func:`distinct_groups` over the n ranks: every
    distinct destination rank but the one a copy lands on first), at the rate the dispatch and
    combine kernels achieve among n_in ranks of one NVLink domain (``comm.ep_link_eff``: HybridEP
    on GB200 NVL72, 0.81 of the link at 8 ranks to 0.60 at 36), not NCCL's; the NIC phase at the
    calibrated NIC rate times what the kernels achieve across that many domains (``comm.ep_rdma_factor``:
    0.67 across two 8-GPU nodes, 1 from eight on; DeepEP and HybridEP, measured). Time as in ``comm``:
    per all-to-all, launch + max(NVLink phase, NIC phase); the step's all-to-alls share one
    placement, so the phases are summed over them before the max.
    """
    if not model.is_moe or ep_dispatch == "alltoall":
        return step
    g = step.groups["ep"]
    n = np.asarray(g.size, dtype=np.float64)
    n_in = np.asarray(g.per_domain, dtype=np.float64)
    f = ep_dedup_factor(model, n, n_in, ep_dispatch)
    cnt = np.asarray(g.count, dtype=np.float64)
    # the k-copy send buffer per step behind comm's all-to-all bytes, (n - 1)/n of it on the wire
    m = (np.asarray(g.nvlink_bytes, dtype=np.float64) + np.asarray(g.nic_bytes, dtype=np.float64)) \
        * n / np.maximum(n - 1.0, 1.0)
    per_rank = distinct_groups(model.moe_experts, model.moe_top_k, n) / model.moe_top_k
    nv = np.where(n_in > 1, m * per_rank * (n_in - 1.0) / np.maximum(n_in, 1.0), 0.0)
    bw_in = np.asarray(topo.nvlink_bw, dtype=np.float64) * comm.ep_link_eff(n_in)
    t_in = np.where(n_in > 1, cnt * topo.alpha_nvlink + nv / bw_in, 0.0)
    nic = g.nic_bytes * f
    # across few domains the kernels pass the home domain's share through their RDMA pipeline too
    bw_out = np.asarray(topo.nic_eff_bw, dtype=np.float64) * comm.ep_rdma_factor(n / np.maximum(n_in, 1.0))
    t_out = np.where(n > n_in, cnt * topo.alpha_nic + nic / bw_out, 0.0)
    secs = np.where(cnt > 0, cnt * topo.alpha_launch + np.maximum(t_in, t_out), 0.0)
    return replace(step, groups={**step.groups, "ep": replace(g, nvlink_bytes=nv, nic_bytes=nic, seconds=secs)})


def _mix_steps(a: comm.StepComm, b: comm.StepComm, x) -> comm.StepComm:
    """(1 - x) a + x b, field by field (traffic is additive over layers)."""
    def mix(u, v):
        return (1.0 - x) * np.asarray(u, dtype=np.float64) + x * np.asarray(v, dtype=np.float64)

    return replace(a.map(mix, b), layouts=b.layouts)


#: Layout fields the per-step traffic depends on (``comm.step_traffic``): ZeRO enters only as
#: {0}, {1, 2}, {3} and recompute only as full or not.
_COMM_FIELDS = ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs", "gbs", "sp")


def _expand_step(step: comm.StepComm, inv: np.ndarray, la: LayoutArray) -> comm.StepComm:
    """Entries ``inv`` of a ``StepComm`` computed on unique layouts, for the layouts ``la``."""
    # the traffic and the group placement depend only on the fields the unique rows share with la
    return step.take(inv, layouts=la)


def _dense_codes(c: np.ndarray) -> tuple[np.ndarray, int]:
    """(``np.unique(c, return_inverse=True)``'s inverse as int64, number of distinct values) of
    an int array: by a table over the value range (no sort) when the range is short."""
    lo, hi = int(c.min()), int(c.max())
    span = hi - lo + 1
    if span > 4 * c.size + 1024:
        u, inv = np.unique(c, return_inverse=True)
        return inv.astype(np.int64).reshape(-1), len(u)
    off = c - lo
    present = np.zeros(span, dtype=bool)
    present[off] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return rank[off], int(rank[-1]) + 1


def _step_traffic(model: Model, la: LayoutArray, topo: Topology, wire: WireFormat) -> comm.StepComm:
    """``comm.step_traffic`` evaluated once per distinct communication pattern (a search grid
    repeats each one for every ZeRO 1/2 choice and non-full recompute mode)."""
    n = len(la)
    scalar_topo = all(np.ndim(getattr(topo, f)) == 0 for f in ("domain", "nvlink_bw", "nic_bw"))
    if n < 4096 or not scalar_topo:
        return comm.step_traffic(model, la, topo, wire)
    cols = [getattr(la, f) for f in _COMM_FIELDS]
    cols += [np.where(la.zero_stage == 0, 0, np.where(la.zero_stage == 3, 2, 1)), (la.recompute == 2).astype(np.int64)]
    codes, dims = [], []
    for c in cols:
        code, dim = _dense_codes(c)
        codes.append(code)
        dims.append(dim)
    if float(np.prod(np.asarray(dims, dtype=np.float64))) >= 2.0**62:
        return comm.step_traffic(model, la, topo, wire)
    key = np.ravel_multi_index(codes, dims)
    uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
    if uk.size > 0.7 * n:
        return comm.step_traffic(model, la, topo, wire)
    sub = la[first]
    # representative rows: ZeRO 1 for {1, 2}, recompute selective for non-full (same traffic)
    sub = sub.replace(zero_stage=np.where(sub.zero_stage == 2, 1, sub.zero_stage),
                      recompute=np.where(sub.recompute == 2, 2, 0))
    return _expand_step(comm.step_traffic(model, sub, topo, wire), inv.ravel(), la)


class _GridPick:
    """Entries of arrays broadcasting to a grid's shape at flat grid positions ``idx`` (base,
    ZeRO stage and recompute fastest); a constant stays one broadcast value."""

    def __init__(self, shape: tuple[int, int, int], idx: np.ndarray):
        nb, nz, nr = self.shape = shape
        self.rows = (idx // (nz * nr), (idx // nr) % nz, idx % nr)
        self.flat: dict[tuple[bool, ...], np.ndarray] = {}  # per broadcast pattern
        self.done: dict[int, tuple[Any, np.ndarray]] = {}  # per array object (the traffic shares some)

    def __call__(self, a) -> np.ndarray:
        hit = self.done.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        out = self._pick(a)
        self.done[id(a)] = (a, out)  # holds ``a``: its id stays its own
        return out

    def _pick(self, a) -> np.ndarray:
        a = np.asarray(a)
        a = a.reshape((1,) * (3 - a.ndim) + a.shape)
        if a.shape == (1, 1, 1):
            return np.broadcast_to(a.reshape(()), (self.rows[0].size,))
        key = tuple(k > 1 for k in a.shape)
        flat = self.flat.get(key)
        if flat is None:
            flat = np.zeros_like(self.rows[0])
            for r, k, big in zip(self.rows, a.shape, key):
                flat = flat * k + (r if big else 0)
            self.flat[key] = flat
        return a.reshape(-1).take(flat)  # as [flat], without fancy indexing's overhead


def prepare(model: Model, layouts, precision: recipes.Recipe, gpu, topo: Topology | None = None,
            wire: WireFormat | None = None, *, recompute_fraction=None, recompute_rest=None,
            ep_dispatch: str = "dedup", fp4_bf16_layers: int = FP4_BF16_LAYERS,
            schedule: str = "unknown", grid: tuple[LayoutGrid, np.ndarray] | None = None,
            stack: str = "megatron", pp_split: str = "auto", attn_kernel: str = "flash",
            tp_comm_overlap: bool | None = None, grad_bytes: float | None = None,
            expert_gemm: str = "auto") -> StepInputs:
    """Efficiency-independent step inputs for every layout (see the module docstring).

    ``precision``: a ``recipes.Recipe``; ``gpu``: a ``hardware.GPU``, or a list of them with one per layout (the
    GPU's peaks, family and topology then become per-layout arrays: ``runplan.TablePlan`` puts the
    groups of different GPUs in one call); ``topo`` default ``Topology.from_gpu(gpu)``;
    ``wire`` default ``WireFormat.for_recipe(precision)``. ``recompute_fraction``: for layouts
    with recompute "full", the fraction of each stage's layers fully recomputed (Megatron
    ``recompute_method=block``, ``recompute_num_layers``), default 1; ``recompute_rest``: what
    the other layers do, 1 selective (default, :func:`least_recompute`'s mix) or 0 none (Megatron's
    block method as the recipes state it, :func:`_selective_share`).
    ``ep_dispatch``: "dedup" (DeepEP-class MoE dispatch, :func:`ep_dedup_factor`, default) or
    "alltoall" (``comm``'s plain all-to-all). ``fp4_bf16_layers``: transformer layers kept in
    BF16 by 4-bit recipes (:data:`FP4_BF16_LAYERS`). ``schedule``: the training schedule
    (``options.SCHEDULES``), which sets how much of the MoE all-to-all can hide
    (``comm.SCHEDULE_EP_OVERLAP``; "unknown": ``comm.Overlap``'s default). ``stack``: the
    software stack (``options.STACKS``, runs column ``stack``): "fsdp" sends gradients in fp32 and
    gathers parameters in bf16 (``comm.stack_wire``, when ``wire`` is not given) and hides none of
    the TP collectives (``comm.STACK_TP_OVERLAP``). ``pp_split``: how the pipeline stages split
    the model (:data:`PP_SPLITS` or a Megatron-Core ``pipeline_model_parallel_layout`` string, runs
    column ``pp_split``; default "auto", the layout search's too):
    the compute and memory-bound work are those of the slowest stage (:func:`pipeline_split`; the
    step's traffic keeps ceil(L / pp) layers). ``tp_comm_overlap``: the run's own TP overlap (runs column
    ``tp_comm_overlap``: True hides ``comm.Overlap.tp``, False none; None: the stack's).
    ``attn_kernel``: :data:`ATTN_KERNELS` (runs column
    ``attn_kernel``; "unfused": the full score matrix through tensor-core GEMMs at the 16-bit rate and
    :data:`UNFUSED_ATTN_BYTES` of HBM traffic per score element at :data:`HBM_STREAM_EFF`, no exp).
    ``grad_bytes``: bytes of a main-gradient element on the wire when ``wire`` is not given (the
    memory option of the same name: 4 with Megatron-Core ``grad_reduce_in_fp32``, runs column
    ``grad_reduce_in_fp32``; default the recipe's, or the stack's). ``grid``: the
    ``layout.LayoutGrid`` and the flat indices into it that ``layouts`` are (the search's fitting
    candidates): the traffic is then computed on the grid (same values).
    Raises ``hardware.UnsupportedPrecision`` when the GPU has no native tensor cores for it.
    """
    fmt = recipes.check(precision).format_class
    la = _as_array(layouts)
    n = len(la)
    g = _gpu_terms(gpu, precision, n)
    peak_fmt, peak_16 = g.peak_fmt, g.peak_16
    topo = g.topo if topo is None else topo
    if wire is None:
        wire = comm.stack_wire(WireFormat.for_recipe(precision), stack)
        wire = wire if grad_bytes is None else replace(wire, grad=float(grad_bytes))
    tp_overlap = comm.stack_tp_overlap(stack)
    if tp_comm_overlap is not None:  # the run states it: TE userbuffers / async TP, or collectives in line
        tp_overlap = comm.Overlap.tp if tp_comm_overlap else 0.0
    on_grid = (grid is not None and recompute_fraction is None and recompute_rest is None
               and all(np.ndim(getattr(topo, f)) == 0 for f in _TOPO_FIELDS) and np.ndim(peak_fmt) == 0)
    if on_grid:  # every term on the grid (once per value it depends on), then taken at the rows
        src, take = grid[0], _GridPick(grid[0].shape, np.asarray(grid[1]))
    else:
        src, take = la, _same
    f64 = np.float64
    tp, pp, cp, ep, etp, dp, vp = (getattr(src, k).astype(f64) for k in ("tp", "pp", "cp", "ep", "etp", "dp", "vp"))
    n_micro = np.maximum(src.n_micro, 1).astype(f64)
    tokens_step = src.gbs.astype(f64) * model.seq_len
    tok_gpu = tokens_step / (tp * cp * dp)  # tokens per step through one GPU of a stage
    M = src.mbs.astype(f64) * model.seq_len / cp  # GEMM rows per micro-batch (SP-gathered)
    rc = src.recompute
    xf = _full_fraction(src, recompute_fraction)
    xs = _selective_share(src, xf, recompute_rest)
    lf = _layer_linear_flops(model)
    vpad = padded_vocab(model.vocab, src.tp).astype(f64)
    # flash attention per score element (causal: a s / 2 per token and layer): forward QK^T and PV,
    # 2 (d_qk + d_v) FLOPs; backward recomputes S and computes dV, dP, dQ, dK: 6 d_qk + 4 d_v
    # (Dao 2023, FlashAttention-2, arXiv 2307.08691, Alg. 2); selective recompute runs the forward again;
    # diagonal tiles computed in full: (s + B) / 2 elements per query (:data:`FA_CAUSAL_TILE`)
    dqk_a, dv_a = float(model.qk_head_dim), float(model.v_head_dim_eff)
    if attn_kernel not in ATTN_KERNELS:
        raise ValueError(f"attn_kernel: must be one of {', '.join(ATTN_KERNELS)} (got {attn_kernel!r})")
    unfused = attn_kernel == "unfused"
    # the kernel's constants per entry, by the GPU's family (attention_constants)
    table = np.array([(1.0, 0.0, 1.0, 0.0) if unfused else attention_constants(attn_kernel, f) for f in FAMILIES])
    a_tc, a_ov, a_bw, a_tile = (table[np.asarray(g.fam_idx), i] for i in range(4))
    # unfused: the whole s x s score matrix, masked afterwards; the backward has no S to recompute
    elems_layer = model.heads * (model.seq_len if unfused else (model.seq_len + FA_CAUSAL_TILE) / 2.0)
    bwd_rows = 1.0 + a_tile / 2.0 * model.heads / elems_layer  # the backward's fixed cost per query row
    n_fwd = 1.0 + xf + xs  # attention forwards: 2 where a layer recomputes (full or selective)
    attn_fwd_fpe = 2.0 * (dqk_a + dv_a)
    attn_bwd_fpe = 4.0 * (dqk_a + dv_a) if unfused else 6.0 * dqk_a + 4.0 * dv_a
    attn_layer = elems_layer * (n_fwd * attn_fwd_fpe + attn_bwd_fpe)  # FLOPs per token and layer
    # --- GEMM shapes: FLOP-weighted mean of 1/n ------------------------------------------------
    g_attn, g_dense, g_shared, g_routed = _gemms(model, M, tp, ep, etp)
    (wa, na), (wd, nd), (ws, ns), (wr, nr) = (_wsum(x) for x in (g_attn, g_dense, g_shared, g_routed))
    # grouped expert GEMMs run on whole row tiles: tokens per local expert m padded by half a tile;
    # the EP rank with the most routed copies sets the layer's time (comm.moe_rank_imbalance)
    exp_scale = 1.0
    if model.is_moe:
        m_exp = M * model.moe_top_k * ep * etp / (tp * model.moe_experts)
        imb = comm.moe_rank_imbalance(model.moe_experts, model.moe_top_k, ep, ep * etp * M / tp)
        exp_scale = (1.0 + 0.5 * GROUPED_TILE_M / np.maximum(m_exp, 1.0)) * imb
    # the slowest pipeline stage: the output layer's time in layers' worth decides. A mean layer's and the
    # output layer's GEMMs at their peaks with the measured shape penalty (1 + k n_ref / n, the
    # ``gemm_roofline`` k of data/measured/gemm_h200.csv) and the grouped-GEMM padding and imbalance,
    # the attention core at 16 bits: tiny per-expert GEMMs make a layer cost more than its FLOPs say
    # (a FLOP count alone put 2 Kimi K2 layers under the 163k-vocabulary head and the head-only last
    # stage as the slowest, so the search costed PP 32 by the head alone); the fixed and the
    # memory-bound time of each join below
    eff0 = default_efficiency()
    k_roof = eff0.gemm_roofline
    frac_d, frac_m = model.n_dense_layers / model.layers, model.n_moe_layers / model.layers
    w_layer = wa + frac_d * wd + frac_m * ws
    s_layer = na + frac_d * nd + frac_m * ns
    # and a layer pass's fixed time (with an MoE layer's extra expert GEMM calls), per token as the rest:
    # a GPU spends t_layer M / tp seconds on a layer per micro-batch, plus that fixed time (without it a
    # layer of many local experts looked cheaper than the output layer, and the head-only last stage
    # the slowest, whatever the experts' calls cost)
    x_calls = expert_call_layers(model, ep, stack, expert_gemm)
    r_calls = ring_call_layers(cp)
    # and the memory-bound time of each (per token on this GPU, x tp on this per-layer scale): the
    # output layer's cross-entropy streams 16 bytes per vocabulary entry a token (without it twice the
    # peak could make a step slower: the split moved layers onto a stage whose memory time it ignored)
    tb = token_bytes(model, src, precision, ep_dispatch, xf, xs)
    mem_layer = (eff0.memory_overhead * (frac_d * tb["dense"] + frac_m * (tb["moe"] - tb["route"]))
                 + eff0.moe_overhead * frac_m * tb["route"]) * tp / g.hbm_bw
    t_layer = (3.0 * ((w_layer + k_roof * g.n_ref_fmt * s_layer)
                      + frac_m * (wr + k_roof * g.n_ref_fmt * nr) * exp_scale) / peak_fmt + attn_layer / peak_16
               + eff0.layer_overhead_us * 1e-6 * (1.0 + frac_m * x_calls + r_calls) * tp / M + mem_layer)
    w_head = 2.0 * model.hidden * vpad
    t_head = (3.0 * w_head * (1.0 + k_roof * g.n_ref_16 / _hm(M, model.hidden, vpad / tp)) / peak_16
              + eff0.memory_overhead * tb["head"] * tp / g.hbm_bw)
    head_layers = t_head / t_layer
    n_split, head_share = pipeline_split(model, pp, pp_split, head_layers, vp)
    layers_stage, dense_stage, moe_stage = _stage_layers(model, pp, n_split)
    # --- FLOPs per token of the stage (forward x 3, plus the recomputed forward) -------------
    redo_attn = xs * lf["mla_up"] + xf * lf["attn"]

    def lin_exp(layers, dense, moe):
        return (layers * (3.0 * lf["attn"] + redo_attn) + dense * (3.0 + xf) * lf["dense_mlp"]
                + moe * (3.0 + xf) * lf["moe_shared"]), moe * (3.0 + xf) * lf["moe_routed"]

    lin_tok, exp_tok = lin_exp(layers_stage, dense_stage, moe_stage)
    elems_tok = layers_stage * elems_layer
    attn_tok = layers_stage * attn_layer
    head_full = 6.0 * (model.hidden * vpad + model._norm_size(model.hidden))
    head_tok = head_full * head_share
    # executed FLOPs per token of the mean stage (1/pp of every layer and of the head): HFU's numerator
    lin_m, exp_m = lin_exp(model.layers / pp, model.n_dense_layers / pp, model.n_moe_layers / pp)
    mean_tok = lin_m + exp_m + model.layers / pp * attn_layer + head_full / pp
    w_lin = layers_stage * wa + dense_stage * wd + moe_stage * ws
    s_lin = (layers_stage * na + dense_stage * nd + moe_stage * ns) / np.maximum(w_lin, 1.0)
    s_exp = np.broadcast_to(take(nr / wr if wr else 0.0), (n,)).astype(f64)
    s_head = 1.0 / _hm(M, model.hidden, vpad / tp)
    lowp = 1.0 - min(1.0, fp4_bf16_layers / model.layers) if fmt == "4bit" else 1.0
    # --- memory-bound bytes, bubble (Narayanan 2021 §2.2), communication ---------------------
    b_micro, b_step, b_route = memory_bound_bytes(model, src, precision, recompute_fraction=xf,
                                                  ep_dispatch=ep_dispatch, recompute_rest=recompute_rest,
                                                  stage=(n_split, head_share), routing=True)
    # unfused attention: the materialized scores stream through HBM, a s elements per token and layer
    b_scores = (tok_gpu * elems_tok / tp * (UNFUSED_ATTN_BYTES[0] * n_fwd + UNFUSED_ATTN_BYTES[1])) if unfused else 0.0
    bubble = (pp - 1.0) / (vp * n_micro)
    if on_grid:
        step = comm.step_traffic(model, src, topo, wire).gather(take, la)
    else:
        step = _step_traffic(model, la, topo, wire)
        partial = (rc == 2) & (xf < 1.0)
        if np.any(partial):
            step = _mix_steps(_step_traffic(model, la.replace(recompute=np.where(partial, 1, rc)), topo, wire),
                              step, np.where(partial, xf, 1.0))
    step = _dedup_ep(step, model, topo, ep_dispatch)
    exp_tok = exp_tok * exp_scale
    flops = {k: tok_gpu * v for k, v in (("lin", lin_tok), ("exp", exp_tok), ("attn", attn_tok), ("head", head_tok))}
    full = np.ones(n)
    return StepInputs(flops_lin=take(flops["lin"]), flops_exp=take(flops["exp"]) * full, flops_attn=take(flops["attn"]),
                      attn_elems_fwd=take(tok_gpu * elems_tok * n_fwd), attn_elems_bwd=take(tok_gpu * elems_tok) * bwd_rows * full,
                      attn_fwd_fpe=attn_fwd_fpe * full, attn_bwd_fpe=attn_bwd_fpe * full,
                      sfu_ratio=g.sfu_ratio * full,
                      flops_head=take(flops["head"]), s_lin=take(s_lin) * full, s_exp=s_exp, s_head=take(s_head) * full,
                      n_ref_fmt=g.n_ref_fmt * full, n_ref_16=g.n_ref_16 * full,
                      lowp_share=lowp * full, bytes_micro=take(b_micro - b_route), bytes_route=take(b_route) * full,
                      bytes_step=take(b_step) * full,
                      bubble=take(bubble), tokens_per_step=take(tokens_step), gpus=la.gpus.astype(f64),
                      model_flops_per_token=float(model.model_flops_per_token(causal=True)) * full,
                      hw_flops_per_gpu=take(tok_gpu * mean_tok) * full, peak_fmt=peak_fmt * full,
                      peak_16=peak_16 * full, hbm_bw=g.hbm_bw * full,
                      fmt_idx=np.full(n, FORMAT_CLASSES.index(fmt)), fam_idx=g.fam_idx + np.zeros(n, np.int64),
                      clock_scale=g.clock * full, regime_idx=_regime_idx(model, la.zero_stage, stack),
                      ep_overlap=comm.schedule_ep_overlap(schedule) * full, tp_overlap=tp_overlap * full,
                      attn_unfused=float(unfused) * full, attn_tc=a_tc * full, attn_exp_hidden=a_ov * full,
                      attn_bwd_eff=a_bw * full, bytes_scores=take(b_scores) * full,
                      layer_passes=take((layers_stage * (1.0 + r_calls) + moe_stage * x_calls) * n_micro) * full,
                      comm=step)


#: GEMM calls of a dense transformer layer's forward and backward: QKV, projection, FC1 and FC2
#: forward, each with its data-gradient and weight-gradient GEMM backward (the unit of ``layer_passes``).
LAYER_GEMM_CALLS = 12


def expert_call_layers(model: Model, ep, stack: str, expert_gemm: str = "auto"):
    """Extra GEMM calls of one MoE layer pass, in dense layers' worth (:data:`LAYER_GEMM_CALLS`), when the
    routed experts run as one GEMM call per local expert: Transformer Engine's ``GroupedLinear`` (what
    Megatron-Core's ``moe_grouped_gemm`` runs) hands ``nvte_multi_tensor_gemm`` one cuBLASLt GEMM per
    expert on a few streams ("For now, we only have multi-stream cublas backend",
    transformer_engine/pytorch/csrc/extensions/gemm.cpp), so E / ep local experts make 6 (E / ep - 1)
    calls more than one grouped kernel would (FC1 and FC2, forward, data and weight gradient). The
    FSDP stacks' grouped experts are one kernel per GEMM (``torch._grouped_mm``): none. ``expert_gemm``
    (runs column, ``options.EXPERT_GEMMS``): "per_expert" or "grouped" as the run states it, "auto" the
    stack's."""
    if expert_gemm not in EXPERT_GEMMS:
        raise ValueError(f"expert_gemm: must be one of {', '.join(EXPERT_GEMMS)} (got {expert_gemm!r})")
    grouped = expert_gemm == "grouped" or (expert_gemm == "auto" and stack == "fsdp")
    if not model.is_moe or grouped:
        return 0.0
    local = model.moe_experts / np.asarray(ep, dtype=np.float64)
    return 6.0 * np.maximum(local - 1.0, 0.0) / LAYER_GEMM_CALLS


def ring_call_layers(cp):
    """Extra attention-kernel calls of one layer pass under context parallelism, in dense layers' worth
    (:data:`LAYER_GEMM_CALLS`): the ring runs its attention as one kernel call per step, cp steps
    forward and cp backward where one rank alone makes one call each way (Transformer Engine
    ``AttnFuncWithCPAndKVP2P``, attention/dot_product_attention/context_parallel.py: ``for i in
    range(cp_size + 1)`` forward, ``for i in range(cp_size)`` backward, one fused or flash attention
    call per step, each with its softmax-statistics and output corrections; PyTorch's
    ``context_parallel`` ring the same), so 2 (cp - 1) calls more per layer pass."""
    return 2.0 * (np.asarray(cp, dtype=np.float64) - 1.0) / LAYER_GEMM_CALLS


def _regime_idx(model: Model, zero_stage, stack: str) -> np.ndarray:
    """Index into ``runs.REGIMES`` of training ``model`` with each ZeRO stage and ``stack``
    (``runs.regime_of``: ZeRO-3 or FSDP2 makes a dense run of ordinary length the FSDP-stack regime)."""
    z = np.asarray(zero_stage)
    large = model.total_params / 1e9 > runs.SMALL_DENSE_PARAMS_B
    experts = model.moe_experts if model.is_moe else 0
    idx = [runs.REGIMES.index(runs.regime_of(experts, model.seq_len, fsdp, large)) for fsdp in (False, True)]
    return np.where((z == 3) | (stack == "fsdp"), idx[1], idx[0]).astype(np.int64)


def _same(a):
    """The identity (what :func:`prepare` takes of its terms when they are per layout already)."""
    return a


# =========================================================================================
# Step time
# =========================================================================================
@dataclass(frozen=True)
class StepTime:
    """Step time per layout and its breakdown by cause, seconds (float64 arrays).

    step_s = compute_s + other_s + bubble_s + exposed_comm_s. compute_s: tensor-core work;
    other_s: memory-bound kernels, the fixed time per layer pass and the optimizer step; bubble_s: pipeline fill and drain;
    exposed_comm_s: communication not hidden by compute (per group in ``comm_groups``;
    ``comm_s`` is all communication, hidden or not). Rates per GPU: tokens_per_s_per_gpu,
    model_tflops_per_gpu (TFLOP/s, no recompute), mfu (model FLOPs / dense peak of the
    precision, PaLM App. B), hfu (executed FLOPs incl. recompute / the same peak).
    """

    step_s: np.ndarray
    compute_s: np.ndarray
    other_s: np.ndarray
    bubble_s: np.ndarray
    exposed_comm_s: np.ndarray
    comm_s: np.ndarray
    comm_groups: dict[str, np.ndarray]
    tokens_per_step: np.ndarray
    tokens_per_s_per_gpu: np.ndarray
    model_tflops_per_gpu: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray

    def __len__(self) -> int:
        return int(np.shape(self.step_s)[0])

    def breakdown(self, i: int = 0) -> dict[str, float]:
        """One layout's step time and breakdown, seconds."""
        return {k: float(getattr(self, k)[i]) for k in ("step_s", "compute_s", "exposed_comm_s", "bubble_s", "other_s")}

    def take(self, idx) -> "StepTime":
        """The entries at ``idx`` (index array or boolean mask)."""
        return StepTime(**{f.name: ({k: v[idx] for k, v in getattr(self, f.name).items()}
                                    if f.name == "comm_groups" else getattr(self, f.name)[idx])
                           for f in fields(self)})

    @staticmethod
    def concat(parts: list["StepTime"]) -> "StepTime":
        """One ``StepTime`` holding every entry of ``parts`` in order."""
        return StepTime(**{f.name: ({k: np.concatenate([p.comm_groups[k] for p in parts]) for k in parts[0].comm_groups}
                                    if f.name == "comm_groups" else np.concatenate([getattr(p, f.name) for p in parts]))
                           for f in fields(StepTime)})


def evaluate(inp: StepInputs, eff: Efficiency | None = None, overlap: Overlap | None = None) -> StepTime:
    """Step time of prepared inputs for one set of efficiencies (see the module docstring).

    ``overlap``: base overlap fractions (default :class:`comm.Overlap`, with the EP fraction
    of each entry's schedule, ``inp.ep_overlap``, and the TP fraction of its software stack,
    ``inp.tp_overlap``), scaled by ``eff.overlap_scale``.
    """
    eff = default_efficiency() if eff is None else eff
    ceil = np.array([eff.gemm_ceiling[k] for k in FORMAT_CLASSES])
    fam = np.array([eff.family_factor[k] for k in FAMILIES])[inp.fam_idx] * inp.clock_scale
    # the 4-bit ceiling is absolute (no Hopper basis: FP4 tensor cores start with Blackwell)
    r_fmt = inp.peak_fmt * ceil[inp.fmt_idx] * np.where(inp.fmt_idx == FP4_CLASS, inp.clock_scale, fam)
    r_16 = inp.peak_16 * ceil[0] * fam
    inv_lin = inp.lowp_share / r_fmt + (1.0 - inp.lowp_share) / r_16  # seconds per FLOP
    k_f, k_16 = eff.gemm_roofline * inp.n_ref_fmt, eff.gemm_roofline * inp.n_ref_16
    attn = attention_seconds(inp, r_16, fam)
    compute = (inp.flops_lin * inv_lin * (1.0 + k_f * inp.s_lin)
               + inp.flops_exp * inv_lin * (1.0 + k_f * inp.s_exp)
               + attn
               + inp.flops_head / r_16 * (1.0 + k_16 * inp.s_head))
    mem_micro = ((eff.memory_overhead * inp.bytes_micro + eff.moe_overhead * inp.bytes_route) / inp.hbm_bw
                 + inp.bytes_scores / (inp.hbm_bw * HBM_STREAM_EFF))
    mem_step = eff.memory_overhead * inp.bytes_step / inp.hbm_bw
    # a fixed time per layer per micro-batch, whatever its work: what a layer's forward and backward
    # cost beyond their FLOPs and bytes (the gaps between its few dozen kernels, each last wave's tail)
    mem_micro = mem_micro + eff.layer_overhead_us * 1e-6 * inp.layer_passes
    busy = compute + mem_micro
    bubble = inp.bubble * busy
    # the context-parallel ring hides its K/V hops under the attention of the chunk at hand only
    # the MoE all-to-all hides as far as the layout's schedule allows, unless overlap is given
    ep_frac = None if overlap is not None else {"ep": ep_hidden_share(inp, eff.overlap_scale),
                                                "tp": np.minimum(1.0, inp.tp_overlap * eff.overlap_scale)}
    exp = comm.exposed_comm(inp.comm, busy, eff.overlap(overlap), windows={"cp": attn}, fractions=ep_frac)
    # the all-to-all kernels that run under the other micro-batch's compute take their SMs from it
    groups = {**exp.groups, "ep": exp.groups["ep"] + EP_COMM_SM_SHARE * exp.hidden["ep"]}
    exposed = np.broadcast_to(np.asarray(sum(groups.values()), dtype=np.float64), busy.shape)
    other = mem_micro + mem_step
    step = compute + other + bubble + exposed
    tps = inp.tokens_per_step / (step * inp.gpus)
    mflops = inp.model_flops_per_token * tps
    return StepTime(step_s=step, compute_s=compute, other_s=other, bubble_s=bubble, exposed_comm_s=exposed,
                    comm_s=np.broadcast_to(np.asarray(inp.comm.seconds, dtype=np.float64), step.shape),
                    comm_groups={k: np.broadcast_to(np.asarray(v, dtype=np.float64), step.shape)
                                 for k, v in groups.items()},
                    tokens_per_step=inp.tokens_per_step, tokens_per_s_per_gpu=tps,
                    model_tflops_per_gpu=mflops / 1e12, mfu=mflops / inp.peak_fmt,
                    hfu=inp.hw_flops_per_gpu / step / inp.peak_fmt)


#: Share of the SMs the MoE dispatch and combine kernels occupy while they run under another
#: micro-batch's compute (Megatron-Core ``overlap_moe_expert_parallel_comm``, DualPipe): that compute
#: runs on the rest. DeepEP's normal kernels default to 20 of an H800's 132 SMs (0.15,
#: deepseek-ai/DeepEP README, ``Buffer.num_sms``); the Megatron-Bridge benchmark recipes give HybridEP
#: 32 of a B200/GB200's 148 (0.22, perf_recipes/_common.py ``moe_hybridep_num_sms = 32``): 0.2.
EP_COMM_SM_SHARE = 0.2


def ep_hidden_share(inp: StepInputs, overlap_scale: float):
    """Share of the MoE all-to-all time that can run under compute, per entry. A paired schedule
    (``ep_overlap``: Megatron-Core's ``overlap_moe_expert_parallel_comm``, which merges one
    micro-batch's forward with another's backward layer by layer; ``dualpipe``) hides every
    all-to-all that has a partner: all but those of the pipeline warm-up (forwards) and cool-down
    (backwards), pp of the n_micro micro-batches each way, 1 - pp / n_micro (1 - 1/n_micro without
    a pipeline); the hidden part costs :data:`EP_COMM_SM_SHARE` of its time in slower compute
    (:func:`evaluate`). Physics, not the fitted ``overlap_scale``. "1f1b" hides none; "unknown" the
    assumed half (``comm.SCHEDULE_EP_OVERLAP``) times ``overlap_scale``."""
    lay = inp.comm.layouts
    m = np.maximum(np.asarray(lay.n_micro, dtype=np.float64), 1.0)
    paired = np.clip(1.0 - np.asarray(lay.pp, dtype=np.float64) / m, 0.0, 1.0)
    base = np.asarray(inp.ep_overlap, dtype=np.float64)
    return np.where(base >= 1.0, paired, np.minimum(1.0, base * overlap_scale))


def attention_seconds(inp: StepInputs, r_16, fam):
    """Flash-attention core time per step, seconds: per score element, the forward GEMMs at the
    kernel's share of the 16-bit rate (``attn_tc``) plus the softmax exp not hidden under them
    (1 - ``attn_exp_hidden``), the backward GEMMs at ``attn_bwd_eff`` of the forward's rate plus one
    unhidden exp, over the backward's elements (its fixed cost per query row included,
    :data:`ATTN_KERNEL_CONSTANTS`). The exp rate is the 16-bit peak / :data:`SFU_RATIO` at the
    family's sustained clock (``fam``). Longer heads amortize the exp over more FLOPs: efficiency
    rises with head size."""
    exp_rate = inp.peak_16 * fam / inp.sfu_ratio
    # unfused: the batched GEMMs at the 16-bit rate (their score operands and outputs are the
    # memory-bound bytes_scores, counted once there), the softmax a memory-bound kernel (no exp here)
    unfused = inp.attn_unfused > 0
    r = r_16 * inp.attn_tc
    x_fwd = np.where(unfused, 0.0, (1.0 - inp.attn_exp_hidden) / exp_rate)
    x_bwd = np.where(unfused, 0.0, 1.0 / exp_rate)
    fwd = inp.attn_elems_fwd * (inp.attn_fwd_fpe / r + x_fwd)
    bwd = inp.attn_elems_bwd * (inp.attn_bwd_fpe / (r * inp.attn_bwd_eff) + x_bwd)
    return fwd + bwd


def attention_efficiency(gpu: hardware.GPU, d_qk: float, d_v: float | None = None, eff: Efficiency | None = None,
                         kernel: str = "flash", seq: float | None = None) -> tuple[float, float]:
    """(forward, backward) causal flash-attention throughput as a fraction of the GPU's dense 16-bit
    peak for heads of ``d_qk`` / ``d_v`` (default d_qk), by :func:`attention_seconds`' rule: FLOPs of
    the causal half of the scores (s^2 / 2 per head) over the time of the elements the kernel runs
    (diagonal tiles, the backward's fixed cost per query row) at sequence ``seq`` (default: very
    long, the per-row costs vanish)."""
    g = hardware.check(gpu)
    eff = default_efficiency() if eff is None else eff
    d_v = d_qk if d_v is None else d_v
    tc, ov, bw, tile = attention_constants(kernel, g.family)
    fam = eff.family_factor[g.family] * power_scale(g)
    r = eff.gemm_ceiling["16bit"] * fam * tc  # fraction of peak of the tensor-core part
    x = fam / SFU_RATIO[g.family]              # exp per peak FLOP
    f_fwd, f_bwd = 2.0 * (d_qk + d_v), 6.0 * d_qk + 4.0 * d_v
    rows_f = 1.0 if seq is None else (seq + FA_CAUSAL_TILE) / seq
    rows_b = 1.0 if seq is None else (seq + FA_CAUSAL_TILE + tile) / seq
    t_fwd = (f_fwd / r + (1.0 - ov) / x) * rows_f
    t_bwd = (f_bwd / (r * bw) + 1.0 / x) * rows_b
    return f_fwd / t_fwd, f_bwd / t_bwd


def step_time(model: Model, layouts, precision: recipes.Recipe, gpu, topo: Topology | None = None,
              eff: Efficiency | None = None, overlap: Overlap | None = None,
              wire: WireFormat | None = None, **prepare_options: Any) -> StepTime:
    """Step time and breakdown for every layout (:func:`prepare` then :func:`evaluate`)."""
    return evaluate(prepare(model, layouts, precision, gpu, topo, wire, **prepare_options), eff, overlap)


@dataclass(frozen=True)
class Prediction:
    """Central step time and its band: ``low`` / ``high`` use every efficiency parameter at the
    end of its range that lowers / raises throughput."""

    value: StepTime
    low: StepTime
    high: StepTime

    def take(self, idx) -> "Prediction":
        return Prediction(self.value.take(idx), self.low.take(idx), self.high.take(idx))


def predict(model: Model, layouts, precision: recipes.Recipe, gpu, topo: Topology | None = None,
            band: EfficiencyBand | None = None, overlap: Overlap | None = None,
            wire: WireFormat | None = None, inputs: StepInputs | None = None,
            **prepare_options: Any) -> Prediction:
    """Step time with its low / high band (``band`` default: ``data/efficiency.yaml``)."""
    inp = prepare(model, layouts, precision, gpu, topo, wire, **prepare_options) if inputs is None else inputs
    return evaluate_band(inp, band, overlap)


def _slower(st: StepTime, f) -> StepTime:
    """``st`` with every time multiplied by ``f`` (rates divided by it)."""
    f = np.asarray(f, dtype=np.float64)
    t = {k: getattr(st, k) * f for k in ("step_s", "compute_s", "other_s", "bubble_s", "exposed_comm_s", "comm_s")}
    r = {k: getattr(st, k) / f for k in ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "hfu")}
    return StepTime(comm_groups={k: v * f for k, v in st.comm_groups.items()}, tokens_per_step=st.tokens_per_step,
                    **t, **r)


def evaluate_band(inp: StepInputs, band: EfficiencyBand | None = None, overlap: Overlap | None = None) -> Prediction:
    """:func:`evaluate` at the central value and both corners of ``band`` (default: the data file),
    each corner widened to at least the out-of-sample band of the entry's regime
    (``band.regime_spread``, else ``band.spread``: value x (1 + w)^-+1 in step time): whichever is
    wider per entry."""
    band = default_band() if band is None else band
    val, lo, hi = (evaluate(inp, e, overlap) for e in (band.value, band.low, band.high))
    w = band.spreads(inp.regime_idx)
    if np.any(w > 0):
        f_lo = np.maximum(lo.step_s / val.step_s, 1.0 + w)     # at least (1 + w) x slower
        f_hi = np.minimum(hi.step_s / val.step_s, 1.0 / (1.0 + w))
        lo, hi = _slower(val, f_lo), _slower(val, f_hi)
    return Prediction(val, lo, hi)


# =========================================================================================
# Least recompute that fits
# =========================================================================================
def least_recompute(model: Model, layouts, gpu, precision: recipes.Recipe, **memory_options: Any):
    """(recompute code, full-recompute fraction, total GiB) of the least recompute that fits.

    Order: none, selective, then full recompute of the fewest layers per virtual pipeline chunk
    (Megatron ``recompute_method=block`` with ``recompute_num_layers`` r of the chunk's
    ceil(L / (pp vp)) layers, the rest selective): memory is interpolated linearly between
    selective (r = 0) and full (r = all), which is exact for the stored per-layer activations.
    Where even full recompute does not fit: code 2, fraction 1, and the (too large) total.
    The layouts' own ``recompute`` is ignored. Vectorized over a ``LayoutArray``.
    """
    la = _as_array(layouts)
    cap = memory.capacity_gib(gpu) * memory.GIB
    n = len(la)
    # one breakdown of the three recompute levels side by side (elementwise the same as three)
    three = LayoutArray.concat([la.replace(recompute=c) for c in (0, 1, 2)])
    total = memory.breakdown(model, three, precision, **memory_options).total
    tot = [total[:n], total[n:2 * n], total[2 * n:]]
    per_chunk = np.ceil(model.layers / (la.pp * la.vp).astype(np.float64))
    need = np.where(tot[1] > tot[2], (tot[1] - cap) / np.maximum(tot[1] - tot[2], 1.0), 1.0)
    r = np.clip(np.ceil(np.round(need * per_chunk, 9)), 1.0, per_chunk)
    x = r / per_chunk
    code = np.where(tot[0] <= cap, 0, np.where(tot[1] <= cap, 1, 2))
    frac = np.where(code == 2, np.where(tot[2] <= cap, x, 1.0), 0.0)
    gib = np.where(code == 0, tot[0], np.where(code == 1, tot[1], tot[1] + frac * (tot[2] - tot[1]))) / memory.GIB
    return code.astype(np.int64), frac, gib


__all__ = ["ADAM_BYTES", "CP_MERGE_BYTES", "CP_STEP_SHARE", "ATTN_FAMILY_CONSTANTS", "ATTN_KERNEL_CONSTANTS", "FA2_FAMILIES", "attention_constants", "FA_CAUSAL_TILE",
           "FP4_BF16_LAYERS", "GROUPED_TILE_M", "pipeline_split", "HBM_STREAM_EFF", "UNFUSED_ATTN_BYTES", "SFU_RATIO",
           "Prediction", "attention_efficiency", "attention_seconds",
           "StepInputs", "StepTime", "compute_precision", "ep_dedup_factor",
           "distinct_groups", "evaluate", "evaluate_band", "least_recompute",
           "memory_bound_bytes", "moe_permute_bytes", "padded_vocab",
           "predict", "prepare", "step_time"]
