"""A small training experiment whose matrix multiplies run in low precision.

Task: next-token prediction from a fixed random order-2 Markov source over a small vocabulary
((context, next token) pairs drawn i.i.d., contexts uniform). The model sees the two previous
tokens through a fixed (not trained) random embedding with a few outlier channels (LLM-like
activation outliers, LLM.int8(), arXiv 2208.07339) and is a ReLU MLP trained with Adam on
the cross-entropy; the best achievable loss is the source's conditional entropy on the
evaluation set (`bayes_loss`).

Every linear layer runs its three GEMMs (y = x W, dx = dy W^T, dW = x^T dy) on operands passed
through `scaletax.model.precision`, with float32 accumulation and float32 master weights, as a
`Recipe` prescribes. Block-scaled operands are blocked along the GEMM's reduction axis, as the
hardware does (so x and dy are re-quantized along the batch axis for dW).

This is a toy: it shows the *mechanisms* (why FP4 needs the NVFP4 recipe elements) at a size
a laptop trains in seconds. The loss gaps at 10^10-10^12 parameters are the published ones in
``data/references.yaml`` (shown by the precision chapter), not extrapolations of this toy.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

import numpy as np

from scaletax.inputs import formats
from scaletax.model import precision as P

__all__ = [
    "Recipe", "RECIPES", "DEFAULT_RECIPES", "TaskConfig", "Task", "RunResult", "RecipeResult",
    "make_task", "train",
    "run_experiment", "collect", "summary",
]

_F32 = np.float32


# --------------------------------------------------------------------------------------------
# Recipes
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """How the GEMM operands of every linear layer are quantized.

    fwd_fmt: format of activations and weights (all three GEMMs); grad_fmt: format of the
    output gradient dy (dgrad and wgrad); "fp32" means not quantized. scaling: "native" (the
    format's own scaling: MX or NVFP4 blocks, none for BF16) or "tensor" (per-tensor current
    scaling, for plain FP8). scale_rule: MX shared-scale rule ("ocp" or "ceil").
    The four NVFP4 recipe elements (arXiv 2509.25149, training methodology): sr_grads:
    stochastic rounding of dy; bf16_last_layers: how many final linear layers run in BF16;
    weight_2d: one scale per 2D weight tile (16x16 for NVFP4, 32x32 for MX) so W and W^T
    quantize identically; hadamard_wgrad: 16x16 random Hadamard transform on both wgrad
    operands along the reduction axis.
    """

    name: str
    fwd_fmt: str = "bf16"
    grad_fmt: str = "bf16"
    scaling: str = "native"
    scale_rule: str = "ocp"
    sr_grads: bool = False
    bf16_last_layers: int = 0
    weight_2d: bool = False
    hadamard_wgrad: bool = False

    def __post_init__(self):
        for f in (self.fwd_fmt, self.grad_fmt):
            if f != "fp32" and f not in formats.FORMATS:
                raise ValueError(f"unknown format {f!r}; valid: fp32, {', '.join(formats.FORMATS)}")
        if self.scaling not in ("native", "tensor"):
            raise ValueError(f"scaling must be 'native' or 'tensor', got {self.scaling!r}")
        if self.scaling == "tensor" and {self.fwd_fmt, self.grad_fmt} - {"fp8_e4m3", "fp8_e5m2"}:
            raise ValueError("per-tensor scaling takes fp8_e4m3 / fp8_e5m2 operands")
        if self.scale_rule not in formats.SCALE_RULES:
            raise ValueError(f"scale_rule must be one of {formats.SCALE_RULES}")
        if self.bf16_last_layers < 0:
            raise ValueError("bf16_last_layers must be >= 0")


_NVFP4_FULL = Recipe("nvfp4", "nvfp4", "nvfp4", sr_grads=True, bf16_last_layers=1,
                     weight_2d=True)

#: Named recipes. fp8_tensor: E4M3 forward / E5M2 gradients with per-tensor current scaling
#: (Transformer Engine hybrid). mxfp8: E4M3 everywhere, round-up scale (arXiv 2506.08027).
#: nvfp4: the NVFP4 recipe of arXiv 2509.25149 minus the Hadamard transform (see nvfp4_rht);
#: nvfp4_no_*: one element removed; nvfp4_naive: none of them; mxfp4: the nvfp4 recipe with
#: MXFP4 operands (32-element blocks, E8M0 scale, 32x32 weight tiles).
RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("bf16"),
    Recipe("fp8_tensor", "fp8_e4m3", "fp8_e5m2", scaling="tensor"),
    Recipe("mxfp8", "mxfp8_e4m3", "mxfp8_e4m3", scale_rule="ceil"),
    _NVFP4_FULL,
    replace(_NVFP4_FULL, name="nvfp4_no_sr", sr_grads=False),
    replace(_NVFP4_FULL, name="nvfp4_no_bf16_last", bf16_last_layers=0),
    replace(_NVFP4_FULL, name="nvfp4_no_2d", weight_2d=False),
    Recipe("nvfp4_naive", "nvfp4", "nvfp4"),
    replace(_NVFP4_FULL, name="mxfp4", fwd_fmt="mxfp4", grad_fmt="mxfp4"),
    replace(_NVFP4_FULL, name="nvfp4_rht", hadamard_wgrad=True),
)}

#: The recipes `run_experiment` runs by default.
DEFAULT_RECIPES: tuple[str, ...] = (
    "bf16", "fp8_tensor", "mxfp8", "nvfp4", "nvfp4_no_sr", "nvfp4_no_bf16_last", "nvfp4_no_2d",
    "nvfp4_naive", "mxfp4",
)

# --------------------------------------------------------------------------------------------
# Task
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskConfig:
    """Sizes of the toy (all parameters; defaults fit ~60 s for 9 recipes x 3 seeds on 2 cores).

    vocab: tokens; embed_dim: channels per context token (input = 2 * embed_dim);
    outlier_channels / outlier_scale: embedding channels multiplied by outlier_scale;
    source_temperature, source_hidden: scale and width of the random teacher that defines the
    Markov source (larger temperature = lower entropy);
    width: hidden units; depth: linear layers; batch: tokens per step; steps; lr (Adam);
    eval_size: held-out pairs; task_seed: fixes the source and the embedding.
    """

    vocab: int = 64
    embed_dim: int = 32
    outlier_channels: int = 2
    outlier_scale: float = 30.0
    source_temperature: float = 4.0
    source_hidden: int = 64
    width: int = 128
    depth: int = 3
    batch: int = 256
    steps: int = 600
    lr: float = 3e-3
    eval_size: int = 4096
    task_seed: int = 1234


@dataclass
class Task:
    """The fixed source and embedding built from a TaskConfig by `make_task`."""

    cdf: np.ndarray  # (vocab*vocab, vocab) cumulative next-token probabilities
    logp: np.ndarray  # (vocab*vocab, vocab) log probabilities
    embed: np.ndarray  # (vocab, embed_dim) float32


def make_task(cfg: TaskConfig) -> Task:
    """The fixed Markov source and input embedding of `cfg` (seeded by cfg.task_seed).

    Token embeddings e_c ~ N(0, I). The source's next-token logits for context (c1, c2) come
    from a fixed random teacher: source_temperature * tanh([e_c1, e_c2] A) B, A and B Gaussian
    scaled by 1/sqrt(fan-in), so the transition table is random but smooth in the embedding
    and learnable from it. The student sees the same embedding with `outlier_channels`
    channels multiplied by `outlier_scale`: the information is unchanged, only its scale.
    """
    rng = np.random.default_rng(cfg.task_seed)
    v, d = cfg.vocab, cfg.embed_dim
    e = rng.standard_normal((v, d))
    a = rng.standard_normal((2 * d, cfg.source_hidden)) / np.sqrt(2 * d)
    b = rng.standard_normal((cfg.source_hidden, v)) / np.sqrt(cfg.source_hidden)
    ctx = np.arange(v * v)
    xs = np.concatenate([e[ctx // v], e[ctx % v]], axis=1)
    logits = cfg.source_temperature * np.tanh(xs @ a) @ b
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    cdf = np.cumsum(np.exp(logp), axis=1)
    cdf[:, -1] = 1.0
    ch = rng.choice(d, size=min(cfg.outlier_channels, d), replace=False)
    e[:, ch] *= cfg.outlier_scale
    return Task(cdf, logp, e.astype(_F32))


def _sample(task: Task, cfg: TaskConfig, n: int, rng: np.random.Generator):
    """n (context, next token) pairs: contexts uniform over vocab^2, next token from the source."""
    ctx = rng.integers(0, cfg.vocab * cfg.vocab, n)
    u = rng.random(n)
    nxt = (task.cdf[ctx] < u[:, None]).sum(axis=1)
    nxt = np.minimum(nxt, cfg.vocab - 1)
    x = np.concatenate([task.embed[ctx // cfg.vocab], task.embed[ctx % cfg.vocab]], axis=1)
    return x, nxt, ctx


# --------------------------------------------------------------------------------------------
# Quantized linear layers
# --------------------------------------------------------------------------------------------

class _Quantizer:
    """Applies one recipe's operand quantization; blocks lie along the last axis."""

    def __init__(self, recipe: Recipe, rng: np.random.Generator):
        self.r = recipe
        self.rng = rng

    def __call__(self, a: np.ndarray, fmt: str, *, grad: bool = False, block=None) -> np.ndarray:
        if fmt == "fp32":
            return a
        sr = grad and self.r.sr_grads
        kw = {"rounding": "stochastic", "rng": self.rng} if sr else {}
        if self.r.scaling == "tensor" and fmt.startswith("fp8"):
            return P.quantize_per_tensor(a, fmt, **kw)
        if fmt in formats.ELEMENT_FORMATS:
            return P.quantize(a, fmt, **kw)
        return P.quantize(a, fmt, block_size=block, scale_rule=self.r.scale_rule, **kw)

    def blockwise(self, fmt: str) -> bool:
        """Whether operands of `fmt` depend on the blocking axis (so W, W^T differ)."""
        return fmt not in formats.ELEMENT_FORMATS and fmt != "fp32" and self.r.scaling == "native"


