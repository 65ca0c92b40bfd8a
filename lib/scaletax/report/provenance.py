"""What produced a book: code version, commit, inputs and their hashes."""
from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from scaletax import ROOT, __version__

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
