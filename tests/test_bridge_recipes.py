"""NVIDIA's Megatron-Bridge benchmark recipes (data/bridge_recipes.csv, data/sources/bridge_recipes.py):
the ast extraction, the coverage probes that are the recipes' exact configurations, the calibration
rows that take a recipe's settings, and the ``fp8_param_gather`` runs column."""
import csv
import importlib.util
import textwrap

import pytest

from scaletax import DATA_DIR, ROOT
from scaletax.inputs import models, pipeline_layout, recipes, runs
from scaletax.model import memory, runplan
from scaletax.chapters import validation as vs

from objects import as_recipe

RECIPES_CSV = DATA_DIR / "bridge_recipes.csv"
TAG = vs.RECIPE_NOTE
GPU = {"h100": "h100_sxm", "b200": "b200", "gb200": "gb200", "b300": "b300", "gb300": "gb300"}


def _load_script():
    spec = importlib.util.spec_from_file_location("bridge_recipes", ROOT / "data" / "sources" / "bridge_recipes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def recipe_rows():
    with RECIPES_CSV.open(encoding="utf-8") as f:
        return {r["recipe"]: r for r in csv.DictReader(f)}


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))


def test_extractor_follows_base_recipes_helpers_and_branches(tmp_path):
    """A miniature package: a base recipe in recipes/, a shared helper with an ``if`` on the state,
    a keyword constructor, a recipe that starts from another recipe, and a runtime branch."""
    pkg = "megatron/bridge"
    (tmp_path / "megatron_bridge-9.9.9.dist-info").mkdir()
    _write(tmp_path, f"{pkg}/recipes/fam/base.py", '''
        SEQ: int = 8192
        def fam_7b_pretrain_config():
            cfg = ConfigContainer(model=None, train=TrainingConfig(micro_batch_size=2, global_batch_size=32),
                                  comm_overlap=None)
            cfg.model = AutoBridge.from_hf_pretrained("org/fam-7b").to_megatron_provider(load_weights=False)
            cfg.model.seq_length = SEQ
            cfg.model.recompute_granularity = None
            return cfg
    ''')
    _write(tmp_path, f"{pkg}/perf_recipes/fam/common.py", '''
        from megatron.bridge.recipes.fam.base import fam_7b_pretrain_config
        def _bench(cfg):
            if getattr(cfg.model, "moe_flex_dispatcher_backend", None) == "hybridep":
                cfg.model.cuda_graph_impl = "full_iteration"
            if torch.cuda.is_available():
                cfg.model.expert_model_parallel_size = 2
    ''')
    _write(tmp_path, f"{pkg}/perf_recipes/fam/h100/fam.py", '''
        from megatron.bridge.perf_recipes.fam.common import _bench, fam_7b_pretrain_config as base
        def fam_7b_pretrain_16gpu_h100_fp8mx_config():
            cfg = base()
            cfg.model.tensor_model_parallel_size = 2
            cfg.model.pipeline_model_parallel_size = 2
            cfg.model.recompute_granularity = "full"
            cfg.model.recompute_method = "block"
            cfg.model.recompute_num_layers = 3
            cfg.model.moe_token_dispatcher_type = "flex"
            cfg.model.moe_flex_dispatcher_backend = "hybridep"
            cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True)
            cfg.mixed_precision = _perf_precision("fp8_mx")
            _bench(cfg)
            return cfg
        def fam_7b_pretrain_32gpu_h100_fp8mx_config():
            cfg = fam_7b_pretrain_16gpu_h100_fp8mx_config()
            cfg.train.global_batch_size = 64
            cfg.model.recompute_modules = []
            return cfg
    ''')
    rows = {r["recipe"]: r for r in _load_script().extract(tmp_path)}
    a, b = rows["fam_7b_pretrain_16gpu_h100_fp8mx_config"], rows["fam_7b_pretrain_32gpu_h100_fp8mx_config"]
    assert (a["kind"], a["hf_model"], a["gpu"], a["gpu_count"], a["precision"]) == ("benchmark", "org/fam-7b", "h100",
                                                                                   "16", "mxfp8")
    assert (a["tp"], a["pp"], a["cp"], a["dp"], a["mbs"], a["gbs"], a["seq_len"]) == ("2", "2", "1", "4", "2", "32", "8192")
    assert (a["recompute_granularity"], a["recompute_method"], a["recompute_num_layers"]) == ("full", "block", "3")
    assert (a["moe_token_dispatcher_type"], a["moe_flex_dispatcher_backend"]) == ("flex", "hybridep")
    assert (a["overlap_moe_expert_parallel_comm"], a["tp_comm_overlap"], a["cuda_graph_impl"]) == ("true", "true",
                                                                                                  "full_iteration")
    # a branch on the running GPU is not guessed: the field stays unset and the branch is listed
    assert a["ep"] == "1" and "may set expert_model_parallel_size" in a["unresolved"]
    assert (b["gbs"], b["recompute_modules"], b["megatron_bridge_version"]) == ("64", "[]", "9.9.9")


