"""The planner's own inputs: inline models and GPUs, sources that follow the values, capacity
bought in whole systems, goodput, power-inclusive prices and the chapter cache keys."""
import json

import numpy as np
import pytest

from scaletax.inputs import hardware, models
from scaletax.model import cost
from scaletax.report import chapters as toc
from scaletax.report.execute import base_key
from scaletax.report.provenance import data_hashes, name_conflict, short_commit
from scaletax.report.scenario import ScenarioError, resolve

#: A 1.8T-total / 254B-active MoE (16 experts, top-2) of the planner's own: 1,803B by the
#: architecture, within 2% of the declared 1,800B.
MOE_1P8T = ("{id: moe_1p8t, name: My MoE 1.8T, layers: 96, hidden: 12288, heads: 96, kv_heads: 8, "
            "ffn_hidden: 49152, vocab: 128256, seq_len: 8192, moe_experts: 16, moe_top_k: 2, "
            "moe_ffn_hidden: 31232, published_total_params_b: 1800, published_active_params_b: 254}")
GB200_800G = "{id: gb200_800g, base: gb200, nic_gbit_s: 800, source: 'vendor quote, Nov 2026'}"
USER_SETS = [f"models=[megatron_1t, {MOE_1P8T}]", f"gpus=[h100_sxm, gb200, {GB200_800G}]",
             "economics.prices.gb200_800g.usd_per_gpu_hour=4.8"]


@pytest.fixture(autouse=True)
def _no_registered_definitions():
    yield
    hardware.unregister()
    models.unregister()


def test_inline_moe_and_derived_gpu_resolve_and_are_marked_as_the_users():
    s = resolve(overrides=USER_SETS)
    assert s.model_ids == ["megatron_1t", "moe_1p8t"] and s.gpu_ids == ["h100_sxm", "gb200", "gb200_800g"]
    defs = s.definitions()
    g = hardware.GPU(**defs["gpus"]["gb200_800g"])
    base = hardware.get("gb200")
    assert g.nic_gbit_s == 800 and g.nic_bw == 100e9  # 800 Gb/s / 8, one direction
    assert (g.hbm_gib, g.tdp_w, g.nvlink_domain, g.gpus_per_system) == (base.hbm_gib, base.tdp_w, 72, 72)
    assert g.label == "GB200 NVL72 (yours)" and g.user_fields == ("nic_gbit_s",)
    assert g.verification.startswith("your input (nic_gbit_s=800)")
    assert g.sources.startswith("your input: vendor quote, Nov 2026")
    m = models.Model(**defs["models"]["moe_1p8t"])
    assert m.name == "My MoE 1.8T (yours)" and m.source.startswith("your input") and not m.verified
    assert abs(m.total_params / 1.8e12 - 1) < 0.02 and m.is_moe
    # the catalog files are untouched: the ids are not in it
    assert "gb200_800g" not in hardware._data_catalog() and "moe_1p8t" not in models._data_catalog()
    lines = s.user_inputs()
    assert any(x.startswith("GPU gb200_800g: your input (nic_gbit_s=800)") for x in lines)
    assert any(x.startswith("model moe_1p8t: your input") for x in lines)
    assert any(x.startswith("price of gb200_800g: $4.8") for x in lines)


def test_registered_definitions_are_what_the_model_code_sees():
    s = resolve(overrides=USER_SETS)
    s.register()
    assert hardware.get("gb200_800g").nic_gbit_s == 800
    assert models.get("moe_1p8t").moe_experts == 16
    hardware.unregister()
    with pytest.raises(hardware.UnknownHardware):
        hardware.get("gb200_800g")


def test_a_kernel_reads_the_definitions_file(tmp_path, monkeypatch):
    s = resolve(overrides=USER_SETS)
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(s.definitions()))
    monkeypatch.setenv(hardware.DEFINITIONS_ENV, str(path))
    assert hardware.get("gb200_800g").label == "GB200 NVL72 (yours)"
    assert models.get("moe_1p8t").total_params == models.Model(**s.definitions()["models"]["moe_1p8t"]).total_params


