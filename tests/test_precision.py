"""Tests for scaletax.model.precision against data/precision_vectors.json and hand-derived blocks."""
from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

from scaletax import DATA_DIR
from scaletax.inputs import formats
from scaletax.model import precision as P

VECTORS = json.loads((DATA_DIR / "precision_vectors.json").read_text())
F32 = np.float32


def _val(v) -> np.float32:
    """JSON value (number or 'nan' / 'inf' / '-0.0' string) as float32."""
    return F32(float(v))


def _same(got, exp) -> bool:
    """Bitwise-level equality for float32 scalars: NaN == NaN, and -0 differs from +0."""
    got, exp = F32(got), F32(exp)
    if np.isnan(exp):
        return bool(np.isnan(got))
    return bool(got == exp and np.signbit(got) == np.signbit(exp))


def _q1(x, fmt, **kw) -> np.float32:
    return P.quantize(np.array([x], dtype=F32), fmt, **kw)[0]


def _row_id(r) -> str:
    return f"{r['format']}-{r['input']}"


# --------------------------------------------------------------------------------------------
# JSON vectors
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("row", VECTORS["elementwise"], ids=_row_id)
def test_elementwise_saturating(row):
    assert _same(_q1(row["input"], row["format"]), _val(row["expected"]))


@pytest.mark.parametrize("row", VECTORS["elementwise"], ids=_row_id)
def test_elementwise_nonsaturating(row):
    got = _q1(row["input"], row["format"], saturate=False)
    assert _same(got, _val(row["expected_nonsaturating"]))


@pytest.mark.parametrize("row", VECTORS["elementwise"], ids=_row_id)
def test_elementwise_bits(row):
    assert int(P.encode([row["input"]], row["format"])[0]) == int(row["expected_bits"], 16)


@pytest.mark.parametrize("row", VECTORS["elementwise"], ids=_row_id)
def test_ml_dtypes_raw_astype_is_what_the_json_says(row):
    # guards the library: if ml_dtypes changes its unclipped overflow, the vectors say so
    dtype = VECTORS["format_parameters"][row["format"]]["ml_dtypes"]
    with np.errstate(invalid="ignore", over="ignore"):
        raw = np.array([row["input"]], F32).astype(getattr(ml_dtypes, dtype)).astype(F32)[0]
    assert _same(raw, _val(row["ml_dtypes_astype_raw"]))


@pytest.mark.parametrize("row", VECTORS["sixteen_bit"], ids=_row_id)
def test_sixteen_bit_ieee(row):
    # the JSON's 16-bit expectations are IEEE overflow (to inf): saturate=False
    assert _same(_q1(row["input"], row["format"], saturate=False), _val(row["expected"]))


@pytest.mark.parametrize("row", VECTORS["sixteen_bit"], ids=_row_id)
def test_sixteen_bit_saturating(row):
    # saturate=True (the default) is the same except that overflow stops at +-max
    exp = _val(row["expected"])
    if np.isinf(exp):
        exp = F32(math.copysign(formats.format_info(row["format"]).max_finite, exp))
    assert _same(_q1(row["input"], row["format"]), exp)


@pytest.mark.parametrize("row", VECTORS["e8m0_codes"], ids=lambda r: r["code"])
def test_e8m0_codes(row):
    code = int(row["code"], 16)
    assert _same(P.e8m0_decode([code])[0], _val(row["value"]))
    if code != 0xFF:
        assert int(P.e8m0_encode([int(np.log2(row["value"]))])[0]) == code


def test_e8m0_encode_clamps():
    assert P.e8m0_encode([-200, 300]).tolist() == [0, 254]


@pytest.mark.parametrize("fmt", sorted(VECTORS["positive_grids"]))
def test_positive_grid(fmt):
    grid = np.array(VECTORS["positive_grids"][fmt])
    np.testing.assert_array_equal(formats.representable_values(fmt), grid)
    g32 = grid.astype(F32)
    # every grid point is a fixed point, on both signs
    np.testing.assert_array_equal(P.quantize(g32, fmt), g32)
    np.testing.assert_array_equal(P.quantize(-g32, fmt), -g32)
    # midpoints tie to the neighbour with the even code; a hair off the midpoint goes to
    # the nearer neighbour
    lo, hi = g32[:-1], g32[1:]
    mid = ((grid[:-1] + grid[1:]) / 2).astype(F32)
    assert np.array_equal(mid.astype(np.float64), (grid[:-1] + grid[1:]) / 2)  # exact
    even_lo = P.encode(lo, fmt) % 2 == 0
    np.testing.assert_array_equal(P.quantize(mid, fmt), np.where(even_lo, lo, hi))
    np.testing.assert_array_equal(P.quantize(np.nextafter(mid, F32(np.inf)), fmt), hi)
    np.testing.assert_array_equal(P.quantize(np.nextafter(mid, F32(0)), fmt), lo)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1",
                                 "bf16", "fp16"])
def test_format_parameters(fmt):
    p = VECTORS["format_parameters"][fmt]
    info = formats.format_info(fmt)
    assert (info.exp_bits, info.man_bits) == (p["exp_bits"], p["man_bits"])
    assert info.max_finite == p["max_normal"]
    assert info.min_normal == p["min_normal"]
    assert info.min_subnormal == p["min_subnormal"]
    if "emax_elem" in p:
        assert formats.ELEMS[fmt].emax == p["emax_elem"]
    assert info.dynamic_range_binades == pytest.approx(
        math.log2(p["max_normal"] / p["min_subnormal"]))


