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
    ("name=Bad Name!", "name: use 1-64 lowercase letters, digits, '-' or '_' (got 'Bad Name!')"),
    ("training", "expected dotted.key=value"),
    ("training.tokens.x=1", "training.tokens: is a value, not a section"),
    ("question=a\x00b", "question: text may not contain the control character U+0000"),
    # booleans and strings are not numbers; YAML 1.2 core scalars only
    ("economics.energy.pue=true", "economics.energy.pue: Input should be a valid number (got True)"),
    ("precision.seed=true", "precision.seed: Input should be a valid integer (got True)"),
    ('training.tokens="1e9"', "training.tokens: Input should be a valid number (got '1e9')"),
    ("training.global_batch_tokens=0x4000", "Input should be a valid integer (got '0x4000')"),
    ("training.global_batch_tokens=1_6384", "Input should be a valid integer (got '1_6384')"),
    ("training.global_batch_tokens=0o20000", "Input should be a valid integer (got '0o20000')"),
    ("economics.prices.b200.assumption=yes", "economics.prices.b200.assumption: Input should be a valid boolean (got 'yes')"),
    ("economics.prices.b200.assumption=1", "economics.prices.b200.assumption: Input should be a valid boolean (got 1)"),
    # typos name the key and the nearest valid one, also inside a price entry
    ("economics.prices.b200.usd_per_gpu_hr=3",
     "unknown key 'economics.prices.b200.usd_per_gpu_hr'; did you mean 'economics.prices.b200.usd_per_gpu_hour'?"),
    ("economics.prices={b200: {usd_per_gpu_hor: 3, source: x, assumption: true}}",
     "unknown key 'economics.prices.b200.usd_per_gpu_hor'; did you mean 'economics.prices.b200.usd_per_gpu_hour'?"),
    ("gpus=[h100_sx]", "unknown GPU id 'h100_sx' (did you mean 'h100_sxm'?)"),
    # bounded before parsing
    ("precision.seed=" + "9" * 5000, "--set precision.seed: line 1: integer longer than 30 digits"),
    ("cluster.sizes=" + "[" * 1000 + "]" * 1000, "--set cluster.sizes: nested deeper than 16 levels"),
    ("cluster.sizes=" + "x" * 20000, "longer than 16384 characters"),
    ("economics.prices={b200: &p {usd_per_gpu_hour: 3, source: x, assumption: true}, gb200: *p}",
     "anchors and aliases (&, *) are not allowed"),
    # power, goodput, ownership and fleets: typed and bounded like the rest
    ("cluster.power_mw=-5", "cluster.power_mw: Input should be greater than 0 (got -5)"),
    ("cluster.power_mw=1e9", "cluster.power_mw: Input should be less than or equal to 100000"),
    ("cluster.goodput=1.5", "cluster.goodput: Input should be less than or equal to 1 (got 1.5)"),
    ("cluster.reliability.failure_report=llama3",
     "cluster.reliability.failure_report: unknown failure report 'llama3' (did you mean 'llama3_405b'?)"),
    ("cluster.reliability.restart_minutes=0", "cluster.reliability.restart_minutes: Input should be greater than 0"),
    ("cluster.reliability.storage_tb_s=true", "cluster.reliability.storage_tb_s: Input should be a valid number (got True)"),
    ("cluster.reliability.failures_per_gpu_hour=0.5", "cluster.reliability.failures_per_gpu_hour: Input should be less than or equal to 0.01"),
    ("cluster.reliabilty.restart_minutes=5", "unknown key 'cluster.reliabilty'; did you mean 'cluster.reliability'?"),
    ("economics.energy.system_overhead=0.5", "economics.energy.system_overhead: Input should be greater than or equal to 1"),
    ("economics.ownership.cost_of_capital=2", "economics.ownership.cost_of_capital: Input should be less than or equal to 1"),
    ("economics.ownership.busy_share=0", "economics.ownership.busy_share: Input should be greater than 0"),
    ("economics.ownership.capex.h100.usd_per_system=3",
     "economics.ownership.capex: unknown GPU id 'h100' (did you mean 'h100_sxm'?)"),
    ("economics.ownership.capex.b200.usd_per_sytem=3",
     "unknown key 'economics.ownership.capex.b200.usd_per_sytem'; did you mean 'economics.ownership.capex.b200.usd_per_system'?"),
    ("fleets=[{name: X, gpu: b2000, count: 5, source: s}]", "fleets.0.gpu: unknown GPU id 'b2000' (did you mean 'b200'?)"),
    ("fleets=[{name: X, gpu: b200, cont: 5, source: s}]", "unknown key 'fleets.0.cont'; did you mean 'fleets.0.count'?"),
    ("fleets=[{name: X, gpu: b200, count: 0, source: s}]", "fleets.0.count: Input should be greater than or equal to 1"),
    ("fleets=[{name: X, gpu: b200, count: 5}]", "fleets.0.source: Field required"),
    ("fleets.0.count=5", "fleets: a list; set it whole (fleets=[{...}, ...])"),
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


def _auto(*sets):
    return build_name(resolve(overrides=list(sets)), list(sets), None)


