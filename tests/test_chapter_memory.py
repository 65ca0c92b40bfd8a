"""The memory chapter's sweeps and tables: references, fit search with the global batch,
sensitivity, published runs, sentences for other scenarios, and the notebook itself."""
import os

import numpy as np
import pytest

from scaletax.inputs import hardware, models
from scaletax.inputs.layout import Layout
from scaletax.model import memory, search
from scaletax.chapters import memory as ms

from objects import as_gpu, as_recipe

GIB = 2**30
ONE_T = models.get(models.DENSE_1T)
MOE = models.get(models.MOE_1T)
B = 16777216  # default global batch tokens


def test_reference_rows_reproduce_the_papers():
    rows = ms.reference_rows()
    assert [r["key"] for r in rows] == [ref.key for ref in ms.REFERENCES]
    for r in rows:
        assert r["computed"] == pytest.approx(r["published"], rel=0.03), r
        assert r["cite"] in ("rajbhandari2020", "korthikanti2022")
    by = {r["key"]: r for r in rows}
    assert by["zero0"]["published"] == 120.0 and by["k_act_tp"]["published"] == 131.25


def test_every_reference_cites_a_bib_entry():
    bib = (models.MODELS_YAML.parents[1] / "book" / "references.bib").read_text()
    for ref in ms.REFERENCES:
        assert "{" + ref.cite + "," in bib
    assert "{dao2022," in bib


@pytest.mark.parametrize("mid, gpu", [(models.DENSE_1T, "h100_sxm"), (models.MOE_1T, "gb200"), ("llama31_405b", "h200_sxm")])
def test_min_gpus_is_the_search_answer(mid, gpu):
    m = models.get(mid)
    mine = ms.min_gpus(m, gpu, "fp8")
    ref = search.min_gpus(m, as_recipe("fp8"), as_gpu(gpu), space=ms.space(None))
    assert mine["gpus"] == ref.gpus[0]
    assert mine["layout"] == ref.best
    assert mine["memory_gib"] == pytest.approx(ref.metrics["memory_gib"])
    # the default batch is large enough not to change the answer at these small counts
    assert ms.min_gpus(m, gpu, "fp8", B)["gpus"] == ref.gpus[0]


def test_fit_respects_capacity_batch_and_least_parallelism():
    gpus = ["h100_sxm", "gb300"]
    precs = {g: as_recipe("fp8") for g in gpus}
    seqs = ms.batch_sequences(MOE, B)
    res = ms.fit(MOE, 16384, gpus, precs, seqs)
    for g, r in res.items():
        lay = r["layout"]
        assert lay is not None and lay.gpus == 16384
        assert abs(lay.gbs - seqs) <= ms.SPACE.batch_tolerance * seqs and lay.gbs % (lay.dp * lay.mbs) == 0
        assert memory.fits(MOE, lay, as_gpu(g), as_recipe("fp8"))[0]
        # no candidate with less model parallelism fits
        la = search.candidates(MOE, 16384, ms.SPACE, seqs, domain=hardware.get(g).nvlink_domain)
        mp = la.tp * la.pp * la.cp
        ok = memory.fits(MOE, la, as_gpu(g), as_recipe("fp8"))
        assert not np.any(ok & (mp < lay.tp * lay.pp * lay.cp))
        # and it is the search's answer for the chapter's space
        one = search.search(MOE, as_recipe("fp8"), as_gpu(g), 16384, gbs=seqs, space=ms.SPACE, pareto=False)
        assert one.best == lay
    # 4,096 sequences cannot feed 16,384 data-parallel ranks: at least 4-way model parallel
    assert res["gb300"]["layout"].tp * res["gb300"]["layout"].pp >= 16384 // seqs // 1.1
    assert res["gb300"]["bound"] == "batch"