def test_e8m0_parameters():
    p = VECTORS["format_parameters"]["fp8_e8m0"]
    assert P.e8m0_decode([254])[0] == F32(p["max"])
    assert P.e8m0_decode([0])[0] == F32(p["min"])


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
def test_rne_table_is_ml_dtypes_astype_on_random_bit_patterns(fmt):
    # every float32 class: random bit patterns cover all exponents, subnormals, inf and NaN
    bits = np.random.default_rng(7).integers(0, 2**32, 200_000, dtype=np.uint32)
    bits[:4] = [0x7F800000, 0xFF800000, 0x00000001, 0x80000000]  # +-inf, min subnormal, -0
    x = bits.view(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(formats.ELEMS[fmt].dtype).astype(F32)
    got = P.quantize(x, fmt, saturate=False)
    num = ~np.isnan(x)
    np.testing.assert_array_equal(got[num], ref[num])
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(ref[num]))
    assert np.isnan(got[~num]).all()  # NaN stays NaN even where the format has none


def _edge_inputs(fmt: str) -> np.ndarray:
    """Random bit patterns (every exponent, subnormals, inf, NaN), the format's grid, its
    ties (midpoints) and their float32 neighbours, +-max, +-0, and values just above max."""
    e = formats.ELEMS[fmt]
    bits = np.random.default_rng(11).integers(0, 2**32, 200_000, dtype=np.uint32).view(F32)
    grid = formats.representable_values(fmt)
    mid = ((grid[:-1] + grid[1:]) / 2).astype(F32)
    g = grid.astype(F32)
    near = np.concatenate([g, mid, np.nextafter(mid, F32(0)), np.nextafter(mid, F32(np.inf)),
                           np.nextafter(F32(e.max), F32(np.inf)) * np.array([1, 1.01, 2], F32),
                           np.array([0, e.min_subnormal / 2, 1e-45, np.inf, np.nan], F32)])
    return np.concatenate([bits, near, -near])


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
def test_saturating_rne_table_is_clip_then_ml_dtypes_astype_bit_for_bit(fmt):
    """The clip is fused into the table: the same bits as np.clip then ml_dtypes' cast."""
    e = formats.ELEMS[fmt]
    x = _edge_inputs(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = np.clip(x, -e.max, e.max).astype(e.dtype).astype(F32)
    ref[np.isnan(x)] = np.nan  # FP6/FP4 have no NaN: the library keeps NaN as NaN
    got = P.quantize(x, fmt)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


def _class_inputs(shift: int) -> np.ndarray:
    """float32 covering every class of an RNE table with `shift` (sign, exponent, kept bits and
    round bit), each with no sticky bit, the lowest, the highest and all of them set."""
    hi = np.arange(2 ** (32 - shift), dtype=np.uint32) << np.uint32(shift)
    low = np.uint32((1 << shift) - 1)
    sticky = np.array([0, 1, (low + 1) >> 1, low], np.uint32)
    return (hi[:, None] | sticky[None, :]).reshape(-1).view(F32)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
def test_saturating_rne_arithmetic_is_the_table_on_every_class(fmt):
    """Saturating RNE runs as float32 arithmetic (precision_kernels._rne_saturate, which
    vectorizes); it gives the saturating table's bits (ml_dtypes' cast after the clip) on every
    class the table tells apart and on random bit patterns. (All 2^32 float32 inputs agreed for
    every format here when it was written; that run takes a minute, so it is not repeated.)"""
    e = formats.ELEMS[fmt]
    table, shift = P._RNE_TABLES[fmt, True]
    x = np.concatenate([_class_inputs(shift), _random_bits(1 << 20, 31)])
    b = x.view(np.uint32)
    ref = table[((b >> np.uint32(shift)) << np.uint32(1)) | ((b & np.uint32((1 << shift) - 1)) != 0)]
    assert P._kind(e, "rne")[0] == P._kernels().KIND_SATURATE
    got = P.quantize(x, fmt)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


def _stochastic_reference(v, e, rng):
    """The stochastic rounding as first written (ldexp and divisions), kept to check the
    bit-built version against."""
    v = np.asarray(v, dtype=F32)
    a = np.abs(v)
    qexp = (a.view(np.uint32) >> np.uint32(23)).view(np.int32)
    qexp -= 127
    np.maximum(qexp, e.emin, out=qexp)
    qexp -= e.man_bits
    ulp = np.ldexp(F32(1), qexp).astype(F32, copy=False)
    with np.errstate(invalid="ignore"):
        lo = a / ulp
        np.floor(lo, out=lo)
        lo *= ulp
        a -= lo
        a /= ulp
        up = rng.random(a.shape, dtype=F32) < a
    ulp *= up
    lo += ulp
    return np.copysign(lo, v, out=lo)


@pytest.mark.parametrize("fmt", formats.ELEMENT_FORMATS)
def test_stochastic_rounding_matches_the_reference_bit_for_bit(fmt):
    e = formats.ELEMS[fmt]
    x = _edge_inputs(fmt) if e.bits <= 8 else np.random.default_rng(3).integers(
        0, 2**32, 200_000, dtype=np.uint32).view(F32)
    with np.errstate(invalid="ignore"):
        v = np.clip(x, -e.max, e.max)
    ref = _stochastic_reference(v, e, np.random.default_rng(5))
    got = P.quantize(x, fmt, rounding="stochastic", rng=np.random.default_rng(5))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


# --------------------------------------------------------------------------------------------
# MX blocks
# --------------------------------------------------------------------------------------------

def test_mx_conventions_are_the_rules_implemented():
    rules = VECTORS["conventions"]["mx_rules"]
    assert "floor(log2(amax)) - emax_elem" in rules["ocp_floor"]
    assert "ceil(log2(amax/max_elem))" in rules["rceil"]
    assert "[-127, 127]" in rules["e8m0_code"]


def _block(values, n=32):
    b = np.zeros(n, F32)
    b[: len(values)] = values
    return b


def test_mxfp4_block_by_hand_both_rules():
    x = _block([7.0, 1.0, 0.3, 2.5, -5.0, 1.25])
    # OCP: floor(log2 7) = 2, emax(E2M1) = 2 -> shared exp 0, X = 1. Elements RNE on E2M1
    # {0, .5, 1, 1.5, 2, 3, 4, 6}: 7 clips to 6; 0.3 -> 0.5; 2.5 ties 2/3 -> 2 (even);
    # -5 ties 4/6 -> -4; 1.25 ties 1/1.5 -> 1.
    assert P.mx_shared_exponent(x, "mxfp4", scale_rule="ocp")[0] == 0
    np.testing.assert_array_equal(P.quantize(x, "mxfp4", scale_rule="ocp"),
                                  _block([6.0, 1.0, 0.5, 2.0, -4.0, 1.0]))
    # round-up: ceil(log2(7/6)) = 1, X = 2. x/2 = 3.5 -> 4 (tie 3/4 -> even 4) -> 8;
    # 0.5 -> 0.5 -> 1; 0.15 -> 0 (flushed); 1.25 -> 1 (tie) -> 2; -2.5 -> -2 (tie) -> -4;
    # 0.625 -> 0.5 -> 1.
    assert P.mx_shared_exponent(x, "mxfp4", scale_rule="ceil")[0] == 1
    np.testing.assert_array_equal(P.quantize(x, "mxfp4", scale_rule="ceil"),
                                  _block([8.0, 1.0, 0.0, 2.0, -4.0, 1.0]))


def test_mxfp8_block_by_hand_both_rules():
    x = _block([500.0, 1.0, 0.0009, -3.3])
    # OCP: floor(log2 500) = 8 = emax(E4M3) -> X = 1: 500 clips to 448; 1 exact;
    # 0.0009 < 2^-10 (half the min subnormal 2^-9) -> 0; -3.3 in [2, 4) step 0.25 -> -3.25.
    assert P.mx_shared_exponent(x, "mxfp8_e4m3", scale_rule="ocp")[0] == 0
    np.testing.assert_array_equal(P.quantize(x, "mxfp8_e4m3", scale_rule="ocp"),
                                  _block([448.0, 1.0, 0.0, -3.25]))
    # round-up: 500/448 = 1.116 -> X = 2^1. 250 in [128, 256) step 16 -> 256 -> 512;
    # 0.5 exact -> 1; 0.00045 -> 0; -1.65 in [1, 2) step 0.125 -> -1.625 -> -3.25.
    assert P.mx_shared_exponent(x, "mxfp8_e4m3", scale_rule="ceil")[0] == 1
    np.testing.assert_array_equal(P.quantize(x, "mxfp8_e4m3", scale_rule="ceil"),
                                  _block([512.0, 1.0, 0.0, -3.25]))


def test_mx_small_scale_and_power_of_two_amax():
    # amax = 12 = 6 * 2: both rules give X = 2 (ceil(log2 2) = 1 exactly; floor(log2 12) - 2 = 1)
    x = _block([12.0, -0.7, 3.0]) * F32(2.0**-20)
    for rule in ("ocp", "ceil"):
        assert P.mx_shared_exponent(x, "mxfp4", scale_rule=rule)[0] == 1 - 20
        # -0.7/2 = -0.35 -> -0.5 -> -1; 3/2 = 1.5 exact
        np.testing.assert_array_equal(P.quantize(x, "mxfp4", scale_rule=rule),
                                      _block([12.0, -1.0, 3.0]) * F32(2.0**-20))


def test_mx_e8m0_clamp_and_zero_block():
    tiny = _block([F32(2.0**-140), F32(2.0**-141)])  # float32 subnormals
    zero = np.zeros(32, F32)
    x = np.stack([tiny, zero])
    # OCP wants -140 - 2 = -142: clamped to -127 (E8M0 code 0); x / 2^-127 = 2^-13 -> 0
    np.testing.assert_array_equal(P.mx_shared_exponent(x, "mxfp4"), [-127, -127])
    np.testing.assert_array_equal(P.quantize(x, "mxfp4"), np.zeros_like(x))
    assert P.e8m0_encode(P.mx_shared_exponent(x, "mxfp4")).tolist() == [0, 0]


@pytest.mark.parametrize("fmt", formats.MX_FORMATS)
@pytest.mark.parametrize("rule", formats.SCALE_RULES)
def test_mx_against_float64_transcription_of_the_conventions(fmt, rule):
    # independent float64 transcription of conventions.mx_rules, on blocks of many magnitudes
    e = formats.ELEMS[formats.BLOCK[fmt][0]]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 32)) * 10.0 ** rng.uniform(-6, 6, (64, 1))).astype(F32)
    amax = np.abs(x.astype(np.float64)).max(axis=1, keepdims=True)
    if rule == "ocp":
        s = np.floor(np.log2(amax)) - e.emax
    else:
        s = np.ceil(np.log2(amax / e.max))
    s = np.clip(s, -127, 127)
    v = np.clip(x / 2.0**s, -e.max, e.max)
    expected = v.astype(e.dtype).astype(np.float64) * 2.0**s
    np.testing.assert_array_equal(P.mx_shared_exponent(x, fmt, scale_rule=rule), s[:, 0])
    np.testing.assert_array_equal(P.quantize(x, fmt, scale_rule=rule), expected.astype(F32))