def test_declared_parameter_count_that_disagrees_with_the_shape_is_an_error_with_both_numbers():
    bad = MOE_1P8T.replace("layers: 96", "layers: 64")
    with pytest.raises(ScenarioError) as exc:
        resolve(overrides=[f"models=[{bad}]"])
    msg = str(exc.value)
    assert "declared total parameters 1800B but the architecture has 1203B (-33.2%; allowed 2%)" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("override,expect", [
    ("gpus=[GB200]", "unknown GPU id 'GB200' (did you mean 'gb200'?)"),
    ("models=[Kimi_K2]", "unknown model id 'Kimi_K2' (did you mean 'kimi_k2'?)"),
    ("economics.prices.H100_SXM.usd_per_gpu_hour=2", "unknown GPU id 'H100_SXM' (did you mean 'h100_sxm'?)"),
    ("gpus=[{id: gb200, base: gb200, nic_gbit_s: 800}]", "inline GPU id 'gb200' is a catalog id"),
    ("gpus=[{id: g1, base: gb200, nic_gbit: 800}]", "GPU 'g1': unknown field 'nic_gbit'; did you mean 'nic_gbit_s'?"),
    ("gpus=[{id: g1, base: gb2000, tdp_w: 500}]", "GPU 'g1': base: unknown GPU id 'gb2000' (did you mean 'gb200'?)"),
    ("gpus=[{id: g1, base: h100_sxm, tdp_w: -5}]", "GPU 'g1': field 'tdp_w': Input should be greater than 0"),
    ("gpus=[{id: g1, base: h100_sxm}]", "base 'h100_sxm' with no field changed"),
    ("gpus=[{id: g1, base: h100_sxm, tdp_w: 500}]", "economics.prices has no price for g1"),
    ("models=[{id: m1, base: kimi_k2, layerz: 90}]", "model 'm1': unknown field 'layerz'; did you mean 'layers'?"),
    ("models=[{id: m1, layers: 8}]", "model 'm1': field 'hidden': Field required"),
])
def test_bad_definitions_are_refused_in_one_line(override, expect):
    with pytest.raises(ScenarioError) as exc:
        resolve(overrides=[override])
    assert expect in str(exc.value) and "\n" not in str(exc.value)


#: Inline definitions are typed as strictly as the rest of the scenario (issue 35): a boolean or
#: text is not a number, a number is not a boolean, ids end where the text ends, numbers are bounded.
STRICT = [
    ("gpus=[h100_sxm, {id: g1, base: gb300, tdp_w: true}]", "gpus: GPU 'g1': field 'tdp_w': Input should be a valid number (got True)"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, tdp_w: \"700\"}]", "gpus: GPU 'g1': field 'tdp_w': Input should be a valid number (got '700')"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, native_mx: \"yes\"}]", "gpus: GPU 'g1': field 'native_mx': Input should be a valid boolean (got 'yes')"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, native_mx: 1}]", "gpus: GPU 'g1': field 'native_mx': Input should be a valid boolean (got 1)"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, tf32_tflops: 1e9}]", "gpus: GPU 'g1': field 'tf32_tflops': Input should be less than or equal to 100000 (got 1000000000.0)"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, label: 5}]", "gpus: GPU 'g1': field 'label': Input should be a valid string (got 5)"),
    ("gpus=[h100_sxm, {id: g1, base: gb300, tdp_w: 700, source: [a]}]", "gpus: GPU 'g1': field 'source': Input should be a valid string (got ['a'])"),
    ("gpus=[h100_sxm, {id: \"g1\\n\", base: gb300, tdp_w: 700}]", "gpus: an inline GPU needs an 'id' of lowercase letters, digits, '-' or '_' (got 'g1\\n')"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, layers: true}]", "models: model 'pm': field 'layers': Input should be a valid integer (got True)"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, layers: \"61\"}]", "models: model 'pm': field 'layers': Input should be a valid integer (got '61')"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, vocab: 1e12}]", "models: model 'pm': field 'vocab': Input should be a valid integer (got 1000000000000.0)"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, vocab: 1000000000000}]", "models: model 'pm': field 'vocab': Input should be less than or equal to 8388608 (got 1000000000000)"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, gated: 1}]", "models: model 'pm': field 'gated': Input should be a valid boolean (got 1)"),
    ("models=[kimi_k2, {id: pm, base: megatron_1t, name: 7}]", "models: model 'pm': field 'name': Input should be a valid string (got 7)"),
    ("models=[kimi_k2, {id: \"pm\\n\", base: megatron_1t, layers: 64}]", "models: an inline model needs an 'id' of lowercase letters, digits, '-' or '_' (got 'pm\\n')"),
]


@pytest.mark.parametrize("override,expect", STRICT)
def test_inline_definitions_are_strictly_typed(override, expect):
    with pytest.raises(ScenarioError) as exc:
        resolve(overrides=[override])
    assert str(exc.value) == expect


