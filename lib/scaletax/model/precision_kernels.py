"""Fused numba loops behind `scaletax.model.precision`: one call per quantize instead of a dozen
numpy passes (and as many Python calls) over the small operands of `lowp_training`.

Each loop does, per element and in float32, the steps of the numpy version it replaced in the
same order (scale multiply, saturating clip, rounding, dequantizing multiply and divide), each
with the same result, so the outputs are bit for bit the same; the tests check them against ml_dtypes' casts,
against numpy transcriptions of the rules and against hand-worked blocks.

Rounding kinds (`KIND_*`): the RNE table of ``precision._rne_table`` (8-bit-or-narrower element
types: ml_dtypes' cast, tabulated; for IEEE overflow), saturating RNE of those types by float32
arithmetic (the same results for every float32 input, checked on all 2^32 of them; no table
lookup, so the loops vectorize), RNE to BFloat16 on the float32 bits, and unbiased stochastic
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
KIND_TABLE, KIND_BF16, KIND_STOCHASTIC, KIND_SATURATE = 0, 1, 2, 3
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
def _rne_saturate(v, hi, qmin, man_bits):
    """RNE of clip(v, +-hi) to the element grid with `man_bits` mantissa bits and smallest
    normal exponent field `qmin` (emin + 127), by float32 arithmetic: the grid spacing around
    a = |v| is u = 2^(max(exponent field, qmin) - man_bits - 127), and (a + 2^23 u) - 2^23 u
    is a rounded to a multiple of u, ties to even, exactly (u is the ulp of 2^23 u, and a is
    far below it); v's sign goes back on. NaN gives the quiet NaN, as the table does. The same
    bits as the saturating table (``precision._rne_table``) for every float32 input."""
    b = _bits(_clip(v, hi))
    a = _float(b & np.uint32(0x7FFFFFFF))
    big = _float(np.uint32(max(np.int64(b >> np.uint32(23) & np.uint32(0xFF)), qmin) - man_bits + 23)
                 << np.uint32(23))  # 2^23 u
    q = _float(_bits((a + big) - big) | (b & np.uint32(0x80000000)))
    return np.float32(np.nan) if v != v else q


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
    if normal:  # 2^(qexp - 127) and its inverse are normal float32: built from their bits
        ulp = _float(np.uint32(qexp) << np.uint32(23))
        a = a * _float(np.uint32(254 - qexp) << np.uint32(23))
    else:
        ulp = POW2[qexp + _POW2_OFF]
        a = a / ulp
    lo = np.floor(a)
    lo = lo + np.float32(r < a - lo)  # + 1 where the draw is below the fraction
    lo = lo * ulp
    return _float((_bits(lo) & np.uint32(0x7FFFFFFF)) | (b & np.uint32(0x80000000)))


@njit(inline="always")
def _pre(v, p, mode):
    """v * p where `mode` has MODE_PRE."""
    return v * p if mode & 1 else v


@njit(inline="always")
def _post(q, m, d, mode):
    """q * m / d, each where `mode` has MODE_MUL / MODE_DIV."""
    if mode & 2:
        q = q * m
    if mode & 4:
        q = q / d
    return q


# One row loop per rounding kind, and one kernel per kind: a loop whose kind is tested per row or
# per element stays scalar (LLVM vectorizes the arithmetic kinds only alone, 3-4x faster), and a
# kind passed as a constant to one body with every kind in it makes numba type and compile all of
# them in every copy (30 s on first use instead of 3). Each kernel is compiled on its first call.

@njit(inline="always")
def _row_table(x, i, p, m, d, mode, table, shift, out):
    for j in range(x.shape[1]):
        out[i, j] = _post(_rne_table(_pre(x[i, j], p, mode), table, shift), m, d, mode)


@njit(inline="always")
def _row_bf16(x, i, p, m, d, mode, hi, saturate, out):
    for j in range(x.shape[1]):
        out[i, j] = _post(_rne_bf16(_pre(x[i, j], p, mode), hi, saturate), m, d, mode)


@njit(inline="always")
def _row_saturate(x, i, p, m, d, mode, hi, qmin, man_bits, out):
    for j in range(x.shape[1]):
        out[i, j] = _post(_rne_saturate(_pre(x[i, j], p, mode), hi, qmin, man_bits), m, d, mode)


@njit(inline="always")
def _row_stochastic(x, i, p, m, d, mode, hi, qmin, man_bits, normal, rand, out):
    for j in range(x.shape[1]):
        out[i, j] = _post(_stochastic(_pre(x[i, j], p, mode), hi, qmin, man_bits, normal, rand[i, j]),
                          m, d, mode)


@njit(**_OPTS)
def block_amax(x):
    """Per-row max |x| of a float32 (n, k) array, NaN ignored (0 for an all-NaN row), as a
    float32 (n,) array, and whether any row's max is infinite.

    On the bits: |x|'s bits order as its values do, and NaN's lie above inf's (0x7F800000), so
    the max of the bits at most inf's is the max |x| without NaN, and an integer max vectorizes."""
    n, k = x.shape
    out = np.empty(n, np.float32)
    inf = False
    top = np.uint32(0x7F800000)
    for i in range(n):
        m = np.uint32(0)
        for j in range(k):
            a = _bits(x[i, j]) & np.uint32(0x7FFFFFFF)
            m = max(m, a if a <= top else np.uint32(0))
        out[i] = _float(m)
        if m == top:
            inf = True
    return out, inf


