"""Execute chapter notebooks with papermill, in parallel, cached by content hash.

The cache key of a chapter is the sha256 of its jupytext source, its parameters, the
library code, the data files it declares and the lock file. A hit reuses the executed
notebook and its figures from ``_build/.cache/<key>/``; a miss executes into a temporary
folder that is renamed into the cache only when the notebook ran to the end.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scaletax import DATA_DIR
from scaletax.report.chapters import Chapter
from scaletax.report.provenance import lib_hash, lock_hash, sha256_bytes
from scaletax.report.scenario import canonical_json

EXECUTION_TIMEOUT_S = 1800
KERNEL = "python3"
#: Thread pools of the numeric libraries in every chapter process (worker, kernel and the
#: kernel's own worker processes): one thread each, so that ``--jobs`` chapters (and the
#: precision chapter's training workers) share the cores without oversubscribing them. A
#: 2-thread OpenBLAS GEMM of the training experiment's size on 2 busy cores is ~10x slower
#: than a 1-thread one; results are byte-identical.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def cache_key(ch: Chapter, parameters: dict, code_hash: str | None = None,
              definitions: dict | None = None) -> str:
    h = hashlib.sha256()
    h.update(b"source\0" + ch.source.read_bytes())
    h.update(b"params\0" + canonical_json(parameters).encode())
    if definitions and any(definitions.values()):  # scenario-defined GPUs/models the chapter reads
        h.update(b"definitions\0" + canonical_json(definitions).encode())
    h.update(b"lib\0" + (code_hash or lib_hash()).encode())
    h.update(b"lock\0" + lock_hash().encode())
    for name in sorted(ch.data):
        h.update(b"data\0" + name.encode() + b"\0" + sha256_bytes((DATA_DIR / name).read_bytes()).encode())
    return h.hexdigest()


def _execute_one(source: str, params_file: str, workdir: str) -> int:
    """Worker entry point (own process and session): papermill one notebook.

    Writes ``status.json`` (seconds, error, cell) into ``workdir``; returns 0 or 1.
    """
    import jupytext
    import papermill as pm

    work = Path(workdir)
    figures = work / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    os.environ["SCALETAX_FIGURES_DIR"] = str(figures)
    os.environ["PYTHONHASHSEED"] = "0"
    defs = work / "definitions.json"
    if defs.exists():  # GPUs / models defined in the scenario: hardware.get / models.get read them
        os.environ["SCALETAX_DEFINITIONS"] = str(defs)
    parameters = json.loads(Path(params_file).read_text(encoding="utf-8"))
    nb = jupytext.read(source)
    t0 = time.perf_counter()
    error, cell = None, None
    try:
        pm.execute_notebook(nb, str(work / "notebook.ipynb"), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(work), progress_bar=False,
                            log_output=False, execution_timeout=EXECUTION_TIMEOUT_S)
    except pm.PapermillExecutionError as exc:
        error, cell = f"{exc.ename}: {exc.evalue}".splitlines()[0][:300], exc.cell_index
    except Exception as exc:  # kernel died, timeout, unreadable notebook
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    _stable_ids(work / "notebook.ipynb")
    status = {"seconds": time.perf_counter() - t0, "error": error, "cell": cell}
    (work / "status.json").write_text(json.dumps(status), encoding="utf-8")
    return 0 if error is None else 1


def _stable_ids(path: Path) -> None:
    """Replace the random cell ids (jupytext, papermill) by their position, so that the same
    inputs give byte-identical notebooks apart from papermill's timestamps."""
    import nbformat

    if not path.exists():
        return
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    nbformat.write(nb, path)


@dataclass
class _Job:
    chapter: Chapter
    params: dict
    key: str
    work: Path
    proc: subprocess.Popen | None = None
    definitions: dict = field(default_factory=dict)


def kernel_env(cache_dir: Path, jobs: int) -> dict[str, str]:
    """Environment of a chapter process: :data:`THREAD_ENV`, the shared result cache
    (``scaletax.memo``, ``<cache_dir>/memo``) and ``SCALETAX_WORKERS`` (processes a chapter
    may use for independent work, the build's ``--jobs``)."""
    from scaletax import memo

    return {**os.environ, **THREAD_ENV, memo.ENV: str(cache_dir / "memo"),
            "SCALETAX_WORKERS": str(max(1, jobs))}


