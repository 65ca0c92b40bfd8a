"""``scaletax plan``: one case answered without a book, with the decision chapter's numbers."""
import json

import pytest
from typer.testing import CliRunner

from scaletax.inputs import hardware, models
from scaletax.model import cost
from scaletax.chapters import decision as d
from scaletax.report import chapters as toc
from scaletax.report.cli import app
from scaletax.report.scenario import resolve

runner = CliRunner()


@pytest.fixture(autouse=True)
def _forget_definitions():
    yield
    hardware.unregister()
    models.unregister()


def _plan(*args):
    res = runner.invoke(app, ["plan", *args])
    return res


def test_json_is_the_decision_chapters_row():
    res = _plan("--model", "kimi_k2", "--gpu", "gb200", "--gpus", "5376", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    plan = d.Plan.from_params(**toc.chapter("decision").parameters(resolve()))
    row = d.economics([d.outcome(plan, "kimi_k2", "gb200", 5376)], plan)[0]
    for key in ("tps", "tps_low", "tps_high", "days", "gpu_hours", "energy_mwh", "cost_usd", "cost_usd_low"):
        assert out[key] == pytest.approx(row[key]), key
    assert out["layout"] == row["layout"] and out["fits"]
    # 5,376 GPUs are 74.7 NVL72 racks: bought as 75 racks, 5,400 GPUs
    assert (out["systems"], out["gpus_bought"], out["system"]) == (75, 5400, "GB200 NVL72 rack")
    # the goodput of Kimi K2 on 5,376 GPUs (the scale model): days = tokens / (tokens/s x GPUs x 86,400 x goodput)
    assert out["goodput"] == pytest.approx(plan.goodput_at("kimi_k2", 5376)) and 0.9 < out["goodput"] < 1
    assert out["goodput_low"] < out["goodput"] < out["goodput_high"]
    assert out["days"] == pytest.approx(15e12 / (out["tps"] * 5376 * 86400 * out["goodput"]))
    # power: 75 racks of 132 kW (data/systems.csv), x the PUE of 1.2
    assert out["it_mw"] == pytest.approx(75 * 0.132) and out["facility_mw"] == pytest.approx(75 * 0.132 * 1.2)
    assert out["cost_usd"] == pytest.approx(out["gpu_hours"] * 4.5 + out["energy_mwh"] * 80)
    assert out["price_basis"] == "assumed"
    assert out["tps_low"] <= out["tps"] <= out["tps_high"] and out["cost_usd_low"] <= out["cost_usd"] <= out["cost_usd_high"]
    # the model's regime and the out-of-sample accuracy on it: the summary's figures (data/efficiency.yaml)
    from scaletax.inputs import runs
    from scaletax.fit import validate

    reg = validate.regime_record("fine-grained MoE")
    assert runs.model_regime(models.get("kimi_k2")) == out["regime"] == "fine-grained MoE"
    assert (out["regime_oos_runs"], out["regime_oos_median"], out["regime_oos_within_25"]) == (
        reg["oos_rows"], reg["oos_median"], reg["oos_within_25"])
    text = _plan("--model", "kimi_k2", "--gpu", "gb200", "--gpus", "5376").output
    assert "Out of sample" in text and f"{100 * reg['oos_median']:.1f}% median" in text


def test_all_in_price_and_your_price():
    res = _plan("--model", "kimi_k2", "--gpu", "h200_sxm", "--gpus", "1024", "--json",
                "--set", "economics.price_includes_power=true", "--set", "economics.prices.h200_sxm.usd_per_gpu_hour=2.1")
    out = json.loads(res.output)
    assert out["price_includes_power"] and out["price_basis"] == "your input"
    assert out["cost_usd"] == pytest.approx(out["gpu_hours"] * 2.1)
    assert (out["systems"], out["gpus_bought"]) == (128, 1024)


def test_a_gpu_of_your_own_from_the_command_line():
    sets = ["--set", "gpus=[h100_sxm, {id: gb200_800g, base: gb200, nic_gbit_s: 800}]",
            "--set", "economics.prices.gb200_800g.usd_per_gpu_hour=4.5"]
    mine = json.loads(_plan("--model", "megatron_1t", "--gpu", "gb200_800g", "--gpus", "4608", "--json", *sets).output)
    base = json.loads(_plan("--model", "megatron_1t", "--gpu", "gb200", "--gpus", "4608", "--json").output)
    assert mine["user_gpu"] and mine["label"] == "GB200 NVL72 (yours)" and mine["price_basis"] == "your input"
    assert mine["tps"] >= base["tps"]  # twice the scale-out bandwidth never slows a step
    assert mine["cost_usd"] <= base["cost_usd"] * (1 + 1e-9)


def test_table_output_and_a_case_that_does_not_fit():
    res = _plan("--model", "megatron_1t", "--gpu", "h100_sxm", "--gpus", "8")
    assert res.exit_code == 0
    assert "does not fit" in res.output and "Bought as" in res.output
    ok = _plan("--model", "kimi_k2", "--gpu", "b200", "--gpus", "2048")
    assert ok.exit_code == 0 and "Tokens/s per GPU" in ok.output and "256 nodes (2,048 GPUs)" in ok.output


@pytest.mark.parametrize("args,expect", [
    (["--model", "kimi_k2", "--gpu", "GB200", "--gpus", "72"], "--gpu: unknown GPU id 'GB200' (did you mean 'gb200'?)"),
    (["--model", "Kimi_K2", "--gpu", "gb200", "--gpus", "72"], "--model: unknown model id 'Kimi_K2' (did you mean 'kimi_k2'?)"),
    (["--model", "kimi_k2", "--gpu", "gb200", "--gpus", "4"], "--gpus: must be between 8 and 1,000,000"),
    (["--model", "kimi_k2", "--gpu", "gb200", "--gpus", "72", "--set", "cluster.goodput=1.5"], "cluster.goodput"),
])
def test_bad_input_is_one_line_exit_2(args, expect):
    res = _plan(*args)
    assert res.exit_code == 2
    err = res.output.strip()
    assert expect in err and len(err.splitlines()) == 1


def test_capacity_rounds_to_whole_systems():
    assert d.capacity("gb200", 5376) == {"need_systems": 75, "need_bought": 5400, "system": "GB200 NVL72 rack",
                                         "per_system": 72}
    assert d.capacity("h100_sxm", 16385)["need_bought"] == 16392 == 8 * cost.whole_systems(16385, 8)


def test_a_case_asked_again_is_read_from_the_builds_result_cache(tmp_path, monkeypatch):
    """``scaletax plan`` searches through the builds' cache (``_build/.cache/memo``): the second
    ask of a case reads the search the first one stored, and answers the same."""
    from scaletax import memo

    monkeypatch.setattr(toc, "BUILD_ROOT", tmp_path)
    monkeypatch.delenv(memo.ENV, raising=False)
    log = tmp_path / "memo.jsonl"
    monkeypatch.setenv(memo.LOG_ENV, str(log))
    args = ("--model", "kimi_k2", "--gpu", "gb200", "--gpus", "4096", "--json")
    from scaletax.model import plan as planning

    planning.clear_cache()  # as two commands: nothing in this process
    first = _plan(*args)
    planning.clear_cache()
    again = _plan(*args)
    assert first.exit_code == again.exit_code == 0, first.output
    assert json.loads(again.output) == json.loads(first.output)
    searches = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["what"] for s in searches if s["fn"] == "scaletax.model.search.search"] == ["miss", "hit"]
    assert list((tmp_path / ".cache" / "memo" / "scaletax.model.search.search").glob("*.pkl"))
    assert memo.ENV not in __import__("os").environ  # the process is left as it was


