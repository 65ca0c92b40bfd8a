"""The scenario's training software (``training.software``): what every MoE layout of the search is
timed with, from the scenario to the search, the same in every chapter and in ``scaletax plan``."""
import pytest

from scaletax.chapters import decision
from scaletax.inputs import hardware, models, recipes
from scaletax.model import plan as planning
from scaletax.model import search
from scaletax.report import chapters as toc
from scaletax.report import scenario


def test_the_default_states_its_software_and_where_it_comes_from():
    sw = scenario.resolve().training.software
    assert (sw.moe_dispatcher, sw.schedule, sw.expert_gemm) == ("flex", "unknown", "auto")
    assert sw.source.startswith("ASSUMPTION: the stack most measured MoE runs of data/ ran")


@pytest.mark.parametrize("override, message", [
    ("training.software.expert_gemm=fused",
     "training.software.expert_gemm: Input should be 'auto', 'per_expert' or 'grouped' (got 'fused')"),
    ("training.software.schedule=zb",
     "training.software.schedule: Input should be 'unknown', '1f1b', 'ep_overlap' or 'dualpipe' (got 'zb')"),
    ("training.software.moe_dispatcher=nccl",
     "training.software.moe_dispatcher: Input should be 'deepep', 'flex' or 'alltoall' (got 'nccl')"),
])
def test_a_bad_choice_is_a_one_line_error(override, message):
    with pytest.raises(scenario.ScenarioError) as exc:
        scenario.resolve(overrides=[override])
    assert str(exc.value) == message


def test_an_unsourced_choice_is_labelled_as_the_planners():
    sc = scenario.resolve(overrides=["training.software.expert_gemm=grouped"])
    assert sc.training.software.source.startswith("your input (--set training.software.expert_gemm=grouped)")
    assert any(line.startswith("training.software: your input") for line in sc.user_inputs())


def test_the_scenario_words_become_the_search_space():
    base = search.SearchSpace(domain=8)
    sp = planning.software_space({"moe_dispatcher": "alltoall", "schedule": "1f1b", "expert_gemm": "grouped"}, base)
    assert (sp.ep_dispatch, sp.schedule, sp.expert_gemm, sp.domain) == ("alltoall", "1f1b", "grouped", 8)
    # flex and deepep are the search's default dispatch (None: "dedup"), kept as None so that the
    # chapters' searches and the validation chapter's share one cache entry
    assert planning.software_space({"moe_dispatcher": "flex"}).ep_dispatch is None
    assert planning.software_space({"moe_dispatcher": "deepep"}, search.SearchSpace(ep_dispatch="alltoall")).ep_dispatch == "dedup"
    assert planning.software_space({}, base) is base
    with pytest.raises(ValueError, match=r"^expert_gemm: must be one of auto, per_expert, grouped \(got 'x'\)$"):
        search.SearchSpace(expert_gemm="x")


def test_every_chapter_that_searches_reads_it():
    """A change of the software re-executes every chapter whose numbers come from the search."""
    for slug in ("summary", "communication", "decision"):
        assert "training.software" in toc.chapter(slug).reads
    params = toc.chapter("decision").parameters(scenario.resolve())
    assert planning.Terms.from_params(**params).space() == search.SearchSpace()  # the default is the search's