def test_ids_end_where_the_text_ends():
    """A trailing newline is not part of a valid id anywhere (``\\Z``, not ``$``)."""
    from scaletax.report.scenario import build_name

    assert hardware.ID_PATTERN.match("g1") and not hardware.ID_PATTERN.match("g1\n")
    assert models.ID_PATTERN.match("pm") and not models.ID_PATTERN.match("pm\n")
    with pytest.raises(ScenarioError, match="--name 'x\\\\n': use 1-64"):
        build_name(resolve(), [], "x\n")
    with pytest.raises(ScenarioError, match="name: use 1-64 lowercase"):
        resolve(overrides=['name="x\\n"'])
    with pytest.raises(ValueError, match="needs an 'id'"):
        hardware.define({"id": "g1\n", "base": "gb300", "tdp_w": 700})
    with pytest.raises(ValueError, match="needs an 'id'"):
        models.define({"id": "pm\n", "base": "megatron_1t", "layers": 64})


def test_a_power_capped_gpu_derives_from_the_catalog():
    s = resolve(overrides=["gpus=[h100_sxm, {id: h100_500w, base: h100_sxm, tdp_w: 500}]",
                           "economics.prices.h100_500w.usd_per_gpu_hour=2.2"])
    g = hardware.GPU(**s.definitions()["gpus"]["h100_500w"])
    assert g.tdp_w == 500 and g.bf16_tflops == hardware.get("h100_sxm").bf16_tflops


# --- sources follow the values ----------------------------------------------------------
def test_a_set_price_is_the_users_and_drops_the_old_source():
    base = resolve().economics.prices["h200_sxm"]
    p = resolve(overrides=["economics.prices.h200_sxm.usd_per_gpu_hour=2.10"]).economics.prices["h200_sxm"]
    assert p.usd_per_gpu_hour == 2.10 and p.your_input and not p.assumption
    assert p.source == "your input (--set economics.prices.h200_sxm.usd_per_gpu_hour=2.1)"
    assert base.source not in p.source
    q = resolve(overrides=["economics.prices.gb200.usd_per_gpu_hour=3.9"]).economics.prices["gb200"]
    assert q.your_input and not q.assumption and "ASSUMPTION" not in q.source  # a quote, not a guess


def test_a_new_source_given_with_the_value_is_kept():
    p = resolve(overrides=["economics.prices.h200_sxm.usd_per_gpu_hour=2.10",
                           "economics.prices.h200_sxm.source=Provider X quote, Nov 2026"]).economics.prices["h200_sxm"]
    assert p.source == "Provider X quote, Nov 2026" and not p.your_input


def test_tokens_energy_electricity_and_goodput_sources_follow_their_values():
    s = resolve(overrides=["training.tokens=2e13", "economics.energy.pue=1.4", "economics.usd_per_mwh=120",
                           "cluster.goodput=0.95"])
    assert s.training.tokens_source == "your input (--set training.tokens=2e13)"
    assert s.economics.usd_per_mwh_source == "your input (--set economics.usd_per_mwh=120)"
    assert s.cluster.goodput_source == "your input (--set cluster.goodput=0.95)"
    assert s.economics.energy.source.startswith("your input (--set economics.energy.pue=1.4); other values: ")
    unchanged = resolve(overrides=["training.tokens=15e12"])  # the default's value: its source stays
    assert unchanged.training.tokens_source == resolve().training.tokens_source


def test_a_user_scenario_file_changing_a_value_without_a_source_is_labelled(tmp_path):
    import yaml

    from scaletax.report.scenario import DEFAULT_SCENARIO

    data = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    data["name"] = "mine"
    data["economics"]["prices"]["b200"]["usd_per_gpu_hour"] = 3.1
    data["economics"]["prices"]["h100_sxm"].update(usd_per_gpu_hour=1.9, source="my contract, 2026")
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump(data))
    prices = resolve(f).economics.prices
    assert prices["b200"].source == "your input (in mine.yaml: economics.prices.b200.usd_per_gpu_hour=3.1)"
    assert prices["b200"].your_input and not prices["b200"].assumption
    assert prices["h100_sxm"].source == "my contract, 2026" and not prices["h100_sxm"].your_input
    assert prices["h200_sxm"] == resolve().economics.prices["h200_sxm"]


#: The default scenario's energy factors (cost.Economics has no defaults for them).
ENERGY = dict(utilization=0.9, pue=1.2)
#: DGX H100's 10.2 kW over its 8 GPUs (data/systems.csv), W.
H100_SYSTEM_W = 1275.0