def test_fit_map_says_why_a_model_does_not_fit():
    need = ms.min_gpus(ONE_T, "h100_sxm", "fp8", B)["gpus"]
    rows = ms.fit_map_rows([models.DENSE_1T], ["h100_sxm", "gb300"], [8, need, 16384], "fp8", B)
    assert [(r["gpu"], r["gpus"]) for r in rows] == [("h100_sxm", 8), ("h100_sxm", need), ("h100_sxm", 16384),
                                                     ("gb300", 8), ("gb300", need), ("gb300", 16384)]
    small = rows[0]
    assert not small["fits"] and small["layout"] is None and small["mp"] is None
    assert small["status"] == f"GPT 1T does not fit on 8 H100 SXM GPUs; it needs at least {need:,}"
    assert rows[1]["fits"] and rows[2]["fits"]
    # more HBM: no more model parallelism at the same count
    assert rows[5]["mp"] <= rows[2]["mp"]
    text = ms.nofit_text(rows)
    assert "does not fit on 8 H100 SXM GPUs" in text and "does not fit on 8 GB300 NVL72 GPUs" in text


def test_min_gpus_reports_no_fit_in_words():
    r = ms.min_gpus(ONE_T, "h100_sxm", "fp8", B, max_gpus=64)
    assert r["gpus"] is None and r["layout"] is None and r["gpus_text"] == "more than 64"
    assert r["layout_label"] == "none fits"


def test_precision_note_names_the_fallback():
    note = ms.precision_note(["h100_sxm", "h200_sxm", "b200"], "mxfp8")
    assert "H100 SXM and H200 SXM lack native MXFP8" in note and "FP8" in note
    assert ms.precision_note(["b200"], "mxfp8").startswith("Every GPU")


def test_state_rows_bytes_per_parameter():
    rows = ms.state_rows([models.DENSE_1T, models.MOE_1T], "bf16")
    for r in rows:
        # bf16 params + bf16 main grads + 16 optimizer bytes (fp32 master, grad shard, m, v), no copy
        assert r["weights_bpp"] == pytest.approx(2.0) and r["gradients_bpp"] == pytest.approx(2.0)
        assert r["optimizer_bpp"] == pytest.approx(16.0) and r["state_bpp"] == pytest.approx(20.0)
    fp8 = ms.state_rows([models.DENSE_1T], "fp8")[0]
    assert 21.5 < fp8["state_bpp"] <= 22.0  # + up to 2 bytes of FP8 weight copies


def test_sweeps_are_monotonic_and_recompute_ordered():
    lay = Layout(tp=8, pp=16, dp=128, gbs=8192)
    rows = ms.sweep_rows(ONE_T, lay, as_recipe("fp8"))
    for knob in ("sequence length", "micro-batch"):
        for rc in ms.RECOMPUTE:
            tot = [r["total_gib"] for r in rows if r["knob"] == knob and r["recompute"] == rc]
            assert len(tot) > 3 and all(b > a for a, b in zip(tot, tot[1:]))
        for x in {r["x"] for r in rows if r["knob"] == knob}:
            by = {r["recompute"]: r["total_gib"] for r in rows if r["knob"] == knob and r["x"] == x}
            assert by["full"] <= by["selective"] <= by["none"]
    # micro-batch 1 at the model's own sequence length is the same point on both sweeps
    a = [r for r in rows if r["knob"] == "micro-batch" and r["x"] == 1 and r["recompute"] == "none"][0]
    b = [r for r in rows if r["knob"] == "sequence length" and r["x"] == ONE_T.seq_len and r["recompute"] == "none"][0]
    assert a["total_gib"] == pytest.approx(b["total_gib"], rel=1e-3)


