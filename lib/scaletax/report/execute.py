"""Execute chapter notebooks with papermill, in parallel, cached by content hash.

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

Schedule: the chapters to execute start longest first (:func:`schedule`: each chapter's last
executed seconds, recorded in ``<cache>/seconds.json``, else its ``cold_seconds``; a chapter
waits for those it runs ``after``), so the longest chapter does not start last. Every process
of the build shares ``jobs`` slots (``scaletax.jobserver``): the runner takes one per chapter,
and a chapter that splits its work over processes (the precision experiment) lends its own
and holds one per piece of work, so the cores are neither oversubscribed nor idle while work
is left. The order changes when chapters run, never what they compute.

Workers are forked by one prefork server per build (``report/prefork.py``), which imported what
a worker and a chapter's kernel import; each worker forks its kernel before papermill starts
(its log: ``<logs>/prefork.log``). Where it cannot run, each worker starts as a new process.
The chapters' figures are drawn by one render server per build (``scaletax.render.pngserver``,
its log: ``<logs>/render.log``); where it cannot run, each chapter draws its own.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from scaletax import DATA_DIR, files, jobserver
from scaletax.inputs import hardware
from scaletax.report import lifecycle
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
#: glibc malloc settings of every build process (chapter worker, kernel and its training workers,
#: Sphinx): blocks up to 256 MiB come from the heap, and free memory at the heap's top is kept up
#: to 1 GiB. glibc's defaults (mallopt(3): M_MMAP_THRESHOLD 128 KiB, raised dynamically to at most
#: 32 MiB; M_TRIM_THRESHOLD twice that) give each numpy temporary of a few MiB fresh pages from
#: mmap, which the kernel zeroes and faults in on every use. Measured on the communication
#: chapter alone: 1.84 M -> 0.19 M minor page faults, 6.6 -> 1.4 s system CPU, the same peak RSS.
#: Placement of allocations only: results are byte-identical. A GLIBC_TUNABLES already set in the
#: environment is kept as it is; other C libraries ignore the variable.
ALLOCATOR_ENV = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824"}


def process_env(**extra: str) -> dict[str, str]:
    """Environment of a build process: ``os.environ`` with :data:`THREAD_ENV`,
    :data:`ALLOCATOR_ENV` (unless GLIBC_TUNABLES is set) and ``extra``."""
    allocator = {} if "GLIBC_TUNABLES" in os.environ else ALLOCATOR_ENV
    return {**os.environ, **THREAD_ENV, **allocator, **extra}
ENTRY_FILE = "entry.json"
#: Data files a chapter that declares ``hardware.csv`` is keyed on through the rows it read.
ROW_FILES = ("hardware.csv", "systems.csv")
#: Where a chapter kernel records its catalog reads (in its work folder; not kept in the entry).
READS_FILE = "hardware_reads.txt"
#: Folder of the cache holding the record of reads by base key.
READS_DIR = "reads"
#: Default size cap of the execution cache (bytes); ``SCALETAX_CACHE_MAX_MB`` overrides.
CACHE_MAX_BYTES = 2 * 1024**3
#: File of the cache recording each chapter's last executed seconds (the schedule's estimate).
SECONDS_FILE = "seconds.json"


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


def _execute_one(source: str, params_file: str, workdir: str, forked_kernel: bool = False) -> int:
    """Worker entry point (own process and session): papermill one notebook.

    Writes ``status.json`` (seconds, error, cell) into ``workdir``; returns 0 or 1. With
    ``forked_kernel`` (a worker forked by the prefork server, its modules imported) the kernel
    is forked from this process (``prefork.plant_seed``) instead of started afresh.
    """
    import jupytext
    import papermill as pm

    work = Path(workdir)
    figures = work / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    os.environ["SCALETAX_FIGURES_DIR"] = str(figures)
    os.environ[hardware.READS_ENV] = str(work / READS_FILE)  # the kernel and its workers append here
    os.environ["PYTHONHASHSEED"] = "0"
    defs = work / "definitions.json"
    if defs.exists():  # GPUs / models defined in the scenario: hardware.get / models.get read them
        os.environ["SCALETAX_DEFINITIONS"] = str(defs)
    parameters = json.loads(Path(params_file).read_text(encoding="utf-8"))
    nb = jupytext.read(source)
    t0 = time.perf_counter()
    error, cell = None, None
    seed, engine = None, {}
    if forked_kernel:
        from scaletax.report import prefork

        with contextlib.suppress(prefork.Unavailable):  # else papermill starts a kernel afresh
            seed = prefork.plant_seed()
            engine["kernel_manager_class"] = prefork.seeded_kernel_manager(seed)
    try:
        # request_save_on_cell_execute=False: papermill's default rewrites (and validates) the whole
        # output notebook at every cell's start and end, megabytes of figures each time (about 2 s
        # of the decision chapter's 6 s); it still writes it at the end, and on an error first.
        # shutdown_kernel="immediate": the notebook has run (every output is in); the kernel and
        # its process group (the precision experiment's forkserver and resource tracker) are
        # killed at once. A graceful shutdown SIGTERMs those children and waits for the resource
        # tracker, which ignores SIGTERM, until jupyter_client kills the kernel after 2.5 s.
        pm.execute_notebook(nb, str(work / "notebook.ipynb"), parameters=parameters,
                            kernel_name=KERNEL, cwd=str(work), progress_bar=False,
                            log_output=False, execution_timeout=EXECUTION_TIMEOUT_S,
                            request_save_on_cell_execute=False, shutdown_kernel="immediate", **engine)
    except pm.PapermillExecutionError as exc:
        error, cell = f"{exc.ename}: {exc.evalue}".splitlines()[0][:300], exc.cell_index
    except Exception as exc:  # kernel died, timeout, unreadable notebook
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    finally:
        if seed is not None:
            seed.close()  # unused (papermill failed before starting a kernel): it exits
    _stable_ids(work / "notebook.ipynb")
    status = {"seconds": time.perf_counter() - t0, "error": error, "cell": cell}
    (work / "status.json").write_text(json.dumps(status), encoding="utf-8")
    return 0 if error is None else 1


def _execute_forked(source: str, params_file: str, workdir: str) -> int:
    """:func:`_execute_one` in a worker forked by the prefork server (its kernel forked too)."""
    return _execute_one(source, params_file, workdir, forked_kernel=True)


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
    key: str  # the base key (:func:`base_key`)
    work: Path
    proc: "subprocess.Popen | prefork.Child | None" = None
    definitions: dict = field(default_factory=dict)


def kernel_env(cache_dir: Path, jobs: int) -> dict[str, str]:
    """Environment of a chapter process (:func:`process_env`): the shared result cache
    (``scaletax.memo``, ``<cache_dir>/memo``) and ``SCALETAX_WORKERS`` (processes a chapter
    may use for independent work, the build's ``--jobs``)."""
    from scaletax import memo

    return process_env(**{memo.ENV: str(cache_dir / "memo"), jobserver.WORKERS_ENV: str(max(1, jobs))})


def _start_server(env: dict[str, str], folder: Path, progress=None):
    """The build's prefork server (``report/prefork.py``), or None where it cannot run (not
    Linux, or it did not start: each chapter then starts afresh, with a note)."""
    from scaletax.report import prefork

    if not sys.platform.startswith("linux"):
        return None
    try:
        return prefork.Server(env, folder / "prefork.log")
    except prefork.Unavailable as exc:
        if progress:
            progress("book", f"{exc}: each chapter starts a new process")
        return None


def _bind_renderer() -> tuple[socket.socket, Path] | None:
    """The socket of the build's render server (``scaletax.render.pngserver``: one vl-convert
    engine draws every chapter's figures), bound and listening in a private folder of the
    system's temporary directory (a socket path has at most 107 bytes): (socket, folder), or None
    where it cannot be made (each chapter then draws its own). Chapters may connect at once:
    :func:`_spawn_renderer` starts the server that answers."""
    sock_dir = Path(tempfile.mkdtemp(prefix="scaletax-render-"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(sock_dir / "png.sock"))
        listener.listen(64)
    except OSError:
        listener.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
        return None
    return listener, sock_dir


def _spawn_renderer(bound: tuple[socket.socket, Path] | None, env: dict[str, str],
                    folder: Path) -> tuple[subprocess.Popen | None, Path] | None:
    """Start the render server on the socket of :func:`_bind_renderer` (its log:
    ``<folder>/render.log``): (process, socket folder); the process is None where it could not
    start (a chapter's request then finds no server and it draws its own)."""
    if bound is None:
        return None
    listener, sock_dir = bound
    proc = None
    try:
        fd = listener.fileno()
        with (folder / "render.log").open("w", encoding="utf-8") as log, lifecycle.Interrupts.deferred():
            proc = subprocess.Popen([sys.executable, "-m", "scaletax.render.pngserver", str(fd)], pass_fds=(fd,),
                                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=lifecycle.die_with_parent())
    except OSError:
        pass
    finally:
        listener.close()  # the server holds the listening socket now (without one, requests are refused)
    return proc, sock_dir


def _stop_renderer(renderer: tuple[subprocess.Popen | None, Path] | None) -> None:
    if renderer is not None:
        proc, sock_dir = renderer
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _start(job: _Job, env: dict[str, str], server: "prefork.Server | None" = None) -> "prefork.Server | None":
    """Start ``job``'s worker: forked by ``server`` when there is one, else a new process.
    Returns the server to use for the next job (None once it failed)."""
    from scaletax.report import prefork

    params_file = job.work / "parameters.json"
    params_file.write_text(canonical_json(job.params), encoding="utf-8")
    if job.definitions.get("gpus") or job.definitions.get("models"):
        (job.work / "definitions.json").write_text(canonical_json(job.definitions), encoding="utf-8")
    if server is not None:
        try:
            with lifecycle.Interrupts.deferred():  # an interrupt during the fork: once job.proc is set
                job.proc = server.spawn(f"{__name__}:_execute_forked",
                                        [str(job.chapter.source), str(params_file), str(job.work)],
                                        job.work / "worker.log")
            return server
        except prefork.Unavailable:  # the server is gone: this chapter and the next start afresh
            server.close()
            server = None
    log = (job.work / "worker.log").open("w", encoding="utf-8")
    try:
        # An interrupt during the fork waits until the worker exists and job.proc names it (the
        # build then stops it): raised inside the fork's own hooks it would be lost.
        with lifecycle.Interrupts.deferred():
            job.proc = subprocess.Popen(
                [sys.executable, "-m", "scaletax.report.execute", str(job.chapter.source), str(params_file),
                 str(job.work)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env,
                preexec_fn=lifecycle.die_with_parent())
    finally:
        log.close()
    return server


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


def recorded_seconds(cache_dir: Path) -> dict[str, float]:
    """{slug: seconds of its last execution} from the cache ({} when none is readable)."""
    try:
        rec = json.loads((cache_dir / SECONDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(rec, dict):
        return {}
    return {k: float(v) for k, v in rec.items()
            if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}


def _record_seconds(cache_dir: Path, slug: str, seconds: float) -> None:
    """Record ``slug``'s executed seconds in :data:`SECONDS_FILE` (one rename; a concurrent
    build may win the race: the record is only an estimate)."""
    rec = recorded_seconds(cache_dir)
    rec[slug] = round(float(seconds), 2)
    files.replace_atomically(cache_dir / SECONDS_FILE, json.dumps(rec, indent=1, sort_keys=True),
                             prefix=lifecycle.temp_name(".tmp-seconds-"), suffix="")


def schedule(chapters: list[Chapter], seconds: dict[str, float] | None = None) -> list[Chapter]:
    """The order to start ``chapters`` in: the longest estimated path to the end first (a
    chapter's execution, ``seconds``, the recorded seconds, else its ``cold_seconds``, plus the
    longest path of the chapters that run ``after`` it: list scheduling by critical path), ties in
    book order, and a chapter after those of the list it runs ``after`` (the runner also waits
    for them to finish: :func:`_ready`)."""
    seconds = seconds or {}
    book = {ch.slug: i for i, ch in enumerate(chapters)}
    path: dict[str, float] = {}

    def longest(ch: Chapter, seen: frozenset = frozenset()) -> float:
        if ch.slug not in path:
            later = [c for c in chapters if ch.slug in c.after and c.slug not in seen]  # seen: a cycle
            path[ch.slug] = seconds.get(ch.slug, ch.cold_seconds) + max(
                (longest(c, seen | {ch.slug}) for c in later), default=0.0)
        return path[ch.slug]

    left = sorted(chapters, key=lambda ch: (-longest(ch), book[ch.slug]))
    order: list[Chapter] = []
    while left:
        todo = {ch.slug for ch in left}
        ch = next((c for c in left if not set(c.after) & todo), left[0])  # left[0]: a cycle
        left.remove(ch)
        order.append(ch)
    return order


def _ready(job: "_Job", waiting: list["_Job"]) -> bool:
    """Whether ``job`` may start: none of the chapters it runs ``after`` is still to finish."""
    return not set(job.chapter.after) & {j.chapter.slug for j in waiting}


def execute_chapters(chapters: list[Chapter], scenario, cache_dir: Path, log_dir: Path,
                     jobs: int = 1, progress=None, work_dir: Path | None = None) -> list[Result]:
    """Execute (or reuse) every chapter, ``jobs`` at a time. Raises ChapterFailed.

    Each notebook runs in its own process session, so an interrupted build can stop the
    worker and its kernel together; unfinished work folders are removed. With ``work_dir``
    every result is a checked private copy there (what the book is built from). Chapters to
    execute start in the order of :func:`schedule`, each holding one of ``jobs`` slots
    (module docstring); the results come back in the order of ``chapters``.
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
        pending.append(_Job(ch, params, base, Path(), definitions=defs))

    order = {ch.slug: i for i, ch in enumerate(schedule([j.chapter for j in pending], recorded_seconds(cache_dir)))}
    pending.sort(key=lambda j: order[j.chapter.slug])
    running: list[_Job] = []
    failures: list[ChapterFailed] = []
    slots = server = renderer = bound = None
    try:
        if pending:
            slots = jobserver.Server(Path(tempfile.mkdtemp(prefix=lifecycle.temp_name(".tmp-jobs-"), dir=cache_dir))
                                     / "slots", max(1, jobs))
        env = {**kernel_env(cache_dir, jobs), **({jobserver.ENV: str(slots.path)} if slots else {})}
        if pending:
            log_dir.mkdir(parents=True, exist_ok=True)
            bound = _bind_renderer()
            if bound is not None:
                from scaletax.render import pngserver

                renderer = (None, bound[1])  # removed with the build whatever happens next
                env[pngserver.ENV] = str(bound[1] / "png.sock")
            server = _start_server(env, log_dir, progress)
            # its engine starts once the server has imported, which every chapter waits for
            renderer = _spawn_renderer(bound, env, log_dir)
        while pending or running:
            while not failures:
                job = next((j for j in pending if _ready(j, pending + running)), None)
                if job is None and pending and not running:  # a cycle of ``after``: start anyway
                    job = pending[0]
                if job is None or not slots.take():
                    slots.want(job is not None)  # a ready chapter goes before the next worker's piece
                    break
                slots.want(False)
                pending.remove(job)
                job.work = Path(tempfile.mkdtemp(prefix=lifecycle.temp_name(f".tmp-{job.chapter.slug}-"),
                                                 dir=cache_dir))
                running.append(job)
                server = _start(job, env, server)
                if progress:
                    progress(job.chapter.slug, "executing")
            if failures and not running:
                break
            time.sleep(0.1)
            for job in [j for j in running if j.proc.poll() is not None]:
                running.remove(job)
                slots.give()
                failure = _finish(job, cache_dir, log_dir, results, progress, work_dir)
                if failure:
                    failures.append(failure)
                    pending.clear()
                    slots.want(False)
    finally:
        for job in running:
            _kill(job)
            shutil.rmtree(job.work, ignore_errors=True)
        if server is not None:
            server.close()
        if bound is not None:
            bound[0].close()
        _stop_renderer(renderer)
        if slots is not None:
            slots.close()
            shutil.rmtree(slots.path.parent, ignore_errors=True)
    if failures:
        raise failures[0]
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


def _finish(job: _Job, cache_dir: Path, log_dir: Path, results: dict, progress,
            work_dir: Path | None = None) -> ChapterFailed | None:
    slug, work = job.chapter.slug, job.work
    try:
        status = json.loads((work / "status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        try:
            tail = (work / "worker.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            tail = []
        status = {"seconds": 0.0, "cell": None,
                  "error": (tail[-1] if tail else f"worker exited with status {job.proc.returncode}")[:300]}
    reads = hardware.read_file(work / READS_FILE)
    if status["error"] is None and reads and not reads_rows(job.chapter):
        status = {"seconds": status["seconds"], "cell": None,
                  "error": f"it read the GPU catalog ({_rows_note(reads)}) but does not declare hardware.csv "
                           "in its data (report/chapters.py): its cache key would not cover those rows"}
    if status["error"] is None:
        reads = reads if reads_rows(job.chapter) else None
        key = job.key if reads is None else entry_key(job.key, reads)
        entry = cache_dir / key
        for name in ("status.json", "parameters.json", "worker.log", "definitions.json", READS_FILE):
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
        _record_seconds(cache_dir, slug, status["seconds"])
        if progress:
            progress(slug, f"executed in {status['seconds']:.1f} s")
        return None
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{slug}.ipynb"
    if (work / "notebook.ipynb").exists():
        shutil.copyfile(work / "notebook.ipynb", log)
    else:
        log = log_dir / f"{slug}.log"
        try:
            shutil.copyfile(work / "worker.log", log)
        except OSError:
            log.write_text(status["error"] + "\n", encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    if progress:
        progress(slug, "FAILED")
    return ChapterFailed(slug, status["cell"], status["error"], log)


# --------------------------------------------------------------------------------------
# Size cap
# --------------------------------------------------------------------------------------
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


if __name__ == "__main__":
    sys.exit(_execute_one(*sys.argv[1:4]))
