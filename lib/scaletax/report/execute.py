"""Execute chapter notebooks, cached by content hash: the build's chapter runner.

The cache key of a chapter is the sha256 of its jupytext source, its parameters, the
library code, the data files it declares and the lock file. A hit reuses the executed
notebook and its figures from ``_build/.cache/<key>/``; a miss executes into a temporary
folder that is renamed into the cache only when the notebook ran to the end.

Of the GPU catalog (:data:`ROW_FILES`: ``hardware.csv`` and the ``systems.csv`` merged into
its rows) a chapter that declares ``hardware.csv`` is keyed on exactly the rows it read: its
kernel records every catalog read (``scaletax.inputs.hardware``, the file named by
``SCALETAX_HARDWARE_READS`` in its work folder), and the entry's key is its
:func:`base_key` (every other input) plus :func:`rows_hash` of those ids' resolved rows now (a
missing id as missing; the whole files when it read the whole catalog). The record is kept in
the entry (``entry.json``) and in an index by base key (``<cache>/reads/<base key>.json``), so
a later build finds the ids from the base key, hashes those rows as they are now and reuses the
entry only when they are unchanged: an edit of one GPU's row re-executes only the chapters that
read that GPU. A chapter that reads the catalog without declaring ``hardware.csv`` fails.

An entry is trusted only after checking it: ``entry.json`` lists the sha256 of every file
it holds, and a reused entry is copied into the build's own folder and checked there (so
neither an edit nor a removal of the cache during the build reaches the book). A bad entry
is discarded and the chapter executed again, with a one-line note. Entries appear by one
rename, so concurrent builds of the same chapter both succeed. The cache is held under a
size cap (``SCALETAX_CACHE_MAX_MB``, default :data:`CACHE_MAX_BYTES`) by evicting the least
recently used entries; ``scaletax cache prune`` does the same on demand.

Execution: the build process drives up to ``jobs`` notebooks at once with nbclient on one
asyncio event loop (:func:`_execute_all`), longest first (``Chapter.cold_seconds``: the longest
does not start last); each chapter gets a fresh ipykernel process of its
own (own session, SIGKILL when the build dies: ``lifecycle.die_with_parent``), its parameters
injected by papermill's ``parameterize_notebook`` first. A signal cancels the loop
(``lifecycle.run_async``): every running kernel is shut down, its process group killed, and
the unfinished work folders removed.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scaletax import DATA_DIR, files, speedups
from scaletax.inputs import hardware
from scaletax.report import lifecycle
from scaletax.report.chapters import Chapter
from scaletax.report.provenance import lib_hash, lock_hash, sha256_bytes
from scaletax.report.scenario import canonical_json

EXECUTION_TIMEOUT_S = 1800
KERNEL = "python3"
#: Environment variable with the build's ``--jobs``: the processes a chapter may use for
#: independent work (the precision experiment's trainings).
WORKERS_ENV = "SCALETAX_WORKERS"
#: Thread pools of the numeric libraries in every chapter process (kernel and the kernel's own
#: worker processes): one thread each, so that ``--jobs`` chapters (and the precision chapter's
#: training workers) share the cores without oversubscribing them. A 2-thread OpenBLAS GEMM of
#: the training experiment's size on 2 busy cores is ~10x slower than a 1-thread one; results
#: are byte-identical.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: glibc malloc settings of every build process (kernel and its training workers, Sphinx): blocks
#: up to 256 MiB come from the heap, and free memory at the heap's top is kept up to 1 GiB.
#: glibc's defaults (mallopt(3): M_MMAP_THRESHOLD 128 KiB, raised dynamically to at most 32 MiB;
#: M_TRIM_THRESHOLD twice that) give each numpy temporary of a few MiB fresh pages from mmap,
#: which the kernel zeroes and faults in on every use. Measured on the communication chapter
#: alone: 1.84 M -> 0.19 M minor page faults, 6.6 -> 1.4 s system CPU, the same peak RSS.
#: Placement of allocations only: results are byte-identical. A GLIBC_TUNABLES already set in the
#: environment is kept as it is; other C libraries ignore the variable.
ALLOCATOR_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824"}


def process_env(**extra: str) -> dict[str, str]:
    """Environment of a build process: ``os.environ`` with :data:`THREAD_ENV`,
    :data:`ALLOCATOR_ENV` (unless GLIBC_TUNABLES is set) and ``extra``."""
    allocator = {} if "GLIBC_TUNABLES" in os.environ or not speedups.on("allocator") else ALLOCATOR_ENV
    threads = THREAD_ENV if speedups.on("one_thread") else {}
    return {**os.environ, **threads, **allocator, **extra}


ENTRY_FILE = "entry.json"
#: Data files a chapter that declares ``hardware.csv`` is keyed on through the rows it read.
ROW_FILES = ("hardware.csv", "systems.csv")
#: Where a chapter kernel records its catalog reads (in its work folder; not kept in the entry).
READS_FILE = "hardware_reads.txt"
#: The kernel's own stdout and stderr (in its work folder; not kept in the entry).
KERNEL_LOG = "kernel.log"
#: Folder of the cache holding the record of reads by base key.
READS_DIR = "reads"
#: Default size cap of the execution cache (bytes); ``SCALETAX_CACHE_MAX_MB`` overrides.
CACHE_MAX_BYTES = 2 * 1024**3


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
    #: the execution that made the notebook: {"executed_at": ..., "seconds": ...}
    execution: dict = field(default_factory=dict)
    #: the catalog ids it was keyed on (``("*",)``: the whole catalog); None: no hardware.csv
    hardware_reads: tuple[str, ...] | None = None


def reads_rows(ch: Chapter) -> bool:
    """Whether ``ch`` is keyed on the catalog rows it read (it declares ``hardware.csv``)."""
    return "hardware.csv" in ch.data


def base_key(ch: Chapter, parameters: dict, code_hash: str | None = None,
             definitions: dict | None = None) -> str:
    """sha256 of every input of a chapter but the catalog rows it reads: source, parameters,
    scenario-defined GPUs/models it reads, library code, lock file and its data files (without
    :data:`ROW_FILES` for a chapter that :func:`reads_rows`). The key of a chapter that does not
    read rows."""
    h = hashlib.sha256()
    h.update(b"source\0" + ch.source.read_bytes())
    h.update(b"params\0" + canonical_json(parameters).encode())
    if definitions and any(definitions.values()):  # scenario-defined GPUs/models the chapter reads
        h.update(b"definitions\0" + canonical_json(definitions).encode())
    h.update(b"lib\0" + (code_hash or lib_hash()).encode())
    h.update(b"lock\0" + lock_hash().encode())
    rows = reads_rows(ch)
    for name in sorted(ch.data):
        if rows and name in ROW_FILES:
            continue
        h.update(b"data\0" + name.encode() + b"\0" + sha256_bytes((DATA_DIR / name).read_bytes()).encode())
    return h.hexdigest()


def rows_hash(reads: tuple[str, ...]) -> str:
    """sha256 of the catalog as ``reads`` saw it: each id with its resolved row now
    (``data/hardware.csv`` merged with ``data/systems.csv``; a missing id as missing), or the
    bytes of both files for ``("*",)`` (the whole catalog)."""
    h = hashlib.sha256()
    if hardware.ALL in reads:
        for name, path in zip(ROW_FILES, (hardware.HARDWARE_CSV, hardware.SYSTEMS_CSV)):
            h.update(b"file\0" + name.encode() + b"\0"
                     + (sha256_bytes(path.read_bytes()) if path.exists() else "missing").encode())
        return h.hexdigest()
    cat = hardware._data_catalog()
    rows = {gid: cat[gid].model_dump(mode="json") if gid in cat else None for gid in sorted(reads)}
    h.update(b"rows\0" + canonical_json(rows).encode())
    return h.hexdigest()


def entry_key(base: str, reads: tuple[str, ...]) -> str:
    """The cache key of a chapter that :func:`reads_rows`: its base key and the rows it read."""
    return hashlib.sha256(f"{base}\0{rows_hash(reads)}".encode()).hexdigest()


def inputs_key(ch: Chapter, parameters: dict, code_hash: str | None = None,
               definitions: dict | None = None) -> str:
    """A hash of every input of a chapter with the catalog files whole (what the book key
    holds: any catalog edit rebuilds the book's pages, which print the data hashes)."""
    key = base_key(ch, parameters, code_hash, definitions)
    return entry_key(key, (hardware.ALL,)) if reads_rows(ch) else key


def _reads_index(cache_dir: Path, base: str) -> Path:
    return cache_dir / READS_DIR / f"{base}.json"


def recorded_reads(cache_dir: Path, base: str) -> tuple[str, ...] | None:
    """The catalog reads recorded for ``base`` by the last execution, or None (never executed,
    or an unreadable record)."""
    try:
        rec = json.loads(_reads_index(cache_dir, base).read_text(encoding="utf-8"))
        reads = rec["hardware_reads"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(reads, list) or not all(isinstance(r, str) for r in reads):
        return None
    return tuple(reads)


def _write_reads_index(cache_dir: Path, base: str, key: str, reads: tuple[str, ...]) -> None:
    """Record ``reads`` (and the entry they made) for ``base``, in one rename."""
    path = _reads_index(cache_dir, base)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace_atomically(path, json.dumps({"hardware_reads": list(reads), "key": key}),
                             prefix=lifecycle.temp_name(".tmp-"), suffix="")  # pid in the name: remove_stale


# --------------------------------------------------------------------------------------
# Executing
# --------------------------------------------------------------------------------------
def kernel_env(cache_dir: Path, jobs: int) -> dict[str, str]:
    """Environment of every chapter kernel (:func:`process_env`): the shared result cache
    (``scaletax.memo``, ``<cache_dir>/memo``), :data:`WORKERS_ENV` (the build's ``--jobs``) and a
    fixed hash seed."""
    from scaletax import memo

    env = process_env(**{memo.ENV: str(cache_dir / "memo"), WORKERS_ENV: str(max(1, jobs)), "PYTHONHASHSEED": "0"})
    if not speedups.on("memo"):
        env.pop(memo.ENV)
    return env


def _notebook(source: Path, parameters: dict):
    """The chapter's notebook with ``parameters`` (if any) injected after its ``parameters`` cell,
    by papermill (a cell tagged ``injected-parameters``)."""
    import jupytext
    from papermill.parameterize import parameterize_notebook

    nb = jupytext.read(source)
    if not parameters:
        return nb
    for cell in nb.cells:  # what papermill's own reader adds before it parameterizes
        cell.metadata.setdefault("tags", [])
    nb.metadata["papermill"] = {"default_parameters": {}, "parameters": {}, "environment_variables": {}}
    return parameterize_notebook(nb, parameters, kernel_name=KERNEL, language="python")


def _failed_cell(nb) -> int | None:
    """Index of the first code cell with an error output."""
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                 and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)


def _stable_ids(nb) -> None:
    """Replace the random cell ids (jupytext) by their position, so that the same inputs give
    byte-identical notebooks."""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"


@dataclass
class _Job:
    chapter: Chapter
    params: dict
    key: str  # the base key (:func:`base_key`)
    definitions: dict = field(default_factory=dict)
    work: Path = Path()


async def _execute(job: _Job, env: dict[str, str]) -> dict:
    """Run ``job``'s notebook in a fresh kernel (its work folder ready); write the executed
    notebook there. Returns {"seconds", "error", "cell"}."""
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    work = job.work
    figures = work / "figures"
    figures.mkdir()
    kenv = {**env, "SCALETAX_FIGURES_DIR": str(figures), hardware.READS_ENV: str(work / READS_FILE)}
    if job.definitions.get("gpus") or job.definitions.get("models"):  # read by hardware.get / models.get
        (work / "definitions.json").write_text(canonical_json(job.definitions), encoding="utf-8")
        kenv["SCALETAX_DEFINITIONS"] = str(work / "definitions.json")
    t0 = time.perf_counter()
    error, cell, nb = None, None, None
    km = AsyncKernelManager(kernel_name=KERNEL)
    try:
        nb = _notebook(job.chapter.source, job.params)
        client = NotebookClient(nb, km=km, timeout=EXECUTION_TIMEOUT_S, kernel_name=KERNEL,
                                resources={"metadata": {"path": str(work)}})
        with (work / KERNEL_LOG).open("w", encoding="utf-8") as log:
            await client.async_execute(env=kenv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                       preexec_fn=lifecycle.die_with_parent())
    except CellExecutionError as exc:
        error, cell = f"{exc.ename}: {exc.evalue}".splitlines()[0][:300], _failed_cell(nb)
    except Exception as exc:  # noqa: BLE001 (kernel died, timeout, unreadable notebook: one line)
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] if str(exc) else type(exc).__name__
    finally:  # cancelled (a signal, another chapter's failure) or failed: its process group goes
        _kill_kernel(km)
    if nb is not None:
        _stable_ids(nb)
        nbformat.write(nb, work / "notebook.ipynb")
    return {"seconds": time.perf_counter() - t0, "error": error, "cell": cell}