def test_mx_rule_ceil_never_clips_ocp_may():
    x = P.make_tensor("gaussian", (32, 256), seed=1)
    _, lim_ceil = P.quantize_with_limit(x, "mxfp8_e4m3", scale_rule="ceil")
    _, lim_ocp = P.quantize_with_limit(x, "mxfp8_e4m3", scale_rule="ocp")
    assert P.error_stats(x, x, limit=lim_ceil)["sat_share"] == 0
    assert P.error_stats(x, x, limit=lim_ocp)["sat_share"] > 0  # amax/X reaches 2^9 > 448


# --------------------------------------------------------------------------------------------
# NVFP4
# --------------------------------------------------------------------------------------------

def _nvfp4_float64(x: np.ndarray) -> np.ndarray:
    """Paper formulas (arXiv 2509.25149 App. B) in float64, blocks of 16 along the last axis."""
    x64 = x.astype(np.float64).reshape(-1, 16)
    s_enc = 6 * 448 / np.abs(x64).max()
    amax_b = np.abs(x64).max(axis=1, keepdims=True)
    s_dec = np.clip(amax_b / 6 * s_enc, 0, 448).astype(ml_dtypes.float8_e4m3fn)
    s_dec = s_dec.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(s_dec > 0, x64 / (s_dec / s_enc), 0)
    q = np.clip(v, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    return (q * s_dec / s_enc).reshape(x.shape)


def _nvfp4_float32_loop(x: np.ndarray) -> np.ndarray:
    """The JSON's float32 TE order, one block at a time (reference for the vectorized code)."""
    blocks = x.reshape(-1, 16)
    amax_t = F32(np.abs(x).max())
    s_enc = F32(2688) / amax_t
    out = np.empty_like(blocks)
    for i, b in enumerate(blocks):
        s_dec = F32(F32(F32(np.abs(b).max()) / F32(6)) * s_enc)
        s_dec = F32(np.array(min(s_dec, F32(448))).astype(ml_dtypes.float8_e4m3fn))
        if s_dec == 0:
            out[i] = np.copysign(F32(0), b)
            continue
        s_enc_b = F32(1) / F32(s_dec * (F32(1) / s_enc))
        q = np.clip(b * s_enc_b, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(F32)
        out[i] = (q * s_dec) / s_enc
    return out.reshape(x.shape)


def test_nvfp4_convention_text():
    c = VECTORS["conventions"]["nvfp4"]
    for piece in ("6*448/amax_tensor", "e4m3_rne(amax_b/6 * s_enc)",
                  "1/(s_dec_b_e4m3 * (1/s_enc))", "x_hat = q_i * s_dec_b_e4m3 / s_enc"):
        assert piece in c


def test_nvfp4_blocks_by_hand():
    # Tensor amax 2688 -> s_enc = 6*448/2688 = 1 exactly, so block scales are plain E4M3.
    b0 = _block([2688.0, 100.0], 16)  # s_dec = 448; 100/448 = 0.223 -> 0 (below 0.25)
    b1 = _block([12.0, 5.0, -0.7], 16)  # s_dec = 12/6 = 2: 2.5 -> 2 (tie) -> 4; -.35 -> -.5 -> -1
    b2 = _block([7.0, 3.0], 16)  # 7/6 = 1.167 -> E4M3 1.125; 7/1.125 = 6.22 clips to 6 -> 6.75;
    #                              3/1.125 = 2.667 -> 3 -> 3.375
    b3 = _block([0.012, 0.001], 16)  # 0.002 -> E4M3 subnormal 2^-9; 0.012*512 = 6.14 -> 6
    #                                  -> 6*2^-9 = 0.01171875; 0.512 -> 0.5 -> 2^-10
    b4 = _block([0.001, -0.0005], 16)  # 0.001/6 = 1.7e-4 < 2^-10: scale 0, block flushes
    x = np.concatenate([b0, b1, b2, b3, b4]).astype(F32)
    s_dec, s_enc = P.nvfp4_scales(x)
    assert s_enc == 1.0
    np.testing.assert_array_equal(s_dec, F32([448, 2, 1.125, 2.0**-9, 0]))
    expected = np.concatenate([
        _block([2688.0, 0.0], 16), _block([12.0, 4.0, -1.0], 16), _block([6.75, 3.375], 16),
        _block([0.01171875, 2.0**-10], 16), _block([0.0, -0.0], 16)]).astype(F32)
    got = P.quantize(x, "nvfp4")
    np.testing.assert_array_equal(got, expected)
    assert np.signbit(got[65])  # the flushed -0.0005 keeps its sign
    # b2's 7 is clipped by the scale rounding: its limit 6 * 1.125 = 6.75 < 7
    _, lim = P.quantize_with_limit(x, "nvfp4")
    assert lim[32] == 6.75 and np.isinf(lim[64])


def test_nvfp4_flush_of_a_small_block_in_a_large_tensor():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 64)).astype(F32)
    x[0, 0] = 1e4  # tensor amax
    x[2, 16:32] *= F32(1e-6)  # block amax ~ 2e-6: amax_b/6 * 2688/1e4 << 2^-10
    q = P.quantize(x, "nvfp4")
    assert np.all(q[2, 16:32] == 0)
    assert np.all(q[2, :16] != 0) or np.count_nonzero(q[2, :16]) > 8  # neighbours survive
    assert P.error_stats(x, q)["zero_share"] >= 16 / x.size