def test_limit_rows_agree_with_fits():
    # pp 12: the 1T model's stage fits an H100 only with full recompute, a GB300 without any
    lay = Layout(tp=8, pp=12, dp=128, gbs=8192, recompute="full")
    rows = ms.limit_rows(ONE_T, lay, ["h100_sxm", "gb300"], "fp8")
    for r in rows:
        cap = r["capacity_gib"]
        if r["least_recompute"] != "does not fit":
            assert memory.fits(ONE_T, lay.replace(recompute=r["least_recompute"]), as_gpu(cap), as_recipe("fp8"))[0]
        for rc in ms.RECOMPUTE:
            mb = r[f"mbs_{rc}"]
            base = lay.replace(recompute=rc)
            if mb:
                assert memory.fits(ONE_T, base.replace(mbs=mb, gbs=mb * base.dp * base.n_micro), as_gpu(cap), as_recipe("fp8"))[0]
            assert not memory.fits(ONE_T, base.replace(mbs=mb + 1, gbs=(mb + 1) * base.dp * base.n_micro), as_gpu(cap), as_recipe("fp8"))[0]
    h100, gb300 = rows
    assert h100["least_recompute"] == "full" and gb300["least_recompute"] == "none"
    assert gb300["seq_none"] > h100["seq_none"] and gb300["mbs_full"] > h100["mbs_full"]
    table = ms.limit_table_rows(rows)
    assert table[0]["mbs"].startswith("– / – /") and "k" in table[0]["seq"]
    assert ms.limit_table_rows([]) == []


def test_published_runs_all_predicted_to_fit():
    rows = ms.run_rows()
    assert len(rows) >= 20
    for r in rows:
        parts = sum(r[f"{t}_gib"] for t in ms.TERMS)
        assert parts == pytest.approx(r["total_gib"], abs=0.01)
        assert r["fits"], r["run_id"]
        assert r["recompute_text"].endswith(("(assumed)", "(stated)"))
    assert ms.runs_text(rows).startswith(f"All {len(rows)} published runs are predicted to fit")
    long = ms.run_term_rows(rows)
    assert len(long) == len(rows) * len(ms.TERMS)


def test_default_scenario_headline_numbers():
    gpus = ["h100_sxm", "h200_sxm", "b200", "gb200", "gb300", "rubin"]
    mins = ms.min_gpus_rows([models.DENSE_1T, models.MOE_1T], gpus, "fp8", B)
    n = {(r["model"], r["gpu"]): r["gpus"] for r in mins}
    for mid in (models.DENSE_1T, models.MOE_1T):
        counts = [n[(mid, g)] for g in gpus]
        assert all(c is not None for c in counts)
        assert counts[0] == max(counts)  # the 80 GiB part needs the most GPUs
        assert n[(mid, "h200_sxm")] < n[(mid, "h100_sxm")] and n[(mid, "gb300")] < n[(mid, "b200")]
    for r in mins:
        assert r["hbm_per_state"] >= 1.0  # aggregate HBM must at least hold one copy of the state
    fmap = ms.fit_map_rows([models.DENSE_1T], gpus, [16384], "fp8", B, min_rows=mins)
    mp = {r["gpu"]: r["mp"] for r in fmap}
    assert mp["h100_sxm"] > mp["h200_sxm"] >= mp["b200"] >= mp["gb300"]
    moe = ms.fit_map_rows([models.MOE_1T], gpus, [16384], "fp8", B, min_rows=mins)
    text = ms.map_text(fmap + moe, gpus, 16384, B)
    assert "the global batch, not memory, sets the model parallelism of Kimi K2" in text
    assert text.endswith("Every model fits on every GPU type at every cluster size of this scenario.")