# --- economics ----------------------------------------------------------------------------
def test_power_inclusive_prices_add_no_energy_and_zero_electricity_is_accepted():
    assert resolve(overrides=["economics.usd_per_mwh=0"]).economics.usd_per_mwh == 0
    s = resolve(overrides=["economics.price_includes_power=true"])
    assert s.economics.price_includes_power
    econ = cost.Economics(**ENERGY, usd_per_gpu_hour=2.0, usd_per_mwh=80, price_includes_power=True)
    r = cost.run_costs(1e12, 1000.0, 1024, H100_SYSTEM_W, econ)
    hours = 1e12 / 1000 / 3600
    assert r["cost_usd"] == pytest.approx(hours * 2.0) and r["energy_cost_usd"] == 0
    assert r["energy_mwh"] == pytest.approx(hours * 1275 * 0.9 * 1.2 / 1e6)  # energy still reported
    owned = cost.run_costs(1e12, 1000.0, 1024, H100_SYSTEM_W,
                           cost.Economics(**ENERGY, usd_per_gpu_hour=2.0, usd_per_mwh=80))
    assert owned["cost_usd"] == pytest.approx(hours * 2.0 + owned["energy_mwh"] * 80)


def test_goodput_stretches_days_and_billed_hours():
    econ = cost.Economics(**ENERGY, usd_per_gpu_hour=2.0, goodput=0.9)
    r = cost.run_costs(15e12, 500.0, 16384, H100_SYSTEM_W, econ)
    ideal_days = 15e12 / (500 * 16384 * 86400)
    assert r["days"] == pytest.approx(ideal_days / 0.9)
    assert r["gpu_hours"] == pytest.approx(15e12 / 500 / 3600 / 0.9)
    assert r["cost_usd"] == pytest.approx(r["gpu_hours"] * 2.0)
    with pytest.raises(ValueError, match=r"goodput: must be in \(0, 1\]"):
        cost.Economics(**ENERGY, usd_per_gpu_hour=1.0, goodput=1.2)
    # one goodput per row (the scale model gives each cluster size its own)
    rows = cost.run_costs(15e12, 500.0, np.array([1024, 16384]), H100_SYSTEM_W, econ, goodput=np.array([0.99, 0.9]))
    assert rows["days"] == pytest.approx([15e12 / (500 * 1024 * 86400 * 0.99), ideal_days / 0.9])
    # the default scenario models goodput (no override); a goodput set without a source is the user's
    assert resolve().cluster.goodput is None and resolve().cluster.reliability.failure_report == "llama3_405b"
    mine = resolve(overrides=["cluster.goodput=0.95"]).cluster
    assert (mine.goodput, mine.goodput_source) == (0.95, "your input (--set cluster.goodput=0.95)")


def test_gpus_for_a_deadline_round_up_to_whole_systems():
    # 5,336.1 GPUs needed -> 5,337 GPUs; in 72-GPU racks 75 racks = 5,400 GPUs (74.1 racks of need)
    tps = 15e12 / (5336.1 * 90 * 86400)
    assert cost.gpus_for_days(15e12, tps, 90) == 5337
    assert cost.gpus_for_days(15e12, tps, 90, per_system=72) == 5400
    assert cost.whole_systems(5400, 72) == 75 and cost.whole_systems(5337, 8) == 668
    assert cost.gpus_for_days(15e12, tps, 90, goodput=0.9, per_system=8) == 8 * 742  # 5,929 -> 742 nodes
    assert hardware.get("gb200").gpus_per_system == 72 and hardware.get("gb200").system == "GB200 NVL72 rack"
    assert hardware.get("h100_sxm").gpus_per_system == 8


# --- chapter cache keys ---------------------------------------------------------------------
def _keys(s):
    return {ch.slug: base_key(ch, ch.parameters(s), "code", ch.definitions(s)) for ch in toc.CHAPTERS}


def test_a_price_change_reexecutes_only_the_chapters_that_read_prices():
    a = _keys(resolve())
    b = _keys(resolve(overrides=["economics.prices.h200_sxm.usd_per_gpu_hour=2.10"]))
    changed = {k for k in a if a[k] != b[k]}
    readers = {ch.slug for ch in toc.CHAPTERS if any(r.startswith("economics") for r in ch.reads)}
    assert changed == readers and "precision" not in changed and "validation" not in changed