def test_power_and_a_goodput_that_falls_from_1024_to_100000_gpus():
    """Issue 36: ``scaletax plan`` reports IT and facility MW and the scale model's goodput, lower on
    100,000 GPUs than on 1,024 (interruptions grow with the count)."""
    small, big = (json.loads(_plan("--model", "megatron_1t", "--gpu", "gb200", "--gpus", str(n), "--json").output)
                  for n in (1024, 100_000))
    assert big["goodput"] < small["goodput"] and big["goodput_high"] < small["goodput_low"]
    assert big["mtbf_h"] == pytest.approx(small["mtbf_h"] * 1024 / 100_000)
    # 100,000 GB200: 1,389 NVL72 racks of 132 kW, facility at PUE 1.2
    assert (big["systems"], big["it_mw"], big["facility_mw"]) == (1389, pytest.approx(1389 * 0.132),
                                                                  pytest.approx(1389 * 0.132 * 1.2))
    text = _plan("--model", "megatron_1t", "--gpu", "gb200", "--gpus", "100000").output
    assert "183.35 / 220.02 MW" in text and "Goodput" in text


def test_a_model_name_with_rich_markup_is_printed_as_typed():
    """The table prints names as text: ``[/bold]`` in a model name raised MarkupError (exit 1)."""
    name = "[red]M[/red] [/bold] :warning:"
    res = _plan("--model", "pm", "--gpu", "h100_sxm", "--gpus", "8",
                "--set", f'models=[kimi_k2, {{id: pm, base: megatron_1t, name: "{name}"}}]')
    assert res.exit_code == 0, res.output
    assert f"{name} (yours) on 8 x H100 SXM" in " ".join(res.output.split())