def test_one_grouped_kernel_makes_kimi_k2_faster_and_plan_agrees_with_the_chapters():
    """Kimi K2 (384 experts) on 2,048 GB300: one grouped kernel pays none of the 6 (E / ep - 1) extra calls
    per MoE layer pass, so the fastest layout is at least as fast; ``plan.case`` (what ``scaletax plan``
    prints) and the decision chapter's ``best`` give the same number."""
    m, g = models.get("kimi_k2"), hardware.get("gb300")
    rows = {}
    for gemm in ("auto", "grouped"):
        sc = scenario.resolve(overrides=[f"training.software.expert_gemm={gemm}"])
        params = toc.chapter("decision").parameters(sc)
        terms = planning.Terms.from_params(**params)
        row = planning.case(terms, m, g, 2048)
        plan = decision.Plan.from_params(**params)
        direct = decision.best(plan, "kimi_k2", "gb300", row["precision"], 2048)
        assert direct.metrics["tokens_per_s_per_gpu"] == row["tps"]
        same = planning.fastest(m, g, recipes.training(row["precision"]), 2048, terms.batch_tokens,
                                space=search.SearchSpace(expert_gemm=gemm))
        assert same.metrics["tokens_per_s_per_gpu"] == row["tps"]
        rows[gemm] = row
    assert rows["grouped"]["tps"] > rows["auto"]["tps"]


def test_the_page_says_what_the_search_assumed():
    plan = decision.Plan.from_params(**toc.chapter("decision").parameters(
        scenario.resolve(overrides=["training.software.schedule=1f1b", "training.software.source=our stack"])))
    assert decision.software_phrase(plan) == (
        "Megatron-Core's flex dispatcher (DeepEP-class: a token crosses to each NVLink domain once); the expert "
        "all-to-all in line (1F1B); one GEMM call per local expert (Transformer Engine's GroupedLinear) (our stack)")


def test_a_scenario_file_from_before_the_key_takes_the_defaults(tmp_path):
    import yaml

    data = yaml.safe_load(scenario.DEFAULT_SCENARIO.read_text(encoding="utf-8"))
    del data["training"]["software"]
    data["name"] = "older"
    path = tmp_path / "older.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert scenario.resolve(path).training.software == scenario.resolve().training.software


def test_predict_searches_a_row_with_the_software_it_states():
    """A runs-table row without a layout is searched with the row's schedule, dispatcher and expert
    GEMMs, the software its searched layout is then timed with: NVIDIA's Kimi K2 recipe on 1,024 H100
    (alltoall dispatcher, 1F1B) with its layout columns emptied."""
    from scaletax.chapters.validation import PRODUCTION_MOE_CSV
    from scaletax.inputs import runs
    from scaletax.inputs.layout import label
    from scaletax.report import predict

    row = dict(runs.read_runs(PRODUCTION_MOE_CSV)[0])
    assert (runs.row_dispatch(row), runs.row_schedule(row)) == ("alltoall", "1f1b")
    for c in runs.SEARCHABLE_LAYOUT:
        row[c] = None
    row["pp_split"] = None
    out = predict.predict_rows([row])[0]
    res = planning.fastest(runs.row_model(row), runs.row_gpu(row), runs.row_recipe(row), 1024, gbs=8192,
                           space=search.SearchSpace(ep_dispatch="alltoall", schedule="1f1b"))
    assert out["layout_searched"] == label(res.best)


def test_every_choice_has_words_and_the_defaults_agree():
    from scaletax.inputs import options
    from scaletax.render import wording

    assert set(wording.SOFTWARE_WORDS["moe_dispatcher"]) == set(options.DISPATCHERS)
    assert set(wording.SOFTWARE_WORDS["schedule"]) == set(options.SCHEDULES)
    assert set(wording.SOFTWARE_WORDS["expert_gemm"]) == set(options.EXPERT_GEMMS)
    fields = scenario.Software.model_fields
    assert {k: fields[k].default for k in wording.SOFTWARE_DEFAULTS} == wording.SOFTWARE_DEFAULTS


def test_plan_says_what_it_timed_an_moe_with():
    from scaletax.report import plan as quick

    sc = scenario.resolve(overrides=["training.software.expert_gemm=grouped"])
    row = quick.as_json(quick.quick_plan(sc, "kimi_k2", "gb300", 2048))
    assert row["software"].endswith("; one grouped kernel for all local experts")
    assert row["software_source"].startswith("your input")
    assert quick.as_json(quick.quick_plan(sc, "llama31_8b", "gb300", 64))["software"] is None  # dense: no dispatch
