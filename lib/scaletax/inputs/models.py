"""Transformer and mixture-of-experts architectures: parameter counts and FLOPs per token.

Public API (stable; `parallel`, `memory`, `comm`, `perf`, `search` build on it):

- ``Model``: frozen, validated pydantic description of one architecture.
  Counts (plain ints, parameters): ``total_params``, ``active_params``,
  ``embedding_params``, ``output_params``, ``attn_params``, ``attn_tp_replicated_params``,
  ``mla_up_proj_params``, ``norm_params``,
  ``dense_mlp_params``, ``expert_params``, ``shared_expert_params``, ``router_params``,
  ``dense_layer_params``, ``moe_layer_params``, ``n_dense_layers``, ``n_moe_layers``,
  ``is_moe``, ``qk_head_dim``, ``v_head_dim_eff``, ``param_breakdown()``.
  FLOPs: ``attn_flops_per_token(seq_len, causal)`` (forward, one layer),
  ``model_flops_per_token(seq_len, causal)``, ``hardware_flops_per_token(recompute, ...)``.
- ``get(id)``, ``ids()``, ``catalog()``: the sourced catalog in ``data/models.yaml``.
- ``from_row(row)``: a ``Model`` from a published-runs table row (column names as in
  ``data/published_runs.csv``).
- ``DENSE_1T``, ``MOE_1T``: catalog ids of the report's trillion-parameter scenario models.

Conventions
-----------
Parameter counts include biases and norm weights. ``total_params`` counts every stored
parameter (both embedding tables when untied; one when tied). ``active_params`` counts the
parameters a token multiplies in a matmul: everything used per token *except the
input-embedding table* (a gather, no FLOPs) -- routed experts count ``moe_top_k`` of
``moe_experts``; the output projection counts once even when tied. This is the convention
of the gpt-oss model card (arXiv 2508.10925, Table 1: 5.13B active = 116.83B total minus
non-selected experts minus the embedding table), and it makes ``6 * active_params`` the
matmul part of the training FLOPs.

Training FLOPs per token follow PaLM (Chowdhery et al. 2022, arXiv 2204.02311, App. B):
``6 * N_active + 6 * L * n_heads * (d_qk + d_v) / 2 * s`` -- the 2 * s * heads * (d_qk + d_v)
forward attention-score term (QK^T and AV) times 3 for forward + backward, halved for causal
masking (``causal=True``, the Megatron-LM causal count used for MFU in the runs table). For
MHA (d_qk = d_v = h / a) this is ``6N + 6 L h s``; with ``causal=False`` it reduces to
Narayanan et al. 2021 (arXiv 2104.04473) eq. 3 divided by tokens, ``72 l h^2 (1 + s/(6h) +
V/(12 l h))`` when N = 12 l h^2 + V h.

"Model FLOPs" (``model_flops_per_token``) count no recomputation: the denominator-free
numerator of MFU. "Hardware FLOPs" (``hardware_flops_per_token``) add the recomputed
forward work: ``selective`` recomputes the attention core (Korthikanti et al. 2022,
arXiv 2205.05198, §5) and, for MLA, the up-projections (DeepSeek-V3 arXiv 2412.19437
§3.2.3; the same set as ``options.SELECTIVE_MODULES``), ``full`` recomputes every transformer layer's forward (not the
output layer), which reproduces Narayanan eq. 3's ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from scaletax import DATA_DIR, unknown_id

MODELS_YAML = DATA_DIR / "models.yaml"
#: A model id of a scenario: lowercase letters, digits, ``-`` and ``_``, to the end of the text
#: (``\Z``: no trailing newline, which ``$`` would let through).
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")

#: Catalog id of the report's ~1T dense scenario model (Narayanan et al. 2021, Table 1).
DENSE_1T = "megatron_1t"
#: Catalog id of the report's trillion-parameter MoE scenario model (Kimi K2).
MOE_1T = "kimi_k2"

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


def _count(v: Any) -> bool:
    """A positive integer (not a boolean, not text)."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


