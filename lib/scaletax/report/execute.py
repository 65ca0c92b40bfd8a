"""Execute the chapters' notebooks, reusing a cached result when none of a chapter's inputs changed.

Running (:func:`execute_chapters`): the build process drives up to ``jobs`` notebooks at once with
nbclient on one asyncio event loop, in book order. Each runs in a fresh
ipykernel process (own process group, SIGKILL when the build dies), its parameters injected by
papermill's ``parameterize_notebook``, in a work folder ``<cache>/.tmp-<slug>-p<pid>-*`` that gets
the executed notebook and its figures. A signal cancels the loop (``lifecycle.run_async``): every
running kernel's process group is killed and its work folder removed.

Cache: ``<cache>/<key>/`` holds ``notebook.ipynb``, ``figures/`` and ``entry.json`` (the sha256 of
every file). The key (:func:`base_key`) hashes the chapter's source, its parameters, the scenario's
GPU and model definitions it reads, the library code, the lock file and its data files. A chapter
that declares ``hardware.csv`` is keyed instead on the catalog rows it read (:func:`entry_key`;
:data:`ROW_FILES`): its kernel records every catalog lookup (``scaletax.inputs.hardware``), the
ids are kept by base key in ``<cache>/reads/``, and the next build hashes those ids' rows as they
are now, so an edit of one GPU's row re-executes only the chapters that read that GPU. A chapter
that reads the catalog without declaring ``hardware.csv`` fails.

Trust: an entry is copied into the build's own folder and checked there against its
``entry.json`` (:func:`check_entry`) before use, so neither an edit nor a removal of the cache
reaches the book; a bad entry is discarded and the chapter executed again, with a one-line note. A
finished work folder enters the cache by one rename, so two builds of one chapter both succeed.
The cache stays under ``SCALETAX_CACHE_MAX_MB`` (default :data:`CACHE_MAX_BYTES`) by evicting the
least recently used entries (:func:`prune`, also ``scaletax cache prune``).
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
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
#: Thread pools of the numeric libraries in every chapter kernel: one thread each, so that
#: ``--jobs`` chapters share the cores without oversubscribing them. A 2-thread OpenBLAS GEMM of
#: the training experiment's size on 2 busy cores is ~10x slower than a 1-thread one; results
#: are byte-identical.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ENTRY_FILE = "entry.json"
#: Data files a chapter that declares ``hardware.csv`` is keyed on through the rows it read.
ROW_FILES = ("hardware.csv", "systems.csv")
#: Files of a work folder that are not kept in its entry: the kernel's record of catalog reads,
#: the scenario's definitions it was handed, and its own stdout and stderr.
READS_FILE, DEFINITIONS_FILE, KERNEL_LOG = "hardware_reads.txt", "definitions.json", "kernel.log"
#: Folder of the cache holding the catalog ids each base key read (``<base key>.json``).
READS_DIR = "reads"
#: Default size cap of the execution cache (bytes); ``SCALETAX_CACHE_MAX_MB`` overrides.
CACHE_MAX_BYTES = 2 * 1024**3
_KEY = re.compile(r"[0-9a-f]{64}")


def process_env(**extra: str) -> dict[str, str]:
    """Environment of a build process: ``os.environ`` with :data:`THREAD_ENV` and ``extra``."""
    threads = THREAD_ENV if speedups.on("one_thread") else {}
    return {**os.environ, **threads, **extra}


def kernel_env(cache_dir: Path) -> dict[str, str]:
    """Environment of every chapter kernel (:func:`process_env`): the shared result cache
    (``scaletax.memo``, ``<cache_dir>/memo``) and a fixed hash seed."""
    from scaletax import memo

    env = process_env(**{memo.ENV: str(cache_dir / "memo"), "PYTHONHASHSEED": "0"})
    if not speedups.on("memo"):
        env.pop(memo.ENV)
    return env


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


# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------
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
    for name in sorted(ch.data):
        if not (reads_rows(ch) and name in ROW_FILES):
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


def recorded_reads(cache_dir: Path, base: str) -> tuple[str, ...] | None:
    """The catalog reads recorded for ``base`` by the last execution, or None (never executed,
    or an unreadable record)."""
    try:
        reads = json.loads((cache_dir / READS_DIR / f"{base}.json").read_text(encoding="utf-8"))["hardware_reads"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(reads, list) or not all(isinstance(r, str) for r in reads):
        return None
    return tuple(reads)


def _write_reads_index(cache_dir: Path, base: str, key: str, reads: tuple[str, ...]) -> None:
    """Record ``reads`` (and the entry they made) for ``base``, in one rename."""
    path = cache_dir / READS_DIR / f"{base}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    files.replace_atomically(path, json.dumps({"hardware_reads": list(reads), "key": key}),
                             prefix=lifecycle.temp_name(".tmp-"), suffix="")  # pid in the name: remove_stale


# --------------------------------------------------------------------------------------
# The build's chapters: reused or executed
# --------------------------------------------------------------------------------------
@dataclass
class _Job:
    chapter: Chapter
    params: dict
    definitions: dict
    base: str  # :func:`base_key`
    work: Path = Path()  # its work folder, once it runs


def execute_chapters(chapters: list[Chapter], scenario, cache_dir: Path, log_dir: Path, work_dir: Path,
                     jobs: int = 1, progress=None) -> list[Result]:
    """Every chapter reused from the cache or executed, ``jobs`` at a time, each result a checked
    private copy in ``work_dir/<slug>`` (what the book is built from), in the order of
    ``chapters``. Raises ChapterFailed (the first failure stops the others)."""
    note = progress or (lambda slug, message: None)
    cache_dir.mkdir(parents=True, exist_ok=True)
    code = lib_hash()
    results: dict[str, Result] = {}
    pending: list[_Job] = []
    for ch in chapters:
        params, defs = ch.parameters(scenario), ch.definitions(scenario)
        job = _Job(ch, params, defs, base_key(ch, params, code, defs))
        res, problem = _reuse(job, cache_dir, work_dir)
        if res is not None:
            results[ch.slug] = res
            reads = res.hardware_reads
            note(ch.slug, "reused (inputs unchanged)" if not reads else
                 "reused (inputs and the whole GPU catalog unchanged)" if hardware.ALL in reads else
                 f"reused (inputs and the {len(reads)} GPU row(s) it read unchanged)")
            continue
        if problem:
            note(ch.slug, f"cache entry discarded ({problem}): executing again")
        pending.append(job)

    def finish(job: _Job, status: dict) -> None:
        try:
            results[job.chapter.slug] = _finish(job, status, cache_dir, log_dir, work_dir)
        except ChapterFailed:
            note(job.chapter.slug, "FAILED")
            raise
        note(job.chapter.slug, f"executed in {status['seconds']:.1f} s")

    if pending:
        slots = max(1, jobs) if speedups.on("chapter_parallel") else 1
        lifecycle.run_async(_execute_all(pending, kernel_env(cache_dir), slots, cache_dir, finish, note))
    return [results[ch.slug] for ch in chapters]


async def _execute_all(pending: list[_Job], env: dict[str, str], jobs: int, cache_dir: Path, finish, note) -> None:
    """Execute ``pending`` in their order, ``jobs`` at a time, each in a work folder of its own;
    ``finish(job, status)`` for each as it ends. The first failure (or a cancellation: a signal)
    cancels the rest; each started one's kernel is killed and its work folder removed."""
    slots = asyncio.Semaphore(jobs)

    async def one(job: _Job) -> None:
        async with slots:
            job.work = Path(tempfile.mkdtemp(prefix=lifecycle.temp_name(f".tmp-{job.chapter.slug}-"), dir=cache_dir))
            try:
                note(job.chapter.slug, "executing")
                status = await _execute(job, env)
                if asyncio.current_task().cancelling():  # stopped, not failed
                    raise asyncio.CancelledError
                finish(job, status)  # raises ChapterFailed
            finally:
                shutil.rmtree(job.work, ignore_errors=True)

    try:
        async with asyncio.TaskGroup() as group:
            for job in pending:
                group.create_task(one(job))
    except BaseExceptionGroup as group_error:
        failed = [e for e in group_error.exceptions if isinstance(e, ChapterFailed)]
        raise (failed[0] if failed else group_error.exceptions[0]) from None


