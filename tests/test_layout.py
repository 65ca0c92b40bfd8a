"""Layouts: validation rules, struct-of-arrays, rank placement."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaletax.inputs import models
from scaletax.inputs.layout import (RECOMPUTE_CODE, Layout, LayoutArray, group_strides, members_per_domain)

DS = models.get("deepseek_v3")
L405 = models.get("llama31_405b")


def test_defaults_and_derived():
    lay = Layout(tp=8, pp=8, cp=2, gpus=8192)
    assert lay.dp == 64 and lay.gpus == 8192
    assert lay.sequence_parallel and lay.etp == 8 and lay.zero_stage == 1 and lay.recompute == "none"
    assert lay.gbs == 1 * 64 * 8 and lay.n_micro == 8
    one = Layout(tp=1, dp=8, sequence_parallel=True)
    assert not one.sequence_parallel  # SP needs TP
    moe = Layout(tp=2, pp=8, ep=64, vp=4, dp=64, gbs=8192)
    assert moe.edp == 1 and moe.n_micro == 128
    assert moe.replace(tp=1, dp=128).edp == 2


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=2, dp=2, gpus=8), "gpus"),
    (dict(tp=1, dp=4, mbs=2, gbs=12), "gbs"),
    (dict(tp=1, dp=4, ep=8), "ep"),
    (dict(tp=3, pp=5, gpus=16), "gpus"),
    (dict(tp=0, dp=1), "tp"),
    (dict(tp=1, dp=1, zero_stage=4), "zero_stage"),
    (dict(tp=1, dp=1, recompute="some"), "recompute"),
])
def test_structural_errors_name_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Layout(**kwargs)


@pytest.mark.parametrize("model, kwargs, field", [
    (L405, dict(tp=3, dp=1), "tp"),          # heads % tp
    (models.get("qwen3_235b_a22b"), dict(tp=8, dp=1), "tp"),  # kv_heads=4 % tp
    (L405, dict(tp=1, pp=127, dp=1), "pp"),
    (L405, dict(tp=1, pp=16, vp=9, dp=1), "vp"),
    (L405, dict(tp=1, cp=3, dp=1), "cp"),
    (DS, dict(tp=1, ep=3, dp=3), "ep"),      # 256 experts % 3
    (L405, dict(tp=1, ep=2, dp=2), "ep"),    # ep on a dense model
])
def test_model_rules_name_field(model, kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        Layout(**kwargs).check(model)


def test_published_style_layouts_are_valid():
    Layout(tp=8, pp=8, cp=2, vp=8, dp=64, gbs=1536).check(L405)  # 126 layers on 64 chunks (+emb, loss)
    Layout(tp=4, pp=16, vp=8, dp=4, gbs=1536).check(L405)       # 128 chunks = 126 layers + 2
    Layout(tp=2, pp=8, ep=64, vp=4, dp=64, gbs=8192).check(DS)


def test_from_layouts_roundtrip():
    lays = [Layout(tp=2, pp=8, ep=64, vp=4, dp=64, gbs=8192, recompute="full"),
            Layout(tp=1, dp=8, zero_stage=3, mbs=2, gbs=128, recompute="selective")]
    arr = LayoutArray.from_layouts(lays)
    assert len(arr) == 2 and arr.recompute.tolist() == [2, 1]
    assert arr.to_layouts() == lays
    assert arr[1].layout(0) == lays[1]
    assert arr.gpus.tolist() == [1024, 8] and arr.edp.tolist() == [1, 8]
    with pytest.raises(AttributeError):
        arr.tp = np.array([1, 1])


def test_from_arrays_broadcast_and_names():
    arr = LayoutArray.from_arrays(tp=np.array([1, 2, 4]), pp=2, dp=4, recompute="full")
    assert len(arr) == 3 and (arr.recompute == 2).all() and arr.sp.tolist() == [0, 1, 1]
    assert arr.etp.tolist() == [1, 2, 4] and arr.gbs.tolist() == [8, 8, 8]
    names = LayoutArray.from_arrays(tp=1, pp=1, dp=1, recompute=np.array(["none", "selective"]))
    assert names.recompute.tolist() == [0, 1]


layout_st = st.builds(
    dict, tp=st.sampled_from([1, 2, 3, 4, 8, 16]), pp=st.sampled_from([1, 2, 4, 7, 8, 16, 62, 64]),
    cp=st.sampled_from([1, 2, 3]), ep=st.sampled_from([1, 2, 3, 8, 32, 64]), dp=st.integers(1, 128),
    vp=st.sampled_from([1, 2, 4, 8]), mbs=st.sampled_from([1, 2]), gbs_mult=st.integers(1, 4))


@settings(max_examples=150, deadline=None)
@given(st.lists(layout_st, min_size=1, max_size=8), st.sampled_from(["deepseek_v3", "llama31_405b", "kimi_k2"]))
def test_valid_mask_equals_scalar_check(specs, mid):
    model = models.get(mid)
    rows = []
    for s in specs:
        rows.append(dict(tp=s["tp"], pp=s["pp"], cp=s["cp"], ep=s["ep"], etp=s["tp"], dp=s["dp"], vp=s["vp"],
                         mbs=s["mbs"], gbs=s["mbs"] * s["dp"] * s["gbs_mult"], sp=int(s["tp"] > 1),
                         zero_stage=1, recompute=0))
    arr = LayoutArray(**{k: np.array([r[k] for r in rows]) for k in rows[0]})
    mask = arr.valid_mask(model)
    for i, r in enumerate(rows):
        try:
            Layout(tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r["ep"], dp=r["dp"], vp=r["vp"], mbs=r["mbs"],
                   gbs=r["gbs"]).check(model)
            ok = True
        except ValueError:
            ok = False
        assert mask[i] == ok, r


def test_valid_mask_rejects_nonpositive_and_gpu_mismatch():
    arr = LayoutArray.from_arrays(tp=np.array([0, 1, 2]), pp=1, dp=4)
    assert arr.valid_mask(L405).tolist() == [False, True, True]
    assert arr.valid_mask(L405, gpus=8).tolist() == [False, False, True]
    reasons = arr.reasons(L405, gpus=8)
    assert any(v[1] for k, v in reasons.items() if k.startswith("gpus"))


def test_group_strides_rank_order():
    lay = Layout(tp=8, pp=4, cp=2, dp=16, ep=16, etp=1)
    g = group_strides(lay)
    assert g["tp"] == (8, 1) and g["cp"] == (2, 8) and g["dp"] == (16, 16)
    assert g["dp_cp"] == (32, 8) and g["pp"] == (4, 256)
    assert g["etp"] == (1, 1) and g["ep"] == (16, 1) and g["edp"] == (16, 16)
    arr = LayoutArray.from_layouts([lay, Layout(tp=4, dp=2)])
    ga = group_strides(arr)
    for k, (size, stride) in g.items():
        assert ga[k][0][0] == size and ga[k][1][0] == stride


def test_members_per_domain():
    # tp=8 inside an 8-GPU node; dp with stride 8 spreads one member per node
    assert members_per_domain(8, 1, 8) == 8
    assert members_per_domain(16, 8, 8) == 1
    # NVL72: 9 dp members of stride 8 share a domain; ep 64 contiguous fits
    assert members_per_domain(16, 8, 72) == 9
    assert members_per_domain(64, 1, 72) == 64
    out = members_per_domain(np.array([8, 64]), np.array([1, 1]), 8)
    assert out.tolist() == [8, 8]


def test_recompute_codes():
    assert RECOMPUTE_CODE == {"none": 0, "selective": 1, "full": 2}