def test_extractor_writes_list_layouts_in_megatrons_string_form(tmp_path):
    """A layout table keyed by (pp, vp), as Megatron-Bridge's set_deepseek_v3_pipeline_model_parallel_layout
    builds it (recipes/deepseek/h100/deepseek_v3.py:50-88), and an explicit string, kept as written."""
    pkg = "megatron/bridge"
    (tmp_path / "megatron_bridge-9.9.9.dist-info").mkdir()
    _write(tmp_path, f"{pkg}/recipes/fam/base.py", '''
        def set_layout(model_cfg, layout=None):
            if layout is not None:
                model_cfg.pipeline_model_parallel_layout = layout
                return
            mtp_layers = getattr(model_cfg, "mtp_num_layers", 1) or 0
            last_layer = ["mtp"] * mtp_layers + ["loss"]
            pp_size = model_cfg.pipeline_model_parallel_size or 1
            vp_size = model_cfg.virtual_pipeline_model_parallel_size or 1
            layout_map = {
                (1, 1): None,
                (4, 1): [["embedding"] + ["decoder"] * 4, ["decoder"] * 4, ["decoder"] * 4, ["decoder"] * 1 + last_layer],
            }
            if (pp_size, vp_size) in layout_map:
                model_cfg.pipeline_model_parallel_layout = layout_map[(pp_size, vp_size)]
        def fam_pretrain_config():
            cfg = ConfigContainer(model=None, train=TrainingConfig(micro_batch_size=1, global_batch_size=8))
            cfg.model = AutoBridge.from_hf_pretrained("org/fam").to_megatron_provider(load_weights=False)
            return cfg
    ''')
    _write(tmp_path, f"{pkg}/perf_recipes/fam/h100/fam.py", '''
        from megatron.bridge.recipes.fam.base import fam_pretrain_config, set_layout
        def fam_pretrain_32gpu_h100_bf16_config():
            cfg = fam_pretrain_config()
            cfg.model.pipeline_model_parallel_size = 4
            cfg.model.virtual_pipeline_model_parallel_size = None
            set_layout(cfg.model)
            return cfg
        def fam_pretrain_64gpu_h100_bf16_config():
            cfg = fam_pretrain_32gpu_h100_bf16_config()
            set_layout(cfg.model, "Et|(tt|)*6mL")
            return cfg
        def fam_pretrain_8gpu_h100_bf16_config():
            cfg = fam_pretrain_config()
            set_layout(cfg.model)
            return cfg
    ''')
    rows = {r["recipe"]: r for r in _load_script().extract(tmp_path)}
    assert rows["fam_pretrain_32gpu_h100_bf16_config"]["pipeline_model_parallel_layout"] == "Et*4|(t*4|)*2tmL"
    assert rows["fam_pretrain_32gpu_h100_bf16_config"]["unresolved"] == ""
    assert rows["fam_pretrain_64gpu_h100_bf16_config"]["pipeline_model_parallel_layout"] == "Et|(tt|)*6mL"
    assert rows["fam_pretrain_8gpu_h100_bf16_config"]["pipeline_model_parallel_layout"] == ""  # (1, 1): None
    # the string form reads back to the same stages
    assert pipeline_layout.expand("Et*4|(t*4|)*2tmL") == ["Etttt", "tttt", "tttt", "tmL"]


