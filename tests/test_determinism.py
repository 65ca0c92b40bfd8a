"""The same scenario built twice from cold, with 2 jobs and with 1, gives the same notebooks,
data, hashes and HTML."""
import json
import re

import pytest

from conftest import SMALL, run_cli

pytestmark = pytest.mark.book

VOLATILE = ("execution", "papermill")


def _strip(nb_path):
    """The notebook without papermill's timestamps and durations (cell ids are kept: they
    must be stable too)."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    nb["metadata"].pop("papermill", None)
    for cell in nb["cells"]:
        for key in VOLATILE:
            cell["metadata"].pop(key, None)
    return json.dumps(nb, sort_keys=True, indent=1)


def _page(path):
    """A page's bytes, its build date (and time) aside: the one thing two builds may differ in."""
    return re.sub(rb"\d{4}-\d{2}-\d{2}( \d{2}:\d{2} UTC)?", b"<date>", path.read_bytes())


def test_cold_builds_are_identical(built_book, tmp_path):
    other = tmp_path / "again"  # an empty build folder: same as after `make clean`
    # one job: chapters one after another (the built book ran two at once)
    proc = run_cli(["build", *SMALL, "--name", "small", "--no-pdf", "--jobs", "1"], other)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m1 = built_book["manifest"]
    m2 = json.loads((other / "small" / "manifest.json").read_text())
    assert {n["status"] for n in m2["notebooks"]} == {"executed"}
    assert [n["content_sha256"] for n in m1["notebooks"]] == [n["content_sha256"] for n in m2["notebooks"]]
    assert m1["scenario_sha256"] == m2["scenario_sha256"]
    for n in m1["notebooks"]:
        a = built_book["build_dir"] / ".cache" / n["content_sha256"] / "notebook.ipynb"
        b = other / ".cache" / n["content_sha256"] / "notebook.ipynb"
        assert _strip(a) == _strip(b), f"{n['chapter']}: executed notebook differs"
    figs1 = sorted((built_book["dir"] / "figures").glob("*.csv"))
    assert figs1
    for f in figs1:
        assert f.read_bytes() == (other / "small" / "figures" / f.name).read_bytes(), f.name
    # every page (the search index is left out: it holds the build's date and time as words)
    pages = sorted(p.relative_to(built_book["dir"] / "html") for p in (built_book["dir"] / "html").rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        assert _page(built_book["dir"] / "html" / page) == _page(other / "small" / "html" / page), page