def _kill_kernel(km) -> None:
    """Kill the process group of ``km``'s kernel if it still runs (a cancelled or failed chapter)."""
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def _execute_all(jobs_: list[_Job], env: dict[str, str], jobs: int, cache_dir: Path, finish, progress) -> None:
    """Run ``jobs_`` in their order, ``jobs`` at a time; ``finish(job, status)`` for each as it
    ends. The first failure (or a cancellation: a signal) cancels the rest; each started one's
    kernel is killed and its work folder removed."""
    slots = asyncio.Semaphore(max(1, jobs) if speedups.on("chapter_parallel") else 1)

    async def one(job: _Job) -> None:
        async with slots:
            job.work = Path(tempfile.mkdtemp(prefix=lifecycle.temp_name(f".tmp-{job.chapter.slug}-"), dir=cache_dir))
            try:
                if progress:
                    progress(job.chapter.slug, "executing")
                status = await _execute(job, env)
                if asyncio.current_task().cancelling():  # stopped, not failed
                    raise asyncio.CancelledError
                finish(job, status)  # raises ChapterFailed
            finally:
                shutil.rmtree(job.work, ignore_errors=True)

    try:
        async with asyncio.TaskGroup() as group:
            for job in jobs_:
                group.create_task(one(job))
    except BaseExceptionGroup as group_error:
        failed = [e for e in group_error.exceptions if isinstance(e, ChapterFailed)]
        raise (failed[0] if failed else group_error.exceptions[0]) from None