def test_every_recipe_layout_is_one_megatron_core_accepts(recipe_rows):
    """Every layout string of the CSV parses with the recipe's pp and vp, and places the model's
    layers (DeepSeek-V3 and Kimi K2: 61, data/models.yaml)."""
    layers = {"deepseek_v3": models.get("deepseek_v3").layers, "kimi_k2": models.get("kimi_k2").layers}
    seen, refused = set(), {}
    for r in recipe_rows.values():
        text = r["pipeline_model_parallel_layout"]
        if text in ("", "?"):
            continue
        try:
            lay = pipeline_layout.parse(text, int(r["pp"]), layers=layers.get(r["model"]),
                                        vp=int(r["vp"]) if r["vp"] else None)
        except pipeline_layout.LayoutError as exc:
            refused[r["recipe"]] = str(exc)
            continue
        seen.add(r["model"])
        assert lay.rank_layers("L")[-1] == 1 and lay.rank_layers("E")[0] == 1, r["recipe"]
    assert {"deepseek_v3", "kimi_k2"} <= seen
    # two development recipes state vp 2 beside a 16-stage layout on PP4, which Megatron-Core's
    # TransformerConfig refuses (megatron-core 0.19.2 transformer_config.py:1974, "conflicts with")
    assert refused == {f"deepseek_v3_pretrain_256gpu_{g}_fp8mx_partial_cg_dev_config":
                       "16 stages on pp=4 make vp=4, but the row's vp is 2 (leave vp blank to take the layout's)"
                       for g in ("gb200", "gb300")}
    assert recipe_rows["deepseek_v3_pretrain_256gpu_b200_bf16_config"]["pipeline_model_parallel_layout"] == \
        "Et*8|(t*8|)*6t*5mL"
    assert recipe_rows["deepseek_v3_pretrain_1024gpu_h100_bf16_config"]["pipeline_model_parallel_layout"] == \
        "Et|(tt|)*30mL"


def test_csv_holds_the_recipes_as_published(recipe_rows):
    """Spot values read from the 0.6.2 recipe files (perf_recipes/<family>/<gpu>/*.py)."""
    assert {r["megatron_bridge_version"] for r in recipe_rows.values()} == {"0.6.2"}
    assert sum(r["kind"] == "benchmark" for r in recipe_rows.values()) >= 400
    r = recipe_rows["llama3_8b_pretrain_8gpu_h100_fp8cs_config"]  # "8x H100, FP8 current-scaling, recompute"
    assert (r["precision"], r["tp"], r["pp"], r["cp"], r["mbs"], r["gbs"], r["seq_len"]) == ("fp8", "1", "1", "1", "1",
                                                                                          "128", "8192")
    assert (r["recompute_granularity"], r["recompute_method"], r["recompute_num_layers"]) == ("full", "block", "5")
    r = recipe_rows["qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx_config"]  # _enable_hybridep_full_iteration_mxfp8
    assert (r["ep"], r["mbs"], r["gbs"], r["moe_token_dispatcher_type"], r["moe_flex_dispatcher_backend"],
            r["overlap_moe_expert_parallel_comm"], r["cuda_graph_impl"], r["moe_router_force_load_balancing"]) == (
        "8", "4", "512", "flex", "hybridep", "true", "full_iteration", "true")
    r = recipe_rows["llama3_70b_pretrain_64gpu_gb200_fp8cs_config"]  # FSDP with CPU offloading of 40 layers
    assert (r["use_megatron_fsdp"], r["cpu_offloading"], r["cpu_offloading_num_layers"]) == ("true", "true", "40")
    r = recipe_rows["gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"]  # selective of no module
    assert (r["recompute_granularity"], r["recompute_modules"]) == ("selective", "[]")
    # the long-context rows are training recipes (the benchmark recipes stop at 8,192 tokens)
    long = [r for r in recipe_rows.values() if r["kind"] == "training"]
    assert long and all(int(r["seq_len"]) > 8192 for r in long)
    assert max(int(r["seq_len"]) for r in recipe_rows.values() if r["kind"] == "benchmark") == 8192