def test_a_user_gpu_invalidates_only_the_chapters_that_read_gpus():
    a = _keys(resolve())
    b = _keys(resolve(overrides=["gpus=[h100_sxm, h200_sxm, b200, gb200, gb300, rubin, "
                                 f"{GB200_800G}]", "economics.prices.gb200_800g.usd_per_gpu_hour=4.8"]))
    c = _keys(resolve(overrides=["gpus=[h100_sxm, h200_sxm, b200, gb200, gb300, rubin, "
                                 "{id: gb200_800g, base: gb200, nic_gbit_s: 1600}]",
                                 "economics.prices.gb200_800g.usd_per_gpu_hour=4.8"]))
    assert a["validation"] == b["validation"] == c["validation"]
    for slug in ("hardware", "memory", "communication", "precision", "decision", "summary"):
        assert a[slug] != b[slug] != c[slug], slug  # same id, another definition: another key


def test_chapter_parameters_hold_ids_not_definitions():
    s = resolve(overrides=USER_SETS)
    p = toc.chapter("memory").parameters(s)
    assert p["gpus"] == ["h100_sxm", "gb200", "gb200_800g"] and p["models"] == ["megatron_1t", "moe_1p8t"]


# --- provenance -------------------------------------------------------------------------------
def test_provenance_helpers(tmp_path):
    assert short_commit("0123456789abcdef0123+dirty") == "0123456789ab+dirty"
    assert short_commit("0123456789abcdef0123") == "0123456789ab"
    h = data_hashes()
    assert "data/hardware.csv" in h and "data/systems.csv" in h and all(len(v) == 64 for v in h.values())

def test_name_conflicts_are_decided_by_the_resolved_scenario(tmp_path):
    """A book is replaced only by a build of the same resolved scenario (its content hash), however
    the file and overrides spelled it; a folder whose manifest cannot be read is a conflict."""
    book = tmp_path / "default"
    default = resolve()
    assert name_conflict(book, default.content_hash()) is None  # nothing there
    book.mkdir()
    (book / "manifest.json").write_text(json.dumps({"scenario_file": "data/scenarios/default.yaml", "overrides": [],
                                                    "scenario_sha256": default.content_hash()}))
    assert name_conflict(book, default.content_hash()) is None  # the same scenario, rebuilt
    # the same scenario spelled another way: an override that sets the default value
    same = resolve(overrides=[f"cluster.gpus={default.cluster.gpus}"])
    assert name_conflict(book, same.content_hash()) is None
    # another scenario under the same file name and the same (empty) overrides: the content differs
    other = resolve(overrides=["cluster.gpus=8192"]).content_hash()
    msg = name_conflict(book, other)
    assert msg == (f"--name default: {book} holds the book of another scenario (data/scenarios/default.yaml, no "
                   f"--set; scenario sha256 {default.content_hash()[:12]}, this one {other[:12]}); choose another "
                   "--name, or add --force to replace it")
    for text in ("{not json", json.dumps({"scenario_file": "x.yaml"}), json.dumps([1, 2])):
        (book / "manifest.json").write_text(text)
        assert name_conflict(book, default.content_hash()) == (
            f"--name default: {book} exists but its manifest cannot be read (not a scaletax manifest); "
            "choose another --name, or add --force to replace it")
    (book / "manifest.json").unlink()
    assert "exists but its manifest cannot be read (No such file or directory)" in name_conflict(book, other)


@pytest.mark.parametrize("mid", list(models._data_catalog()))
def test_a_model_copied_whole_from_the_catalog_is_accepted(mid):
    """Issue 34: every field of a data/models.yaml entry, ``verified`` included, is accepted inline
    with the catalog's types; the copy has the catalog's architecture and stays the user's."""
    import yaml

    entry = yaml.safe_load(models.MODELS_YAML.read_text(encoding="utf-8"))["models"][mid]
    spec = {"id": f"copy_{mid}", **entry}
    s = resolve(overrides=[f"models=[{json.dumps(spec)}]"])
    m, cat = models.Model(**s.definitions()["models"][f"copy_{mid}"]), models.get(mid)
    assert m.total_params == cat.total_params and m.active_params == cat.active_params
    assert m.model_dump(exclude={"id", "name", "source", "notes", "verified"}) == cat.model_dump(
        exclude={"id", "name", "source", "notes", "verified"})
    assert not m.verified and m.source.startswith("your input: ")
    assert ("marked verified in your definition" in m.source) == entry["verified"]


@pytest.mark.parametrize("value", ["yes", 1, "true"])
def test_verified_must_be_true_or_false(value):
    with pytest.raises(ScenarioError) as exc:
        resolve(overrides=[f"models=[{json.dumps({'id': 'm1', 'base': 'kimi_k2', 'layers': 60, 'verified': value})}]"])
    assert f"model 'm1': field 'verified': expected true or false (got {value!r})" in str(exc.value)