def test_nvfp4_matches_float32_reference_loop_exactly():
    x = P.make_tensor("outlier_channels", (16, 256), seed=11)
    x[3, 32:48] *= F32(1e-7)  # include a flushed block
    np.testing.assert_array_equal(P.quantize(x, "nvfp4"), _nvfp4_float32_loop(x))


def test_nvfp4_matches_paper_formulas_in_float64():
    x = P.make_tensor("student_t", (64, 256), seed=2)
    got = P.quantize(x, "nvfp4").astype(np.float64)
    ref = _nvfp4_float64(x)
    # float32 (TE order) and float64 differ by float32 rounding of s_enc and of the final
    # division (a few 1e-7), and by a whole E2M1 step only where the scaled element lands
    # within that rounding of a tie: rare, and one step of the block at most
    assert np.mean(np.isclose(got, ref, rtol=1e-6, atol=0)) > 0.999
    s_dec, s_enc = P.nvfp4_scales(x)
    step = np.repeat(2 * s_dec / s_enc, 16).reshape(x.shape)
    assert np.all(np.abs(got - ref) <= step * (1 + 1e-6))


def test_nvfp4_2d_weights_are_transpose_consistent():
    w = P.make_tensor("gaussian", (64, 32), seed=4)
    a = P.quantize(w, "nvfp4", block_size=(16, 16))
    b = P.quantize(w.T, "nvfp4", block_size=(16, 16)).T
    np.testing.assert_array_equal(a, b)
    # 1x16 blocks along rows vs along columns do differ
    assert not np.array_equal(P.quantize(w, "nvfp4"), P.quantize(w.T, "nvfp4").T)