def _recompute_of(rec):
    g, mods = rec["recompute_granularity"], rec["recompute_modules"]
    if g == "" or (g == "selective" and mods == "[]"):
        return "none", "", ""
    if g == "selective":
        return "selective", mods or "core_attn", ""  # Megatron-Core's default recompute_modules
    assert (g, rec["recompute_method"]) == ("full", "block")
    return "full", "", rec["recompute_num_layers"]


def test_recipe_probes_are_the_recipes_exact_configurations(recipe_rows):
    with (DATA_DIR / "coverage_probes.csv").open(encoding="utf-8") as f:
        probes = list(csv.DictReader(f))
    from_recipes = [p for p in probes if p["recipe"]]
    assert {p["category"] for p in from_recipes} >= {"fine_moe", "long_context", "small_dense_dp", "blackwell_ultra"}
    for p in from_recipes:
        rec = recipe_rows[p["recipe"]]
        assert p["layout_source"] == f"{rec['kind']} recipe" and p["megatron_bridge_version"] == "0.6.2"
        assert p["hardware"] == GPU[rec["gpu"]] and p["precision"] == rec["precision"], p["run_id"]
        for col in ("gpu_count", "tp", "pp", "cp", "mbs", "gbs", "seq_len", "dp"):
            assert p[col] == rec[col], (p["run_id"], col)
        assert p["vp"] == (rec["vp"] or "1"), p["run_id"]  # a blank vp would take runs.default_vp
        assert (p["recompute"], p["recompute_modules"], p["recompute_num_layers"]) == _recompute_of(rec), p["run_id"]
        assert (p["fp8_param_gather"] == "true") == (rec["fp8_param_gather"] == "true"), p["run_id"]
        if p["moe_experts"]:
            assert p["ep"] == rec["ep"] and p["etp"] == (rec["etp"] or "1")
            assert p["moe_dispatcher"] == ("flex" if rec["moe_token_dispatcher_type"] == "flex" else "alltoall")
            assert p["schedule"] == ("ep_overlap" if rec["overlap_moe_expert_parallel_comm"] == "true" else "1f1b")
    # every probe is accepted as a runs table and predicted (scaletax predict plans it the same way)
    plan = runplan.plan_rows(runs.read_runs(DATA_DIR / "coverage_probes.csv"))
    assert len(plan) == len(probes)


def test_probe_table_says_where_each_layout_comes_from():
    probes = vs.probe_rows()
    src = vs.probe_sources(probes)
    assert src["total"] == len(probes) == sum(src[k] for k in vs.PROBE_SOURCES)
    assert src["benchmark recipe"] > src["training recipe"] > 0 and src["version"] == "0.6.2"
    assert all(p["source"] in vs.PROBE_SOURCES for p in probes)
    block = next(p for p in probes if p["recompute_num_layers"])
    assert block["recompute"].startswith("full on ") and block["recompute"].endswith("none on the rest")
    fits = vs.probe_fit_text(probes)
    assert fits.startswith("every one") if all(p["fits"] for p in probes) else "do not fit" in fits


