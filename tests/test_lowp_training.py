"""Tests for scaletax.model.lowp_training: plumbing, determinism and the FP4 mechanisms at tiny size."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scaletax.model import lowp_training as L

TINY = L.TaskConfig(vocab=32, embed_dim=16, width=32, batch=64, steps=8, eval_size=256)
SMALL = L.TaskConfig(width=64, batch=128, steps=150)


def test_named_recipes():
    assert set(L.DEFAULT_RECIPES) <= set(L.RECIPES)
    assert set(L.DEFAULT_RECIPES) == {"bf16", "fp8_tensor", "mxfp8", "nvfp4", "nvfp4_no_sr",
                                      "nvfp4_no_bf16_last", "nvfp4_no_2d", "nvfp4_naive",
                                      "mxfp4"}
    full, R = L.RECIPES["nvfp4"], L.RECIPES
    assert full.sr_grads and full.bf16_last_layers == 1 and full.weight_2d
    assert R["nvfp4_no_sr"] == replace(full, name="nvfp4_no_sr", sr_grads=False)
    assert R["nvfp4_no_bf16_last"] == replace(full, name="nvfp4_no_bf16_last",
                                              bf16_last_layers=0)
    assert R["nvfp4_no_2d"] == replace(full, name="nvfp4_no_2d", weight_2d=False)
    naive = R["nvfp4_naive"]
    assert not (naive.sr_grads or naive.bf16_last_layers or naive.weight_2d
                or naive.hadamard_wgrad)
    assert (R["fp8_tensor"].fwd_fmt, R["fp8_tensor"].grad_fmt) == ("fp8_e4m3", "fp8_e5m2")
    assert R["fp8_tensor"].scaling == "tensor"


def test_recipe_validation():
    with pytest.raises(ValueError, match="unknown format"):
        L.Recipe("x", fwd_fmt="fp5")
    with pytest.raises(ValueError, match="per-tensor"):
        L.Recipe("x", "nvfp4", "nvfp4", scaling="tensor")
    with pytest.raises(ValueError, match="scale_rule"):
        L.Recipe("x", "mxfp4", "mxfp4", scale_rule="floor")


@pytest.mark.parametrize("name", list(L.RECIPES))
def test_tiny_run_of_every_recipe(name):
    r = L.train(name, seed=0, cfg=TINY)
    assert r.recipe == name and r.curve.shape == (TINY.steps,)
    assert np.isfinite(r.curve).all() and np.isfinite(r.final_loss)
    assert r.curve[0] == pytest.approx(np.log(TINY.vocab), rel=1e-5)  # zero-init output layer
    assert 0 < r.bayes_loss < np.log(TINY.vocab)


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="named recipes: bf16"):
        L.train("fp3", cfg=TINY)
    with pytest.raises(ValueError, match="unknown TaskConfig field"):
        L.run_experiment(["bf16"], seeds=(0,), cfg=TINY, stepz=3)


def test_block_size_must_divide_the_sizes():
    with pytest.raises(ValueError, match="block size 32"):
        L.train("mxfp8", cfg=replace(TINY, batch=48))


def test_deterministic_for_a_seed():
    a = L.train("nvfp4", seed=3, cfg=TINY)  # stochastic rounding included
    b = L.train("nvfp4", seed=3, cfg=TINY)
    np.testing.assert_array_equal(a.curve, b.curve)
    assert a.final_loss == b.final_loss
    c = L.train("nvfp4", seed=4, cfg=TINY)
    assert not np.array_equal(a.curve, c.curve)


def _grads(recipe, cfg, dtype):
    task = L.make_task(cfg)
    x, y, _ = L._sample(task, cfg, cfg.batch, np.random.default_rng(0))
    model = L._Model(cfg, np.random.default_rng(1))
    model.W[-1] = np.random.default_rng(2).standard_normal(model.W[-1].shape) * 0.1
    model.W = [w.astype(dtype) for w in model.W]
    model.b = [b.astype(dtype) for b in model.b]
    x = x.astype(dtype)
    q = L._Quantizer(recipe, np.random.default_rng(3))
    rht = (np.random.default_rng(4).choice([-1.0, 1.0], 16)[:, None] * L._hadamard(16))

    def loss(m):
        return L._xent(L._forward(m, x, q, recipe, keep=False)[0], y)[0]

    logits, cache = L._forward(model, x, q, recipe, keep=True)
    _, d = L._xent(logits, y)
    return model, loss, L._backward(model, cache, d, q, recipe, rht)


def test_backward_matches_finite_differences():
    fp32 = L.Recipe("fp32", "fp32", "fp32")
    model, loss, grads = _grads(fp32, TINY, np.float64)
    params = model.params()
    rng = np.random.default_rng(5)
    dirs = [rng.standard_normal(p.shape) for p in params]
    eps = 1e-4
    for p, d in zip(params, dirs):
        p += eps * d
    up = loss(model)
    for p, d in zip(params, dirs):
        p -= 2 * eps * d
    down = loss(model)
    numeric = (up - down) / (2 * eps)
    analytic = sum(float(np.sum(g * d)) for g, d in zip(grads, dirs))
    assert analytic == pytest.approx(numeric, rel=1e-4)


def test_hadamard_on_wgrad_is_exact_in_full_precision():
    h = L._hadamard(16)
    np.testing.assert_allclose(h @ h.T, np.eye(16), atol=1e-12)
    fp32 = L.Recipe("fp32", "fp32", "fp32")
    _, _, g0 = _grads(fp32, TINY, np.float64)
    _, _, g1 = _grads(replace(fp32, hadamard_wgrad=True), TINY, np.float64)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_quantized_gemm_operands_differ_from_full_precision():
    fp32 = L.Recipe("fp32", "fp32", "fp32")
    _, _, g0 = _grads(fp32, TINY, np.float32)
    _, _, g1 = _grads(L.RECIPES["nvfp4_naive"], TINY, np.float32)
    rel = [np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in zip(g0[:3], g1[:3])]
    assert all(0.01 < r < 1.0 for r in rel)  # FP4 noise in every wgrad, but not garbage


def test_bf16_curve_decreases():
    r = L.train("bf16", seed=0, cfg=SMALL)
    assert r.curve[-20:].mean() < r.curve[0] - 0.5  # log(64) = 4.16 at step 0
    assert r.final_loss == pytest.approx(r.final_loss_fp32, rel=1e-3)


def test_fp4_mechanisms_show_at_small_size():
    res = L.run_experiment(["bf16", "nvfp4", "mxfp4", "nvfp4_naive"], seeds=(0,), cfg=SMALL)
    loss = {k: float(v.final_loss[0]) for k, v in res.items()}
    # fewer bits cost loss; MXFP4's power-of-two scales over 32 elements cost more than
    # NVFP4's E4M3 scales over 16; without SR and BF16 last layer the FP4 run blows up
    assert loss["bf16"] < loss["nvfp4"] < loss["mxfp4"] < loss["nvfp4_naive"]
    assert loss["nvfp4_naive"] > loss["nvfp4"] + 1.0


def test_run_experiment_structure_and_summary():
    res = L.run_experiment(["bf16", "fp8_tensor"], seeds=(0, 1), cfg=TINY, steps=5)
    assert list(res) == ["bf16", "fp8_tensor"]
    r = res["fp8_tensor"]
    assert r.seeds == (0, 1) and r.curves.shape == (2, 5) and r.final_loss.shape == (2,)
    assert [u.seed for u in r.runs] == [0, 1]
    rows = {row["recipe"]: row for row in L.summary(res)}
    assert rows["bf16"]["gap_pct"] == 0.0
    b, f = res["bf16"].final_loss, r.final_loss
    assert rows["fp8_tensor"]["gap_pct"] == pytest.approx(float(np.mean((f - b) / b * 100)))
    assert rows["fp8_tensor"]["final_loss_std"] == pytest.approx(float(np.std(f, ddof=1)))


def test_each_recipe_element_changes_the_run():
    # same seed, same data: the first loss agrees (zero-init output), the runs then part
    base = L.train("nvfp4", seed=0, cfg=TINY)
    for name in ("nvfp4_no_sr", "nvfp4_no_bf16_last", "nvfp4_no_2d", "nvfp4_rht"):
        other = L.train(name, seed=0, cfg=TINY)
        assert other.curve[0] == base.curve[0]
        assert not np.array_equal(other.curve, base.curve), name
