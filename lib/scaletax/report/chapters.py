"""The book's table of contents: hand-written pages and executed chapters, in order.

A chapter names the scenario keys it reads and the data files it reads; those, its
source and the library code make its cache key, so changing one parameter re-executes
only the chapters that read it. GPUs and models defined in the scenario enter the key (as
resolved definitions) only of the chapters that read ``gpus`` / ``models``. Of
``hardware.csv`` (with ``systems.csv``) a chapter that declares it is keyed on the rows of the
GPUs its execution read, recorded as it runs (``report/execute.py``): an edit of one GPU's row
re-executes only the chapters that read that GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import os
from pathlib import Path

from scaletax import ROOT

#: Chapter sources (``SCALETAX_NOTEBOOKS`` overrides it, for tests of failing chapters).
NOTEBOOK_DIR = Path(os.environ.get("SCALETAX_NOTEBOOKS", ROOT / "notebooks"))
BOOK_DIR = ROOT / "book"
#: Where books, the execution cache and logs go (``SCALETAX_BUILD_DIR`` overrides, e.g. in tests).
BUILD_ROOT = Path(os.environ.get("SCALETAX_BUILD_DIR", ROOT / "_build"))


@dataclass(frozen=True)
class Chapter:
    """A notebook chapter: ``notebooks/<slug>.md`` executed with the keys it ``reads``."""

    slug: str
    reads: tuple[str, ...]
    #: data files (relative to ``data/``) it reads; ``hardware.csv``: keyed on the rows it reads
    data: tuple[str, ...]

    @property
    def source(self):
        return NOTEBOOK_DIR / f"{self.slug}.md"

    def parameters(self, scenario) -> dict:
        """Notebook parameters: each dotted key becomes a name with '_' for '.'; ``gpus`` and
        ``models`` are lists of ids (inline definitions reach the kernel via :meth:`definitions`)."""
        ids = {"gpus": scenario.gpu_ids, "models": scenario.model_ids}
        return {key.replace(".", "_"): ids[key] if key in ids else scenario.get(key) for key in self.reads}

    def definitions(self, scenario) -> dict:
        """The resolved scenario-defined GPUs / models this chapter reads (JSON-ready)."""
        defs = scenario.definitions()
        return {"gpus": defs["gpus"] if "gpus" in self.reads else {},
                "models": defs["models"] if "models" in self.reads else {}}


@dataclass(frozen=True)
class Page:
    """A hand-written page ``book/<slug>.md`` (or one generated at build time)."""

    slug: str
    generated: bool = False


@dataclass(frozen=True)
class Part:
    caption: str
    entries: tuple


_MODEL_DATA = ("hardware.csv", "systems.csv", "models.yaml", "efficiency.yaml")
_PLAN = ("models", "gpus", "training.tokens", "training.global_batch_tokens", "training.precision",
         "training.precisions", "training.software", "cluster.sizes", "cluster.gpus", "cluster.target_days", "cluster.goodput",
         "cluster.reliability", "economics.prices", "economics.energy", "economics.usd_per_mwh",
         "economics.price_includes_power", "comparisons")

#: Executed chapters, in book order (the summary is the book's first page), which is also the order
#: they start in. The summary asks the decision chapter's searches (all 61 of its ``search()``
#: calls); the two may run side by side: a search one of them computes, the other waits for and
#: reads (``scaletax.memo``'s per-key lock).
CHAPTERS = (
    Chapter("summary", reads=("name", *_PLAN, "cluster.goodput_source", "economics.ownership"),
            data=(*_MODEL_DATA, "references.yaml", "published_runs.csv", "published_runs_validation.csv",
                  "failures.csv")),
    Chapter("hardware", reads=("gpus",), data=("hardware.csv",)),
    Chapter("memory", reads=("models", "gpus", "cluster.sizes", "cluster.gpus", "training.precision",
                             "training.precisions", "training.global_batch_tokens"),
            data=("hardware.csv", "models.yaml", "published_runs.csv", "references.yaml")),
    Chapter("communication", reads=("models", "gpus", "cluster.sizes", "cluster.gpus", "training.precision",
                                    "training.precisions", "training.global_batch_tokens", "training.software"),
            data=("hardware.csv", "models.yaml", "collectives.csv", "efficiency.yaml", "published_runs.csv",
                  "heldout_runs.csv")),
    Chapter("precision", reads=("gpus", "training.precisions", "precision.seed", "precision.experiment_seeds",
                                "precision.experiment_steps"),
            data=("hardware.csv", "published_runs.csv", "published_runs_validation.csv", "precision_vectors.json",
                  "references.yaml")),
    Chapter("validation", reads=(),
            data=("hardware.csv", "models.yaml", "published_runs.csv", "published_runs_validation.csv",
                  "efficiency.yaml", "collectives.csv", "measured/gemm_h200.csv", "coverage_probes.csv", "production_moe_recipes.csv", "heldout_runs.csv")),
    Chapter("decision", reads=("name", *_PLAN, "training.tokens_source", "economics.usd_per_mwh_source",
                               "cluster.goodput_source", "economics.ownership", "cluster.power_mw",
                               "cluster.power_mw_source", "fleets"),
            data=(*_MODEL_DATA, "references.yaml", "failures.csv", "published_runs.csv",
                  "published_runs_validation.csv")),
)
_BY_SLUG = {c.slug: c for c in CHAPTERS}

TOC = (
    Part("About this book", (Page("intro"),)),
    Part("The three taxes", tuple(_BY_SLUG[s] for s in ("hardware", "memory", "communication", "precision"))),
    Part("What it costs", tuple(_BY_SLUG[s] for s in ("validation", "decision"))),
    Part("Method and provenance", (Page("method"), Page("reproduce", generated=True),
                                   Page("cite"), Page("bibliography"))),
)
ROOT_PAGE = "summary"


def chapter(slug: str) -> Chapter:
    for ch in CHAPTERS:
        if ch.slug == slug:
            return ch
    raise KeyError(f"no chapter {slug!r}; chapters: {', '.join(c.slug for c in CHAPTERS)}")


def default_parameters(slug: str) -> dict:
    """The default scenario's values of the keys chapter ``slug`` reads: its notebook's parameter
    defaults (a build injects the scenario's own values after them)."""
    from scaletax.report.scenario import resolve

    return chapter(slug).parameters(resolve())


def toc_yaml() -> dict:
    """The sphinx-external-toc structure (jb-book format) for the TOC above."""
    parts = []
    for part in TOC:
        files = [{"file": e.slug} for e in part.entries if e.slug != ROOT_PAGE]
        if files:
            parts.append({"caption": part.caption, "numbered": True, "chapters": files})
    return {"format": "jb-book", "root": ROOT_PAGE, "parts": parts}