def test_calibration_rows_that_took_a_recipes_settings(recipe_rows):
    """A row whose notes cite a recipe has its layout (tp, pp, cp, vp, ep, mbs, gbs, FSDP) and takes
    only what the recipe states."""
    rows = runs.read_runs(runs.RUNS_CSV)
    tagged = [r for r in rows if TAG in r["notes"]]
    assert len(tagged) >= 8 and [r["run_id"] for r in tagged] == vs.recipe_matched(rows)
    for r in tagged:
        name = r["notes"].split(TAG + " (")[1].split(")")[0]
        rec = recipe_rows[name]
        assert GPU[rec["gpu"]] == r["hardware"] and int(rec["gpu_count"]) == r["gpu_count"]
        assert rec["precision"] == r["precision"]
        for col, default in (("tp", 1), ("pp", 1), ("cp", 1), ("vp", 1), ("ep", 1), ("mbs", 1), ("gbs", None)):
            assert int(rec[col] or default) == (r[col] if r[col] is not None else default), (r["run_id"], col)
        assert (rec["use_megatron_fsdp"] == "true") == (r.get("zero_stage") == 3), r["run_id"]
        if r["recompute"] == "none":
            assert rec["recompute_granularity"] == ""
        assert (r.get("fp8_param_gather") == "true") == (rec["fp8_param_gather"] == "true"), r["run_id"]
        if r.get("moe_experts"):
            assert r["moe_dispatcher"] == ("flex" if rec["moe_token_dispatcher_type"] == "flex" else "alltoall")
            assert r["schedule"] == ("ep_overlap" if rec["overlap_moe_expert_parallel_comm"] == "true" else "1f1b")
    # the 8-GPU H100 Llama 3 8B row lists FSDP, the 0.6.2 recipe does not: its recompute is not taken
    h100 = next(r for r in rows if r["run_id"] == "mbridge25.11-Llama3-DGX-H100-8-FP8-CS")
    assert TAG not in h100["notes"] and h100["recompute"] == "unknown"


def test_fp8_param_gather_keeps_the_linear_weights_only_as_their_copy(tmp_path):
    row = {"model": "Llama 3 70B", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128,
           "ffn_hidden": 28672, "vocab": 128256, "seq_len": 8192, "hardware": "gb300", "gpu_count": 64, "tp": 1,
           "pp": 4, "vp": 5, "mbs": 1, "gbs": 256, "precision": "mxfp8", "recompute": "none"}
    plain, gather = runplan.plan_row(row), runplan.plan_row({**row, "fp8_param_gather": "true"})
    assert gather.options == {"lowp_params": True} and plain.options == {}
    w0 = memory.breakdown(plain.model, plain.layout, as_recipe("mxfp8")).gib()["weights"][0]
    w1 = memory.breakdown(plain.model, plain.layout, as_recipe("mxfp8"), lowp_params=True).gib()["weights"][0]
    # the 16-bit copy of the stage's linear weights is gone: weights drop by param_bytes per linear weight
    assert w1 < w0 and plain.memory_gib - gather.memory_gib == pytest.approx(w0 - w1, rel=1e-9)
    assert w0 - w1 > 0.5 * recipes.training("mxfp8").param_bytes * 17e9 / memory.GIB
    p = tmp_path / "bad.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row) + ["fp8_param_gather"])
        w.writeheader()
        w.writerow({**row, "precision": "bf16", "fp8_param_gather": "true"})
        w.writerow({**row, "fp8_param_gather": "maybe"})
    with pytest.raises(runs.RunsTableError) as exc:
        runs.read_runs(p)
    msg = str(exc.value)
    assert ("row 2, column 'fp8_param_gather': needs an 8-bit or 4-bit precision (got 'bf16'): a bf16 recipe has "
            "no low-precision weight copy") in msg
    assert "row 3, column 'fp8_param_gather': expected true/false, got 'maybe'" in msg
