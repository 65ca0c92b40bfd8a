"""Fused numba loops behind `scaletax.precision`: one call per quantize instead of a dozen
numpy passes (and as many Python calls) over the small operands of `lowp_training`.

Each loop does, per element and in float32, the same IEEE operations in the same order as the
numpy version it replaced (scale multiply, saturating clip, rounding, dequantizing multiply and
divide), so the results are bit for bit the same; the tests check them against ml_dtypes' casts,
against numpy transcriptions of the rules and against hand-worked blocks.

Rounding kinds (`KIND_*`): the RNE table of ``precision._rne_table`` (8-bit-or-narrower element
types: ml_dtypes' cast, tabulated), RNE to BFloat16 on the float32 bits, and unbiased stochastic
rounding from one float32 uniform draw per element.

Compiled on first use and cached on disk by numba (``cache=True``: ``__pycache__`` beside this
file, or ``NUMBA_CACHE_DIR``); `precision` imports this module on its first quantize.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

#: Rounding kinds of the loops.
KIND_TABLE, KIND_BF16, KIND_STOCHASTIC = 0, 1, 2
#: Which per-row operands `round_rows` applies: x * pre before the rounding, * mul, / div after.
MODE_PRE, MODE_MUL, MODE_DIV = 1, 2, 4

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}

#: 2^(q - 127) as float32 at index q + _POW2_OFF, for q from -_POW2_OFF to 254 (every float32
#: power of two, subnormals included): grid spacings and their inverses, exact.
_POW2_OFF = 32
POW2 = np.ldexp(1.0, np.arange(-_POW2_OFF, 255) - 127).astype(np.float32)


@intrinsic
def _bits(typingctx, v):
    """The bits of a float32 as uint32 (a bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _float(typingctx, b):
    """The float32 whose bits are the uint32 b (a bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@njit(inline="always")
def _clip(v, hi):
    """clip(v, -hi, hi); NaN stays NaN."""
    if v > hi:
        return hi
    if v < -hi:
        return -hi
    return v


@njit(inline="always")
def _rne_table(v, table, shift):
    """RNE by the table: index = sign, exponent, kept mantissa bits and round bit, then the
    sticky OR of the bits below (a saturating table holds the clip too)."""
    b = _bits(v)
    low = np.uint32((1 << shift) - 1)
    return table[((b >> np.uint32(shift)) << np.uint32(1)) | np.uint32((b & low) != 0)]


@njit(inline="always")
def _rne_bf16(v, hi, saturate):
    """BF16 RNE: add 0x7FFF plus the lowest kept bit, drop the low 16 bits (ml_dtypes' cast for
    every finite value, subnormals included; overflows to inf as IEEE does); NaN is the quiet
    NaN 0x7FC0 with its sign, as ml_dtypes makes it."""
    if saturate:
        v = _clip(v, hi)
    b = _bits(v)
    if v != v:
        return _float((b & np.uint32(0x80000000)) | np.uint32(0x7FC00000))
    return _float((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))
                  & np.uint32(0xFFFF0000))


@njit(inline="always")
def _stochastic(v, hi, qmin, man_bits, normal, r):
    """Unbiased stochastic rounding of clip(v, +-hi) with the uniform draw r: spacing
    ulp = 2^(qexp - 127), qexp = max(exponent field, emin + 127) - man_bits; a = |v| / ulp
    (exact: times 2^(127 - qexp) where that is a normal float32), then
    (floor(a) + (r < a - floor(a))) * ulp with v's sign bit."""
    v = _clip(v, hi)
    b = _bits(v)
    a = abs(v)
    qexp = max(np.int64((b & np.uint32(0x7FFFFFFF)) >> np.uint32(23)), qmin) - man_bits
    ulp = POW2[qexp + _POW2_OFF]
    if normal:
        a = a * POW2[254 - qexp + _POW2_OFF]
    else:
        a = a / ulp
    lo = np.floor(a)
    lo = lo + np.float32(r < a - lo)  # + 1 where the draw is below the fraction
    lo = lo * ulp
    return _float((_bits(lo) & np.uint32(0x7FFFFFFF)) | (b & np.uint32(0x80000000)))


@njit(inline="always")
def _elem(v, p, m, d, mode, kind, hi, table, shift, saturate, qmin, man_bits, normal, r):
    """round(v * p) * m / d for one float32 (`mode` bits: which of p, m, d apply). The loops
    call it with a constant `kind`, so each compiles to one tight loop for its rounding."""
    if mode & 1:
        v = v * p
    if kind == 0:
        q = _rne_table(v, table, shift)
    elif kind == 1:
        q = _rne_bf16(v, hi, saturate)
    else:
        q = _stochastic(v, hi, qmin, man_bits, normal, r)
    if mode & 2:
        q = q * m
    if mode & 4:
        q = q / d
    return q


@njit(inline="always")
def _row(x, i, p, m, d, mode, kind, hi, table, shift, saturate, qmin, man_bits, normal, rand,
         out):
    """out[i] = round(x[i] * p) * m / d: one loop per rounding kind, each with `kind` constant."""
    z = np.float32(0)
    if kind == 0:
        for j in range(x.shape[1]):
            out[i, j] = _elem(x[i, j], p, m, d, mode, 0, hi, table, shift, saturate, qmin,
                              man_bits, normal, z)
    elif kind == 1:
        for j in range(x.shape[1]):
            out[i, j] = _elem(x[i, j], p, m, d, mode, 1, hi, table, shift, saturate, qmin,
                              man_bits, normal, z)
    else:
        for j in range(x.shape[1]):
            out[i, j] = _elem(x[i, j], p, m, d, mode, 2, hi, table, shift, saturate, qmin,
                              man_bits, normal, rand[i, j])


@njit(**_OPTS)
def block_amax(x):
    """Per-row max |x| of a float32 (n, k) array, NaN ignored (0 for an all-NaN row), as a
    float32 (n,) array, and whether any row's max is infinite."""
    n, k = x.shape
    out = np.empty(n, np.float32)
    inf = False
    for i in range(n):
        m = np.float32(0)
        for j in range(k):
            a = abs(x[i, j])
            if a > m:  # False for NaN: ignored
                m = a
        out[i] = m
        if m == np.inf:
            inf = True
    return out, inf


@njit(**_OPTS)
def round_rows(x, pre, mul, div, mode, kind, hi, table, shift, saturate, emin, man_bits, rand,
               out):
    """out = round(x * pre) * mul / div per row of float32 (n, k) x (`mode` bits say which of
    the per-row pre, mul, div apply; `rand`: the uniform draws, x's shape, for KIND_STOCHASTIC)."""
    qmin = emin + 127
    normal = emin - man_bits > -127  # spacing and its inverse are normal float32
    for i in range(x.shape[0]):
        _row(x, i, pre[i], mul[i], div[i], mode, kind, hi, table, shift, saturate, qmin, man_bits,
             normal, rand, out)


@njit(**_OPTS)
def mx_rows(x, amax, ceil_rule, emax, elem_max, kind, hi, table, shift, emin, man_bits, rand,
            out, exps):
    """OCP MX blocks: per row the shared exponent s (into `exps`, int32) from the row's amax,
    then out = round(x * 2^-s) * 2^s (clamped to +-hi first).

    s: "ocp" floor(log2 amax) - emax (OCP MX v1.0, arXiv 2310.10537 Alg. 1); `ceil_rule`:
    ceil(log2(amax / elem_max)) (arXiv 2506.08027), exact in float64; an all-zero block gets
    -127; s is clamped to the E8M0 range [-127, 127].
    """
    n = x.shape[0]
    qmin = emin + 127
    normal = emin - man_bits > -127
    one = np.float32(1)
    for i in range(n):
        am = amax[i]
        if am > 0:
            if ceil_rule:
                f, ex = math.frexp(np.float64(am) / elem_max)
                s = ex - (1 if f == 0.5 else 0)
            else:
                f, ex = math.frexp(np.float64(am))  # exact: float32 in float64
                s = ex - 1 - emax
            s = min(max(s, -127), 127)
        else:
            s = -127
        exps[i] = s
        inv, scale = POW2[127 - s + _POW2_OFF], POW2[127 + s + _POW2_OFF]  # 2^-s, 2^s: exact
        _row(x, i, inv, scale, one, 3, kind, hi, table, shift, True, qmin, man_bits, normal, rand,
             out)


@njit(**_OPTS)
def nvfp4_rows(x, amax, s_enc, e4m3_table, e4m3_shift, kind, hi, table, shift, emin, man_bits,
               rand, out, s_dec_out, s_enc_b_out):
    """NVFP4 blocks (arXiv 2509.25149 App. B, float32 in Transformer Engine's reference order):
    per row s_dec = e4m3_rne(amax / 6 * s_enc) (into `s_dec_out`), s_enc_b = 1 / (s_dec *
    (1 / s_enc)) (0 where s_dec is 0: the block flushes to zero; into `s_enc_b_out`), then
    out = round(clamp(x * s_enc_b, +-6)) * s_dec / s_enc."""
    n = x.shape[0]
    qmin = emin + 127
    normal = emin - man_bits > -127
    inv_enc = np.float32(1) / s_enc
    for i in range(n):
        sd = _rne_table((amax[i] / np.float32(6)) * s_enc, e4m3_table, e4m3_shift)
        se = np.float32(0) if sd == 0 else np.float32(1) / (sd * inv_enc)
        s_dec_out[i] = sd
        s_enc_b_out[i] = se
        _row(x, i, se, sd, s_enc, 7, kind, hi, table, shift, True, qmin, man_bits, normal, rand,
             out)