async def _execute(job: _Job, env: dict[str, str]) -> dict:
    """Run ``job``'s notebook in a fresh kernel and write the executed notebook into its work
    folder (whatever happened). Returns {"seconds", "error" (one line, or None), "cell"}."""
    import jupytext
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from papermill.parameterize import parameterize_notebook

    work = job.work
    (work / "figures").mkdir()
    kenv = {**env, "SCALETAX_FIGURES_DIR": str(work / "figures"), hardware.READS_ENV: str(work / READS_FILE)}
    if job.definitions.get("gpus") or job.definitions.get("models"):  # read by hardware.get / models.get
        (work / DEFINITIONS_FILE).write_text(canonical_json(job.definitions), encoding="utf-8")
        kenv["SCALETAX_DEFINITIONS"] = str(work / DEFINITIONS_FILE)
    t0 = time.perf_counter()
    error, cell, nb = None, None, None
    km = AsyncKernelManager(kernel_name=KERNEL)
    try:
        nb = jupytext.read(job.chapter.source)
        if job.params:  # papermill's cell tagged injected-parameters, after the parameters cell
            for c in nb.cells:
                c.metadata.setdefault("tags", [])
            nb.metadata["papermill"] = {"default_parameters": {}, "parameters": {}, "environment_variables": {}}
            nb = parameterize_notebook(nb, job.params, kernel_name=KERNEL, language="python")
        with (work / KERNEL_LOG).open("w", encoding="utf-8") as log:
            for start in range(KERNEL_STARTS):
                client = NotebookClient(nb, km=km, timeout=EXECUTION_TIMEOUT_S, kernel_name=KERNEL,
                                        resources={"metadata": {"path": str(work)}})
                try:
                    await client.async_execute(env=kenv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                               preexec_fn=lifecycle.die_with_parent())
                    break
                except RuntimeError as exc:  # a kernel that died before it answered: no cell ran, start another
                    if start + 1 == KERNEL_STARTS or not str(exc).startswith(KERNEL_DIED_AT_START):
                        raise
                    _kill_kernel(km)
                    log.write(f"scaletax: the kernel died before it answered ({exc}); starting another\n")
                    log.flush()
                    km = AsyncKernelManager(kernel_name=KERNEL)
    except CellExecutionError as exc:
        error = f"{exc.ename}: {exc.evalue}".splitlines()[0][:300]
        cell = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                     and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
    except Exception as exc:  # noqa: BLE001 (kernel died, timeout, unreadable notebook: one line)
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] if str(exc) else type(exc).__name__
    finally:  # cancelled (a signal, another chapter's failure) or failed: its process group goes
        _kill_kernel(km)
    if nb is not None:
        for i, c in enumerate(nb.cells):  # jupytext's random cell ids by position: the same bytes every time
            c["id"] = f"cell-{i:03d}"
        nbformat.write(nb, work / "notebook.ipynb")
    return {"seconds": time.perf_counter() - t0, "error": error, "cell": cell}


