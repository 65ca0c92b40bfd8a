"""Results cached on disk by the content hash of exactly their inputs (compute once, render many).

``@memo.cached(data=(...))`` on a function makes its result a file
``<SCALETAX_MEMO_DIR>/<module.function>/<key>.pkl``. The key is the sha256 of

- the function's module and name;
- the source of the library code it runs: its module and every ``scaletax`` module that module
  imports, transitively (so an edit of ``cost.py`` does not invalidate a search, an edit of
  ``perf.py`` does);
- its arguments in canonical form (numbers exactly, dataclasses and pydantic models field by
  field, arrays by dtype, shape and bytes): a resolved ``GPU`` or ``Model`` argument makes a
  ``data/hardware.csv`` edit invalidate only the results that read the edited GPU;
- the bytes of the data files the function declares it reads (``data``, relative to ``data/``).

Without ``SCALETAX_MEMO_DIR`` in the environment the function is simply called (tests, library
use). The build runner sets it to ``_build/.cache/memo``, shared by chapters and builds. Writes
are atomic (temporary file, then rename); a per-key lock makes a second process that needs the
same result while the first computes it wait and read it instead of computing it again.
Each file records the sha256 of the pickled value it holds (:func:`write_entry`); a file whose
value does not hash to it (edited, truncated, or written by other code) is never used: the value
is computed again and the file rewritten (:func:`read_entry`; counted as "bad" in the log). This
catches corruption and an edit of the value alone; whoever rewrites both can also edit the code.
Arguments of a type with no canonical form raise ``TypeError`` (never a silent wrong hit).

The GPU catalog is read only through the arguments: a cached call that looks a GPU up itself
(``hardware.get`` / ``catalog``, recorded by :func:`scaletax.inputs.hardware.reads_during`, which
the catalog hands this module on import, :func:`guard_catalog`) raises
``TypeError`` naming the ids, since its key would not cover those rows (and a hit would hide the
read from the chapter runner's record). A function that declares ``hardware.csv`` in ``data`` is
keyed on the whole file and records a read of the whole catalog on every call, hit or miss.

Every call is counted in :data:`STATS` (this process); with ``SCALETAX_MEMO_LOG`` naming a file,
each cached call also appends one JSON line to it (function, key, "hit", "miss" or "bad", seconds,
process id, and the canonical arguments of a miss): the benchmark reads which calls missed.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import fcntl
import functools
import hashlib
import inspect
import json
import math
import os
import pickle
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from scaletax import DATA_DIR, files

#: Environment variable naming the cache folder; unset = no caching.
ENV = "SCALETAX_MEMO_DIR"
#: Environment variable naming a JSON-lines file of every cached call; unset = no log.
LOG_ENV = "SCALETAX_MEMO_LOG"
_PKG = "scaletax"
#: This process's counts per function: {"module.name": {"hit": n, "miss": n[, "bad": n]}}.
STATS: dict[str, dict[str, int]] = {}
_STATS_LOCK = threading.Lock()  # a chapter may call cached functions from threads


@contextlib.contextmanager
def using(folder: Path):
    """Cache in ``folder`` during the block (a command outside a build: ``scaletax plan`` reads and
    adds to the builds' cache), unless :data:`ENV` names a folder already or ``folder`` cannot be
    made (then as before: that folder, or no cache)."""
    if os.environ.get(ENV):
        yield
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        yield
        return
    os.environ[ENV] = str(folder)
    try:
        yield
    finally:
        os.environ.pop(ENV, None)


def _module_file(name: str) -> Path | None:
    mod = sys.modules.get(name)
    f = getattr(mod, "__file__", None)
    return Path(f) if f else None


#: An import statement: at a line's start or after ``;`` / ``:`` (``if TYPE_CHECKING: import x``),
#: parenthesized or continued lines included. Only these are parsed, not the whole module (a
#: tenth of the time; the same modules as walking the module's whole syntax tree: tests/test_memo.py).
_IMPORT = re.compile(r"(?:^|(?<=[;:]))[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|(?:[^\n\\;]|\\\n)*)"
                     r"|import[ \t]+(?:[^\n\\;]|\\\n)*)", re.M)


def _imports(name: str, source: str) -> set[str]:
    """``scaletax`` modules imported by the module ``name`` (absolute and relative imports,
    at any depth: a function's lazy import counts)."""
    out: set[str] = set()
    pkg = name if _module_file(name) and _module_file(name).name == "__init__.py" else name.rpartition(".")[0]
    for match in _IMPORT.finditer(source):
        try:
            statements = ast.parse(match.group(0).strip()).body
        except SyntaxError:  # words in a string or comment that only look like an import
            continue
        for node in statements:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names)  # `from scaletax import perf`
    return {m for m in out if m == _PKG or m.startswith(_PKG + ".")}


@functools.lru_cache(maxsize=None)
def closure(module: str) -> tuple[str, ...]:
    """``module``, the scaletax modules it imports, transitively, and their packages, sorted."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:  # `from scaletax import DATA_DIR` names no module
                continue
        seen.add(name)
        parent = name.rpartition(".")[0]
        if parent:  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            todo.append(parent)
        todo.extend(_module_imports(name))
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=None)
def _module_imports(name: str) -> frozenset[str]:
    """:func:`_imports` of an imported module's source (once per process)."""
    f = _module_file(name)
    return frozenset(_imports(name, f.read_text(encoding="utf-8"))) if f and f.suffix == ".py" else frozenset()


@functools.lru_cache(maxsize=None)
def code_hash(module: str) -> str:
    """sha256 of the sources of :func:`closure` (``module`` and what it imports)."""
    h = hashlib.sha256()
    for name in closure(module):
        f = _module_file(name)
        h.update(name.encode() + b"\0" + (f.read_bytes() if f else b"") + b"\0")
    return h.hexdigest()


def canonical(obj: Any) -> Any:
    """A JSON-serializable, exact and type-tagged form of ``obj``; TypeError if there is none."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return {"enum": f"{type(obj).__qualname__}.{obj.name}"}
    if isinstance(obj, (int, np.integer)):
        return {"int": str(int(obj))}
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return {"float": v.hex() if math.isfinite(v) else repr(v), "dtype": type(obj).__name__}
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        if a.dtype == object:
            return {"array": [canonical(v) for v in a.reshape(-1)], "shape": list(a.shape)}
        return {"array": hashlib.sha256(a.tobytes()).hexdigest(), "dtype": a.dtype.str, "shape": list(a.shape)}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__: [canonical(v) for v in obj]}
    if isinstance(obj, (set, frozenset)):
        items = sorted((canonical(v) for v in obj), key=lambda c: json.dumps(c, sort_keys=True))
        return {"set": items}
    if isinstance(obj, dict):
        items = sorted(([canonical(k), canonical(v)] for k, v in obj.items()),
                       key=lambda kv: json.dumps(kv[0], sort_keys=True))
        return {"dict": items}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"dataclass": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "fields": {f.name: canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    dump = getattr(obj, "model_dump", None)  # pydantic models (GPU, Model, Layout)
    if callable(dump) and hasattr(type(obj), "model_fields"):
        return {"pydantic": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "fields": {k: canonical(getattr(obj, k)) for k in type(obj).model_fields}}
    raise TypeError(f"memo: no canonical form for an argument of type {type(obj).__qualname__}")


def _data_hash(names: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + hashlib.sha256((DATA_DIR / name).read_bytes()).digest())
    return h.hexdigest()


def _arguments(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Canonical form of ``fn``'s arguments bound by name, defaults applied."""
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return canonical(dict(bound.arguments))


def key(fn: Callable, args: tuple, kwargs: dict, data: tuple[str, ...] = (), name: str | None = None) -> str:
    """The cache key of ``fn(*args, **kwargs)`` (module docstring); arguments bound by name;
    ``name``: the cached function's name (default its module and qualified name)."""
    h = hashlib.sha256()
    h.update(f"{name or f'{fn.__module__}.{fn.__qualname__}'}\0".encode())
    h.update(code_hash(fn.__module__).encode() + b"\0")
    h.update(json.dumps(_arguments(fn, args, kwargs), sort_keys=True).encode() + b"\0")
    h.update(_data_hash(tuple(data)).encode())
    return h.hexdigest()


def _count(name: str, what: str, digest: str = "", seconds: float = 0.0, args: Any = None) -> None:
    with _STATS_LOCK:
        counts = STATS.setdefault(name, {"hit": 0, "miss": 0})
        counts[what] = counts.get(what, 0) + 1  # "bad" only once one was found
    log = os.environ.get(LOG_ENV)
    if log:
        line = {"fn": name, "key": digest, "what": what, "seconds": round(seconds, 4), "pid": os.getpid()}
        if args is not None:
            line["args"] = args
        with open(log, "a", encoding="utf-8") as f:  # one write per line: lines of processes do not interleave
            f.write(json.dumps(line, sort_keys=True) + "\n")


#: A cache file is this line, the sha256 of the rest in hex, a newline, then the rest (the pickled
#: value, or a PNG's bytes): a file whose rest does not hash to it is never used.
_HEAD = b"scaletax-memo sha256="
_DIGEST = 64


def write_entry(path: Path, payload: bytes) -> None:
    """Write ``payload`` to the cache file ``path`` with its sha256 (atomically)."""
    digest = hashlib.sha256(payload).hexdigest().encode()
    files.replace_atomically(path, _HEAD + digest + b"\n" + payload, prefix=".tmp-", suffix=path.suffix)


def read_entry(path: Path) -> tuple[str, bytes | None]:
    """("hit", payload) when ``path`` holds a payload that hashes to its recorded sha256;
    ("missing", None) when there is no file; ("bad", None) when it is unreadable, has no record
    or does not match it (edited or corrupt: the caller computes the value again and rewrites it)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "missing", None
    except OSError:
        return "bad", None
    n = len(_HEAD)
    if raw[:n] != _HEAD or raw[n + _DIGEST:n + _DIGEST + 1] != b"\n":
        return "bad", None
    payload = raw[n + _DIGEST + 1:]
    if hashlib.sha256(payload).hexdigest().encode() != raw[n:n + _DIGEST]:
        return "bad", None
    return "hit", payload


def _load(path: Path) -> tuple[str, Any]:
    """(:func:`read_entry`'s status, the unpickled value or None)."""
    status, payload = read_entry(path)
    if status != "hit":
        return status, None
    try:
        return "hit", pickle.loads(payload)
    except (EOFError, pickle.UnpicklingError, AttributeError, ImportError):  # pickled by other code
        return "bad", None


#: How the GPU catalog (``data/hardware.csv``) records its reads: ``reads_during`` (a context manager
#: yielding the set of ids read in the block) and ``read_all`` (a read of the whole catalog). Handed
#: over by the catalog's module when it is imported (:func:`guard_catalog`): memo is a utility below
#: the inputs layer and imports none of it; before that import nothing can read the catalog.
_CATALOG: dict[str, Callable] = {}


def guard_catalog(reads_during: Callable, read_all: Callable[[], Any]) -> None:
    """Make the GPU catalog one that cached calls read only through their arguments
    (``scaletax.inputs.hardware`` calls it on import with its ``reads_during`` and ``catalog``)."""
    _CATALOG.update(reads_during=reads_during, read_all=read_all)


def _read_all() -> None:
    if _CATALOG:
        _CATALOG["read_all"]()


def _compute(f: Callable, name: str, args: tuple, kwargs: dict, whole_catalog: bool):
    """``f(*args, **kwargs)``; TypeError when it read GPU rows its key does not cover."""
    if whole_catalog:
        _read_all()  # keyed on the whole hardware.csv: the caller read all of it
        return f(*args, **kwargs)
    if not _CATALOG:
        return f(*args, **kwargs)
    with _CATALOG["reads_during"]() as seen:
        value = f(*args, **kwargs)
    if seen:
        raise TypeError(f"memo: {name} read GPU row(s) {', '.join(sorted(seen))} from the catalog itself; "
                        "its key covers only its arguments: pass resolved hardware.GPU objects")
    return value


def cached(fn: Callable | None = None, *, data: tuple[str, ...] = (), name: str | None = None):
    """Decorator: cache ``fn``'s result on disk by :func:`key` (``data``: files it reads; ``name``:
    the cache's folder and the key's first part, default ``fn``'s module and qualified name)."""
    def wrap(f: Callable) -> Callable:
        label = name or f"{f.__module__}.{f.__qualname__}"
        whole_catalog = "hardware.csv" in data

        def _lookup(root: str, args: tuple, kwargs: dict):
            """(key, its file, loaded?, the cached value or None); a hit is counted."""
            if whole_catalog:
                _read_all()  # a hit reads what the computation read: the whole catalog
            t0 = time.perf_counter()
            digest = key(f, args, kwargs, data, label)
            path = Path(root) / label / f"{digest}.pkl"
            status, value = _load(path)
            if status != "missing":
                _count(label, status, digest, time.perf_counter() - t0)
            return digest, path, status == "hit", value

        @functools.wraps(f)
        def inner(*args, **kwargs):
            root = os.environ.get(ENV)
            if not root:
                return _compute(f, label, args, kwargs, whole_catalog)
            t0 = time.perf_counter()
            digest, path, ok, value = _lookup(root, args, kwargs)
            if ok:
                return value
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_suffix(".lock"), "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # another process computing it: wait, then read
                    fcntl.flock(lock, fcntl.LOCK_EX)
                status, value = _load(path)
                if status == "hit":
                    _count(label, "hit", digest, time.perf_counter() - t0)
                    return value
                value = _compute(f, label, args, kwargs, whole_catalog)
                write_entry(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            _count(label, "miss", digest, time.perf_counter() - t0,
                   _arguments(f, args, kwargs) if os.environ.get(LOG_ENV) else None)
            return value

        inner.memo_name = label
        return inner

    return wrap(fn) if fn is not None else wrap
