"""Bytes per GPU by term, vectorized over layouts, and fit checks.

Public API:

- ``breakdown(model, layouts, precision=BF16, *, reserve_gib=RESERVE_GIB, stage="max",
  **options) -> Memory``: bytes per GPU of the heaviest pipeline stage by term (``weights,
  gradients, optimizer, activations, reserve``) and ``total``, float64 arrays over a
  ``LayoutArray`` (a single ``Layout`` gives length 1). Pure numpy broadcasting, no Python
  loop over layouts (1e6 layouts in ~0.3 s on one core).
- ``grid_total(model, grid, precision=BF16, *, reserve_gib=RESERVE_GIB, **options)``: the
  ``total`` of ``breakdown`` (same bits, same order) for a ``layout.LayoutGrid``, each term that
  depends on neither ZeRO stage nor recompute computed once per base layout (the search's grid).
- ``fits(model, layouts, gpu, precision=BF16, **options) -> bool array``; ``gpu`` is a
  capacity in GiB or a ``hardware.GPU`` (``hbm_gib``).
- ``least_recompute(model, layouts, gpu, precision, **options) -> int array``: the smallest
  recompute code (0 none, 1 selective, 2 full) that fits each layout, -1 if none does.
- ``max_micro_batch(model, layouts, gpu, precision, **options) -> int array``.
- The smallest GPU count and the least model-parallel layout that fits are questions to the
  layout search (:func:`scaletax.model.search.min_gpus`, ``SearchSpace(objective="least_parallel")``).
- ``activation_items(model, precision, attention, dropout)``: the per-layer activation terms.
- ``resolve_options(precision, **options)``: the options below with their defaults filled.

Options (keywords of every function above): ``attention`` "flash" (default: modern runs use
flash attention) | "paper" (Korthikanti's stored attention scores, to reproduce the paper);
``dropout`` (default True with "paper", False with "flash"); ``param_bytes``, ``grad_bytes``,
``optimizer_bytes`` per parameter (defaults: the recipe's, :mod:`scaletax.inputs.recipes`; optimizer 12,
or 16 with 16-bit gradients); ``lowp_weight_copy`` (True); ``lowp_params`` (False: True models
fp8/fp4 "param gather", linear weights kept only in the low-precision format);
``selective_modules`` (what "selective" recomputes: ``options.SELECTIVE_MODULES``, or
``options.SELECTIVE_MODULES_PAPER`` with "paper"); ``include_embeddings`` (True; False reproduces the
papers' transformer-layers-only accounting); ``fsdp_prefetch_layers``; ``gather_bytes`` (bytes
per parameter of the ZeRO-3 gathered layers; default the stored linear-weight bytes: a stack that
stores fp32 and gathers bf16, FSDP2's mixed precision, states 2); ``pp_layout`` (None; a Megatron-Core
``pipeline_model_parallel_layout`` string, :mod:`scaletax.inputs.pipeline_layout`: the first and last
stage hold the transformer layers its first and last rank hold).

Model of each term (h hidden, a heads, s sequence, b micro-batch, t tensor-parallel size,
V vocab, L layers, p pipeline size, v virtual stages):

- Model state per parameter, Megatron-LM distributed-optimizer table
  (docs/source/api-guide/dist_optimizer.md): bf16 params + bf16 main grads (the grad buffer
  reduced in place in 16 bits, ``recipes.GRAD_BYTES``, the same bytes ``comm`` puts on the wire)
  + fp32 master, fp32 gradient shard and Adam m, v = 2 + 2 + 16 bytes ("4 + 16/d" with the
  distributed optimizer); with fp32 main grads (``grad_bytes=4``, ``grad_reduce_in_fp32``)
  2 + 4 + 12 ("6 + 12/d"). The fp32 gradient shard is transient: Megatron-Core's
  ``DistributedOptimizer`` builds it from the 16-bit grad buffer at the optimizer step
  (``_copy_model_grads_to_main_grads``: ``shard_main_param.grad = shard_model_grad.float()``) and
  drops it at the next step's ``zero_grad(set_to_none=True)``, before the forward pass; it never
  coexists with the activations, so a stage's peak holds the larger of the two (the excess of
  the copy is reported under ``optimizer``; explicitly stated ``optimizer_bytes`` are all
  persistent). PyTorch FSDP2 as TorchTitan runs it (``runs.fsdp_memory_options``): fp32 parameter
  shards that are the master weights, fp32 gradient shards and Adam m, v, 4 + 4 + 8 = 16 bytes,
  with the layers in flight gathered in bf16 (``gather_bytes``). ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, §5): stage 1
  shards the optimizer state, stage 2 also the gradients, stage 3 also the parameters, over
  the data-parallel group: ``dp * cp`` for dense parameters (Megatron shards over data and
  context ranks), the expert-data-parallel group ``edp`` for routed-expert parameters (whose
  ``moe_experts`` experts are already split over ``ep * etp`` ranks).
- Low-precision weight copies: recipes that run GEMMs in FP8/MX/NVFP4 keep the bf16 weights
  plus a cached quantized copy of every transformer linear weight in both orientations
  (row-wise for forward, column-wise for backward, as Transformer Engine caches them across
  micro-batches): ``Recipe.lowp_copy_bytes``.
- Activations: Korthikanti et al. 2022 (arXiv 2205.05198) §4, term by term in
  ``activation_items`` so that GQA, MLA, gated MLPs, MoE and the GEMM precision change the
  constants; the first pipeline stage holds ``p`` micro-batches for 1F1B and
  ``(1 + (p-1)/(p v))`` times that for the interleaved schedule (§4.2.3, generalised from
  Megatron's warm-up count ``2 (p - r - 1) + (v - 1) p`` for rank r); the embedding dropout
  mask on the first stage and the output layer (``4 s b h / t`` inputs plus ``4 s b V / t``
  fp32 logits, §4.3) on the last; context parallelism divides s. "none" keeps everything,
  "selective" frees what ``selective_modules`` recompute, "full" keeps each layer's 2 s b h
  input (Table 2; / t with sequence parallelism) plus one layer's activations for the
  recomputation.
- Reserve: ``options.RESERVE_GIB`` per GPU (ASSUMPTION) for the CUDA context, NCCL buffers and
  allocator fragmentation.

The heaviest stage is the larger of the first and the last pipeline stage (middle stages
hold no embedding and fewer micro-batches than the first). Each stage holds
``ceil(L / p)`` layers (upper bound for uneven splits), or with ``pp_layout`` the layers the
layout gives its first and last rank; on an MoE model the first stage holds the leading dense
layers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from scaletax.inputs import pipeline_layout, recipes
from scaletax.inputs.layout import Layout, LayoutArray, LayoutGrid
from scaletax.inputs.models import Model
from scaletax.inputs.options import RECOMPUTE_MODULES, RESERVE_GIB, SELECTIVE_MODULES, SELECTIVE_MODULES_PAPER

GIB = 2**30

#: ASSUMPTION: with ZeRO-3/FSDP, this many layers' parameters are held unsharded at once
#: (the layer being computed and the prefetched next one).
FSDP_PREFETCH_LAYERS = 2
#: Bytes per stored activation element (16-bit activations; FP8 recipes that save some GEMM
#: inputs in 8 bits would need less -- ignored, so activations are an upper bound there).
ACT_BYTES = 2

#: The precisions the memory model trains in (the recipe registry's); their parameter, gradient,
#: optimizer and quantized-copy bytes are the recipes' (:mod:`scaletax.inputs.recipes`).
PRECISIONS: tuple[str, ...] = recipes.TRAINING
#: The default recipe of the functions below (16-bit mixed precision).
BF16 = recipes.training("bf16")

TERMS: tuple[str, ...] = ("weights", "gradients", "optimizer", "activations", "reserve")
_STAGE_TERMS = TERMS[:4]  # what a pipeline stage holds (the reserve is per GPU)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU by term (float64 arrays, one entry per layout) and their ``total``.

    ``stage`` is 0 where the first pipeline stage is the heaviest, 1 where the last is.
    """

    weights: np.ndarray
    gradients: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    reserve: np.ndarray
    total: np.ndarray
    stage: np.ndarray

    def __len__(self) -> int:
        return int(self.total.shape[0])

    def __getitem__(self, key: str) -> np.ndarray:
        return getattr(self, key)

    def gib(self) -> dict[str, np.ndarray]:
        """Terms and total in GiB."""
        return {k: getattr(self, k) / GIB for k in (*TERMS, "total")}

    def model_state(self) -> np.ndarray:
        """Weights + gradients + optimizer, bytes."""
        return self.weights + self.gradients + self.optimizer


