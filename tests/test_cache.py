"""The execution cache verifies what it reuses, installs entries atomically and stays under its cap."""
import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, SCALETAX, edit_gpu_row
from scaletax.report import execute
from scaletax.report.chapters import Chapter

NOTEBOOK = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Tiny

```{code-cell} ipython3
:tags: [parameters]
value = 1
```

```{code-cell} ipython3
import os, pathlib
figs = pathlib.Path(os.environ["SCALETAX_FIGURES_DIR"])
(figs / "tiny.csv").write_text(f"value\\n{value}\\n")
(figs / "tiny2.csv").write_text("x\\n1\\n")
print(value)
```
"""


@dataclass(frozen=True)
class TinyChapter(Chapter):
    path: str = ""

    @property
    def source(self):
        return Path(self.path)


class Scen:
    """The part of a Scenario that execute_chapters reads."""

    gpu_ids: list = []
    model_ids: list = []

    def get(self, key):
        return {"value": 7}[key]

    def definitions(self):
        return {"gpus": {}, "models": {}}


@pytest.fixture
def tiny(tmp_path):
    src = tmp_path / "tiny.md"
    src.write_text(NOTEBOOK)
    return TinyChapter("tiny", reads=("value",), data=(), path=str(src))


def _run(ch, cache, tmp_path, tag="w", notes=None):
    work = tmp_path / f"work-{tag}"
    work.mkdir(exist_ok=True)
    progress = (lambda slug, msg: notes.append(msg)) if notes is not None else None
    (res,) = execute.execute_chapters([ch], Scen(), cache, tmp_path / "logs", progress=progress, work_dir=work)
    return res


def _entry(cache):
    (entry,) = [p for p in cache.iterdir() if execute._KEY.fullmatch(p.name)]  # not seconds.json, reads/
    return entry


@pytest.mark.kernels
@pytest.mark.parametrize("damage", ["edit", "truncate", "remove-figure", "add-file", "record"])
def test_a_damaged_entry_is_discarded_and_executed_again(tiny, tmp_path, damage):
    cache = tmp_path / "cache"
    first = _run(tiny, cache, tmp_path, "a")
    assert not first.reused and first.execution["seconds"] >= 0
    entry = _entry(cache)
    record = json.loads((entry / execute.ENTRY_FILE).read_text())
    assert set(record["files"]) == {"notebook.ipynb", "figures/tiny.csv", "figures/tiny2.csv"}
    again = _run(tiny, cache, tmp_path, "b")
    assert again.reused and again.execution == first.execution  # the real execution's record
    nb = entry / "notebook.ipynb"
    if damage == "edit":
        nb.write_text(nb.read_text().replace("Tiny", "Tampered"))
    elif damage == "truncate":
        nb.write_bytes(nb.read_bytes()[:100])
    elif damage == "remove-figure":
        (entry / "figures" / "tiny2.csv").unlink()
    elif damage == "add-file":
        (entry / "figures" / "extra.csv").write_text("injected\n")
    else:
        (entry / execute.ENTRY_FILE).write_text("{not json")
    notes = []
    third = _run(tiny, cache, tmp_path, "c", notes)
    assert not third.reused
    (note,) = [n for n in notes if "discarded" in n]
    assert note.startswith("cache entry discarded (") and note.endswith("): executing again")
    assert "Tampered" not in third.notebook.read_text()
    assert sorted(p.name for p in third.figures.iterdir()) == ["tiny.csv", "tiny2.csv"]
    assert execute.check_entry(_entry(cache), third.key)[1] is None  # repaired


@pytest.mark.kernels
def test_a_reused_entry_is_a_private_copy(tiny, tmp_path):
    cache = tmp_path / "cache"
    _run(tiny, cache, tmp_path, "a")
    res = _run(tiny, cache, tmp_path, "b")
    assert res.reused and tmp_path / "work-b" in res.notebook.parents
    import shutil

    shutil.rmtree(_entry(cache))  # e.g. removed by another build while Sphinx runs
    assert res.notebook.is_file() and (res.figures / "tiny2.csv").is_file()


def _two_builds_at_once(tmp_path, cache, chapter: str, shown: str) -> list[str]:
    """``execute_chapters`` of one chapter (``chapter``: the Python expression of a TinyChapter)
    in two processes at once; the last word each printed of ``shown`` (an expression of ``res``)."""
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from test_cache import TinyChapter, Scen
        from scaletax.report import execute
        ch = {chapter}
        work = Path(sys.argv[1]); work.mkdir()
        (res,) = execute.execute_chapters([ch], Scen(), Path({str(cache)!r}), work / "logs", work_dir=work)
        print(res.reused, {shown})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"w{i}")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    words = []
    for p, (out, err) in zip(procs, [p.communicate(timeout=600) for p in procs]):
        assert p.returncode == 0, err[-2000:]
        words.append(out.split()[-1])
    return words


@pytest.mark.kernels
def test_two_builds_executing_the_same_chapter_both_succeed(tiny, tmp_path):
    cache = tmp_path / "cache"
    chapter = f'TinyChapter("tiny", reads=("value",), data=(), path={str(tiny.source)!r})'
    assert _two_builds_at_once(tmp_path, cache, chapter, '(res.figures / "tiny.csv").read_text().split()[1]') == ["7", "7"]
    assert execute.check_entry(_entry(cache))[1] is None
    assert not list(cache.glob(".tmp-*"))


def _fake_entry(cache, name, size, age):
    e = cache / name
    (e / "figures").mkdir(parents=True)
    (e / "notebook.ipynb").write_bytes(b"x" * size)
    record = {"key": name, "chapter": "c", "files": execute._files(e), "execution": {}}
    (e / execute.ENTRY_FILE).write_text(json.dumps(record))
    t = time.time() - age
    os.utime(e, (t, t))
    return e


def test_prune_evicts_least_recently_used_and_bad_entries(tmp_path):
    cache = tmp_path / "cache"
    old = _fake_entry(cache, "a" * 64, 4000, 300)
    mid = _fake_entry(cache, "b" * 64, 4000, 200)
    new = _fake_entry(cache, "c" * 64, 4000, 100)
    kept = _fake_entry(cache, "d" * 64, 4000, 400)  # oldest, but used by this build
    bad = _fake_entry(cache, "e" * 64, 10, 50)
    (bad / "notebook.ipynb").write_bytes(b"changed")
    res = execute.prune(cache, 9000, keep=frozenset({kept.name}), check=True)
    assert res["bad"] == 1 and res["evicted"] == 2
    assert not old.exists() and not mid.exists() and not bad.exists()
    assert new.exists() and kept.exists()


def test_cache_prune_command(tmp_path):
    cache = tmp_path / "build" / ".cache"
    _fake_entry(cache, "a" * 64, 3 * 1024**2, 300)
    _fake_entry(cache, "b" * 64, 1024, 100)
    (cache / ".tmp-hardware-p999999999-abcd").mkdir()  # a dead build's work folder
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(tmp_path / "build"))
    proc = subprocess.run(SCALETAX + ["cache", "prune", "--max-mb", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "removed 0 bad, 1 least recently used, 1 stale temporary; 1 entries" in proc.stdout
    assert [p.name for p in cache.iterdir()] == ["b" * 64]
    bad = subprocess.run(SCALETAX + ["cache", "prune"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(env, SCALETAX_CACHE_MAX_MB="lots"))
    assert bad.returncode == 2
    assert bad.stderr.strip() == "scaletax: error: SCALETAX_CACHE_MAX_MB='lots': expected a whole number of MiB"


# --- keyed on the GPU rows a chapter read -----------------------------------------------------
READER = NOTEBOOK.replace('''print(value)
```''', '''print(value)
```

```{code-cell} ipython3
from scaletax.inputs import hardware
hardware.HARDWARE_CSV = pathlib.Path(os.environ["TEST_HARDWARE_CSV"])  # the test's copy of the catalog
hardware.catalog.cache_clear()
READS
(figs / "read.csv").write_text("ok\\n")
```''')


def _reader(tmp_path, slug, reads, data=("hardware.csv",)):
    src = tmp_path / f"{slug}.md"
    src.write_text(READER.replace("READS", reads))
    return TinyChapter(slug, reads=("value",), data=data, path=str(src))


@pytest.fixture
def catalog_copy(tmp_path, monkeypatch):
    """A copy of data/hardware.csv that this process and the chapter kernels read."""
    from scaletax.inputs import hardware

    path = tmp_path / "hardware.csv"
    path.write_bytes(hardware.HARDWARE_CSV.read_bytes())
    monkeypatch.setattr(hardware, "HARDWARE_CSV", path)
    monkeypatch.setenv("TEST_HARDWARE_CSV", str(path))
    hardware.catalog.cache_clear()
    yield path
    hardware.catalog.cache_clear()


def _build(chapters, cache, tmp_path, tag):
    from scaletax.inputs import hardware

    hardware.catalog.cache_clear()  # the CSV changed under this process
    work = tmp_path / f"work-{tag}"
    work.mkdir()
    res = execute.execute_chapters(chapters, Scen(), cache, tmp_path / "logs", jobs=2, work_dir=work)
    return {r.slug: r for r in res}


@pytest.mark.kernels
def test_a_gpu_row_edit_reexecutes_only_the_chapters_that_read_that_gpu(tmp_path, catalog_copy):
    chapters = [_reader(tmp_path, "h100", "hardware.get('h100_sxm').tdp_w"),
                _reader(tmp_path, "b300", "[hardware.get(g).hbm_gib for g in ('b300', 'b300')]"),
                _reader(tmp_path, "everything", "hardware.catalog()"),
                _reader(tmp_path, "nothing", "None")]
    cache = tmp_path / "cache"
    first = _build(chapters, cache, tmp_path, "a")
    assert not any(r.reused for r in first.values())
    assert {s: r.hardware_reads for s, r in first.items()} == {
        "h100": ("h100_sxm",), "b300": ("b300",), "everything": ("*",), "nothing": ()}
    record = json.loads((cache / first["b300"].key / execute.ENTRY_FILE).read_text())
    assert record["hardware_reads"] == ["b300"] and execute.READS_FILE not in record["files"]
    index = json.loads((cache / execute.READS_DIR / f"{record['base_key']}.json").read_text())
    assert index == {"hardware_reads": ["b300"], "key": first["b300"].key}

    assert all(r.reused for r in _build(chapters, cache, tmp_path, "b").values())

    edit_gpu_row(catalog_copy, "b300", "tdp_w", "1234")  # a GPU only one chapter reads
    third = _build(chapters, cache, tmp_path, "c")
    assert {s for s, r in third.items() if not r.reused} == {"b300", "everything"}

    edit_gpu_row(catalog_copy, "h100_sxm", "nic_gbit_s", "1234")
    fourth = _build(chapters, cache, tmp_path, "d")
    assert {s for s, r in fourth.items() if not r.reused} == {"h100", "everything"}

    catalog_copy.write_bytes((ROOT / "data" / "hardware.csv").read_bytes())  # both edits undone
    fifth = _build(chapters, cache, tmp_path, "e")
    assert all(r.reused for r in fifth.values())  # the entries of the first build, found again
    assert {s: r.key for s, r in fifth.items()} == {s: r.key for s, r in first.items()}


@pytest.mark.kernels
def test_an_entry_without_its_record_of_rows_is_not_reused(tmp_path, catalog_copy):
    ch = _reader(tmp_path, "h100", "hardware.get('h100_sxm')")
    cache = tmp_path / "cache"
    first = _build([ch], cache, tmp_path, "a")["h100"]
    entry = cache / first.key
    record = json.loads((entry / execute.ENTRY_FILE).read_text())
    del record["hardware_reads"]  # an entry written before the rows were recorded
    (entry / execute.ENTRY_FILE).write_text(json.dumps(record))
    again = _build([ch], cache, tmp_path, "b")["h100"]
    assert not again.reused and again.key == first.key and again.hardware_reads == ("h100_sxm",)
    (cache / execute.READS_DIR / f"{record['base_key']}.json").unlink()  # no index: nothing to look up
    assert not _build([ch], cache, tmp_path, "c")["h100"].reused


@pytest.mark.kernels
def test_a_chapter_that_reads_gpus_without_declaring_hardware_csv_fails(tmp_path, catalog_copy):
    ch = _reader(tmp_path, "sneaky", "hardware.get('gb300')", data=())
    with pytest.raises(execute.ChapterFailed, match=r"chapter 'sneaky' failed in setup: it read the GPU catalog "
                                                    r"\(rows of gb300\) but does not declare hardware.csv"):
        _build([ch], tmp_path / "cache", tmp_path, "a")
    assert not [p for p in (tmp_path / "cache").iterdir() if execute._KEY.fullmatch(p.name)]


def test_prune_drops_records_of_reads_whose_entry_is_gone(tmp_path):
    cache = tmp_path / "cache"
    kept = _fake_entry(cache, "a" * 64, 10, 100)
    execute._write_reads_index(cache, "1" * 64, kept.name, ("h100_sxm",))
    execute._write_reads_index(cache, "2" * 64, "b" * 64, ("gb200",))  # its entry was evicted
    execute.prune(cache, 10**9)
    assert sorted(p.name for p in (cache / execute.READS_DIR).iterdir()) == ["1" * 64 + ".json"]
    assert execute.recorded_reads(cache, "1" * 64) == ("h100_sxm",)
    assert execute.recorded_reads(cache, "2" * 64) is None


@pytest.mark.kernels
def test_two_builds_executing_the_same_row_keyed_chapter_both_succeed(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_HARDWARE_CSV", str(ROOT / "data" / "hardware.csv"))
    ch = _reader(tmp_path, "gb300", "hardware.get('gb300')")
    cache = tmp_path / "cache"
    chapter = f'TinyChapter("gb300", reads=("value",), data=("hardware.csv",), path={str(ch.source)!r})'
    assert _two_builds_at_once(tmp_path, cache, chapter, '",".join(res.hardware_reads)') == ["gb300", "gb300"]
    (entry,) = [p for p in cache.iterdir() if execute._KEY.fullmatch(p.name)]
    record, problem = execute.check_entry(entry, entry.name)
    assert problem is None and record["hardware_reads"] == ["gb300"]
    assert execute.recorded_reads(cache, record["base_key"]) == ("gb300",)
    assert not list(cache.glob(".tmp-*")) and not list((cache / execute.READS_DIR).glob(".tmp-*"))