#: Kernel starts a chapter tries when a kernel dies before it answers ``kernel_info`` (no cell ran):
#: a start that fails for the machine's reasons (seen once in CI, 2026-12-04) is not the chapter's.
KERNEL_STARTS = 2
#: The start of jupyter_client's error for a kernel that died before it answered ``kernel_info``.
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"


def _kill_kernel(km) -> None:
    """Kill ``km``'s kernel process group, if it still runs, and reap it."""
    proc = getattr(km.provisioner, "process", None)
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _finish(job: _Job, status: dict, cache_dir: Path, log_dir: Path, work_dir: Path) -> Result:
    """The result of a chapter that ran to the end: its work folder sealed and installed in the
    cache, copied to ``work_dir/<slug>``. Raises :class:`ChapterFailed` with the executed notebook
    (or the kernel's log) copied into ``log_dir`` when it did not."""
    slug, work = job.chapter.slug, job.work
    reads = hardware.read_file(work / READS_FILE)
    if status["error"] is None and reads and not reads_rows(job.chapter):
        what = "whole GPU catalog" if hardware.ALL in reads else f"rows of {', '.join(reads)}"
        status = {**status, "cell": None, "error": f"it read the GPU catalog ({what}) but does not declare "
                  "hardware.csv in its data (report/chapters.py): its cache key would not cover those rows"}
    if status["error"] is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{slug}.ipynb"
        if (work / "notebook.ipynb").exists():
            shutil.copyfile(work / "notebook.ipynb", log)
            with contextlib.suppress(OSError):  # the kernel's own output beside it (a kernel that died at start)
                shutil.copyfile(work / KERNEL_LOG, log_dir / f"{slug}.kernel.log")
        else:
            log = log_dir / f"{slug}.log"
            try:
                shutil.copyfile(work / KERNEL_LOG, log)
            except OSError:
                log.write_text(status["error"] + "\n", encoding="utf-8")
        raise ChapterFailed(slug, status["cell"], status["error"], log)
    reads = reads if reads_rows(job.chapter) else None
    key = job.base if reads is None else entry_key(job.base, reads)
    for name in (KERNEL_LOG, DEFINITIONS_FILE, READS_FILE):
        (work / name).unlink(missing_ok=True)
    record = {"key": key, "chapter": slug, "files": _files(work),
              "execution": {"executed_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                            "seconds": round(status["seconds"], 2)}}
    if reads is not None:
        record.update(base_key=job.base, hardware_reads=list(reads))
    (work / ENTRY_FILE).write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    where = work_dir / slug
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(work, where)
    _install(work, cache_dir / key)
    if reads is not None:
        _write_reads_index(cache_dir, job.base, key, reads)
    return Result(slug, key, where / "notebook.ipynb", where / "figures", reused=False, seconds=status["seconds"],
                  parameters=job.params, execution=record["execution"], hardware_reads=reads)


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


def check_entry(folder: Path, key: str | None = None) -> tuple[dict | None, str | None]:
    """(record, None) when ``folder`` holds exactly the files its ``entry.json`` lists, with
    those hashes (and the key, when given); else (None, what is wrong)."""
    try:
        record = json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
        listed = record["files"]
        if not isinstance(listed, dict) or "notebook.ipynb" not in listed:
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
    if actual != listed:
        changed = sorted(set(actual) ^ set(listed)) or sorted(f for f in listed if actual[f] != listed[f])
        return None, f"{changed[0]} {'changed' if changed[0] in listed and changed[0] in actual else 'missing or added'}"
    return record, None


def _reuse(job: _Job, cache_dir: Path, work_dir: Path) -> tuple[Result | None, str | None]:
    """(Result, None) for a good cache entry of ``job``, copied to ``work_dir/<slug>`` and
    checked there (for a chapter keyed on catalog rows: the entry of the rows it read last time,
    as they are now); (None, problem) for a bad one (discarded); (None, None) when there is none."""
    reads = recorded_reads(cache_dir, job.base) if reads_rows(job.chapter) else None
    if reads_rows(job.chapter) and reads is None:
        return None, None
    key = job.base if reads is None else entry_key(job.base, reads)
    entry, where = cache_dir / key, work_dir / job.chapter.slug
    if not entry.exists():
        return None, None
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
        shutil.rmtree(where, ignore_errors=True)
        return None, problem
    with contextlib.suppress(OSError):
        os.utime(entry)  # last use, for the size cap
    return Result(job.chapter.slug, key, where / "notebook.ipynb", where / "figures", reused=True, seconds=0.0,
                  parameters=job.params, execution=record.get("execution", {}), hardware_reads=reads), None


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


# --------------------------------------------------------------------------------------
# Size cap
# --------------------------------------------------------------------------------------
def cache_max_bytes() -> int:
    """The cache's size cap: ``SCALETAX_CACHE_MAX_MB`` (MiB) or :data:`CACHE_MAX_BYTES`."""
    raw = os.environ.get("SCALETAX_CACHE_MAX_MB")
    if raw is None or not raw.strip():
        return CACHE_MAX_BYTES
    if not raw.strip().isdigit():
        raise ValueError(f"SCALETAX_CACHE_MAX_MB={raw!r}: expected a whole number of MiB")
    return int(raw) * 1024**2


def prune(cache_dir: Path, max_bytes: int, keep: frozenset[str] = frozenset(), check: bool = False) -> dict:
    """Hold the cache under ``max_bytes``: remove temporary folders of dead builds, entries
    that fail their check (``check=True``), then the least recently used entries (never
    those in ``keep``) until the rest fits, and the records of reads whose entry is gone.
    Returns counts and bytes."""
    removed = {"stale": len(lifecycle.remove_stale(cache_dir, (".tmp-*",))), "bad": 0, "evicted": 0}
    if not cache_dir.is_dir():
        return {**removed, "entries": 0, "bytes": 0}
    entries = []
    for entry in cache_dir.iterdir():
        if not _KEY.fullmatch(entry.name) or not entry.is_dir():
            continue  # temporary folders, and other caches kept here (memo/, reads/)
        if check and check_entry(entry, entry.name)[0] is None:
            _discard(entry)
            removed["bad"] += 1
            continue
        with contextlib.suppress(OSError):
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file() and not p.is_symlink())
            entries.append((entry.stat().st_mtime, size, entry))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        if entry.name not in keep:
            _discard(entry)
            total -= size
            removed["evicted"] += 1
    index = cache_dir / READS_DIR
    lifecycle.remove_stale(index, (".tmp-*",))
    for path in index.glob("[!.]*.json") if index.is_dir() else ():
        try:
            key = json.loads(path.read_text(encoding="utf-8"))["key"]
        except (OSError, ValueError, KeyError, TypeError):
            key = None
        if not isinstance(key, str) or not _KEY.fullmatch(key) or not (cache_dir / key).is_dir():
            path.unlink(missing_ok=True)
    return {**removed, "entries": len(entries) - removed["evicted"], "bytes": total}