# --- helpers ------------------------------------------------------------------------------

def capacity_gib(gpu: Any) -> float:
    """Usable memory in GiB of ``gpu``: a number (GiB) or a ``hardware.GPU`` (its ``hbm_gib``)."""
    if isinstance(gpu, (int, float, np.integer, np.floating)) and not isinstance(gpu, bool):
        if gpu <= 0:
            raise ValueError(f"capacity: must be positive GiB (got {gpu})")
        return float(gpu)
    if hasattr(gpu, "hbm_gib"):
        return float(gpu.hbm_gib)
    raise TypeError(f"gpu: expected GiB or a hardware.GPU (got {type(gpu).__name__} {gpu!r}): look a GPU id up "
                    "once where it comes in (hardware.get)")


def _as_array(layouts: Layout | LayoutArray | Iterable[Layout]) -> LayoutArray:
    if isinstance(layouts, LayoutArray):
        return layouts
    if isinstance(layouts, Layout):
        return LayoutArray.from_layouts([layouts])
    return LayoutArray.from_layouts(list(layouts))


def _check_precision(precision: recipes.Recipe) -> None:
    if not recipes.check(precision).trains:
        raise ValueError(f"precision: the memory model does not train in {precision.name}; valid: "
                         f"{', '.join(recipes.TRAINING)}")


