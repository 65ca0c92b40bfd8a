"""scaletax: the memory, communication and precision taxes of training at scale.

Layers, each a package, imports pointing one way (ARCHITECTURE.md, tests/test_architecture.py):
``inputs`` (GPUs, architectures, formats, recipes, layouts, the runs-table schema) <- ``model``
(memory, network, step time, search, cost; plain numpy) <- ``fit`` (calibrate, validate) <-
``chapters`` (one module per notebook; ``render`` beside it) <- ``report`` (scenario, papermill,
Jupyter Book, CLI: the only part that imports papermill or Jupyter Book). The top-level modules
(this one, ``files``, ``memo``, ``jobserver``) are utilities below every layer.
"""
from importlib.metadata import PackageNotFoundError, version as _version
from pathlib import Path

try:
    __version__ = _version("scaletax")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"

#: Repository root (lib/scaletax/__init__.py -> ../../).
ROOT = Path(__file__).resolve().parents[2]
#: Sourced data files.
DATA_DIR = ROOT / "data"


def unknown_id(value: str, valid: list[str], what: str = "id") -> str:
    """"unknown <what> 'X' (did you mean 'x'?)": a case-insensitive match first, else the nearest."""
    import difflib

    lower = {v.lower(): v for v in valid}
    key = str(value).lower()
    near = [lower[key]] if key in lower else difflib.get_close_matches(key, valid, n=1)
    return f"unknown {what} {value!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
