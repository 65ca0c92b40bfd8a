"""The scenario schema: what it accepts, and the one-line refusals of everything else."""
import pytest

from scaletax.report.scenario import (DEFAULT_SCENARIO, ScenarioError, build_name, load_yaml,
                                      parse_override, resolve)


def test_default_scenario_states_the_question():
    s = resolve()
    assert s.name == "default"
    assert {"megatron_1t", "kimi_k2"} <= set(s.models)
    assert {"h100_sxm", "h200_sxm", "b200", "gb200", "gb300", "rubin"} <= set(s.gpus)
    assert max(s.cluster.sizes) == 100_000
    assert s.training.tokens >= 1e12
    # every price without a published source says so
    for gpu, price in s.economics.prices.items():
        assert price.assumption == ("ASSUMPTION" in price.source), gpu


def test_overrides_apply_and_hash_changes():
    base = resolve()
    s = resolve(overrides=["cluster.gpus=32768", "training.precision=mxfp8"])
    assert s.cluster.gpus == 32768 and s.training.precision == "mxfp8"
    assert s.content_hash() != base.content_hash()
    assert resolve().content_hash() == base.content_hash()


@pytest.mark.parametrize("override,expect", [
    ("cluster.size=3", "unknown key 'cluster.size'; did you mean 'cluster.sizes'?"),
    ("trainig.tokens=1", "unknown key 'trainig'; did you mean 'training'?"),
    ("training.tokens=-5", "training.tokens: Input should be greater than or equal to 1000000"),
    ("training.tokens=0", "training.tokens"),
    ("training.tokens=.nan", "training.tokens: must be a finite number"),
    ("training.tokens=.inf", "training.tokens: must be a finite number"),
    ("training.tokens=lots", "training.tokens: Input should be a valid number"),
    ("cluster.gpus=1.5", "cluster.gpus"),
    ("cluster.sizes=[1024,1024]", "cluster sizes must be unique"),
    ("gpus=[h100]", "unknown GPU id 'h100' (did you mean 'h100_sxm'?); allowed: a100_sxm_80gb"),
    ("models=[gpt5]", "unknown model id 'gpt5'"),
    ("training.precision=fp3", "training.precision: Input should be"),
    ("economics.energy.pue=0.5", "economics.energy.pue: Input should be greater than or equal to 1"),
    ("economics.prices.b200.usd=3", "unknown key 'economics.prices.b200.usd'"),
    ("economics.prices.h100={usd_per_gpu_hour: 3, source: x, assumption: true}", "economics.prices: unknown GPU id 'h100'"),
    ("economics.prices.h100.usd_per_gpu_hour=3", "economics.prices: unknown GPU id 'h100' (did you mean 'h100_sxm'?)"),
    ("gpus=[h100_sxm,a100_sxm_80gb]", "economics.prices has no price for a100_sxm_80gb"),
    ("name=Bad Name!", "name: String should match pattern"),
    ("training", "expected dotted.key=value"),
    ("training.tokens.x=1", "training.tokens: is a value, not a section"),
    ("title=```{raw} html", "title: text may not contain '```'"),
    ("question=see @@commit@@", "question: text may not contain '@@'"),
])
def test_bad_overrides_are_refused_in_one_line(override, expect):
    with pytest.raises(ScenarioError) as exc:
        resolve(overrides=[override])
    msg = str(exc.value)
    assert expect in msg
    assert "\n" not in msg


def test_bad_files(tmp_path):
    with pytest.raises(ScenarioError, match="scenario file not found"):
        resolve(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodels: [a, b\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: malformed YAML at line \d+"):
        resolve(bad)
    notscen = tmp_path / "list.yaml"
    notscen.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="not a scenario"):
        resolve(notscen)
    with pytest.raises(ScenarioError, match="is a folder"):
        resolve(tmp_path)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(DEFAULT_SCENARIO.read_text() + "\nflavour: vanilla\n")
    with pytest.raises(ScenarioError, match="unknown key 'flavour'"):
        resolve(unknown)


def test_strings_with_quotes_and_code_stay_plain_data():
    key, value = parse_override("title=a 'b' \"c\"; import os")
    assert key == "title" and value == "a 'b' \"c\"; import os"
    s = resolve(overrides=["title=Eve's \"book\"; __import__('os')"])
    assert s.title == "Eve's \"book\"; __import__('os')"


def test_build_names():
    s = resolve()
    assert build_name(s, [], None) == "default"
    a = build_name(s, ["cluster.gpus=32768"], None)
    b = build_name(s, ["cluster.gpus=65536"], None)
    assert a.startswith("default-") and a != b and len(a) == len("default-") + 8
    assert build_name(s, ["cluster.gpus=32768"], "mine") == "mine"
    with pytest.raises(ScenarioError, match="--name"):
        build_name(s, [], "../escape")


def test_parse_override_values():
    assert parse_override("cluster.sizes=[8, 16]") == ("cluster.sizes", [8, 16])
    assert parse_override("a.b=1.0e+3") == ("a.b", 1000.0)
    assert resolve(overrides=["training.tokens=2e13"]).training.tokens == 2e13  # YAML 1.1 reads "2e13" as text
    assert resolve(overrides=["title=a: b"]).title == "a: b"
