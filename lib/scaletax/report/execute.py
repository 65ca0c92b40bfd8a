"""Execute chapter notebooks with papermill, in parallel, cached by content hash.

The cache key of a chapter is the sha256 of its jupytext source, its parameters, the
library code, the data files it declares and the lock file. A hit reuses the executed
notebook and its figures from ``_build/.cache/<key>/``; a miss executes into a temporary
folder that is renamed into the cache only when the notebook ran to the end.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from scaletax import DATA_DIR
from scaletax.report.chapters import Chapter
from scaletax.report.provenance import lib_hash, lock_hash, sha256_bytes
from scaletax.report.scenario import canonical_json

EXECUTION_TIMEOUT_S = 1800
KERNEL = "python3"


class ChapterFailed(RuntimeError):
    """A notebook raised; carries where and the path of the executed notebook."""

    def __init__(self, slug: str, cell: int | None, error: str, log: Path):
        self.slug, self.cell, self.error, self.log = slug, cell, error, log
        where = f"cell {cell}" if cell is not None else "setup"
        super().__init__(f"chapter {slug!r} failed in {where}: {error}; executed notebook with "
                         f"the traceback: {log}")


@dataclass
class Result:
    slug: str
    key: str
    notebook: Path
    figures: Path
    reused: bool
    seconds: float
    parameters: dict = field(default_factory=dict)


def cache_key(ch: Chapter, parameters: dict, code_hash: str | None = None) -> str:
    h = hashlib.sha256()
    h.update(b"source\0" + ch.source.read_bytes())
    h.update(b"params\0" + canonical_json(parameters).encode())
    h.update(b"lib\0" + (code_hash or lib_hash()).encode())
    h.update(b"lock\0" + lock_hash().encode())
    for name in sorted(ch.data):
        h.update(b"data\0" + name.encode() + b"\0" + sha256_bytes((DATA_DIR / name).read_bytes()).encode())
    return h.hexdigest()


def _execute_one(slug: str, source: str, parameters: dict, workdir: str) -> tuple[float, str | None, int | None]:
    """Run in a worker process: papermill one notebook. Returns (seconds, error, cell)."""
    import jupytext
    import papermill as pm

    work = Path(workdir)
    figures = work / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    os.environ["SCALETAX_FIGURES_DIR"] = str(figures)
    os.environ["PYTHONHASHSEED"] = "0"
    nb = jupytext.read(source)
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(nb, str(work / "notebook.ipynb"), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(work), progress_bar=False,
                            log_output=False, execution_timeout=EXECUTION_TIMEOUT_S)
    except pm.PapermillExecutionError as exc:
        return time.perf_counter() - t0, f"{exc.ename}: {exc.evalue}".splitlines()[0][:300], exc.cell_index
    except Exception as exc:  # kernel died, timeout, bad notebook
        return time.perf_counter() - t0, f"{type(exc).__name__}: {exc}".splitlines()[0][:300], None
    return time.perf_counter() - t0, None, None


def execute_chapters(chapters: list[Chapter], scenario, cache_dir: Path, log_dir: Path,
                     jobs: int = 1, progress=None) -> list[Result]:
    """Execute (or reuse) every chapter. Raises ChapterFailed for the first failure."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    code = lib_hash()
    results: dict[str, Result] = {}
    todo = []
    for ch in chapters:
        params = ch.parameters(scenario)
        key = cache_key(ch, params, code)
        entry = cache_dir / key
        if (entry / "notebook.ipynb").exists():
            results[ch.slug] = Result(ch.slug, key, entry / "notebook.ipynb", entry / "figures",
                                      reused=True, seconds=0.0, parameters=params)
            if progress:
                progress(ch.slug, "reused")
        else:
            todo.append((ch, params, key))

    failures: list[ChapterFailed] = []
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo)))) as pool:
            futures = {}
            for ch, params, key in todo:
                work = Path(tempfile.mkdtemp(prefix=f".tmp-{ch.slug}-", dir=cache_dir))
                fut = pool.submit(_execute_one, ch.slug, str(ch.source), params, str(work))
                futures[fut] = (ch, params, key, work)
                if progress:
                    progress(ch.slug, "queued")
            for fut in as_completed(futures):
                ch, params, key, work = futures[fut]
                try:
                    seconds, error, cell = fut.result()
                except Exception as exc:  # the worker itself died
                    seconds, error, cell = 0.0, f"{type(exc).__name__}: {exc}", None
                if error is None:
                    entry = cache_dir / key
                    if entry.exists():  # a concurrent build filled it first
                        shutil.rmtree(work, ignore_errors=True)
                    else:
                        os.replace(work, entry)
                    results[ch.slug] = Result(ch.slug, key, entry / "notebook.ipynb",
                                              entry / "figures", reused=False,
                                              seconds=seconds, parameters=params)
                    if progress:
                        progress(ch.slug, f"executed in {seconds:.1f} s")
                else:
                    log_dir.mkdir(parents=True, exist_ok=True)
                    log = log_dir / f"{ch.slug}.ipynb"
                    if (work / "notebook.ipynb").exists():
                        shutil.copyfile(work / "notebook.ipynb", log)
                    shutil.rmtree(work, ignore_errors=True)
                    failures.append(ChapterFailed(ch.slug, cell, error, log))
                    if progress:
                        progress(ch.slug, "FAILED")
    if failures:
        raise failures[0]
    return [results[ch.slug] for ch in chapters]