def _start(job: _Job, env: dict[str, str]) -> None:
    params_file = job.work / "parameters.json"
    params_file.write_text(canonical_json(job.params), encoding="utf-8")
    if job.definitions.get("gpus") or job.definitions.get("models"):
        (job.work / "definitions.json").write_text(canonical_json(job.definitions), encoding="utf-8")
    log = (job.work / "worker.log").open("w", encoding="utf-8")
    job.proc = subprocess.Popen(
        [sys.executable, "-m", "scaletax.report.execute", str(job.chapter.source), str(params_file),
         str(job.work)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    log.close()


def _kill(job: _Job) -> None:
    """Stop a worker and its kernel (they share the worker's process group)."""
    if job.proc is None or job.proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(job.proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            job.proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def execute_chapters(chapters: list[Chapter], scenario, cache_dir: Path, log_dir: Path,
                     jobs: int = 1, progress=None) -> list[Result]:
    """Execute (or reuse) every chapter, ``jobs`` at a time. Raises ChapterFailed.

    Each notebook runs in its own process session, so an interrupted build can stop the
    worker and its kernel together; unfinished work folders are removed.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    code = lib_hash()
    results: dict[str, Result] = {}
    pending: list[_Job] = []
    for ch in chapters:
        params = ch.parameters(scenario)
        defs = ch.definitions(scenario)
        key = cache_key(ch, params, code, defs)
        entry = cache_dir / key
        if (entry / "notebook.ipynb").exists():
            results[ch.slug] = Result(ch.slug, key, entry / "notebook.ipynb", entry / "figures",
                                      reused=True, seconds=0.0, parameters=params)
            if progress:
                progress(ch.slug, "reused (inputs unchanged)")
        else:
            pending.append(_Job(ch, params, key, Path(), definitions=defs))

    env = kernel_env(cache_dir, jobs)
    running: list[_Job] = []
    failures: list[ChapterFailed] = []
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs) and not failures:
                job = pending.pop(0)
                job.work = Path(tempfile.mkdtemp(prefix=f".tmp-{job.chapter.slug}-", dir=cache_dir))
                _start(job, env)
                running.append(job)
                if progress:
                    progress(job.chapter.slug, "executing")
            if failures and not running:
                break
            time.sleep(0.1)
            for job in [j for j in running if j.proc.poll() is not None]:
                running.remove(job)
                failure = _finish(job, cache_dir, log_dir, results, progress)
                if failure:
                    failures.append(failure)
                    pending.clear()
    finally:
        for job in running:
            _kill(job)
            shutil.rmtree(job.work, ignore_errors=True)
    if failures:
        raise failures[0]
    return [results[ch.slug] for ch in chapters]


def _finish(job: _Job, cache_dir: Path, log_dir: Path, results: dict, progress) -> ChapterFailed | None:
    slug, work = job.chapter.slug, job.work
    try:
        status = json.loads((work / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = (work / "worker.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
        status = {"seconds": 0.0, "cell": None,
                  "error": (tail[-1] if tail else f"worker exited with status {job.proc.returncode}")[:300]}
    if status["error"] is None:
        entry = cache_dir / job.key
        for name in ("status.json", "parameters.json", "worker.log", "definitions.json"):
            (work / name).unlink(missing_ok=True)
        if entry.exists():  # a concurrent build of another name filled it first
            shutil.rmtree(work, ignore_errors=True)
        else:
            os.replace(work, entry)
        results[slug] = Result(slug, job.key, entry / "notebook.ipynb", entry / "figures",
                               reused=False, seconds=status["seconds"], parameters=job.params)
        if progress:
            progress(slug, f"executed in {status['seconds']:.1f} s")
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{slug}.ipynb"
    if (work / "notebook.ipynb").exists():
        shutil.copyfile(work / "notebook.ipynb", log)
    else:
        log = log_dir / f"{slug}.log"
        shutil.copyfile(work / "worker.log", log)
    shutil.rmtree(work, ignore_errors=True)
    if progress:
        progress(slug, "FAILED")
    return ChapterFailed(slug, status["cell"], status["error"], log)


if __name__ == "__main__":
    sys.exit(_execute_one(*sys.argv[1:4]))