#: ASSUMPTION: every transformer GEMM runs in the recipe precision, and Transformer Engine saves
#: the quantized input -- column-wise, with its block scales, ``Recipe.operand_bytes`` -- for the
#: weight-gradient GEMM; norms, activation-function inputs and attention Q/K/V/O stay 16-bit.


def activation_items(model: Model, precision: recipes.Recipe = BF16, attention: str = "flash",
                     dropout: bool = False) -> list[tuple[str, float, str, str, frozenset]]:
    """Saved activations of one layer, bytes per token, term by term.

    Each item is ``(name, bytes_per_token, placement, layer_kind, dropped_by)``:
    placement "rep" (outside the tensor-parallel region: divided by t only with sequence
    parallelism), "split" (divided by t), "routed" (per routed token copy, divided by t) or
    "routed_etp" (as "routed", once per expert-tensor-parallel rank); layer_kind "all",
    "dense" or "moe"; ``dropped_by`` the recompute modules that free it.

    Korthikanti et al. 2022 §4.1 (16-bit elements, 1-byte dropout masks): layer norm inputs
    2h + 2h, attention input 2h, Q K V 2h each, output-projection input 2h, MLP input 2h, fc1
    output 8h and GELU output 8h (f = 4h), two dropout masks h + h (= 10h outside TP, 24h
    inside), attention core 5 a s (softmax 2as, its dropout mask as and output 2as).
    Generalised: Q 2 a d_qk, K 2 g d_qk, V 2 g d_v (GQA; MLA with g = a), output-projection
    input 2 a d_v; a gated MLP saves its fc1 output (gate and up, 2 x 2f) and the product
    (fc2 input); GEMM inputs take the recipe's ``operand_bytes``; flash attention stores no
    scores, only an fp32 log-sum-exp per head (4a; Dao et al. 2022 arXiv 2205.14135 §3.1);
    MLA adds its latents (down-projection outputs 2(q_lora + kv_lora + rope), their normed
    copies as up-projection inputs); an MoE layer stores the router input (16-bit) and fp32
    router probabilities (4 x experts), per routed copy (top_k per token, balanced routing)
    the expert fc1 input, fc1 output and activation output (routing weights are applied
    inside the activation in Megatron-Core, so expert outputs are not kept), and the shared
    experts like a dense MLP.
    """
    if attention not in ("flash", "paper"):
        raise ValueError(f"attention: must be 'flash' or 'paper' (got {attention!r})")
    _check_precision(precision)
    h, a, g, s = model.hidden, model.heads, model.kv_heads, model.seq_len
    dqk, dv = model.qk_head_dim, model.v_head_dim_eff
    B, q = ACT_BYTES, precision.operand_bytes
    up = frozenset({"mla_up_proj"}) if model.attention == "mla" else frozenset()
    ln = frozenset({"layernorm"})
    none = frozenset()

    def fc1(width):  # saved activation-function input: gate and up (gated) or pre-GELU
        return B * (2 * width if model.gated else width)

    items = [
        ("ln1_input", B * h, "rep", "all", none),
        ("attn_input", q * h, "rep", "all", ln),
        ("ln2_input", B * h, "rep", "all", none),
        ("q", B * a * dqk, "split", "all", up),
        ("k", B * g * dqk, "split", "all", up),
        ("v", B * g * dv, "split", "all", up),
        ("attn_core", (a * s * (B + ((1 + B) if dropout else 0))) if attention == "paper" else 4.0 * a,
         "split", "all", frozenset({"core_attn"})),
        ("proj_input", B * a * dv, "split", "all", none),
        ("dense_mlp_input", q * h, "rep", "dense", ln),
        ("dense_fc1_output", fc1(model.ffn_hidden), "split", "dense", frozenset({"mlp"})),
        ("dense_act_output", q * model.ffn_hidden, "split", "dense", frozenset({"mlp"})),
    ]
    if dropout:
        items.append(("dropout_masks", 2.0 * h, "rep", "all", none))
    if model.attention == "mla":
        items.append(("mla_latents", B * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim),
                      "rep", "all", none))
        items.append(("mla_latents_normed", q * (model.q_lora_rank + model.kv_lora_rank), "rep", "all", up))
    if model.is_moe:
        fs, fm, k = model.moe_ffn_hidden * model.moe_shared_experts, model.moe_ffn_hidden, model.moe_top_k
        sh = frozenset({"shared_experts"})
        items += [
            ("router_input", B * h, "rep", "moe", ln),
            ("router_probs", 4.0 * model.moe_experts, "rep", "moe", none),
            ("expert_input", k * q * h, "routed_etp", "moe", none),
            ("expert_fc1_output", k * fc1(fm), "routed", "moe", none),
            ("expert_act_output", k * q * fm, "routed", "moe", frozenset({"moe_act"})),
        ]
        if fs:
            items += [
                ("shared_input", q * h, "rep", "moe", ln | sh),
                ("shared_fc1_output", fc1(fs), "split", "moe", sh),
                ("shared_act_output", q * fs, "split", "moe", sh),
            ]
    return [(n, float(b), p, kind, d) for n, b, p, kind, d in items]