# round(x * pre) * mul / div per row ------------------------------------------------------------

@njit(**_OPTS)
def _round_rows_table(x, pre, mul, div, mode, hi, table, shift, saturate, emin, man_bits, rand, out):
    for i in range(x.shape[0]):
        _row_table(x, i, pre[i], mul[i], div[i], mode, table, shift, out)


@njit(**_OPTS)
def _round_rows_bf16(x, pre, mul, div, mode, hi, table, shift, saturate, emin, man_bits, rand, out):
    for i in range(x.shape[0]):
        _row_bf16(x, i, pre[i], mul[i], div[i], mode, hi, saturate, out)


@njit(**_OPTS)
def _round_rows_saturate(x, pre, mul, div, mode, hi, table, shift, saturate, emin, man_bits, rand, out):
    for i in range(x.shape[0]):
        _row_saturate(x, i, pre[i], mul[i], div[i], mode, hi, emin + 127, man_bits, out)


@njit(**_OPTS)
def _round_rows_stochastic(x, pre, mul, div, mode, hi, table, shift, saturate, emin, man_bits, rand, out):
    normal = emin - man_bits > -127  # spacing and its inverse are normal float32
    for i in range(x.shape[0]):
        _row_stochastic(x, i, pre[i], mul[i], div[i], mode, hi, emin + 127, man_bits, normal, rand, out)


_ROUND_ROWS = {KIND_TABLE: _round_rows_table, KIND_BF16: _round_rows_bf16,
               KIND_SATURATE: _round_rows_saturate, KIND_STOCHASTIC: _round_rows_stochastic}


def round_rows(x, pre, mul, div, mode, kind, hi, table, shift, saturate, emin, man_bits, rand, out):
    """out = round(x * pre) * mul / div per row of float32 (n, k) x (`mode` bits say which of
    the per-row pre, mul, div apply; `rand`: the uniform draws, x's shape, for KIND_STOCHASTIC)."""
    _ROUND_ROWS[kind](x, pre, mul, div, mode, hi, table, shift, saturate, emin, man_bits, rand, out)


# OCP MX blocks --------------------------------------------------------------------------------

@njit(inline="always")
def _mx_exponent(am, ceil_rule, emax, elem_max):
    """The block's shared exponent from its amax (see :func:`mx_rows`)."""
    if am > 0:
        if ceil_rule:
            f, ex = math.frexp(np.float64(am) / elem_max)
            s = ex - (1 if f == 0.5 else 0)
        else:
            f, ex = math.frexp(np.float64(am))  # exact: float32 in float64
            s = ex - 1 - emax
        return min(max(s, -127), 127)
    return -127


@njit(**_OPTS)
def _mx_rows_saturate(x, amax, ceil_rule, emax, elem_max, hi, emin, man_bits, rand, out, exps):
    for i in range(x.shape[0]):
        s = exps[i] = _mx_exponent(amax[i], ceil_rule, emax, elem_max)
        inv, scale = POW2[127 - s + _POW2_OFF], POW2[127 + s + _POW2_OFF]  # 2^-s, 2^s: exact
        _row_saturate(x, i, inv, scale, np.float32(1), 3, hi, emin + 127, man_bits, out)