def test_nvfp4_all_zero_tensor():
    np.testing.assert_array_equal(P.quantize(np.zeros((2, 32), F32), "nvfp4"), 0)


# --------------------------------------------------------------------------------------------
# Stochastic rounding
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["fp4_e2m1", "fp8_e4m3", "fp8_e5m2", "bf16"])
def test_stochastic_rounding_unbiased(fmt):
    grid = formats.representable_values(fmt)
    # points between neighbours at several binades, both signs, and a subnormal one
    i = np.array([1, 3, len(grid) // 2, len(grid) - 3])
    frac = np.array([0.3, 0.5, 0.9, 0.15])
    x = (grid[i] + frac * (grid[i + 1] - grid[i])).astype(F32)
    x = np.concatenate([x, -x])
    n = 20_000
    draws = P.quantize(np.broadcast_to(x, (n, x.size)), fmt, rounding="stochastic",
                       rng=np.random.default_rng(0))
    lo = np.concatenate([grid[i], -grid[i]])
    hi = np.concatenate([grid[i + 1], -grid[i + 1]])
    assert np.all((draws == lo) | (draws == hi))  # only the two neighbours
    p = np.concatenate([frac, frac])
    # mean of a two-point variable: tolerance 5 standard errors (fixed seed)
    se = np.abs(hi - lo) * np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(draws.astype(np.float64).mean(axis=0) - x) < 5 * se)


def test_stochastic_rounding_is_deterministic_and_needs_a_generator():
    x = P.make_tensor("gaussian", (4, 32), seed=0)
    a = P.quantize(x, "nvfp4", rounding="stochastic", rng=np.random.default_rng(9))
    b = P.quantize(x, "nvfp4", rounding="stochastic", rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, P.quantize(x, "nvfp4"))
    with pytest.raises(ValueError, match="Generator"):
        P.quantize(x, "nvfp4", rounding="stochastic")
    with pytest.raises(ValueError, match="rounding"):
        P.quantize(x, "nvfp4", rounding="down")


def test_stochastic_rounding_in_mx_block_is_unbiased():
    x = np.tile(_block([6.0, 0.7, -0.2]), (20_000, 1))  # X = 1 under the OCP rule
    q = P.quantize(x, "mxfp4", rounding="stochastic", rng=np.random.default_rng(1))
    assert abs(q[:, 1].mean() - 0.7) < 5 * 0.5 * np.sqrt(0.4 * 0.6 / 20_000)
    assert abs(q[:, 2].mean() + 0.2) < 5 * 0.5 * np.sqrt(0.4 * 0.6 / 20_000)
    assert np.all(q[:, 0] == 6)


# --------------------------------------------------------------------------------------------
# format_info and errors
# --------------------------------------------------------------------------------------------

def test_format_info_bits():
    bits = {f: formats.format_info(f).bits_per_element for f in formats.FORMATS}
    assert bits["mxfp8_e4m3"] == bits["mxfp8_e5m2"] == 8.25
    assert bits["mxfp6_e3m2"] == bits["mxfp6_e2m3"] == 6.25
    assert bits["mxfp4"] == 4.25
    assert bits["nvfp4"] == 4.5
    assert bits["bf16"] == 16 and bits["fp8_e4m3"] == 8 and bits["fp4_e2m1"] == 4
    info = formats.format_info("nvfp4")
    assert (info.block_size, info.element_format, info.max_finite) == (16, "fp4_e2m1", 6.0)
    assert formats.format_info("mxfp4").scale_format == "e8m0"
    assert formats.format_info("fp8_e4m3").dynamic_range_binades == pytest.approx(math.log2(448) + 9)
    assert len(formats.FORMATS) == 13


def test_unknown_format_lists_valid_ones():
    with pytest.raises(ValueError) as e:
        P.quantize(np.ones(4), "fp3")
    assert all(f in str(e.value) for f in formats.FORMATS)
    with pytest.raises(ValueError, match="valid formats"):
        formats.format_info("int8")


def test_bad_block_size_names_sizes():
    with pytest.raises(ValueError, match=r"block size 32 .* length 48"):
        P.quantize(np.ones((2, 48), F32), "mxfp4")
    with pytest.raises(ValueError, match=r"block size 16 .* length 24"):
        P.quantize(np.ones((2, 24), F32), "nvfp4")
    with pytest.raises(ValueError, match=r"\(16, 16\) .* \(24, 32\)"):
        P.quantize(np.ones((24, 32), F32), "nvfp4", block_size=(16, 16))
    with pytest.raises(ValueError, match="block_size applies"):
        P.quantize(np.ones(32), "fp8_e4m3", block_size=32)
    with pytest.raises(ValueError, match="scale_rule"):
        P.quantize(np.ones(32), "mxfp4", scale_rule="floor")
    with pytest.raises(ValueError, match="128"):
        P.quantize_128x128(np.ones((64, 128), F32))


# --------------------------------------------------------------------------------------------
# Non-finite inputs (documented in the module docstring)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_nan_propagates_elementwise(fmt):
    x = np.linspace(-3, 3, 64, dtype=F32).reshape(2, 32)
    x[0, 5] = np.nan
    q = P.quantize(x, fmt)
    assert np.isnan(q[0, 5]) and np.isnan(q).sum() == 1
    x0 = x.copy()
    x0[0, 5] = 0
    np.testing.assert_array_equal(np.delete(q.ravel(), 5),
                                  np.delete(P.quantize(x0, fmt).ravel(), 5))


@pytest.mark.parametrize("fmt", formats.ELEMENT_FORMATS)
def test_inf_saturates_in_plain_formats(fmt):
    mx = F32(formats.format_info(fmt).max_finite)
    np.testing.assert_array_equal(P.quantize(np.array([np.inf, -np.inf], F32), fmt), [mx, -mx])


def test_inf_without_saturation_follows_ieee():
    x = np.array([np.inf, -np.inf], F32)
    np.testing.assert_array_equal(P.quantize(x, "bf16", saturate=False), x)
    np.testing.assert_array_equal(P.quantize(x, "fp8_e5m2", saturate=False), x)
    assert np.isnan(P.quantize(x, "fp8_e4m3", saturate=False)).all()
    np.testing.assert_array_equal(P.quantize(x, "fp4_e2m1", saturate=False), [6, -6])


@pytest.mark.parametrize("fmt", formats.MX_FORMATS + ("nvfp4",))
def test_inf_raises_in_scaled_formats(fmt):
    x = np.ones(32, F32)
    x[3] = np.inf
    with pytest.raises(ValueError, match="inf"):
        P.quantize(x, fmt)


def test_inf_raises_in_tensor_scaling():
    x = np.ones((1, 128), F32)
    x[0, 1] = -np.inf
    with pytest.raises(ValueError, match="inf"):
        P.quantize_per_tensor(x)
    with pytest.raises(ValueError, match="inf"):
        P.quantize_1x128(x)


# --------------------------------------------------------------------------------------------
# FP8 tensor scaling recipes
# --------------------------------------------------------------------------------------------

def test_per_tensor_current_scaling():
    x = np.array([0.5, -3.0, 0.001], F32)
    # scale = 448/3: amax maps onto 448; the result divides back
    q = P.quantize_per_tensor(x)
    assert q[1] == pytest.approx(-3.0, rel=1e-6)
    s = F32(448 / 3.0)
    exp = (np.clip(x * s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(F32)) / s
    np.testing.assert_array_equal(q, exp)
    # margin 1 halves the scale; a stale (smaller) amax clips
    _, lim = P.quantize_per_tensor(x, amax=1.0, return_limit=True)
    assert P.error_stats(x, q, limit=lim)["sat_share"] == pytest.approx(1 / 3)


def test_delayed_scaler_uses_history():
    ds = P.DelayedScaler("fp8_e4m3", history_len=3)
    x1 = np.full(8, 2.0, F32)
    np.testing.assert_array_equal(ds.quantize(x1), x1)  # scale 1: 2.0 is exact in E4M3
    assert ds.update() == pytest.approx(448 / 2.0)
    big = np.full(8, 8.0, F32)
    q, lim = ds.quantize(big, return_limit=True)  # stale scale from amax 2: 8 clips to 2
    np.testing.assert_allclose(q, 2.0)
    assert P.error_stats(big, q, limit=lim)["sat_share"] == 1.0
    assert ds.update() == pytest.approx(448 / 8.0)
    for _ in range(2):  # 8.0 still in the 3-step window
        ds.quantize(x1)
        assert ds.update() == pytest.approx(448 / 8.0)
    ds.quantize(x1)
    assert ds.update() == pytest.approx(448 / 2.0)  # 8.0 left the window


def test_tile_scaling_1x128_and_128x128():
    x = P.make_tensor("outlier_channels", (128, 256), seed=3)
    q1 = P.quantize_1x128(x)
    # every tile's amax maps onto 448 and back: reproduced to float32 rounding
    tiles = x.reshape(128, 2, 128)
    am = np.abs(tiles).max(axis=2)
    qam = np.abs(q1.reshape(128, 2, 128)).max(axis=2)
    np.testing.assert_allclose(qam, am, rtol=1e-6)
    q2 = P.quantize_128x128(x)
    assert q2.shape == x.shape
    # finer tiles: lower error on outlier-channel activations
    assert P.error_stats(x, q1)["rel_err"] < P.error_stats(x, q2)["rel_err"]


# --------------------------------------------------------------------------------------------
# Error statistics
# --------------------------------------------------------------------------------------------

def test_error_stats_by_hand():
    x = np.array([1.0, 2.0, 0.0, -4.0])
    xq = np.array([1.0, 0.0, 0.0, -4.0])
    s = P.error_stats(x, xq, limit=3.0)
    assert s["rel_err"] == pytest.approx(2 / math.sqrt(21))
    assert s["snr_db"] == pytest.approx(10 * math.log10(21 / 4))
    assert s["zero_share"] == 0.25
    assert s["sat_share"] == 0.25
    assert math.isnan(P.error_stats(x, x)["sat_share"])
    assert P.error_stats(x, x)["snr_db"] == math.inf


def test_make_tensor_families():
    g = P.make_tensor("gaussian", (64, 1024), seed=0)
    t = P.make_tensor("student_t", (64, 1024), seed=0)
    o = P.make_tensor("outlier_channels", (64, 1024), seed=0, magnitude=1e-3)
    assert g.dtype == F32 and g.shape == (64, 1024)

    def kurt(a):
        a = a.astype(np.float64)
        return float(np.mean(a**4) / np.mean(a**2) ** 2)

    assert kurt(t) > 2 * kurt(g)
    ch = np.abs(o).max(axis=0)
    assert np.sum(ch > 10 * np.median(ch)) == 5  # 0.5% of 1024 channels, scaled 20-100x
    np.testing.assert_array_equal(g, P.make_tensor("gaussian", (64, 1024), seed=0))
    with pytest.raises(ValueError, match="distribution"):
        P.make_tensor("uniform")


@pytest.fixture(scope="module")
def table():
    return P.error_table()


def _row(table, fmt, rule, dist, mag=1.0):
    (r,) = [r for r in table if (r["format"], r["scale_rule"], r["distribution"],
                                 r["magnitude"]) == (fmt, rule, dist, mag)]
    return r


def test_error_table_shape(table):
    keys = {"format", "scale_rule", "bits", "distribution", "magnitude", "rel_err", "snr_db",
            "zero_share", "sat_share"}
    assert all(set(r) == keys for r in table)
    assert len(table) == len(P.SCHEMES) * len(P.DISTRIBUTIONS) * 3


@pytest.mark.parametrize("rule", formats.SCALE_RULES)
def test_mxfp8_beats_mxfp4_on_gaussian(table, rule):
    assert (_row(table, "mxfp8_e4m3", rule, "gaussian")["rel_err"]
            < _row(table, "mxfp4", rule, "gaussian")["rel_err"] / 3)


@pytest.mark.parametrize("dist", P.DISTRIBUTIONS)
def test_nvfp4_beats_mxfp4(table, dist):
    nv = _row(table, "nvfp4", "two_level", dist)["rel_err"]
    assert nv < min(_row(table, "mxfp4", r, dist)["rel_err"] for r in formats.SCALE_RULES)


@pytest.mark.parametrize("mag", [1e-3, 1.0, 1e3])
def test_per_tensor_fp8_flushes_more_than_1x128_on_outliers(table, mag):
    pt = _row(table, "fp8_e4m3", "tensor", "outlier_channels", mag)
    tile = _row(table, "fp8_e4m3", "1x128", "outlier_channels", mag)
    assert pt["zero_share"] > 3 * tile["zero_share"]
    assert pt["rel_err"] > tile["rel_err"]


def test_scaling_makes_error_independent_of_magnitude(table):
    # scaled formats see the same tensor at every magnitude; a plain cast does not
    for fmt, rule in (("nvfp4", "two_level"), ("fp8_e4m3", "tensor")):
        errs = [_row(table, fmt, rule, "gaussian", m)["rel_err"] for m in (1e-3, 1.0, 1e3)]
        assert max(errs) - min(errs) < 0.01 * max(errs)
    raw = [_row(table, "fp8_e4m3", "none", "gaussian", m) for m in (1e-3, 1e3)]
    assert raw[0]["zero_share"] > 0.5 and raw[1]["sat_share"] > 0.5


# --------------------------------------------------------------------------------------------
# The fused loops (precision_kernels) against numpy transcriptions, bit for bit
# --------------------------------------------------------------------------------------------

def _random_bits(n: int, seed: int) -> np.ndarray:
    """float32 from random bit patterns: every exponent, subnormals, +-inf and NaN payloads."""
    bits = np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint32)
    bits[:6] = [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFA00001, 0x00000001, 0x80000000]
    return bits.view(F32)


@pytest.mark.parametrize("saturate", [True, False])
def test_bf16_rounding_is_ml_dtypes_cast_bit_for_bit(saturate):
    """BF16 RNE on the float32 bits gives ml_dtypes' astype bits, NaN payloads and -0 included."""
    x = _random_bits(200_000, 21)
    e = formats.ELEMS["bf16"]
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.clip(x, -e.max, e.max) if saturate else x
        ref = v.astype(ml_dtypes.bfloat16).astype(F32)
    got = P.quantize(x, "bf16", saturate=saturate)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


def _e4m3_rne(v) -> np.ndarray:
    return np.minimum(v, F32(448)).astype(ml_dtypes.float8_e4m3fn).astype(F32)


def test_nvfp4_stochastic_is_the_numpy_transcription_bit_for_bit():
    """NVFP4 with stochastic rounding: the TE-order scales in numpy, then the stochastic
    reference on the scaled, clipped blocks, with the same draws (one per element, C order)."""
    x = P.make_tensor("outlier_channels", (64, 256), seed=5)
    x[3, 32:48] *= F32(1e-9)  # a block whose scale flushes to zero
    blocks = x.reshape(-1, 16)
    amax_b = np.abs(blocks).max(axis=1, keepdims=True)
    s_enc = F32(2688) / F32(amax_b.max())
    s_dec = _e4m3_rne((amax_b / F32(6)) * s_enc)
    with np.errstate(divide="ignore"):
        s_enc_b = F32(1) / (s_dec * (F32(1) / s_enc))
    s_enc_b[s_dec == 0] = 0
    v = np.clip(blocks * s_enc_b, -6, 6)
    q = _stochastic_reference(v, formats.ELEMS["fp4_e2m1"], np.random.default_rng(9))
    ref = ((q * s_dec) / s_enc).reshape(x.shape)
    got = P.quantize(x, "nvfp4", rounding="stochastic", rng=np.random.default_rng(9))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert (got[3, 32:48] == 0).all()


@pytest.mark.parametrize("fmt,rule", [("mxfp4", "ocp"), ("mxfp8_e4m3", "ceil"),
                                      ("mxfp6_e2m3", "ocp")])
def test_mx_stochastic_is_the_numpy_transcription_bit_for_bit(fmt, rule):
    e = formats.ELEMS[formats.BLOCK[fmt][0]]
    x = P.make_tensor("student_t", (32, 256), seed=4)
    x[1, :32] = 0  # an all-zero block
    blocks = x.reshape(-1, 32)
    s = P.mx_shared_exponent(x, fmt, scale_rule=rule)[:, None]
    v = np.clip(blocks * np.ldexp(F32(1), -s).astype(F32), -e.max, e.max)
    q = _stochastic_reference(v, e, np.random.default_rng(2))
    ref = (q * np.ldexp(F32(1), s).astype(F32)).reshape(x.shape)
    got = P.quantize(x, fmt, scale_rule=rule, rounding="stochastic", rng=np.random.default_rng(2))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("rounding", ["rne", "stochastic"])
def test_per_tensor_and_tile_scaling_are_the_numpy_transcription_bit_for_bit(rounding):
    """x * scale, clipped to +-448, rounded, divided by the same scale (tensor and 1x128 tiles)."""
    e = formats.ELEMS["fp8_e4m3"]
    x = P.make_tensor("outlier_channels", (16, 512), seed=8)

    def ref(v, scale):
        v = np.clip(v * scale, -e.max, e.max)
        if rounding == "rne":
            q = v.astype(e.dtype).astype(F32)
        else:
            q = _stochastic_reference(v, e, np.random.default_rng(6))
        return q / scale

    kw = {"rounding": rounding, "rng": np.random.default_rng(6)}
    scale = F32(F32(e.max) / F32(np.abs(x).max()))
    got = P.quantize_per_tensor(x, **kw)
    assert np.array_equal(got.view(np.uint32), ref(x, scale).view(np.uint32))
    tiles = x.reshape(-1, 128)
    kw["rng"] = np.random.default_rng(6)
    want = ref(tiles, F32(e.max) / np.abs(tiles).max(axis=1, keepdims=True)).reshape(x.shape)
    assert np.array_equal(P.quantize_1x128(x, **kw).view(np.uint32), want.view(np.uint32))