class Model(BaseModel):
    """One dense or MoE decoder-only transformer. All sizes are element counts.

    ``hidden`` h, ``heads`` a (query heads), ``kv_heads`` g (GQA groups; = a for MHA and
    for MLA, whose keys/values are up-projected per head), ``head_dim`` (default h / a),
    ``ffn_hidden`` (width of the dense MLP, used by the leading ``moe_dense_layers`` of an
    MoE model), ``seq_len`` s (training sequence length, tokens).
    MLA (DeepSeek-V2, arXiv 2405.04434 §2.1): ``q_lora_rank`` (0 = no query compression),
    ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``.
    MoE: ``moe_experts`` routed experts (0 = dense model), ``moe_top_k`` routed per token,
    ``moe_ffn_hidden`` per-expert width, ``moe_shared_experts`` always-on experts of the
    same width, ``moe_dense_layers`` leading layers with a dense MLP.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default="", pattern=r"^$|^[a-z0-9][a-z0-9_-]{0,63}$")  # pydantic's regex: $ ends the text
    name: str = ""
    layers: int = Field(gt=0, le=1024)
    hidden: int = Field(gt=0, le=2**18)
    heads: int = Field(gt=0, le=4096)
    kv_heads: int | None = Field(default=None, gt=0, le=4096)
    head_dim: int | None = Field(default=None, gt=0, le=4096)
    ffn_hidden: int = Field(gt=0, le=2**21)
    vocab: int = Field(gt=0, le=2**23)
    seq_len: int = Field(gt=0, le=2**24)
    attention: Literal["mha", "gqa", "mla"] | None = None
    q_lora_rank: int = Field(default=0, ge=0, le=2**16)
    kv_lora_rank: int = Field(default=0, ge=0, le=2**16)
    qk_nope_head_dim: int = Field(default=0, ge=0, le=4096)
    qk_rope_head_dim: int = Field(default=0, ge=0, le=4096)
    v_head_dim: int = Field(default=0, ge=0, le=4096)
    moe_experts: int = Field(default=0, ge=0, le=2**16)
    moe_top_k: int = Field(default=0, ge=0, le=1024)
    moe_ffn_hidden: int = Field(default=0, ge=0, le=2**21)
    moe_shared_experts: int = Field(default=0, ge=0, le=1024)
    moe_dense_layers: int = Field(default=0, ge=0, le=1024)
    gated: bool = True  #: SwiGLU-style MLP (3 matrices) vs plain GELU MLP (2 matrices)
    tied_embeddings: bool = False
    bias: bool = False  #: biases on attention and MLP linears (GPT-2/3, gpt-oss)
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    position_embedding: Literal["rope", "learned"] = "rope"
    qk_norm: bool = False  #: per-head RMSNorm on q and k (Qwen3)
    # --- catalog metadata (not architecture) ---------------------------------------
    published_total_params_b: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)
    published_active_params_b: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)
    source: str = ""
    verified: bool = True
    notes: str = ""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        d = dict(data)
        heads = d.get("heads")
        if d.get("kv_heads") is None and heads is not None:
            d["kv_heads"] = heads
        if d.get("attention") is None and heads is not None:
            d["attention"] = "gqa" if d["kv_heads"] != heads else "mha"
        hidden = d.get("hidden")
        if d.get("head_dim") is None and _count(heads) and _count(hidden):  # else the fields' own errors
            if hidden % heads:
                raise ValueError(f"head_dim: not given and hidden={hidden} is not divisible by heads={heads}")
            d["head_dim"] = hidden // heads
        return d

    @model_validator(mode="after")
    def _check(self) -> "Model":
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: heads={self.heads} must be divisible by kv_heads={self.kv_heads}")
        if self.attention == "mha" and self.kv_heads != self.heads:
            raise ValueError(f"kv_heads: attention 'mha' needs kv_heads == heads ({self.kv_heads} != {self.heads})")
        if self.attention == "mla":
            for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) <= 0:
                    raise ValueError(f"{f}: attention 'mla' needs a positive {f}")
            if self.kv_heads != self.heads:
                raise ValueError("kv_heads: MLA up-projects keys/values per head, so kv_heads must equal heads")
        if self.moe_experts:
            if not 1 <= self.moe_top_k <= self.moe_experts:
                raise ValueError(f"moe_top_k: must be in 1..moe_experts={self.moe_experts} (got {self.moe_top_k})")
            if self.moe_ffn_hidden <= 0:
                raise ValueError("moe_ffn_hidden: an MoE model needs a positive per-expert width")
            if self.moe_dense_layers >= self.layers:
                raise ValueError(f"moe_dense_layers: must be < layers={self.layers} (got {self.moe_dense_layers})")
        elif self.moe_top_k or self.moe_shared_experts or self.moe_dense_layers:
            raise ValueError("moe_experts: moe_top_k/moe_shared_experts/moe_dense_layers set on a dense model (moe_experts=0)")
        return self

    # --- structure ------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def n_dense_layers(self) -> int:
        """Layers with a dense MLP (all of them for a dense model)."""
        return self.moe_dense_layers if self.is_moe else self.layers

    @property
    def n_moe_layers(self) -> int:
        return self.layers - self.n_dense_layers

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width entering QK^T."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def v_head_dim_eff(self) -> int:
        """Per-head value width entering AV (and the output projection)."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    # --- parameters (counts) --------------------------------------------------------
    def _norm_size(self, width: int) -> int:
        return 2 * width if self.norm == "layernorm" else width  # LayerNorm: gain + bias

    @property
    def attn_params(self) -> int:
        """Attention parameters of one layer (projections, biases, MLA latent norms)."""
        h, a, g = self.hidden, self.heads, self.kv_heads
        if self.attention == "mla":
            # DeepSeek-V2 arXiv 2405.04434 §2.1.2-2.1.3 (W^DQ, W^UQ, W^DKV incl. decoupled RoPE key, W^UK, W^UV, W^O)
            qk = self.qk_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk  # + q latent RMSNorm
            else:
                q = h * a * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            o = a * self.v_head_dim * h
            n = q + kv + o
            if self.bias:
                n += h
            return n
        d = self.head_dim
        n = h * a * d + 2 * h * g * d + a * d * h  # W_q, W_k, W_v, W_o
        if self.bias:
            n += a * d + 2 * g * d + h
        if self.qk_norm:
            n += 2 * d
        return n

    @property
    def attn_tp_replicated_params(self) -> int:
        """Attention parameters of one layer that tensor parallelism does not split: the MLA
        down-projections and latent norms (Megatron-Core builds them "duplicated"); 0 for MHA/GQA."""
        if self.attention != "mla":
            return 0
        h = self.hidden
        q = h * self.q_lora_rank + self.q_lora_rank if self.q_lora_rank else 0
        return q + h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank

    @property
    def mla_up_proj_params(self) -> int:
        """MLA up-projection weights of one layer (W^UQ, W^UK, W^UV); 0 for MHA/GQA."""
        if self.attention != "mla":
            return 0
        a = self.heads
        q = self.q_lora_rank * a * self.qk_head_dim if self.q_lora_rank else 0
        return q + self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)

    @property
    def norm_params(self) -> int:
        """The two pre-sublayer norms of one layer."""
        return 2 * self._norm_size(self.hidden)

    def _mlp(self, width: int) -> int:
        h = self.hidden
        if self.gated:  # gate, up, down (Shazeer 2020, arXiv 2002.05202)
            n = 3 * h * width
            return n + (2 * width + h if self.bias else 0)
        n = 2 * h * width
        return n + (width + h if self.bias else 0)

    @property
    def dense_mlp_params(self) -> int:
        """Dense MLP of one (dense) layer, width ``ffn_hidden``."""
        return self._mlp(self.ffn_hidden)

    @property
    def expert_params(self) -> int:
        """One routed expert (0 for a dense model)."""
        return self._mlp(self.moe_ffn_hidden) if self.is_moe else 0

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer together."""
        return self.moe_shared_experts * self._mlp(self.moe_ffn_hidden) if self.is_moe else 0

    @property
    def router_params(self) -> int:
        """Router of one MoE layer (a linear h -> experts, plus a bias when ``bias``)."""
        if not self.is_moe:
            return 0
        return self.hidden * self.moe_experts + (self.moe_experts if self.bias else 0)

    @property
    def dense_layer_params(self) -> int:
        return self.attn_params + self.norm_params + self.dense_mlp_params

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer including all routed experts (0 for a dense model)."""
        if not self.is_moe:
            return 0
        return (self.attn_params + self.norm_params + self.router_params
                + self.shared_expert_params + self.moe_experts * self.expert_params)

    @property
    def embedding_params(self) -> int:
        """Input token embedding (plus learned position embedding)."""
        pos = self.seq_len * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + pos

    @property
    def output_params(self) -> int:
        """Stored output-projection parameters (0 when tied) plus the final norm."""
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return head + self._norm_size(self.hidden)

    def param_breakdown(self) -> dict[str, int]:
        """Total parameters by part (sums to ``total_params``)."""
        return {
            "embedding": self.embedding_params,
            "output": self.output_params,
            "attention": self.layers * self.attn_params,
            "norms": self.layers * self.norm_params,
            "dense_mlp": self.n_dense_layers * self.dense_mlp_params,
            "router": self.n_moe_layers * self.router_params,
            "shared_experts": self.n_moe_layers * self.shared_expert_params,
            "routed_experts": self.n_moe_layers * self.moe_experts * self.expert_params,
        }

    @property
    def total_params(self) -> int:
        """Every stored parameter."""
        return sum(self.param_breakdown().values())

    @property
    def active_params(self) -> int:
        """Parameters a token multiplies: top-k experts only, no input-embedding gather."""
        b = self.param_breakdown()
        routed = self.n_moe_layers * self.moe_top_k * self.expert_params
        head = self.vocab * self.hidden  # the output projection runs even when tied
        return (b["attention"] + b["norms"] + b["dense_mlp"] + b["router"]
                + b["shared_experts"] + routed + self._norm_size(self.hidden) + head)

    # --- FLOPs ------------------------------------------------------------------------
    def attn_flops_per_token(self, seq_len: int | None = None, causal: bool = True) -> float:
        """Forward attention-score FLOPs (QK^T and AV) of one layer per token.

        2 FLOP per multiply-add x heads x (d_qk + d_v) x s keys; causal masking halves it
        (PaLM arXiv 2204.02311 App. B, without the causal halving there).
        """
        s = self.seq_len if seq_len is None else seq_len
        f = 2.0 * self.heads * (self.qk_head_dim + self.v_head_dim_eff) * s
        return f / 2 if causal else f

    def model_flops_per_token(self, seq_len: int | None = None, causal: bool = True) -> float:
        """Training FLOPs per token without recomputation (MFU numerator), FLOP/token.

        fwd + bwd = 3 x forward: 6 N_active + 3 L attn_fwd (PaLM App. B; Narayanan eq. 3).
        """
        return 6.0 * self.active_params + 3.0 * self.layers * self.attn_flops_per_token(seq_len, causal)

    def hardware_flops_per_token(self, recompute: Recompute = "none", seq_len: int | None = None,
                                 causal: bool = True) -> float:
        """Training FLOPs per token including recomputed forward work, FLOP/token."""
        if recompute not in RECOMPUTE_MODES:
            raise ValueError(f"recompute: must be one of {RECOMPUTE_MODES} (got {recompute!r})")
        base = self.model_flops_per_token(seq_len, causal)
        attn = self.layers * self.attn_flops_per_token(seq_len, causal)
        if recompute == "none":
            return base
        if recompute == "selective":
            # attention core (Korthikanti 2022 §5) and, for MLA, the up-projections (DeepSeek-V3
            # §3.2.3), as options.SELECTIVE_MODULES; norms and activation functions are elementwise
            return base + attn + 2.0 * self.layers * self.mla_up_proj_params
        # full: one more forward of every layer, output layer excluded (Narayanan 2021 eq. 3)
        layer_params = self.active_params - self.vocab * self.hidden - self._norm_size(self.hidden)
        return base + 2.0 * layer_params + attn

    def describe(self) -> str:
        kind = f"MoE {self.moe_experts}x top-{self.moe_top_k}" if self.is_moe else "dense"
        return (f"{self.name or self.id}: {kind}, {self.total_params / 1e9:.1f}B total, "
                f"{self.active_params / 1e9:.1f}B active, L={self.layers}, h={self.hidden}, s={self.seq_len}")