def _hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


_RHT = 16  # Hadamard size on the wgrad reduction axis (arXiv 2509.25149)


def _rht(a: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Apply the orthogonal (16 x 16) m along the last axis of a, in groups of 16."""
    d, n = a.shape
    return (a.reshape(d, n // _RHT, _RHT) @ m).reshape(d, n).astype(_F32)


class _Model:
    def __init__(self, cfg: TaskConfig, rng: np.random.Generator):
        dims = [2 * cfg.embed_dim] + [cfg.width] * (cfg.depth - 1) + [cfg.vocab]
        # He init; the output layer starts at zero so the initial loss is log(vocab)
        self.W = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a) * (i < len(dims) - 2))
                  .astype(_F32) for i, (a, b) in enumerate(zip(dims[:-1], dims[1:]))]
        self.b = [np.zeros(b, _F32) for b in dims[1:]]

    def params(self):
        return self.W + self.b


def _layer_fmts(recipe: Recipe, i: int, depth: int) -> tuple[str, str]:
    if i >= depth - recipe.bf16_last_layers:
        return "bf16", "bf16"
    return recipe.fwd_fmt, recipe.grad_fmt


def _weight_block(fmt: str) -> tuple[int, int]:
    b = formats.format_info(fmt).block_size
    return (b, b)


def _forward(model: _Model, x, q: _Quantizer, recipe: Recipe, keep: bool):
    """Logits and (if keep) the per-layer cache of quantized operands for backward."""
    cache = []
    depth = len(model.W)
    h = x
    for i, (W, b) in enumerate(zip(model.W, model.b)):
        ff, _ = _layer_fmts(recipe, i, depth)
        hq = q(h, ff)
        if not q.blockwise(ff):
            wq_f = wq_b = q(W, ff)
        elif recipe.weight_2d:
            wq_f = wq_b = q(W, ff, block=_weight_block(ff))  # one tile scale for W and W^T
        else:
            wq_f = q(W.T, ff).T  # blocks along d_in, the forward reduction axis
            wq_b = None  # blocks along d_out: quantized in backward
        z = hq @ wq_f + b
        if keep:
            cache.append((h, hq, wq_b, z))
        h = np.maximum(z, 0) if i < depth - 1 else z
    return h, cache


def _xent(logits: np.ndarray, y: np.ndarray):
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    s = e.sum(axis=1, keepdims=True)
    loss = float(np.mean(np.log(s[:, 0]) + m[:, 0] - logits[np.arange(len(y)), y]))
    g = e / s
    g[np.arange(len(y)), y] -= 1
    return loss, (g / len(y)).astype(_F32)


def _backward(model: _Model, cache, dlogits, q: _Quantizer, recipe: Recipe, rht):
    depth = len(model.W)
    gW, gb = [None] * depth, [None] * depth
    dz = dlogits
    for i in reversed(range(depth)):
        h, hq, wq_b, z = cache[i]
        if i < depth - 1:
            dz = dz * (z > 0)
        ff, fg = _layer_fmts(recipe, i, depth)
        dzq = q(dz, fg, grad=True)  # blocks along d_out, the dgrad reduction axis
        if i > 0:
            if wq_b is None:
                wq_b = q(model.W[i], ff)
            dh = dzq @ wq_b.T
        if q.blockwise(ff) or q.blockwise(fg) or recipe.hadamard_wgrad:
            hT, dzT = h.T, dz.T
            if recipe.hadamard_wgrad:
                hT, dzT = _rht(hT, rht), _rht(dzT, rht)
            hTq = q(np.ascontiguousarray(hT), ff)  # blocks along the batch axis
            dzTq = q(np.ascontiguousarray(dzT), fg, grad=True)
            gW[i] = hTq @ dzTq.T
        else:
            gW[i] = hq.T @ dzq  # per-tensor / element formats: the same operands transposed
        gb[i] = dz.sum(axis=0)
        if i > 0:
            dz = dh
    return gW + gb


class _Adam:
    def __init__(self, params, lr, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p -= (self.lr / c1 * m / (np.sqrt(v / c2) + self.eps)).astype(_F32)


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

@dataclass
class RunResult:
    """One training run. Losses in nats per token.

    curve: training loss per step (quantized forward, as the recipe trains);
    final_loss: held-out loss with the recipe's quantized forward; final_loss_fp32: the same
    weights evaluated in float32; bayes_loss: the source's conditional entropy on the same
    held-out set (the best any model can do).
    """

    recipe: str
    seed: int
    curve: np.ndarray
    final_loss: float
    final_loss_fp32: float
    bayes_loss: float


def _recipe(r: Recipe | str) -> Recipe:
    if isinstance(r, Recipe):
        return r
    if r not in RECIPES:
        raise ValueError(f"unknown recipe {r!r}; named recipes: {', '.join(RECIPES)}")
    return RECIPES[r]


def _eval_loss(model, x, y, q, recipe) -> float:
    logits, _ = _forward(model, x, q, recipe, keep=False)
    return _xent(logits, y)[0]


def train(recipe: Recipe | str, seed: int = 0, cfg: TaskConfig = TaskConfig(),
          task: Task | None = None) -> RunResult:
    """Train the toy with `recipe` from `seed` (init, data order, stochastic rounding).

    batch, width, 2*embed_dim (and vocab when the last layer is not BF16) must be multiples of
    the recipe's block size; `quantize` raises ValueError naming the sizes otherwise.
    """
    recipe = _recipe(recipe)
    if cfg.depth < 2:
        raise ValueError("depth must be >= 2")
    if recipe.hadamard_wgrad and cfg.batch % _RHT:
        raise ValueError(f"batch={cfg.batch} must be a multiple of {_RHT} for the Hadamard "
                         "transform")
    task = make_task(cfg) if task is None else task
    eval_rng = np.random.default_rng([cfg.task_seed, 7])
    xe, ye, ce = _sample(task, cfg, cfg.eval_size, eval_rng)
    bayes = float(-np.mean(task.logp[ce, ye]))
    data_rng = np.random.default_rng([seed, 1])
    model = _Model(cfg, np.random.default_rng([seed, 2]))
    q = _Quantizer(recipe, np.random.default_rng([seed, 3]))
    signs = np.random.default_rng([seed, 4]).choice([-1.0, 1.0], _RHT)
    rht = (signs[:, None] * _hadamard(_RHT)).astype(_F32)  # orthogonal: D H / 4
    opt = _Adam(model.params(), cfg.lr)
    curve = np.empty(cfg.steps)
    for t in range(cfg.steps):
        x, y, _ = _sample(task, cfg, cfg.batch, data_rng)
        logits, cache = _forward(model, x, q, recipe, keep=True)
        curve[t], dlogits = _xent(logits, y)
        opt.step(model.params(), _backward(model, cache, dlogits, q, recipe, rht))
    fp32 = Recipe("fp32", "fp32", "fp32")
    return RunResult(recipe.name, seed, curve, _eval_loss(model, xe, ye, q, recipe),
                     _eval_loss(model, xe, ye, _Quantizer(fp32, None), fp32), bayes)


@dataclass
class RecipeResult:
    """All seeds of one recipe: curves (n_seeds, steps) and final losses (n_seeds,)."""

    recipe: str
    seeds: tuple[int, ...]
    curves: np.ndarray
    final_loss: np.ndarray
    final_loss_fp32: np.ndarray
    bayes_loss: float
    runs: list[RunResult] = field(repr=False, default_factory=list)


def run_experiment(recipes: Iterable[str | Recipe] = DEFAULT_RECIPES,
                   seeds: Sequence[int] = (0, 1, 2), cfg: TaskConfig = TaskConfig(),
                   **overrides) -> dict[str, RecipeResult]:
    """Train every recipe from every seed; deterministic for fixed seeds and sizes.

    `overrides` replace TaskConfig fields (e.g. steps=50, width=64). Returns {recipe name:
    RecipeResult}; the same seed gives every recipe the same data, init and source.
    """
    unknown = set(overrides) - set(TaskConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown TaskConfig field(s) {sorted(unknown)}; valid: "
                         f"{', '.join(TaskConfig.__dataclass_fields__)}")
    cfg = replace(cfg, **overrides)
    task = make_task(cfg)
    recipes = [_recipe(r) for r in recipes]
    return collect(recipes, seeds, [train(r, s, cfg, task) for r in recipes for s in seeds])


def collect(recipes: Sequence[str | Recipe], seeds: Sequence[int],
            runs: Sequence[RunResult]) -> dict[str, RecipeResult]:
    """{recipe name: RecipeResult} from the runs of every recipe and seed, recipe-major
    (``runs[i * len(seeds) + j]`` is recipe i from seed j), as `run_experiment` returns."""
    names = [_recipe(r).name for r in recipes]
    if len(runs) != len(names) * len(seeds):
        raise ValueError(f"expected {len(names) * len(seeds)} runs, got {len(runs)}")
    out = {}
    for i, name in enumerate(names):
        rs = list(runs[i * len(seeds):(i + 1) * len(seeds)])
        out[name] = RecipeResult(
            name, tuple(seeds), np.array([u.curve for u in rs]),
            np.array([u.final_loss for u in rs]), np.array([u.final_loss_fp32 for u in rs]),
            rs[0].bayes_loss if rs else float("nan"), rs)
    return out


def summary(results: dict[str, RecipeResult], baseline: str = "bf16") -> list[dict]:
    """One row per recipe: final loss mean/std over seeds, gap vs baseline (same seeds).

    gap_pct: mean over seeds of (loss - baseline loss) / baseline loss, in percent; gap_std_pct
    its standard deviation over seeds; excess_*: loss above the source entropy (bayes_loss).
    """
    base = results.get(baseline)
    rows = []
    for name, r in results.items():
        row = {"recipe": name, "final_loss_mean": float(r.final_loss.mean()),
               "final_loss_std": float(r.final_loss.std(ddof=1)) if len(r.seeds) > 1 else 0.0,
               "final_loss_fp32_mean": float(r.final_loss_fp32.mean()),
               "excess_loss_mean": float(r.final_loss.mean() - r.bayes_loss),
               "bayes_loss": r.bayes_loss}
        if base is not None and base.seeds == r.seeds:
            gap = (r.final_loss - base.final_loss) / base.final_loss * 100
            row["gap_pct"] = float(gap.mean())
            row["gap_std_pct"] = float(gap.std(ddof=1)) if len(gap) > 1 else 0.0
        rows.append(row)
    return rows
