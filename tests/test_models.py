"""Architectures: catalog, parameter counts against published totals, FLOPs conventions."""
import csv

import pytest

from scaletax import DATA_DIR
from scaletax.inputs import models
from scaletax.inputs.models import Model

MOE_IDS = ("deepseek_v3", "kimi_k2", "qwen3_235b_a22b", "gpt_oss_120b")
REQUIRED_IDS = ("gpt3_175b", "llama31_8b", "llama31_70b", "llama31_405b", "megatron_1t", *MOE_IDS)


def test_catalog_has_required_models_with_sources():
    ids = models.ids()
    for mid in REQUIRED_IDS:
        assert mid in ids
        m = models.get(mid)
        assert m.source and m.published_total_params_b
    assert models.DENSE_1T in ids and models.MOE_1T in ids
    assert models.get(models.MOE_1T).is_moe and not models.get(models.DENSE_1T).is_moe


@pytest.mark.parametrize("mid", models.ids())
def test_total_params_match_published_within_2pct(mid):
    m = models.get(mid)
    assert m.total_params / 1e9 == pytest.approx(m.published_total_params_b, rel=0.02)


@pytest.mark.parametrize("mid", MOE_IDS)
def test_moe_active_params_match_published_within_2pct(mid):
    m = models.get(mid)
    assert m.active_params / 1e9 == pytest.approx(m.published_active_params_b, rel=0.02)


def test_headline_moe_counts():
    ds, k2 = models.get("deepseek_v3"), models.get("kimi_k2")
    assert ds.total_params == pytest.approx(671e9, rel=0.02) and ds.active_params == pytest.approx(37e9, rel=0.02)
    assert k2.total_params == pytest.approx(1.04e12, rel=0.02) and k2.active_params == pytest.approx(32e9, rel=0.02)
    # gpt-oss model card gives the exact figures of our convention (no input embedding)
    oss = models.get("gpt_oss_120b")
    assert oss.total_params == pytest.approx(116.83e9, rel=1e-3)
    assert oss.active_params == pytest.approx(5.13e9, rel=2e-3)


def test_breakdown_sums_and_active_convention():
    for mid in models.ids():
        m = models.get(mid)
        b = m.param_breakdown()
        assert sum(b.values()) == m.total_params
        if not m.is_moe and not m.tied_embeddings:
            # dense, untied: active = total minus the input-embedding gather
            assert m.active_params == m.total_params - m.embedding_params


def test_gpt3_layer_params_are_12h2_plus_13h():
    m = models.get("gpt3_175b")
    h = m.hidden
    assert m.dense_layer_params == 12 * h * h + 13 * h


def test_narayanan_flops_formula_full_recompute():
    # Narayanan et al. 2021 eq. 3 per token: 96 l h^2 (1 + s/(6h) + V/(16 l h)) (non-causal)
    m = models.get("megatron_1t")
    L, h, s, V = m.layers, m.hidden, m.seq_len, m.vocab
    ref = 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert m.hardware_flops_per_token("full", causal=False) == pytest.approx(ref, rel=1e-3)
    ref_model = 72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert m.model_flops_per_token(causal=False) == pytest.approx(ref_model, rel=1e-3)


def test_flops_causal_attention_term():
    m = models.get("llama31_70b")
    s = m.seq_len
    assert m.model_flops_per_token() == pytest.approx(6 * m.active_params + 6 * m.layers * m.hidden * s)
    assert m.attn_flops_per_token(causal=False) == 2 * m.attn_flops_per_token()
    assert m.attn_flops_per_token(seq_len=2 * s) == 2 * m.attn_flops_per_token()


@pytest.mark.parametrize("mid", models.ids())
def test_hardware_flops_ordering(mid):
    m = models.get(mid)
    none, sel, full = (m.hardware_flops_per_token(r) for r in ("none", "selective", "full"))
    assert none == m.model_flops_per_token() < sel < full
    assert full < 4 / 3 * none * 1.001  # one extra forward at most


def test_mla_selective_includes_up_projection():
    m = models.get("deepseek_v3")
    extra = m.hardware_flops_per_token("selective") - m.model_flops_per_token()
    assert extra == pytest.approx(m.layers * (m.attn_flops_per_token() + 2 * m.mla_up_proj_params))


def test_validation_errors_name_the_field():
    base = dict(layers=2, hidden=64, heads=8, ffn_hidden=256, vocab=100, seq_len=32)
    with pytest.raises(ValueError, match="kv_heads"):
        Model(**base, kv_heads=3)
    with pytest.raises(ValueError, match="moe_top_k"):
        Model(**base, moe_experts=4, moe_top_k=5, moe_ffn_hidden=32)
    with pytest.raises(ValueError, match="kv_lora_rank"):
        Model(**base, attention="mla")
    with pytest.raises(ValueError, match="layers"):
        Model(**{**base, "layers": 0})
    with pytest.raises(ValueError, match="moe_dense_layers"):
        Model(**base, moe_experts=4, moe_top_k=1, moe_ffn_hidden=32, moe_dense_layers=2)
    with pytest.raises(ValueError, match="head_dim"):
        Model(**{**base, "hidden": 60})
    with pytest.raises(ValueError, match="recompute"):
        models.get("gpt3_175b").hardware_flops_per_token("some")


def test_get_unknown_lists_ids():
    with pytest.raises(ValueError, match="megatron_1t"):
        models.get("gpt5")


def test_catalog_file_errors(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("models:\n  x:\n    layers: 2\n    hidden: 64\n    heads: 8\n    ffn_hidden: 256\n"
                 "    vocab: 10\n    seq_len: 8\n")
    with pytest.raises(models.ModelCatalogError, match="source"):
        models.load_catalog(p)
    p.write_text("models:\n  x:\n    source: here\n    layers: -2\n    hidden: 64\n    heads: 8\n"
                 "    ffn_hidden: 256\n    vocab: 10\n    seq_len: 8\n")
    with pytest.raises(models.ModelCatalogError, match="layers"):
        models.load_catalog(p)
    p.write_text("")
    with pytest.raises(models.ModelCatalogError):
        models.load_catalog(p)


def _published_rows():
    with open(DATA_DIR / "published_runs.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_from_row_matches_catalog_and_published_totals():
    for row in _published_rows():
        m = models.from_row(row)
        assert m.id, row["run_id"]
        assert m.total_params / 1e9 == pytest.approx(float(row["total_params_b"]), rel=0.02)
        cat = models.get(m.id)
        assert (m.gated, m.tied_embeddings, m.attention) == (cat.gated, cat.tied_embeddings, cat.attention)
        if m.is_moe:
            assert m.active_params / 1e9 == pytest.approx(float(row["active_params_b"]), rel=0.02)


def test_from_row_without_catalog_match():
    row = dict(layers="4", hidden="512", heads="8", kv_heads="", ffn_hidden="2048", vocab="1000",
               seq_len="128", attention="mha", moe_experts="")
    m = models.from_row(row)
    assert m.id == "" and not m.gated and m.kv_heads == 8  # ffn = 4h: plain GELU MLP
    with pytest.raises(ValueError, match="'hidden'"):
        models.from_row({**row, "hidden": "abc"})
    with pytest.raises(ValueError, match="'vocab'"):
        models.from_row({**row, "vocab": ""})
    with pytest.raises(ValueError, match="kv_lora_rank"):
        models.from_row({**row, "attention": "mla"})
    mla = models.from_row({**row, "attention": "mla", "kv_lora_rank": "64", "qk_nope_head_dim": "32",
                           "qk_rope_head_dim": "16", "v_head_dim": "32"})
    assert mla.qk_head_dim == 48