def _act_coeffs(items, kind: str, dropped: frozenset) -> dict[str, float]:
    out = {"rep": 0.0, "split": 0.0, "routed": 0.0, "routed_etp": 0.0}
    for _, b, place, k, d in items:
        if k in ("all", kind) and not (d & dropped):
            out[place] += b
    return out


def _common(model: Model, la: LayoutArray, o: dict[str, Any]) -> dict[str, Any]:
    """Per-layout arrays shared by the first and last stage (per-layer params, divisors, bytes/token)."""
    f64 = np.float64
    c: dict[str, Any] = {k: getattr(la, k).astype(f64) for k in ("tp", "pp", "cp", "ep", "etp", "dp", "vp", "mbs")}
    tp, pp, cp, ep, etp, dp = (c[k] for k in ("tp", "pp", "cp", "ep", "etp", "dp"))
    zero, rc = la.zero_stage, la.recompute
    if o["pp_layout"] is None:
        c["n_first"] = c["n_last"] = np.ceil(model.layers / pp)
    else:  # the ranks' own transformer layers (Megatron-Core pipeline_model_parallel_layout)
        c["n_first"], c["n_last"] = pipeline_layout.end_stage_layers(o["pp_layout"], pp)
    # parameters of one layer on one GPU (norms, router and MLA down-projections replicated over TP)
    a_rep = model.attn_tp_replicated_params
    attn_tp = (model.attn_params - a_rep) / tp + a_rep
    c["dense_layer"] = attn_tp + model.norm_params + model.dense_mlp_params / tp
    c["moe_nonexp"] = attn_tp + model.norm_params + model.router_params + model.shared_expert_params / tp
    c["moe_exp"] = model.moe_experts * model.expert_params / (ep * etp)
    c["head"] = model.vocab * model.hidden / tp
    # ZeRO sharding divisors: dense params over dp*cp, routed experts over edp (module docstring)
    shard_d = dp * cp
    shard_e = np.maximum((tp * cp * dp) // (ep * etp), 1.0)
    z3, z2, z1 = zero >= 3, zero >= 2, zero >= 1
    c["z3"] = z3
    c["w_d"], c["w_e"] = np.where(z3, shard_d, 1.0), np.where(z3, shard_e, 1.0)
    c["g_d"], c["g_e"] = np.where(z2, shard_d, 1.0), np.where(z2, shard_e, 1.0)
    c["o_d"], c["o_e"] = np.where(z1, shard_d, 1.0), np.where(z1, shard_e, 1.0)
    # activation bytes per token of one layer on this GPU
    items = activation_items(model, o["precision"], o["attention"], o["dropout"])
    rep_div = np.where(la.sp.astype(bool), tp, 1.0)
    c["rep_div"] = rep_div

    def per_token(kind: str, dropped: frozenset) -> np.ndarray:
        k = _act_coeffs(items, kind, dropped)
        return k["rep"] / rep_div + (k["split"] + k["routed"] + k["routed_etp"] * etp) / tp

    sel = frozenset(o["selective_modules"])
    c["dense_none"] = per_token("dense", frozenset())
    c["dense_tok"] = np.where(rc == 1, per_token("dense", sel), c["dense_none"])
    if model.is_moe:
        c["moe_none"] = per_token("moe", frozenset())
        c["moe_tok"] = np.where(rc == 1, per_token("moe", sel), c["moe_none"])
    else:
        c["moe_none"] = c["moe_tok"] = np.zeros_like(tp)
    c["tokens"] = c["mbs"] * model.seq_len / cp  # tokens of one micro-batch on this CP rank
    c["n_micro"] = np.maximum(la.n_micro.astype(f64), 1.0)
    c["full"] = rc == 2
    return c


def _stage(model: Model, la: LayoutArray, last: bool, o: dict[str, Any], c: dict[str, Any]) -> dict[str, np.ndarray]:
    """Terms (bytes) for the first (``last=False``) or last pipeline stage of every layout."""
    tp, pp, vp = c["tp"], c["pp"], c["vp"]
    L, n_stage = model.layers, c["n_last" if last else "n_first"]
    if last:
        n_dense = np.maximum(0.0, model.n_dense_layers - (L - n_stage))
    else:
        n_dense = np.minimum(float(model.n_dense_layers), n_stage)
    n_moe = n_stage - n_dense
    include_emb = o["include_embeddings"]

    # --- parameters on one GPU of this stage ---------------------------------------------
    dense_layer, moe_nonexp, moe_exp = c["dense_layer"], c["moe_nonexp"], c["moe_exp"]
    p_dense = n_dense * dense_layer + n_moe * moe_nonexp
    p_exp = n_moe * moe_exp
    # transformer linear weights (those with quantized copies): no norms, no router
    l_dense = p_dense - n_stage * model.norm_params - n_moe * model.router_params
    if include_emb:
        single = pp == 1
        pos = model.embedding_params - model.vocab * model.hidden  # learned positions, replicated
        final_norm = model.output_params - (0 if model.tied_embeddings else model.vocab * model.hidden)
        head = c["head"]
        if last:
            # output projection (a tied copy too when pp > 1: Megatron keeps one on the last stage)
            out_w = np.where(single & model.tied_embeddings, 0.0, head) + final_norm
            emb_w = np.where(single, head + pos, 0.0)
        else:
            emb_w = head + pos
            out_w = np.where(single, np.where(model.tied_embeddings, 0.0, head) + final_norm, 0.0)
        p_dense = p_dense + emb_w + out_w
    pb, lowp = o["param_bytes"], o["lowp"]
    # lowp_params: linear weights live only as their quantized copy (fp8/fp4 param gather)
    lin_pb = 0.0 if o["lowp_params"] and lowp > 0 else pb
    w_d, w_e = c["w_d"], c["w_e"]
    weights = pb * (p_dense - l_dense) / w_d + (lin_pb + lowp) * (l_dense / w_d + p_exp / w_e)
    # ZeRO-3 / FSDP: gathered (unsharded) parameters of the layers in flight (ASSUMPTION above)
    largest_layer = np.maximum(np.where(n_dense > 0, dense_layer, 0.0),
                               np.where(n_moe > 0, moe_nonexp + moe_exp, 0.0))
    gathered = (lin_pb if o["gather_bytes"] is None else o["gather_bytes"]) + lowp
    weights = weights + np.where(c["z3"], o["fsdp_prefetch_layers"] * largest_layer * gathered, 0.0)
    gradients = o["grad_bytes"] * (p_dense / c["g_d"] + p_exp / c["g_e"])
    optimizer = o["optimizer_bytes"] * (p_dense / c["o_d"] + p_exp / c["o_e"])
    grad_copy = o["optimizer_transient_bytes"] * (p_dense / c["o_d"] + p_exp / c["o_e"])

    # --- activations ----------------------------------------------------------------------
    # in-flight micro-batches (in units of whole stages) on rank r: 1F1B holds p - r; the
    # interleaved schedule holds 2(p-r-1) + (v-1)p + 1 model chunks of 1/v stage each
    # (Korthikanti §4.2.3; Megatron-LM schedules.py warm-up count), capped by the micro-batches.
    r = pp - 1 if last else 0.0
    n_micro = c["n_micro"]
    inflight = np.where(vp > 1,
                        np.minimum(2 * (pp - r - 1) + (vp - 1) * pp + 1, n_micro * vp) / vp,
                        np.minimum(pp - r, n_micro))
    rep_div, tokens = c["rep_div"], c["tokens"]
    stored = n_dense * c["dense_tok"] + n_moe * c["moe_tok"]
    # full recompute keeps each layer's 16-bit input (Korthikanti Table 2: 2sbh per layer,
    # / t with sequence parallelism); recomputing one layer in backward needs its full
    # activations once more (one micro-batch, one layer)
    full_keep = n_stage * ACT_BYTES * model.hidden / rep_div
    full_work = np.maximum(np.where(n_dense > 0, c["dense_none"], 0.0), np.where(n_moe > 0, c["moe_none"], 0.0))
    acts = np.where(c["full"], inflight * full_keep + full_work, inflight * stored) * tokens
    if include_emb:
        single = pp == 1
        emb_mask = (model.hidden if o["dropout"] else 0.0) / rep_div  # §4.3: embedding dropout mask
        # §4.3: final-norm and output-projection inputs 4sbh/t, fp32 logits for the loss 4sbV/t
        output = 2 * ACT_BYTES * model.hidden / rep_div + 4.0 * model.vocab / tp
        if last:
            acts = acts + tokens * (output + np.where(single, emb_mask, 0.0))
        else:
            acts = acts + tokens * (emb_mask * inflight + np.where(single, output, 0.0))
    # the fp32 gradient-shard copy and the activations are never held at once: the peak is the
    # larger of the two, the excess of the copy counted with the optimizer
    optimizer = optimizer - grad_copy + np.maximum(grad_copy - acts, 0.0)
    return {"weights": weights, "gradients": gradients, "optimizer": optimizer, "activations": acts}


def resolve_options(precision: recipes.Recipe = BF16, *, attention: str = "flash", dropout: bool | None = None,
                    param_bytes: float | None = None, grad_bytes: float | None = None,
                    optimizer_bytes: float | None = None, lowp_weight_copy: bool = True,
                    lowp_params: bool = False, selective_modules: Sequence[str] | None = None,
                    include_embeddings: bool = True, fsdp_prefetch_layers: int = FSDP_PREFETCH_LAYERS,
                    gather_bytes: float | None = None, pp_layout: str | None = None) -> dict[str, Any]:
    """Validate the memory-model options and fill their defaults (see ``breakdown``)."""
    _check_precision(precision)
    if pp_layout is not None:
        pipeline_layout.expand(pp_layout)  # the grammar; the layout is checked against pp where it is used
    if attention not in ("flash", "paper"):
        raise ValueError(f"attention: must be 'flash' or 'paper' (got {attention!r})")
    rec = precision
    pb = rec.param_bytes
    gb = rec.grad_bytes if grad_bytes is None else float(grad_bytes)
    # the fp32 copy of the gradient shard (16-bit grads) lives only from the optimizer step to the
    # next zero_grad, when no activations are held (module docstring); stated bytes: all persistent
    transient = rec.optimizer_bytes(gb) - rec.optimizer_bytes(recipes.FP32_BYTES) if optimizer_bytes is None else 0.0
    if optimizer_bytes is None:
        optimizer_bytes = rec.optimizer_bytes(gb)
    if selective_modules is None:
        selective_modules = SELECTIVE_MODULES_PAPER if attention == "paper" else SELECTIVE_MODULES
    bad = set(selective_modules) - set(RECOMPUTE_MODULES)
    if bad:
        raise ValueError(f"selective_modules: unknown {sorted(bad)}; valid: {', '.join(RECOMPUTE_MODULES)}")
    return {
        "precision": precision,
        "attention": attention,
        "dropout": (attention == "paper") if dropout is None else bool(dropout),
        "param_bytes": pb if param_bytes is None else float(param_bytes),
        "grad_bytes": gb,
        "optimizer_bytes": float(optimizer_bytes),
        "optimizer_transient_bytes": float(transient),
        "lowp": rec.lowp_copy_bytes if (lowp_weight_copy or lowp_params) else 0.0,
        "lowp_params": bool(lowp_params),
        "selective_modules": tuple(selective_modules),
        "include_embeddings": bool(include_embeddings),
        "fsdp_prefetch_layers": int(fsdp_prefetch_layers),
        "gather_bytes": None if gather_bytes is None else float(gather_bytes),
        "pp_layout": None if pp_layout is None else str(pp_layout),
    }


# --- public functions ---------------------------------------------------------------------

def breakdown(model: Model, layouts: Layout | LayoutArray | Iterable[Layout], precision: recipes.Recipe = BF16, *,
              reserve_gib: float | np.ndarray = RESERVE_GIB, stage: str = "max", **options: Any) -> Memory:
    """Bytes per GPU by term for every layout (see the module docstring for the model).

    ``precision``: one of ``PRECISIONS``. ``stage``: "first", "last" or "max" (the heavier of
    the two by total, per layout). ``reserve_gib`` may be an array. Options:
    ``attention`` "flash" (default) | "paper"; ``dropout`` (default True for "paper");
    ``param_bytes``/``grad_bytes``/``optimizer_bytes`` per parameter (defaults: the recipe's,
    :mod:`scaletax.inputs.recipes`: optimizer 12, or 16 with 16-bit gradients); ``lowp_weight_copy``
    (True: keep the quantized weight copies of FP8/MX/NVFP4 recipes); ``lowp_params`` (False; True = fp8/fp4
    param gather, no 16-bit linear weights); ``selective_modules`` (what "selective"
    recomputes, default ``SELECTIVE_MODULES``, ``SELECTIVE_MODULES_PAPER`` with "paper");
    ``include_embeddings`` (True; False = the papers' transformer-layers-only accounting);
    ``fsdp_prefetch_layers``.
    """
    la = _as_array(layouts)
    o = resolve_options(precision, **options)
    n = len(la)
    reserve = np.broadcast_to(np.asarray(reserve_gib, dtype=np.float64) * GIB, (n,)).astype(np.float64)
    if stage not in ("max", "first", "last"):
        raise ValueError(f"stage: must be 'max', 'first' or 'last' (got {stage!r})")
    chosen, use_last = _terms(model, la, o, stage)
    if stage == "first":
        which = np.zeros(n, dtype=np.int8)
    elif stage == "last":
        which = np.ones(n, dtype=np.int8)
    else:
        which = use_last.astype(np.int8)
    terms = {k: np.broadcast_to(np.asarray(chosen[k], dtype=np.float64), (n,)).copy() for k in _STAGE_TERMS}
    total = terms["weights"] + terms["gradients"] + terms["optimizer"] + terms["activations"] + reserve
    return Memory(reserve=reserve, total=total, stage=which, **terms)


def _terms(model: Model, la, o: dict[str, Any], stage: str):
    """(terms of the chosen stage, mask of layouts whose last stage is the heavier; None unless
    ``stage`` is "max") for a ``LayoutArray`` or a ``LayoutGrid`` (then broadcast arrays)."""
    c = _common(model, la, o)
    first = _stage(model, la, False, o, c) if stage in ("max", "first") else None
    lastd = _stage(model, la, True, o, c) if stage in ("max", "last") else None
    if stage == "first":
        return first, None
    if stage == "last":
        return lastd, None
    tf = sum(first[k] for k in _STAGE_TERMS)
    tl = sum(lastd[k] for k in _STAGE_TERMS)
    use_last = tl > tf
    return {k: np.where(use_last, lastd[k], first[k]) for k in _STAGE_TERMS}, use_last


def grid_total(model: Model, grid: LayoutGrid, precision: recipes.Recipe = BF16, *, reserve_gib: float = RESERVE_GIB,
               **options: Any) -> np.ndarray:
    """``breakdown(model, grid.expand(), precision, ...).total`` (bytes, same value in every
    bit, same order), computed on the grid: the terms that depend on neither the ZeRO stage nor
    recompute once per base layout (what the search asks for every candidate)."""
    o = resolve_options(precision, **options)
    chosen, _ = _terms(model, grid, o, "max")
    reserve = np.float64(reserve_gib) * GIB
    shape = grid.shape
    w, g, opt, a = (np.broadcast_to(np.asarray(chosen[k], dtype=np.float64), shape) for k in _STAGE_TERMS)
    return (w + g + opt + a + reserve).reshape(-1)


def fits(model: Model, layouts: Layout | LayoutArray | Iterable[Layout], gpu: Any,
         precision: recipes.Recipe = BF16, **options: Any) -> np.ndarray:
    """True where the layout's heaviest stage fits in ``gpu`` (GiB or a ``hardware.GPU``)."""
    cap = capacity_gib(gpu) * GIB
    return breakdown(model, layouts, precision, **options).total <= cap


def least_recompute(model: Model, layouts: Layout | LayoutArray | Iterable[Layout], gpu: Any,
                    precision: recipes.Recipe = BF16, **options: Any) -> np.ndarray:
    """Smallest recompute code (0 none, 1 selective, 2 full) that fits; -1 where none fits.

    The layouts' own ``recompute`` is ignored.
    """
    la = _as_array(layouts)
    out = np.full(len(la), -1, dtype=np.int64)
    for code in (2, 1, 0):  # later (smaller) codes overwrite
        ok = fits(model, la.replace(recompute=code), gpu, precision, **options)
        out = np.where(ok, code, out)
    return out


def max_micro_batch(model: Model, layouts: Layout | LayoutArray | Iterable[Layout], gpu: Any,
                    precision: recipes.Recipe = BF16, *, limit: int = 4096, **options: Any) -> np.ndarray:
    """Largest micro-batch (sequences) that fits each layout, 0 if even 1 does not.

    The number of micro-batches per step is held at the layout's value (gbs scales with mbs).
    Memory is non-decreasing and convex in mbs (affine, or the larger of an affine activation
    term and the transient gradient copy), so a vectorized bisection finds the bound.
    """
    la = _as_array(layouts)
    nm = np.maximum(la.n_micro, 1)
    cap = capacity_gib(gpu) * GIB

    def ok(m):
        m = np.broadcast_to(np.asarray(m, dtype=np.int64), (len(la),))
        return breakdown(model, la.replace(mbs=m, gbs=m * la.dp * nm), precision, **options).total <= cap

    t1 = ok(1)
    lo = np.where(t1, 1, 0).astype(np.int64)       # largest known to fit (0: none)
    ok_limit = ok(limit)
    hi = np.where(t1, np.where(ok_limit, limit + 1, limit), 1).astype(np.int64)  # smallest known not to fit
    lo = np.where(ok_limit, limit, lo)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        act = hi - lo > 1
        good = ok(np.where(act, np.maximum(mid, 1), 1))
        lo = np.where(act & good, mid, lo)
        hi = np.where(act & ~good, mid, hi)
    return np.where(t1, lo, 0)


__all__ = ["ACT_BYTES", "FSDP_PREFETCH_LAYERS", "GIB", "PRECISIONS", "TERMS", "Memory", "activation_items", "breakdown", "capacity_gib", "grid_total",
           "fits", "least_recompute", "max_micro_batch",
           "resolve_options"]