def test_build_names_follow_the_resolved_scenario():
    s = resolve()
    assert build_name(s, [], None) == "default"
    a, b = _auto("cluster.gpus=32768"), _auto("cluster.gpus=65536")
    assert a.startswith("default-") and a != b and len(a) == len("default-") + 12
    # the last override wins, so the order matters, and the name follows what was resolved
    assert _auto("question=A", "question=B") != _auto("question=B", "question=A")
    assert _auto("question=A", "question=B") == _auto("question=B")
    # equal scenarios share a name, whatever form the overrides took
    assert _auto("cluster.gpus=32768", "training.tokens=15e12") == _auto("cluster.gpus=32768")
    assert _auto("cluster.gpus=16384") == "default"  # the default's own value
    assert build_name(s, ["cluster.gpus=32768"], "mine") == "mine"
    with pytest.raises(ScenarioError, match="--name"):
        build_name(s, [], "../escape")
    with pytest.raises(ScenarioError, match="--name ''"):
        build_name(s, [], "")


def test_parse_override_values():
    assert parse_override("cluster.sizes=[8, 16]") == ("cluster.sizes", [8, 16])
    assert parse_override("a.b=1.0e+3") == ("a.b", 1000.0)
    assert resolve(overrides=["training.tokens=2e13"]).training.tokens == 2e13  # YAML 1.1 reads "2e13" as text
    assert resolve(overrides=["title=a: b"]).title == "a: b"


def test_markup_in_text_is_kept_as_typed():
    """Text is data: the escaping happens where it is printed (scaletax.escape)."""
    for text in ("```{raw} html", "see @@commit@@", "<script>alert(1)</script>", "~~~{eval-rst}\n.. raw:: html"):
        assert resolve(overrides=[f"question={text}"]).question == text


def test_yaml_file_strictness(tmp_path):
    base = DEFAULT_SCENARIO.read_text()
    dup = tmp_path / "dup.yaml"
    dup.write_text(base + "\nname: other\n")
    with pytest.raises(ScenarioError, match=r"duplicate key 'name' at line \d+"):
        resolve(dup)
    price_typo = tmp_path / "price.yaml"
    price_typo.write_text(base.replace("b200: {usd_per_gpu_hour: 4.00", "b200: {usd_per_gpu_hr: 4.00"))
    with pytest.raises(ScenarioError, match="unknown key 'economics.prices.b200.usd_per_gpu_hr'; "
                                            "did you mean 'economics.prices.b200.usd_per_gpu_hour'"):
        resolve(price_typo)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\nmodels: " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(ScenarioError, match="deep.yaml: nested deeper than 16 levels"):
        resolve(deep)
    big_int = tmp_path / "int.yaml"
    big_int.write_text(base.replace("seed: 20261130", "seed: " + "7" * 5000))
    with pytest.raises(ScenarioError, match="integer longer than 30 digits"):
        resolve(big_int)
    yes = tmp_path / "yes.yaml"
    yes.write_text(base.replace("assumption: true", "assumption: yes", 1))
    with pytest.raises(ScenarioError, match="assumption: Input should be a valid boolean"):
        resolve(yes)


def test_only_small_regular_files_are_read(tmp_path):
    import os

    from scaletax.report.scenario import MAX_SCENARIO_BYTES

    with pytest.raises(ScenarioError, match="is not a regular file"):
        resolve("/dev/zero")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="is not a regular file"):
        resolve(fifo)  # refused at once: never waits for a writer
    big = tmp_path / "big.yaml"
    big.write_text("name: x\nmodels: [" + "a, " * MAX_SCENARIO_BYTES + "b]\n")
    with pytest.raises(ScenarioError, match=f"the limit is {MAX_SCENARIO_BYTES} bytes"):
        resolve(big)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        resolve(binary)


def test_an_older_scenario_file_takes_the_new_sections_from_the_default(tmp_path):
    """A scenario written before power, goodput, ownership and fleets existed still resolves: those
    sections are the default's, sources and all."""
    import yaml

    data = load_yaml(DEFAULT_SCENARIO)
    for key in ("reliability", "power_mw", "power_mw_source"):
        data["cluster"].pop(key)
    data["economics"].pop("ownership")
    data.pop("fleets")
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data))
    s, default = resolve(old), resolve()
    assert s.cluster.reliability == default.cluster.reliability and s.economics.ownership == default.economics.ownership
    assert s.fleets == default.fleets and s.cluster.power_mw == default.cluster.power_mw


def test_default_fleets_are_press_reports_and_a_fleet_given_with_set_replaces_them():
    s = resolve()
    assert [f.count for f in s.fleets] == [100_000, 36_000, 20_000, 20_000, 4_000]
    assert all(not f.verified and "press report" in f.source and "unverified" in f.source for f in s.fleets)
    heq = next(f for f in s.fleets if f.name == "H-equivalent fleet")
    assert (heq.gpu, heq.equivalent) == ("h100_sxm", True)
    mine = resolve(overrides=['fleets=[{name: "Our site", gpu: gb300, count: 8640, source: "our plan"}]'])
    assert [(f.name, f.gpu, f.count, f.equivalent) for f in mine.fleets] == [("Our site", "gb300", 8640, False)]