def test_sentences_for_a_single_gpu_and_a_missing_fit():
    gpus = ["h100_sxm"]
    mins = ms.min_gpus_rows(["llama31_405b"], gpus, "fp8", B)
    fmap = ms.fit_map_rows(["llama31_405b"], gpus, [8, 1024], "fp8", B, min_rows=mins)
    refs, sweeps, limits = ms.sensitivity(["llama31_405b"], gpus, fmap, mins, 8, "fp8")
    assert refs["llama31_405b"]["basis"].startswith("forced on the fewest H100 SXM GPUs")
    for text in (ms.min_gpus_text(mins, gpus), ms.tax_text(mins), ms.reserve_text(gpus),
                 ms.forced_text(fmap, gpus, 8), ms.nofit_text(fmap), ms.reference_text(refs),
                 ms.recompute_text(sweeps, refs), ms.map_text(fmap, gpus, 8, B),
                 ms.buys_text(fmap, limits, refs, gpus, 8), ms.announced_note(gpus)):
        assert isinstance(text, str) and text.endswith(".") and "None" not in text
    need = mins[0]["gpus"]
    assert ms.forced_text(fmap, gpus, 8) == f"Llama 3.1 405B: does not fit on 8 H100 SXM GPUs; it needs at least {need}."
    assert "single GPU memory size" in ms.buys_text(fmap, limits, refs, gpus, 8)
    assert ms.bound_text(fmap, 8, B) == ""
    assert ms.map_text(fmap, gpus, 8, B) == ms.forced_text(fmap, gpus, 8) + " At the other cluster sizes every model fits on every GPU type."
    # nothing fits anywhere: sentences still read
    none = [dict(r, gpus=None, gpus_text="more than 64", layout=None, hbm_per_state=None, hbm_tib=None) for r in mins]
    assert "fits on none" in ms.tax_text(none)
    assert ms.reference_layout("llama31_405b", gpus, [], none, 8) is None
    assert "no sweep" in ms.reference_text({"llama31_405b": None})


def test_extremes_prefer_shipping_parts():
    assert ms.extremes(["h100_sxm", "gb300", "rubin"]) == ("h100_sxm", "gb300")
    assert ms.extremes(["rubin"]) == ("rubin", "rubin")
    assert "Rubin NVL72 is announced" in ms.announced_note(["h100_sxm", "rubin"])


def _glue_keys(nb):
    keys = set()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                keys.add(name)
    return keys


@pytest.fixture(scope="module")
def run_notebook(tmp_path_factory):
    jupytext = pytest.importorskip("jupytext")
    pm = pytest.importorskip("papermill")
    src = jupytext.read(models.MODELS_YAML.parents[1] / "notebooks" / "memory.md")

    def run(**params):
        out = tmp_path_factory.mktemp("mem")
        old = os.environ.get("SCALETAX_FIGURES_DIR")
        os.environ["SCALETAX_FIGURES_DIR"] = str(out / "figures")
        try:
            nb = pm.execute_notebook(src, str(out / "memory.ipynb"), parameters=params, kernel_name="python3",
                                     progress_bar=False, cwd=str(out))
        finally:
            if old is None:
                os.environ.pop("SCALETAX_FIGURES_DIR", None)
            else:
                os.environ["SCALETAX_FIGURES_DIR"] = old
        return nb, out / "figures"

    return run


def test_notebook_glue_keys_do_not_depend_on_the_scenario(run_notebook):
    default, figs = run_notebook()
    keys = _glue_keys(default)
    assert {"mem_min_text", "mem_runs_text", "mem_ref_zero0_calc", "fig-mem-fitmap"} <= keys
    assert {p.stem for p in figs.glob("fig-mem-*.png")} == {p.stem for p in figs.glob("fig-mem-*.csv")}
    one_gpu, _ = run_notebook(gpus=["h100_sxm"], models=["llama31_405b"], cluster_gpus=8,
                              cluster_sizes=[8, 1024], training_precision="nvfp4")
    assert _glue_keys(one_gpu) == keys


def test_rows_searched_on_the_builds_free_slots_are_those_of_the_plain_loop(monkeypatch, free_slot):
    """In a build the model x GPU rows and the counts of the fit map are searched side by side on
    free job slots (jobserver.map, threads): the rows of the plain loop."""
    from scaletax import jobserver

    gpus = ["h100_sxm", "gb200", "gb300"]
    mins = ms.min_gpus_rows([models.DENSE_1T, models.MOE_1T], gpus, "fp8", B)
    fmap = ms.fit_map_rows([models.DENSE_1T], gpus, [8, 1024, 16384], "fp8", B, min_rows=mins)
    monkeypatch.delenv(jobserver.ENV)
    assert mins == ms.min_gpus_rows([models.DENSE_1T, models.MOE_1T], gpus, "fp8", B)
    assert fmap == ms.fit_map_rows([models.DENSE_1T], gpus, [8, 1024, 16384], "fp8", B, min_rows=mins)
