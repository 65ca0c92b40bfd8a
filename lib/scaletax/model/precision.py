"""Quantizers to the low-precision number formats (block scaling included) and their error on realistic tensors.

Element types and round-to-nearest-even (RNE) come from ``ml_dtypes``; what no library has
is written here: the MX shared scale (OCP floor and round-up rules), NVFP4's two-level scale,
FP8 tensor-scaling recipes (current, delayed, DeepSeek-V3 1x128 / 128x128 tiles), unbiased
stochastic rounding, and error statistics.

Every quantizer returns the *dequantized* tensor as float32 with the shape of its input, so
``x - quantize(x, fmt)`` is the quantization error. Conventions follow
``data/precision_vectors.json`` (``conventions``), which the tests reproduce exactly.

Non-finite inputs (one rule for every function here):

* NaN propagates as NaN in the output, element by element, in every format, including FP6 and
  FP4, which have no NaN encoding (the float32 result still says NaN). A NaN never enters a
  block's or a tensor's amax: the other elements of its block are quantized as if it were 0.
* +-inf: plain element formats saturate it to +-max (``saturate=True``, the default) or follow
  IEEE overflow with ``saturate=False`` (inf for BF16, FP16 and E5M2, NaN for E4M3, +-max for
  FP6/FP4 which have neither). Every scaled format (MX, NVFP4, tensor and tile scaling) raises
  ``ValueError``: an infinite amax has no finite scale.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import ml_dtypes
import numpy as np

from scaletax.inputs.formats import (BLOCK, ELEMENT_FORMATS, ELEMS, MX_FORMATS, SCALE_RULES, Elem, check_format,
                                     format_info)

__all__ = [
    "DISTRIBUTIONS", "SCHEMES", "encode", "e8m0_encode", "e8m0_decode",
    "quantize", "quantize_with_limit", "mx_shared_exponent", "nvfp4_scales",
    "quantize_per_tensor", "DelayedScaler", "quantize_tiles", "quantize_1x128",
    "quantize_128x128", "make_tensor", "error_stats", "error_table",
]

# --------------------------------------------------------------------------------------------
# Element encodings (the formats themselves: scaletax.inputs.formats)
# --------------------------------------------------------------------------------------------

_F32 = np.float32
_E4M3 = ELEMS["fp8_e4m3"]
_E2M1 = ELEMS["fp4_e2m1"]
_NVFP4_S_ENC_NUM = _F32(_E2M1.max * _E4M3.max)  # 6 * 448 = 2688 (arXiv 2509.25149 App. B)


def _rne_table(e: Elem, saturate: bool) -> tuple[np.ndarray, int]:
    """ml_dtypes' RNE cast (then decode to float32) tabulated over float32 bit classes.

    Round-to-nearest-even of a float32 to an element with m mantissa bits depends only on the
    sign, the exponent, the top m+1 mantissa bits (kept bits and round bit) and the sticky OR
    of the rest. The table holds ml_dtypes' own astype result for one representative of each
    of those 2^(10+m+1) classes, so looking it up is ml_dtypes' rounding, bit for bit (the tests
    check it against astype on random bit patterns), at ~3x the speed of astype + decode.
    NaN inputs map to NaN even for FP6/FP4, which have no NaN (ml_dtypes returns -0 there).
    ``saturate``: the table of clip(x, -max, max) then the cast. It is exact per class because
    max is a grid point, so its class holds max alone and every other class lies wholly above
    or below it (inf is the class above the largest finite ones): the clip costs no pass.
    """
    shift = 23 - (e.man_bits + 1)
    hi = np.arange(2 ** (9 + e.man_bits + 1), dtype=np.uint32) << np.uint32(shift)
    rep = np.stack([hi, hi | np.uint32(1)], axis=1).reshape(-1).view(_F32)
    with np.errstate(invalid="ignore", over="ignore"):
        table = (np.clip(rep, -e.max, e.max) if saturate else rep).astype(e.dtype).astype(_F32)
    table[np.isnan(rep)] = np.nan
    return table, shift


_RNE_TABLES = {(n, sat): _rne_table(e, sat) for n, e in ELEMS.items() if e.bits <= 8
               for sat in (True, False)}




def encode(x, fmt: str, *, saturate: bool = True) -> np.ndarray:
    """Bit codes (uint8) of an 8-bit-or-narrower element format after RNE (sign in the top bit)."""
    check_format(fmt)
    e = ELEMS.get(fmt)
    if e is None or e.bits > 8:
        raise ValueError(f"encode takes an 8-bit or narrower element format, got {fmt!r}")
    v = np.asarray(x, dtype=_F32)
    if saturate:
        v = np.clip(v, -e.max, e.max)
    with np.errstate(invalid="ignore", over="ignore"):
        return v.astype(e.dtype).view(np.uint8)


def e8m0_encode(shared_exp) -> np.ndarray:
    """E8M0 codes (uint8) of shared exponents: code = exp + 127, exp clamped to [-127, 127]."""
    return (np.clip(np.asarray(shared_exp), -127, 127) + 127).astype(np.uint8)


def e8m0_decode(code) -> np.ndarray:
    """Value (float32) of E8M0 codes, by ml_dtypes: 2^(code-127); 0xFF is NaN."""
    return np.asarray(code, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(_F32)


# --------------------------------------------------------------------------------------------
# Element rounding
# --------------------------------------------------------------------------------------------

def _kernels():
    """The fused numba loops (`scaletax.model.precision_kernels`), imported on the first quantize."""
    global _K
    if _K is None:
        from . import precision_kernels
        _K = precision_kernels
    return _K


_K = None


def _per_row(s, n: int) -> np.ndarray:
    """A scalar or (n, 1) float32 operand as a contiguous float32 (n,) array."""
    a = np.asarray(s, dtype=_F32)
    if a.size == 1:
        return np.full(n, a.reshape(-1)[0], _F32)
    return np.ascontiguousarray(a).reshape(n)


def _kind(e: Elem, rounding: str, saturate: bool = True):
    """(kernel rounding kind, table, shift, clip bound) for element type e."""
    K = _kernels()
    if rounding == "stochastic":
        return K.KIND_STOCHASTIC, _NO_TABLE, 0, _F32(e.max)
    if e.bits <= 8 and saturate:  # the clip and the RNE in float32 arithmetic, as the table
        return K.KIND_SATURATE, _NO_TABLE, 0, _F32(e.max)
    if e.bits <= 8:
        return (K.KIND_TABLE, *_RNE_TABLES[e.name, saturate], _F32(e.max))
    return K.KIND_BF16, _NO_TABLE, 0, _F32(e.max)


_NO_TABLE = np.zeros(1, _F32)
_NO_DRAW = np.zeros((1, 1), _F32)


def _draws(rounding: str, rng, shape) -> np.ndarray:
    """The float32 uniform draws of stochastic rounding (one per element, C order)."""
    return rng.random(shape, dtype=_F32) if rounding == "stochastic" else _NO_DRAW


def _round_rows(x: np.ndarray, e: Elem, rounding: str = "rne", rng=None, *, pre=None,
                mul=None, div=None, saturate: bool = True) -> np.ndarray:
    """round(clip(x * pre, +-e.max)) * mul / div for each row of float32 (n, k) x, in one pass.

    pre, mul, div: scalars or (n, 1) float32, None where not applied. The clip is part of every
    recipe here (OCP MX, NVFP4 and FP8 scaling saturate first); ``saturate=False`` (RNE only)
    gives IEEE overflow instead. rounding="rne": round-to-nearest-even as ml_dtypes' cast;
    "stochastic": unbiased, the upper neighbour with probability (|v| - lo) / ulp from one
    float32 uniform draw per element (``rng.random(x.shape)``), so E[result] = v up to the
    draw's 2^-24 resolution. Returns a new float32 array.
    """
    x = np.ascontiguousarray(x, dtype=_F32)
    n = x.shape[0]
    if rounding == "rne" and e.name == "fp16":  # numpy passes (no recipe here uses FP16 RNE)
        v = x * _per_row(pre, n)[:, None] if pre is not None else x
        if saturate:
            v = np.maximum(np.minimum(v, _F32(e.max)), -_F32(e.max))
        with np.errstate(invalid="ignore", over="ignore"):
            q = v.astype(e.dtype).astype(_F32)
        if mul is not None:
            q *= _per_row(mul, n)[:, None]
        if div is not None:
            q /= _per_row(div, n)[:, None]
        return q
    ones = np.ones(n, _F32)
    ops = [ones if o is None else _per_row(o, n) for o in (pre, mul, div)]
    mode = (pre is not None) | (mul is not None) << 1 | (div is not None) << 2
    kind, table, shift, hi = _kind(e, rounding, saturate)
    out = np.empty_like(x)
    _kernels().round_rows(x, *ops, mode, kind, hi, table, shift, saturate, e.emin, e.man_bits,
                          _draws(rounding, rng, x.shape), out)
    return out


def _round(v: np.ndarray, e: Elem, rounding: str = "rne", rng=None, *, saturate: bool = True,
           pre=None, div=None) -> np.ndarray:
    """`_round_rows` of float32 v of any shape (one row; a scalar pre / div), v's shape."""
    v = np.asarray(v, dtype=_F32)
    return _round_rows(v.reshape(1, -1), e, rounding, rng, pre=pre, div=div,
                       saturate=saturate).reshape(v.shape)


