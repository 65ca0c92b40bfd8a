"""What produced a book: code version, commit, inputs and their hashes."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from scaletax import DATA_DIR, ROOT, __version__
from scaletax.inputs import hardware

#: Packages whose versions go into the manifest (the rest are in requirements.lock).
KEY_PACKAGES = ("numpy", "ml_dtypes", "altair", "vl-convert-python", "papermill", "jupytext",
                "jupyter-book", "sphinx", "myst-nb", "pydantic")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_hash(root: Path, patterns: tuple[str, ...]) -> str:
    """sha256 over the relative paths and bytes of the files under ``root`` matching patterns."""
    h = hashlib.sha256()
    files = sorted({p for pat in patterns for p in root.rglob(pat) if p.is_file()
                    and "__pycache__" not in p.parts})
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def lib_hash() -> str:
    """Hash of the library code (``lib/scaletax``) that notebooks import."""
    return tree_hash(ROOT / "lib" / "scaletax", ("*.py",))


def lock_hash() -> str:
    lock = ROOT / "requirements.lock"
    return sha256_bytes(lock.read_bytes()) if lock.exists() else "no-lock-file"


def git_commit() -> str:
    """``<sha>`` of HEAD, with ``+dirty`` when tracked files differ; ``unknown`` outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "scaletax": __version__}
    for name in KEY_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def short_commit(commit: str) -> str:
    """The commit as the book shows it: 12 hex digits, keeping ``+dirty``."""
    sha, _, rest = commit.partition("+")
    return sha[:12] + (f"+{rest}" if rest else "")


def data_hashes(root: Path = DATA_DIR) -> dict[str, str]:
    """sha256 of every data file the model can read (``data/``, relative path -> hex)."""
    return {str(p.relative_to(root.parent)): sha256_bytes(p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def name_conflict(book: Path, scenario_hash: str) -> str | None:
    """Why ``book`` (a built book's folder) must not be replaced by a build of the scenario whose
    :meth:`~scaletax.report.scenario.Scenario.content_hash` is ``scenario_hash``; None when it may
    (no folder there, or a book of the same resolved scenario, however its file and overrides
    spelled it). A folder whose manifest cannot be read, or names no scenario hash, is a
    conflict: what it holds is unknown."""
    if not os.path.lexists(book):
        return None
    try:
        old = json.loads((book / "manifest.json").read_text(encoding="utf-8"))
        old_hash = old["scenario_sha256"] if isinstance(old, dict) else None
        if not isinstance(old_hash, str):
            raise ValueError("no scenario hash")
    except (OSError, ValueError, KeyError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a scaletax manifest"
        return (f"--name {book.name}: {book} exists but its manifest cannot be read ({why}); "
                "choose another --name, or add --force to replace it")
    if old_hash == scenario_hash:
        return None
    sets = old.get("overrides") if isinstance(old.get("overrides"), list) else []
    what = f"{old.get('scenario_file', '?')}{''.join(f' --set {o}' for o in sets) or ', no --set'}"
    return (f"--name {book.name}: {book} holds the book of another scenario ({what}; scenario sha256 "
            f"{str(old_hash)[:12]}, this one {scenario_hash[:12]}); choose another --name, or add --force to "
            "replace it").replace("\n", " ")


def keyed_rows(reads: tuple[str, ...] | None) -> list[str] | str | None:
    """What a chapter's cache key held of the GPU catalog, as the manifest says it: the ids
    whose rows it read (``data/hardware.csv`` merged with ``data/systems.csv``), ``"all"`` (it
    read the whole catalog: both files whole), or None (it does not read the catalog)."""
    if reads is None:
        return None
    return "all" if hardware.ALL in reads else list(reads)


def keyed_rows_list(rows: dict[str, list[str] | str | None]) -> str:
    """A MyST bullet list, one line per chapter (slug -> :func:`keyed_rows`), for the
    Reproduce page."""
    from scaletax import escape

    lines = []
    for slug, got in rows.items():
        if got is None:
            what = "reads no GPU row"
        elif got == "all":
            what = "the whole catalog (it reads every GPU: any edit of either file re-executes it)"
        elif not got:
            what = "no GPU row"
        else:
            what = "the rows of " + ", ".join(escape.myst_code(g) for g in got)
        lines.append(f"- {escape.myst_text(slug)}: {what}")
    return "\n".join(lines) if lines else "- (no chapter in this build)"
