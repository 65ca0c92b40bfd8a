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

from conftest import ROOT, SCALETAX
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
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
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


@pytest.mark.kernels
def test_two_builds_executing_the_same_chapter_both_succeed(tiny, tmp_path):
    cache = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from test_cache import TinyChapter, Scen
        from scaletax.report import execute
        ch = TinyChapter("tiny", reads=("value",), data=(), path={str(tiny.source)!r})
        work = Path(sys.argv[1]); work.mkdir()
        (res,) = execute.execute_chapters([ch], Scen(), Path({str(cache)!r}), work / "logs", work_dir=work)
        print(res.reused, (res.figures / "tiny.csv").read_text().split()[1])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"w{i}")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.split()[-1] == "7"
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