def execute_chapters(chapters: list[Chapter], scenario, cache_dir: Path, log_dir: Path,
                     jobs: int = 1, progress=None, work_dir: Path | None = None) -> list[Result]:
    """Execute (or reuse) every chapter, ``jobs`` at a time, longest first. Raises ChapterFailed.

    With ``work_dir`` every result is a checked private copy there (what the book is built
    from). The results come back in the order of ``chapters``.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    code = lib_hash()
    results: dict[str, Result] = {}
    pending: list[_Job] = []
    for ch in chapters:
        params = ch.parameters(scenario)
        defs = ch.definitions(scenario)
        base = base_key(ch, params, code, defs)
        reads = recorded_reads(cache_dir, base) if reads_rows(ch) else None
        res, problem = None, None
        if not reads_rows(ch) or reads is not None:
            key = base if reads is None else entry_key(base, reads)
            res, problem = _reuse(ch.slug, key, cache_dir / key, params, work_dir, reads)
        if res is not None:
            results[ch.slug] = res
            if progress:
                progress(ch.slug, "reused (inputs unchanged)" if not reads else
                         "reused (inputs and the whole GPU catalog unchanged)" if hardware.ALL in reads else
                         f"reused (inputs and the {len(reads)} GPU row(s) it read unchanged)")
            continue
        if problem and progress:
            progress(ch.slug, f"cache entry discarded ({problem}): executing again")
        pending.append(_Job(ch, params, base, definitions=defs))
    if pending:
        if speedups.on("longest_first"):  # the longest chapter does not start last (a stable sort: ties in book order)
            pending.sort(key=lambda j: -j.chapter.cold_seconds)
        finish = lambda job, status: _finish(job, status, cache_dir, log_dir, results, progress, work_dir)  # noqa: E731
        lifecycle.run_async(_execute_all(pending, kernel_env(cache_dir, jobs), jobs, cache_dir, finish, progress))
    return [results[ch.slug] for ch in chapters]


# --------------------------------------------------------------------------------------
# Cache entries: written whole, checked before use
# --------------------------------------------------------------------------------------
def _files(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the entry record, by relative path."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            raise ValueError(f"{path.relative_to(folder)} is a symbolic link")
        if path.is_file() and path.name != ENTRY_FILE:
            out[path.relative_to(folder).as_posix()] = sha256_bytes(path.read_bytes())
    return out


def _rows_note(reads: tuple[str, ...]) -> str:
    """"rows of gb200, h100_sxm" / "whole GPU catalog": what a chapter was keyed on."""
    if hardware.ALL in reads:
        return "whole GPU catalog"
    return f"rows of {', '.join(reads)}" if reads else "GPU catalog (none read)"


def _seal(work: Path, key: str, slug: str, seconds: float, base: str | None = None,
          reads: tuple[str, ...] | None = None) -> dict:
    """Write ``entry.json`` (the hash of every output file, and for a chapter keyed on catalog
    rows its base key and the ids it read) into a finished work folder."""
    import datetime as dt

    record = {"key": key, "chapter": slug, "files": _files(work),
              "execution": {"executed_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                            "seconds": round(seconds, 2)}}
    if reads is not None:
        record.update(base_key=base, hardware_reads=list(reads))
    (work / ENTRY_FILE).write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    return record


def check_entry(folder: Path, key: str | None = None) -> tuple[dict | None, str | None]:
    """(record, None) when ``folder`` holds exactly the files its ``entry.json`` lists, with
    those hashes (and the key, when given); else (None, what is wrong)."""
    try:
        record = json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
        files = record["files"]
        if not isinstance(files, dict) or "notebook.ipynb" not in files:
            return None, "no notebook in its record"
    except FileNotFoundError:
        return None, "no entry record"
    except (OSError, ValueError, KeyError, TypeError):
        return None, "unreadable entry record"
    if key is not None and record.get("key") != key:
        return None, "record of another key"
    try:
        actual = _files(folder)
    except (OSError, ValueError) as exc:
        return None, str(exc)
    if actual != files:
        changed = sorted(set(actual) ^ set(files)) or sorted(f for f in files if actual[f] != files[f])
        return None, f"{changed[0]} {'changed' if changed[0] in files and changed[0] in actual else 'missing or added'}"
    return record, None


def _reuse(slug: str, key: str, entry: Path, params: dict, work_dir: Path | None,
           reads: tuple[str, ...] | None = None):
    """(Result, None) for a good cache entry (for a chapter keyed on catalog rows: one whose
    record names the same ``reads``); (None, problem) for a bad one (discarded); (None, None)
    when there is none."""
    if not entry.exists():
        return None, None
    if work_dir is None:
        record, problem = check_entry(entry, key)
        where = entry
    else:
        where = work_dir / slug
        shutil.rmtree(where, ignore_errors=True)
        try:
            shutil.copytree(entry, where, symlinks=True)
        except (OSError, shutil.Error):
            shutil.rmtree(where, ignore_errors=True)
            return None, "could not be copied"
        record, problem = check_entry(where, key)  # the copy is what the book uses
    if record is not None and reads is not None and record.get("hardware_reads") != list(reads):
        record, problem = None, "its record of GPU rows differs"
    if record is None:
        _discard(entry)
        if work_dir is not None:
            shutil.rmtree(where, ignore_errors=True)
        return None, problem
    with contextlib.suppress(OSError):
        os.utime(entry)  # last use, for the size cap
    return Result(slug, key, where / "notebook.ipynb", where / "figures", reused=True, seconds=0.0,
                  parameters=params, execution=record.get("execution", {}), hardware_reads=reads), None


def _discard(entry: Path) -> None:
    """Remove a cache entry without racing a build that reads it: rename it away first."""
    gone = entry.with_name(lifecycle.temp_name(f".tmp-discard-{entry.name[:12]}-") + os.urandom(4).hex())
    try:
        os.rename(entry, gone)
    except OSError:
        return
    shutil.rmtree(gone, ignore_errors=True)


def _install(work: Path, entry: Path) -> None:
    """Move a sealed work folder into the cache as ``entry`` in one rename. When a concurrent
    build installed the same key first, keep its entry if it checks, else replace it."""
    try:
        os.rename(work, entry)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if check_entry(entry)[0] is not None:
        shutil.rmtree(work, ignore_errors=True)
        return
    _discard(entry)
    try:
        os.rename(work, entry)
    except OSError:  # another build was quicker again: its entry is checked at next use
        shutil.rmtree(work, ignore_errors=True)


def _finish(job: _Job, status: dict, cache_dir: Path, log_dir: Path, results: dict, progress,
            work_dir: Path | None = None) -> None:
    """Seal and install a chapter that ran to the end (its result into ``results``), or raise
    :class:`ChapterFailed` with its executed notebook (or kernel log) copied into ``log_dir``."""
    slug, work = job.chapter.slug, job.work
    reads = hardware.read_file(work / READS_FILE)
    if status["error"] is None and reads and not reads_rows(job.chapter):
        status = {"seconds": status["seconds"], "cell": None,
                  "error": f"it read the GPU catalog ({_rows_note(reads)}) but does not declare hardware.csv "
                           "in its data (report/chapters.py): its cache key would not cover those rows"}
    if status["error"] is None:
        reads = reads if reads_rows(job.chapter) else None
        key = job.key if reads is None else entry_key(job.key, reads)
        entry = cache_dir / key
        for name in (KERNEL_LOG, "definitions.json", READS_FILE):
            (work / name).unlink(missing_ok=True)
        record = _seal(work, key, slug, status["seconds"], job.key, reads)
        where = work
        if work_dir is not None:
            where = work_dir / slug
            shutil.rmtree(where, ignore_errors=True)
            shutil.copytree(work, where)
        _install(work, entry)
        if reads is not None:
            _write_reads_index(cache_dir, job.key, key, reads)
        if work_dir is None:
            where = entry
        results[slug] = Result(slug, key, where / "notebook.ipynb", where / "figures",
                               reused=False, seconds=status["seconds"], parameters=job.params,
                               execution=record["execution"], hardware_reads=reads)
        if progress:
            progress(slug, f"executed in {status['seconds']:.1f} s")
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{slug}.ipynb"
    if (work / "notebook.ipynb").exists():
        shutil.copyfile(work / "notebook.ipynb", log)
    else:
        log = log_dir / f"{slug}.log"
        try:
            shutil.copyfile(work / KERNEL_LOG, log)
        except OSError:
            log.write_text(status["error"] + "\n", encoding="utf-8")
    if progress:
        progress(slug, "FAILED")
    raise ChapterFailed(slug, status["cell"], status["error"], log)


# --------------------------------------------------------------------------------------
# Size cap
# --------------------------------------------------------------------------------------
_KEY = re.compile(r"[0-9a-f]{64}")
_KEY = re.compile(r"[0-9a-f]{64}")


def cache_max_bytes() -> int:
    """The cache's size cap: ``SCALETAX_CACHE_MAX_MB`` (MiB) or :data:`CACHE_MAX_BYTES`."""
    raw = os.environ.get("SCALETAX_CACHE_MAX_MB")
    if raw is None or not raw.strip():
        return CACHE_MAX_BYTES
    if not raw.strip().isdigit():
        raise ValueError(f"SCALETAX_CACHE_MAX_MB={raw!r}: expected a whole number of MiB")
    return int(raw) * 1024**2


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def prune(cache_dir: Path, max_bytes: int, keep: frozenset[str] = frozenset(), check: bool = False) -> dict:
    """Hold the cache under ``max_bytes``: remove temporary folders of dead builds, entries
    that fail their check (``check=True``), then the least recently used entries (never
    those in ``keep``) until the rest fits. Returns counts and bytes."""
    removed = {"stale": len(lifecycle.remove_stale(cache_dir, (".tmp-*",))), "bad": 0, "evicted": 0}
    entries = []
    if not cache_dir.is_dir():
        return {**removed, "entries": 0, "bytes": 0}
    for entry in cache_dir.iterdir():
        if not _KEY.fullmatch(entry.name) or not entry.is_dir():
            continue  # temporary folders, and other caches kept here (memo/)
        if check and check_entry(entry, entry.name)[0] is None:
            _discard(entry)
            removed["bad"] += 1
            continue
        try:
            entries.append((entry.stat().st_mtime, _size(entry), entry))
        except OSError:
            continue
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        if entry.name in keep:
            continue
        _discard(entry)
        total -= size
        removed["evicted"] += 1
    _prune_reads_index(cache_dir)
    return {**removed, "entries": len(entries) - removed["evicted"], "bytes": total}


def _prune_reads_index(cache_dir: Path) -> None:
    """Drop the records of reads whose entry is gone (and temporary files of dead builds)."""
    index = cache_dir / READS_DIR
    if not index.is_dir():
        return
    lifecycle.remove_stale(index, (".tmp-*",))
    for path in index.glob("*.json"):
        if path.name.startswith("."):
            continue
        try:
            key = json.loads(path.read_text(encoding="utf-8"))["key"]
        except (OSError, ValueError, KeyError, TypeError):
            key = None
        if not isinstance(key, str) or not _KEY.fullmatch(key) or not (cache_dir / key).is_dir():
            path.unlink(missing_ok=True)