@njit(**_OPTS)
def _mx_rows_stochastic(x, amax, ceil_rule, emax, elem_max, hi, emin, man_bits, rand, out, exps):
    normal = emin - man_bits > -127
    for i in range(x.shape[0]):
        s = exps[i] = _mx_exponent(amax[i], ceil_rule, emax, elem_max)
        inv, scale = POW2[127 - s + _POW2_OFF], POW2[127 + s + _POW2_OFF]
        _row_stochastic(x, i, inv, scale, np.float32(1), 3, hi, emin + 127, man_bits, normal, rand, out)


_MX_ROWS = {KIND_SATURATE: _mx_rows_saturate, KIND_STOCHASTIC: _mx_rows_stochastic}


def mx_rows(x, amax, ceil_rule, emax, elem_max, kind, hi, emin, man_bits, rand, out, exps):
    """OCP MX blocks: per row the shared exponent s (into `exps`, int32) from the row's amax,
    then out = round(x * 2^-s) * 2^s, clamped to +-hi first (`kind`: KIND_SATURATE or
    KIND_STOCHASTIC).

    s: "ocp" floor(log2 amax) - emax (OCP MX v1.0, arXiv 2310.10537 Alg. 1); `ceil_rule`:
    ceil(log2(amax / elem_max)) (arXiv 2506.08027), exact in float64; an all-zero block gets
    -127; s is clamped to the E8M0 range [-127, 127].
    """
    _MX_ROWS[kind](x, amax, ceil_rule, emax, elem_max, hi, emin, man_bits, rand, out, exps)


# NVFP4 blocks ---------------------------------------------------------------------------------

@njit(inline="always")
def _nvfp4_scale(am, s_enc, inv_enc, e4m3_table, e4m3_shift):
    """(s_dec, s_enc_b) of a block with amax `am` (see :func:`nvfp4_rows`)."""
    sd = _rne_table((am / np.float32(6)) * s_enc, e4m3_table, e4m3_shift)
    return sd, np.float32(0) if sd == 0 else np.float32(1) / (sd * inv_enc)


@njit(**_OPTS)
def _nvfp4_rows_saturate(x, amax, s_enc, e4m3_table, e4m3_shift, hi, emin, man_bits, rand, out,
                         s_dec_out, s_enc_b_out):
    inv_enc = np.float32(1) / s_enc
    for i in range(x.shape[0]):
        sd, se = _nvfp4_scale(amax[i], s_enc, inv_enc, e4m3_table, e4m3_shift)
        s_dec_out[i], s_enc_b_out[i] = sd, se
        _row_saturate(x, i, se, sd, s_enc, 7, hi, emin + 127, man_bits, out)


@njit(**_OPTS)
def _nvfp4_rows_stochastic(x, amax, s_enc, e4m3_table, e4m3_shift, hi, emin, man_bits, rand, out,
                           s_dec_out, s_enc_b_out):
    inv_enc = np.float32(1) / s_enc
    normal = emin - man_bits > -127
    for i in range(x.shape[0]):
        sd, se = _nvfp4_scale(amax[i], s_enc, inv_enc, e4m3_table, e4m3_shift)
        s_dec_out[i], s_enc_b_out[i] = sd, se
        _row_stochastic(x, i, se, sd, s_enc, 7, hi, emin + 127, man_bits, normal, rand, out)


_NVFP4_ROWS = {KIND_SATURATE: _nvfp4_rows_saturate, KIND_STOCHASTIC: _nvfp4_rows_stochastic}


def nvfp4_rows(x, amax, s_enc, e4m3_table, e4m3_shift, kind, hi, emin, man_bits, rand, out,
               s_dec_out, s_enc_b_out):
    """NVFP4 blocks (arXiv 2509.25149 App. B, float32 in Transformer Engine's reference order):
    per row s_dec = e4m3_rne(amax / 6 * s_enc) (into `s_dec_out`), s_enc_b = 1 / (s_dec *
    (1 / s_enc)) (0 where s_dec is 0: the block flushes to zero; into `s_enc_b_out`), then
    out = round(clamp(x * s_enc_b, +-6)) * s_dec / s_enc (`kind`: KIND_SATURATE or
    KIND_STOCHASTIC)."""
    _NVFP4_ROWS[kind](x, amax, s_enc, e4m3_table, e4m3_shift, hi, emin, man_bits, rand, out, s_dec_out,
                      s_enc_b_out)