# --- catalog ----------------------------------------------------------------------------

class ModelCatalogError(ValueError):
    """``data/models.yaml`` is malformed; the message names the file and the entry."""


def load_catalog(path: Path | str = MODELS_YAML) -> dict[str, Model]:
    """Read and validate a models YAML file: a mapping ``id -> fields``."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelCatalogError(f"{path}: cannot read ({exc.strerror})") from None
    entries = (raw or {}).get("models") if isinstance(raw, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ModelCatalogError(f"{path}: expected a non-empty 'models:' mapping")
    out: dict[str, Model] = {}
    for mid, fields in entries.items():
        if not isinstance(fields, dict):
            raise ModelCatalogError(f"{path.name}: model {mid!r}: expected a mapping")
        if not fields.get("source"):
            raise ModelCatalogError(f"{path.name}: model {mid!r}: field 'source': every model needs a source")
        try:
            out[mid] = Model(id=mid, **fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "?"
            raise ModelCatalogError(f"{path.name}: model {mid!r}: field {loc!r}: {err['msg']}") from None
    return out


@lru_cache(maxsize=1)
def _data_catalog() -> dict[str, Model]:
    return load_catalog(MODELS_YAML)


#: Models defined in a scenario (see :func:`register`), consulted after the catalog.
_USER: dict[str, Model] = {}
#: Environment variable naming the JSON file of user definitions a chapter kernel reads
#: (the same file as ``hardware.DEFINITIONS_ENV``; this module reads its "models").
DEFINITIONS_ENV = "SCALETAX_DEFINITIONS"
#: Marker on the name and source of a model defined in a scenario.
USER_MARK = "your input"
#: Largest relative gap allowed between a declared parameter count and the architecture's.
PARAM_TOLERANCE = 0.02


def catalog() -> dict[str, Model]:
    """The project catalog (``data/models.yaml``), then the models a scenario defined."""
    path = os.environ.get(DEFINITIONS_ENV)
    if path and not _USER:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        register({k: Model(**v) for k, v in data.get("models", {}).items()})
    return {**_data_catalog(), **_USER}


catalog.cache_clear = _data_catalog.cache_clear  # type: ignore[attr-defined]


def register(models: dict[str, Model]) -> None:
    """Make scenario-defined models (from :func:`define`) visible to :func:`get` in this process."""
    for mid, m in models.items():
        if mid in _data_catalog():
            raise ValueError(f"model id {mid!r} is a catalog id; give your model another id")
        _USER[mid] = m


def unregister() -> None:
    """Forget the scenario-defined models of this process."""
    _USER.clear()


def ids() -> list[str]:
    """All model ids, in file order (scenario-defined ones last)."""
    return list(catalog())


def get(model_id: str) -> Model:
    """Model by id; an unknown id raises ValueError with the nearest id and the valid ones."""
    cat = catalog()
    if model_id not in cat:
        raise ValueError(f"{unknown_id(model_id, list(cat), 'model id')}; valid ids: {', '.join(cat)}")
    return cat[model_id]


def check_declared(m: Model) -> None:
    """Raise ValueError when a declared (published) parameter count differs from the
    architecture's count by more than :data:`PARAM_TOLERANCE`; the message shows both.

    A dense model's published active count is its size (publishers quote one number: the catalog's
    Llama 3.1 8B declares 8 and 8), so it is compared with ``total_params``; ``active_params``,
    which leaves out the input-embedding gather for the FLOPs convention, is compared only for an MoE."""
    active = m.active_params if m.is_moe else m.total_params
    for kind, declared, computed in (("total", m.published_total_params_b, m.total_params),
                                     ("active", m.published_active_params_b, active)):
        if declared is None:
            continue
        gap = computed / (declared * 1e9) - 1.0
        if abs(gap) > PARAM_TOLERANCE:
            raise ValueError(
                f"model {m.id!r}: declared {kind} parameters {declared:g}B but the architecture has "
                f"{computed / 1e9:.4g}B ({gap:+.1%}; allowed {PARAM_TOLERANCE:.0%}): fix the shape or the declared count")


def define(spec: dict) -> Model:
    """A model from a scenario entry: ``id`` plus :class:`Model` fields (the schema of
    ``data/models.yaml``: an entry copied whole from it is accepted, ``verified`` included, whose
    true is kept as text in the source: a scenario's model is never marked verified), or
    ``base: <catalog id>`` plus the fields that differ.

    Types are strict, as in the rest of the scenario (pydantic strict mode): ``true`` or ``"61"``
    is not a number, ``1e12`` is not an integer, and every number has bounds.

    ``published_total_params_b`` / ``published_active_params_b`` (billions), when given, must
    match the architecture within 2%. The name ends with "(yours)" and the source starts with
    "your input". Raises ValueError (one line).
    """
    if not isinstance(spec, dict):
        raise ValueError(f"a model definition must be a mapping or a catalog id (got {spec!r})")
    spec = dict(spec)
    mid = spec.pop("id", None)
    if not isinstance(mid, str) or not ID_PATTERN.match(mid):
        raise ValueError(f"a model definition needs an 'id' of lowercase letters, digits, '-' or '_' (got {mid!r})")
    base_id = spec.pop("base", None)
    for key in ("base", "source", "name"):
        value = base_id if key == "base" else spec.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"model {mid!r}: field {key!r}: Input should be a valid string (got {value!r})")
    allowed = [f for f in Model.model_fields if f != "id"]
    for key in spec:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"model {mid!r}: unknown field {key!r}{hint}")
    # the catalog's own mark (an entry copied whole from data/models.yaml carries it): kept in the
    # source text; a scenario's model is the user's input, never checked here (verified false)
    stated = spec.pop("verified", None)
    if stated is not None and not isinstance(stated, bool):
        raise ValueError(f"model {mid!r}: field 'verified': expected true or false (got {stated!r})")
    note = spec.pop("source", "")
    if stated:
        note = f"{note + '; ' if note else ''}marked verified in your definition"
    fields: dict[str, Any] = {}
    if base_id is not None:
        cat = _data_catalog()
        if base_id not in cat:
            raise ValueError(f"model {mid!r}: base: unknown model id {base_id!r}; valid ids: {', '.join(cat)}")
        base = cat[base_id]
        fields = base.model_dump(exclude={"published_total_params_b", "published_active_params_b"})
        what = ", ".join(f"{k}={spec[k]}" for k in sorted(spec) if k not in ("name", "notes"))
        fields.update(name=f"{base.name} with your {what}" if what else base.name, notes="")
        note = f"{note + '; ' if note else ''}{base_id} with {what}; other values: {base.source}"
    fields.update(spec)
    fields.update(id=mid, verified=False, source=f"{USER_MARK}{': ' + note if note else ''}")
    fields["name"] = f"{fields.get('name') or mid} (yours)"
    try:
        m = Model.model_validate(fields, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "?"
        msg = err["msg"][len("Value error, "):] if err["msg"].startswith("Value error, ") else err["msg"]
        got = f" (got {spec[loc]!r})" if loc in spec else ""
        raise ValueError(f"model {mid!r}: field {loc!r}: {msg}{got}") from None
    check_declared(m)
    return m


def user_defined(m: Model) -> bool:
    """True for a model defined in a scenario (not a catalog entry)."""
    return m.source.startswith(USER_MARK)


# --- runs-table rows ----------------------------------------------------------------------

#: Runs-table columns that ``from_row`` reads (all others are ignored).
ROW_INT_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
                   "seq_len", "moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts",
                   "moe_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                   "qk_rope_head_dim", "v_head_dim")
ROW_REQUIRED = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len")
#: Fields not in the runs schema; taken from the matching catalog entry when there is one.
_STYLE_FIELDS = ("gated", "tied_embeddings", "bias", "norm", "position_embedding", "qk_norm",
                 "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MATCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "moe_experts",
                 "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_dense_layers")


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "") or (isinstance(v, float) and math.isnan(v))


def _to_int(col: str, v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError(f"column {col!r}: expected an integer, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"column {col!r}: expected an integer, got {v!r}") from None
    if not f.is_integer():
        raise ValueError(f"column {col!r}: expected an integer, got {v!r}")
    return int(f)


def _to_bool(col: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"column {col!r}: expected true/false, got {v!r}")


def from_row(row: dict[str, Any]) -> Model:
    """Build a ``Model`` from a runs-table row (``data/published_runs.csv`` column names).

    Integer columns may be strings or numbers; blank MoE columns mean a dense model.
    Columns absent from the runs schema (``gated``, ``tied_embeddings``, ``bias``, ``norm``,
    ``position_embedding``, ``qk_norm`` and the MLA ranks) are read when present, else taken
    from the catalog entry with the same shape (layers, hidden, heads, kv_heads, ffn and MoE
    fields); without a match the defaults are a gated MLP unless ``ffn_hidden == 4*hidden``
    (the GPT/Megatron default plain-GELU width), untied, no biases, RMSNorm, RoPE. An MLA row
    with neither MLA columns nor a catalog match raises ValueError naming the columns.
    Raises ValueError naming the column for a bad value.
    """
    fields: dict[str, Any] = {}
    for col in ROW_REQUIRED:
        if _blank(row.get(col)):
            raise ValueError(f"column {col!r}: required for the model architecture but empty or missing")
    for col in ROW_INT_COLUMNS:
        if not _blank(row.get(col)):
            fields[col] = _to_int(col, row[col])
    if not _blank(row.get("attention")):
        fields["attention"] = str(row["attention"]).strip().lower()
    if fields.get("moe_experts", 0) == 0:
        for col in ("moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts", "moe_dense_layers"):
            fields.pop(col, None)
    for col in ("total_params_b", "active_params_b"):
        if not _blank(row.get(col)):
            try:
                fields[f"published_{col}"] = float(row[col])
            except ValueError:
                raise ValueError(f"column {col!r}: expected a number, got {row[col]!r}") from None
    match = _catalog_match(fields)
    for col in _STYLE_FIELDS:
        if not _blank(row.get(col)):
            if col in ("gated", "tied_embeddings", "bias", "qk_norm"):
                fields[col] = _to_bool(col, row[col])
            elif col in ("norm", "position_embedding"):
                fields[col] = str(row[col]).strip().lower()
        elif col not in fields and match is not None:
            fields[col] = getattr(match, col)
    if match is None and "gated" not in fields:
        fields["gated"] = fields["ffn_hidden"] != 4 * fields["hidden"]
    if fields.get("attention") == "mla" and match is None:
        missing = [c for c in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if c not in fields]
        if missing:
            raise ValueError(f"column(s) {', '.join(missing)}: needed for attention 'mla' "
                             "(no catalog model with this shape to take them from)")
    fields["name"] = str(row.get("model") or "")
    fields["id"] = match.id if match is not None else ""
    try:
        return Model(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "?"
        raise ValueError(f"column {loc!r}: {err['msg']}") from None


def _catalog_match(fields: dict[str, Any]) -> Model | None:
    """The catalog model whose shape equals the row's (None if none or ambiguous)."""
    try:
        cat = catalog()
    except ModelCatalogError:
        return None
    heads = fields.get("heads")
    want = dict(fields)
    want.setdefault("kv_heads", heads)
    hits = [m for m in cat.values()
            if all(getattr(m, f) == want.get(f, 0 if f.startswith("moe_") else None) for f in _MATCH_FIELDS)]
    return hits[0] if len(hits) == 1 else None