def _check_rounding(rounding: str, rng) -> None:
    if rounding not in ("rne", "stochastic"):
        raise ValueError(f"rounding must be 'rne' or 'stochastic', got {rounding!r}")
    if rounding == "stochastic" and not isinstance(rng, np.random.Generator):
        raise ValueError("rounding='stochastic' needs rng=numpy.random.Generator")


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------

def _check_block(shape: tuple[int, ...], bs) -> tuple[int, ...]:
    """Validate a block size (int: along the last axis; (r, c): tiles of the last two axes)."""
    try:
        return _check_block_cached(tuple(shape), bs)
    except TypeError:  # an unhashable block size (list, array)
        return _check_block_uncached(tuple(shape), bs)


def _check_block_uncached(shape: tuple[int, ...], bs) -> tuple[int, ...]:
    bs_t = (int(bs),) if np.ndim(bs) == 0 else tuple(int(b) for b in bs)
    if len(bs_t) not in (1, 2) or min(bs_t) < 1:
        raise ValueError(f"block size must be a positive int or a pair (rows, cols), got {bs!r}")
    if len(shape) < len(bs_t):
        raise ValueError(f"block size {bs!r} needs an array of at least {len(bs_t)} dimension(s),"
                         f" got shape {shape}")
    dims = shape[-len(bs_t):]
    if any(d % b for d, b in zip(dims, bs_t)):
        what = "last axis" if len(bs_t) == 1 else "last two axes"
        raise ValueError(f"block size {bs_t if len(bs_t) == 2 else bs_t[0]} does not divide the "
                         f"{what} of length {dims if len(dims) == 2 else dims[0]} (shape {shape})")
    return bs_t


