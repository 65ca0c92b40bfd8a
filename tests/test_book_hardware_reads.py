"""The small book's chapters are keyed on the GPU rows they read; a catalog edit re-executes
only the chapters (and, inside them, the searches) that read the edited GPU."""
import csv
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, SCALETAX, SMALL, edit_gpu_row
from scaletax import memo
from scaletax.inputs import references, runs
from scaletax.chapters import decision, precision

pytestmark = pytest.mark.book

SMALL_GPUS = {"h100_sxm", "gb200"}  # SMALL's gpus=[...]


def _csv_ids(name: str, column: str) -> set[str]:
    return {r[column] for r in csv.DictReader((ROOT / "data" / name).read_text(encoding="utf-8").splitlines())}


def _rows(manifest) -> dict:
    return {n["chapter"]: n["gpu_rows"] for n in manifest["notebooks"]}


def test_each_chapter_is_keyed_on_the_gpus_it_reads(built_book):
    rows = _rows(built_book["manifest"])
    published = {r["hardware"] for r in runs.read_runs(runs.RUNS_CSV)}
    comparisons = yaml.safe_load((ROOT / "data/scenarios/default.yaml").read_text())["comparisons"]
    compared = {comparisons["baseline"], comparisons["hopper_reference"], *comparisons["heq_hopper"]}
    assert rows["hardware"] == sorted(SMALL_GPUS)
    fitted = {r["hardware"] for r in runs.fitted_runs()}
    # the scenario's GPUs and those of every published run (calibration and validation tables), whose
    # share of peak and precision tax the chapter states
    assert rows["precision"] == sorted(SMALL_GPUS | fitted | {precision.REFERENCE_GPU})
    assert rows["memory"] == sorted(SMALL_GPUS | published)
    heldout = {r["hardware"] for r in runs.read_runs(runs.HELDOUT_CSV)}
    validation = {r["hardware"] for r in runs.read_runs(runs.VALIDATION_CSV)}
    # and the published and held-out runs' GPUs: the largest measured run bounds its step times; and
    # the validation table's, whose measured MoE runs set every search's floors (plan.validated_space
    # reads the three tables, each row checked against the catalog)
    assert rows["communication"] == sorted(SMALL_GPUS | _csv_ids("collectives.csv", "hardware") | published | heldout
                                           | validation)
    # the refit of the calibration scans GPU families (efficiency.power_per_flop): the whole catalog
    assert rows["validation"] == "all"
    assert SMALL_GPUS | compared <= set(rows["decision"]) <= set(rows["summary"])  # the summary is built on it
    # beyond the scenario, its comparisons and fleets: the GPUs of the fitted runs, whose best
    # measured MFU per family bounds the cases' MFU (summary.mfu_validity_sentence)
    fleets = {f["gpu"] for f in yaml.safe_load((ROOT / "data/scenarios/default.yaml").read_text())["fleets"]}
    claim = references.claim(decision.CLAIM_KEY)  # the announced claim the decision chapter checks
    known = (SMALL_GPUS | compared | set(comparisons["heq_blackwell"]) | fleets | fitted | {claim["new"], claim["old"]}
             | published | heldout | validation)  # the search's floors read the measured-run tables
    for slug in ("decision", "summary"):
        assert set(rows[slug]) <= known, (slug, set(rows[slug]) - known)
    repro = (built_book["dir"] / "html" / "reproduce.html").read_text(encoding="utf-8")
    assert "hardware: the rows of <code" in repro and "validation: the whole catalog" in repro


def _project_copy(tmp_path):
    """The project's sources and data in a folder of their own (same bytes, so the same chapter
    keys as the built book's), whose data/ a test may edit."""
    root = tmp_path / "project"
    for name in ("lib", "notebooks", "data", "book"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("_config.yml", "requirements.lock"):
        shutil.copy2(ROOT / name, root / name)
    return root


def _search_pickles(build_dir):
    return set((build_dir / ".cache" / "memo" / "scaletax.model.search.search").glob("*.pkl"))


def test_a_gpu_row_edit_reexecutes_only_the_chapters_and_searches_that_read_it(built_book, tmp_path):
    build_dir = built_book["build_dir"]
    rows = _rows(built_book["manifest"])
    project = _project_copy(tmp_path)
    # b300: read by the whole-catalog reader and by the chapters that state the validation table's
    # runs (precision, decision, summary), not by hardware or memory; h800_sxm: one of the default
    # scenario's comparison GPUs (decision, summary) and in collectives.csv (communication)
    edit_gpu_row(project / "data" / "hardware.csv", "b300", "tdp_w", "1234")
    edit_gpu_row(project / "data" / "hardware.csv", "h800_sxm", "tdp_w", "777")
    before = _search_pickles(build_dir)
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), PYTHONPATH=str(project / "lib"), PYTHONUNBUFFERED="1")
    proc = subprocess.run(SCALETAX + ["build", *SMALL, "--name", "edited", "--no-pdf", "--jobs", "2"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((build_dir / "edited" / "manifest.json").read_text())
    assert m["data_sha256"]["data/hardware.csv"] != built_book["manifest"]["data_sha256"]["data/hardware.csv"]
    executed = {n["chapter"] for n in m["notebooks"] if n["status"] == "executed"}
    readers = {slug for slug, got in rows.items() if got == "all" or {"b300", "h800_sxm"} & set(got or ())}
    assert executed == readers
    assert {"hardware", "memory"}.isdisjoint(executed) and {"decision", "validation", "precision"} <= executed
    # inside the re-executed chapters only the searches on the edited GPU ran again
    new = _search_pickles(build_dir) - before
    gpus = set()
    for path in new:
        status, payload = memo.read_entry(path)
        assert status == "hit", path
        gpus.add(pickle.loads(payload).gpu)
    assert gpus == {"h800_sxm"}