_check_block_cached = lru_cache(maxsize=256)(_check_block_uncached)


def _to_blocks(x: np.ndarray, bs: tuple[int, ...]) -> np.ndarray:
    """(n_blocks, block_elems) view or copy of x."""
    if len(bs) == 1:
        return x.reshape(-1, bs[0])
    r, c = bs
    *lead, rows, cols = x.shape
    t = x.reshape(*lead, rows // r, r, cols // c, c).swapaxes(-3, -2)
    return t.reshape(-1, r * c)


def _from_blocks(b: np.ndarray, shape: tuple[int, ...], bs: tuple[int, ...]) -> np.ndarray:
    if len(bs) == 1:
        return b.reshape(shape)
    r, c = bs
    *lead, rows, cols = shape
    return b.reshape(*lead, rows // r, cols // c, r, c).swapaxes(-3, -2).reshape(shape)


def _block_amax(blocks: np.ndarray) -> np.ndarray:
    """Per-block max |x| (n, 1) float32, NaN ignored; raises on inf."""
    amax, inf = _kernels().block_amax(np.ascontiguousarray(blocks, dtype=_F32))
    if inf:
        raise ValueError("infinite input: a block-scaled format has no finite scale for inf")
    return amax[:, None]


def _tensor_amax(x: np.ndarray) -> _F32:
    """max |x| over the whole tensor (float32), NaN ignored (0 if all NaN); raises on inf."""
    if not x.size:
        return _F32(0)
    amax, inf = _kernels().block_amax(np.ascontiguousarray(x, dtype=_F32).reshape(1, -1))
    if inf:
        raise ValueError("infinite input: a scaled format has no finite scale for inf")
    return amax[0]


# --------------------------------------------------------------------------------------------
# MX and NVFP4
# --------------------------------------------------------------------------------------------

def _mx_blocks(blocks, e: Elem, rule, rounding, rng):
    """(dequantized (n, k) float32, shared exponents (n,) int32) of MX blocks (n, k).

    Shared exponent per block, OCP MX v1.0 / arXiv 2310.10537 Alg. 1 ("ocp"): floor(log2(amax))
    - emax_elem; round-up rule of arXiv 2506.08027 ("ceil"): ceil(log2(amax / max_elem)). An
    all-zero block gets -127 (any scale gives zeros: the smallest); clamped to the E8M0 range
    [-127, 127]. Elements: RNE(x / X) (or stochastic) clamped to +-max_elem first, times X.
    """
    blocks = np.ascontiguousarray(blocks, dtype=_F32)
    amax = _block_amax(blocks)[:, 0]
    kind, _, _, hi = _kind(e, rounding)
    out = np.empty_like(blocks)
    exps = np.empty(blocks.shape[0], np.int32)
    _kernels().mx_rows(blocks, amax, rule == "ceil", e.emax, e.max, kind, hi, e.emin, e.man_bits,
                       _draws(rounding, rng, blocks.shape), out, exps)
    return out, exps


def _mx(x, e: Elem, bs, rule, rounding, rng, want_limit):
    blocks = _to_blocks(x, bs)
    q, s = _mx_blocks(blocks, e, rule, rounding, rng)
    out = _from_blocks(q, x.shape, bs)
    if not want_limit:
        return out, None
    scale = np.ldexp(_F32(1), s).astype(_F32)[:, None]  # X, exact power of two
    return out, _from_blocks(np.repeat(_F32(e.max) * scale, blocks.shape[1], 1), x.shape, bs)


def _nvfp4_blocks(blocks, rounding, rng):
    """(dequantized (n, k), s_dec_b (n,), s_enc_b (n,), s_enc) of NVFP4 blocks (n, k), float32.

    arXiv 2509.25149 App. B, in Transformer Engine's reference order: s_enc = 6*448 /
    amax_tensor (capped at the float32 max; 1 for an all-zero tensor), s_dec_b =
    e4m3_rne(amax_b / 6 * s_enc), s_enc_b = 1 / (s_dec_b * (1 / s_enc)), x_hat =
    round(clamp(x * s_enc_b, +-6)) * s_dec_b / s_enc. A block whose E4M3 scale rounds to 0
    flushes to zero (TE clamps the encode scale to the float32 max, so every element becomes
    +-6 * 0): it is encoded with s_enc_b = 0 instead of inf.
    """
    blocks = np.ascontiguousarray(blocks, dtype=_F32)
    amax_b = _block_amax(blocks)[:, 0]
    amax_t = _F32(amax_b.max()) if amax_b.size else _F32(0)
    if amax_t == 0:
        s_enc = _F32(1)
    else:
        with np.errstate(over="ignore", divide="ignore"):
            s_enc = _NVFP4_S_ENC_NUM / amax_t  # 6*448 / amax_tensor
        s_enc = _F32(min(s_enc, np.finfo(_F32).max))
    kind, _, _, hi = _kind(_E2M1, rounding)
    e4m3_table, e4m3_shift = _RNE_TABLES[_E4M3.name, True]
    n = blocks.shape[0]
    out, s_dec, s_enc_b = np.empty_like(blocks), np.empty(n, _F32), np.empty(n, _F32)
    _kernels().nvfp4_rows(blocks, amax_b, s_enc, e4m3_table, e4m3_shift, kind, hi, _E2M1.emin,
                          _E2M1.man_bits, _draws(rounding, rng, blocks.shape), out, s_dec, s_enc_b)
    return out, s_dec, s_enc_b, s_enc


def _nvfp4(x, bs, rounding, rng, want_limit):
    blocks = _to_blocks(x, bs)
    q, _, s_enc_b, _ = _nvfp4_blocks(blocks, rounding, rng)
    out = _from_blocks(q, x.shape, bs)
    if not want_limit:
        return out, None
    with np.errstate(divide="ignore"):
        lim = _F32(_E2M1.max) / s_enc_b[:, None]  # a flushed block (s_enc_b = 0) clips nothing
    return out, _from_blocks(np.repeat(lim, blocks.shape[1], 1), x.shape, bs)


def nvfp4_scales(x, *, block_size=16) -> tuple[np.ndarray, float]:
    """NVFP4 per-block decode scales (E4M3 values, float32, shape (n_blocks,)) and s_enc."""
    x = np.asarray(x, dtype=_F32)
    bs = _check_block(x.shape, block_size)
    _, s_dec, _, s_enc = _nvfp4_blocks(_to_blocks(x, bs), "rne", None)
    return s_dec, float(s_enc)


def mx_shared_exponent(x, fmt: str, *, block_size=32, scale_rule: str = "ocp") -> np.ndarray:
    """Shared exponent per MX block (int32, shape (n_blocks,)); E8M0 code = exponent + 127."""
    check_format(fmt)
    if fmt not in MX_FORMATS:
        raise ValueError(f"{fmt!r} is not an MX format; MX formats: {', '.join(MX_FORMATS)}")
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    x = np.asarray(x, dtype=_F32)
    bs = _check_block(x.shape, block_size)
    return _mx_blocks(_to_blocks(x, bs), ELEMS[BLOCK[fmt][0]], scale_rule, "rne", None)[1]


# --------------------------------------------------------------------------------------------
# quantize
# --------------------------------------------------------------------------------------------

def _quantize(x, fmt, block_size, scale_rule, rounding, rng, saturate, want_limit):
    check_format(fmt)
    _check_rounding(rounding, rng)
    x = np.asarray(x, dtype=_F32)
    if fmt in ELEMS:
        if block_size is not None:
            raise ValueError(f"block_size applies to block-scaled formats, not {fmt!r}")
        e = ELEMS[fmt]
        if not saturate and rounding == "stochastic":
            raise ValueError("stochastic rounding always saturates: use saturate=True")
        return _round(x, e, rounding, rng, saturate=saturate), _F32(e.max)
    if not saturate:
        raise ValueError(f"block-scaled {fmt!r} always clamps to the element max (saturate=True)")
    en, default_bs, _ = BLOCK[fmt]
    bs = _check_block(x.shape, default_bs if block_size is None else block_size)
    if fmt == "nvfp4":
        return _nvfp4(x, bs, rounding, rng, want_limit)
    if scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    return _mx(x, ELEMS[en], bs, scale_rule, rounding, rng, want_limit)


def quantize_with_limit(x, fmt: str, *, block_size=None, scale_rule: str = "ocp",
                        rounding: str = "rne", rng=None, saturate: bool = True):
    """Like `quantize`, also returning the largest magnitude representable at each element.

    The limit (float32, scalar or x's shape) is max_elem times the element's scale; an element
    with |x| > limit was clipped (saturated). Used by `error_stats`.
    """
    return _quantize(x, fmt, block_size, scale_rule, rounding, rng, saturate, True)


def quantize(x, fmt: str, *, block_size=None, scale_rule: str = "ocp", rounding: str = "rne",
             rng: np.random.Generator | None = None, saturate: bool = True) -> np.ndarray:
    """Quantize x to `fmt` and return the dequantized values (float32, same shape as x).

    fmt: one of FORMATS. Plain element formats (bf16 ... fp4_e2m1) round x directly;
    ``saturate=True`` clips to +-max first (what Transformer Engine does), ``saturate=False``
    gives IEEE-style overflow (BF16/FP16/E5M2 -> inf, E4M3 -> NaN; FP6/FP4 always saturate).
    MX formats: blocks of `block_size` (default 32) along the last axis share an E8M0 scale X
    chosen by `scale_rule` ("ocp": 2^(floor(log2 amax) - emax_elem), "ceil":
    2^ceil(log2(amax/max_elem))), exponent clamped to [-127, 127]; elements are RNE(x/X)
    clamped to +-max_elem. nvfp4: blocks of 16 with an E4M3 scale under an FP32 per-tensor
    scale (arXiv 2509.25149 App. B, float32 in Transformer Engine's reference order).
    block_size may be a pair (r, c) for 2D tiles over the last two axes (NVFP4 weights: 16x16).
    rounding: "rne" or "stochastic" (unbiased; needs `rng`, a numpy Generator).
    Non-finite inputs: see the module docstring (NaN propagates; inf saturates in plain
    formats and raises ValueError in scaled ones).
    """
    return _quantize(x, fmt, block_size, scale_rule, rounding, rng, saturate, False)[0]


# --------------------------------------------------------------------------------------------
# FP8 tensor scaling recipes
# --------------------------------------------------------------------------------------------

def _fp8_elem(fmt: str) -> Elem:
    if fmt not in ("fp8_e4m3", "fp8_e5m2"):
        check_format(fmt)
        raise ValueError(f"FP8 scaling recipes take 'fp8_e4m3' or 'fp8_e5m2', got {fmt!r}")
    return ELEMS[fmt]


def _scaled(x, e: Elem, scale, rounding, rng):
    """Quantize x * scale to e (clipping to +-max) and divide back; scale a float32 scalar."""
    return _round(x, e, rounding, rng, pre=scale, div=scale)


def quantize_per_tensor(x, fmt: str = "fp8_e4m3", *, margin: int = 0, amax=None,
                        rounding: str = "rne", rng=None, return_limit: bool = False):
    """Per-tensor current scaling: scale = max_fmt / amax / 2^margin (Transformer Engine).

    amax defaults to max|x| (current scaling); pass a stale one to emulate delayed scaling.
    Returns dequantized float32 (and the representable limit max_fmt/scale if asked).
    """
    e = _fp8_elem(fmt)
    _check_rounding(rounding, rng)
    x = np.asarray(x, dtype=_F32)
    amax = _tensor_amax(x) if amax is None else _F32(amax)
    scale = _F32(_F32(e.max) / amax / _F32(2.0 ** margin)) if amax > 0 else _F32(1)
    xq = _scaled(x, e, scale, rounding, rng)
    # the amax itself maps onto max_fmt: a float32 rounding hair above it is not clipping
    return (xq, max(_F32(e.max) / scale, amax)) if return_limit else xq


class DelayedScaler:
    """FP8 delayed scaling as Transformer Engine's DelayedScaling (amax_compute_algo="max").

    `quantize(x)` uses the scale in force (initially 1) and records amax(x) in the history;
    `update()` sets scale = max_fmt / max(history) / 2^margin (kept when that max is 0) and
    rolls the history window of `history_len` steps.
    """

    def __init__(self, fmt: str = "fp8_e4m3", history_len: int = 16, margin: int = 0):
        if history_len < 1:
            raise ValueError(f"history_len must be >= 1, got {history_len}")
        self.fmt = fmt
        self._e = _fp8_elem(fmt)
        self.margin = margin
        self.amax_history = np.zeros(history_len, dtype=_F32)
        self.scale = _F32(1)

    def quantize(self, x, *, return_limit: bool = False):
        """Dequantized float32 of x with the current scale; records amax(x)."""
        x = np.asarray(x, dtype=_F32)
        self.amax_history[0] = max(self.amax_history[0], _tensor_amax(x))
        xq = _scaled(x, self._e, self.scale, "rne", None)
        return (xq, _F32(self._e.max) / self.scale) if return_limit else xq

    def update(self) -> float:
        """Recompute the scale from the amax history; returns the new scale."""
        amax = self.amax_history.max()
        if amax > 0:
            self.scale = _F32(_F32(self._e.max) / amax / _F32(2.0 ** self.margin))
        self.amax_history = np.roll(self.amax_history, 1)
        self.amax_history[0] = 0
        return float(self.scale)


def quantize_tiles(x, fmt: str = "fp8_e4m3", *, tile=(1, 128), rounding: str = "rne", rng=None,
                   return_limit: bool = False):
    """Fine-grained FP8 scaling with one float32 scale (max_fmt / tile amax) per tile.

    DeepSeek-V3 (arXiv 2412.19437 §3.3): 1x128 tiles for activations (per token, per 128
    channels) and 128x128 blocks for weights. tile is (rows, cols) over the last two axes;
    an all-zero tile gets scale 1.
    """
    e = _fp8_elem(fmt)
    _check_rounding(rounding, rng)
    x = np.asarray(x, dtype=_F32)
    bs = _check_block(x.shape, tuple(tile))
    blocks = _to_blocks(x, bs)
    amax = _block_amax(blocks)
    with np.errstate(divide="ignore"):
        scale = np.where(amax > 0, _F32(e.max) / amax, _F32(1)).astype(_F32)
    out = _from_blocks(_round_rows(blocks, e, rounding, rng, pre=scale, div=scale), x.shape, bs)
    if not return_limit:
        return out
    lim = np.maximum(_F32(e.max) / scale, amax)  # as in quantize_per_tensor
    return out, _from_blocks(np.repeat(lim, blocks.shape[1], 1), x.shape, bs)


def quantize_1x128(x, fmt: str = "fp8_e4m3", **kw):
    """DeepSeek-V3 activation scaling: 1x128 tiles along the last axis."""
    return quantize_tiles(x, fmt, tile=(1, 128), **kw)


def quantize_128x128(x, fmt: str = "fp8_e4m3", **kw):
    """DeepSeek-V3 weight scaling: 128x128 blocks over the last two axes."""
    return quantize_tiles(x, fmt, tile=(128, 128), **kw)


# --------------------------------------------------------------------------------------------
# Error statistics
# --------------------------------------------------------------------------------------------

#: Test-tensor families for `make_tensor`.
DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "student_t", "outlier_channels")


def make_tensor(distribution: str, shape=(128, 2048), *, magnitude: float = 1.0, seed: int = 0,
                df: float = 3.0, outlier_frac: float = 0.005,
                outlier_scale=(20.0, 100.0)) -> np.ndarray:
    """A float32 test tensor (rows = tokens, last axis = channels), times `magnitude`.

    gaussian: N(0, 1). student_t: standard Student-t with `df` degrees of freedom (heavy tails).
    outlier_channels: N(0, 1) with a fraction `outlier_frac` of channels (at least one) scaled
    by factors drawn uniformly from `outlier_scale`, the systematic activation outliers of LLMs
    (LLM.int8(), Dettmers et al. 2022, arXiv 2208.07339).
    """
    rng = np.random.default_rng(seed)
    if distribution == "gaussian":
        x = rng.standard_normal(shape)
    elif distribution == "student_t":
        x = rng.standard_t(df, shape)
    elif distribution == "outlier_channels":
        x = rng.standard_normal(shape)
        n_ch = shape[-1]
        k = max(1, int(round(outlier_frac * n_ch)))
        ch = rng.choice(n_ch, size=k, replace=False)
        x[..., ch] *= rng.uniform(*outlier_scale, size=k)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {DISTRIBUTIONS}")
    return (x * magnitude).astype(_F32)


def error_stats(x, xq, *, limit=None) -> dict[str, float]:
    """Error of a quantized tensor xq against x.

    rel_err: ||xq - x||_2 / ||x||_2 (relative RMS error, dimensionless); snr_db:
    10 log10(sum x^2 / sum (xq - x)^2) in dB (inf when exact); zero_share: share of elements
    with x != 0 and xq == 0 (flushed); sat_share: share with |x| > limit, the largest magnitude
    representable after scaling (clipped), NaN when no limit is given. Clipping counts every
    element beyond the limit, also those the clip costs nothing: NVFP4's E4M3 block scale
    rounds down about half the time, and the block's largest elements then clip to 6 by at
    most the scale's rounding error (1/16 for normal E4M3 scales), where RNE would give 6 too.
    """
    x = np.asarray(x, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    err2 = float(np.sum((xq - x) ** 2))
    sig2 = float(np.sum(x * x))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.sqrt(err2 / sig2) if sig2 > 0 else (0.0 if err2 == 0 else np.inf)
        snr = 10 * np.log10(sig2 / err2) if err2 > 0 else np.inf
    n = max(x.size, 1)
    zero = float(np.count_nonzero((x != 0) & (xq == 0))) / n
    sat = np.nan if limit is None else float(np.count_nonzero(np.abs(x) > limit)) / n
    return {"rel_err": float(rel), "snr_db": float(snr), "zero_share": zero, "sat_share": sat}


#: (format, scale_rule) pairs of the error table. scale_rule: "none" (plain cast), "tensor"
#: (per-tensor current scaling), "1x128"/"128x128" (DeepSeek-V3 tiles), "ocp"/"ceil" (MX rules),
#: "two_level" (NVFP4).
SCHEMES: tuple[tuple[str, str], ...] = (
    tuple((f, "none") for f in ELEMENT_FORMATS)
    + (("fp8_e4m3", "tensor"), ("fp8_e4m3", "1x128"), ("fp8_e4m3", "128x128"),
       ("fp8_e5m2", "tensor"))
    + tuple((f, r) for f in MX_FORMATS for r in SCALE_RULES)
    + (("nvfp4", "two_level"),)
)


def _apply_scheme(x, fmt: str, rule: str):
    if rule == "none":
        return quantize_with_limit(x, fmt)
    if rule == "tensor":
        return quantize_per_tensor(x, fmt, return_limit=True)
    if rule in ("1x128", "128x128"):
        return quantize_tiles(x, fmt, tile=(1, 128) if rule == "1x128" else (128, 128),
                              return_limit=True)
    if rule == "two_level":
        return quantize_with_limit(x, "nvfp4")
    return quantize_with_limit(x, fmt, scale_rule=rule)


def error_table(schemes: Sequence[tuple[str, str]] = SCHEMES,
                distributions: Sequence[str] = DISTRIBUTIONS,
                magnitudes: Sequence[float] = (1e-3, 1.0, 1e3), *, shape=(128, 2048),
                seed: int = 0) -> list[dict]:
    """Error statistics for every scheme x distribution x magnitude, as a list of dict rows.

    Row keys: format, scale_rule, bits (per element, scales included), distribution, magnitude,
    rel_err, snr_db, zero_share, sat_share. The same seeded tensor (scaled by each magnitude)
    is used for every scheme. 128x128 tiles need both dimensions of `shape` divisible by 128;
    schemes whose tiles do not fit the shape are skipped.
    """
    rows = []
    for dist in distributions:
        base = make_tensor(dist, shape, seed=seed)
        for mag in magnitudes:
            x = (base * _F32(mag)).astype(_F32)
            for fmt, rule in schemes:
                if rule == "128x128" and (len(shape) < 2 or shape[-2] % 128 or shape[-1] % 128):
                    continue
                with np.errstate(over="ignore", invalid="ignore"):
                    xq, lim = _apply_scheme(x, fmt, rule)
                rows.append({"format": fmt, "scale_rule": rule,
                             "bits": format_info(fmt).bits_per_element, "distribution": dist,
                             "magnitude": float(mag), **error_stats(x, xq, limit=lim)})
    return rows
