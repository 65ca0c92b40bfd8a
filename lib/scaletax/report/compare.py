"""Two books side by side: ``scaletax compare A B`` -> ``_build/compare-A-vs-B/`` (HTML and PDF).

The page holds what a planner diffed by hand before: the scenario inputs that differ (from the
two manifests' resolved scenarios), the summary's headline numbers of both books with the change
(from their exported table CSVs, whose ranges are numeric columns), and the key figures with both
books' data in one chart. It reads only the two published books; nothing is recomputed.

A book is named, never given as a path: the name is checked (:func:`load_book`) and nothing is read
outside ``<build root>/<name>/``. Everything the books hold (scenario values, captions, CSV cells)
is text to this page: it reaches the MyST source only through :mod:`scaletax.escape`, and the page
is built with the book's MyST extensions and its ``docutils.conf`` (no raw HTML, no file inclusion).
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaletax import __version__, escape


class CompareError(ValueError):
    """The two books cannot be compared; one line naming what is missing."""


@dataclass(frozen=True)
class KeyFigure:
    """A figure of both books redrawn in one chart from their exported CSVs."""

    label: str
    title: str
    x: str
    y: str
    series: str
    facet: str
    x_title: str
    y_title: str
    mark: str = "point"
    log_x: bool = False
    y_scale: float = 1.0


KEY_FIGURES = (
    KeyFigure("fig-dec-cost-time", "Days and cost to train, per model and GPU", "days", "cost_musd", "gpu",
              "model_name", "days to train", "cost ($M)"),
    KeyFigure("fig-comm-tax", "Exposed communication from 1k to 100k GPUs", "gpus", "share", "gpu", "model",
              "GPUs in the job", "exposed communication (% of step time)", mark="line", log_x=True, y_scale=100),
)


#: A book's name (as ``scaletax build --name`` takes it) and a figure or table label.
BOOK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")
LABEL = re.compile(r"[a-z0-9][a-z0-9-]{0,127}\Z")
#: Largest exported CSV the page reads (the book's own are a few kB).
MAX_CSV_BYTES = 16 * 1024**2


@dataclass
class Book:
    name: str
    dir: Path
    manifest: dict

    def csv(self, label: str) -> list[dict] | None:
        """The rows of ``figures/<label>.csv`` (text cells as written, :func:`scaletax.escape.csv_value`),
        or None when the book has no such file."""
        from scaletax.files import InputFileError, read_bounded

        if not LABEL.match(label):
            raise CompareError(f"book {self.name!r}: bad figure or table label {label[:40]!r}")
        path = self.dir / "figures" / f"{label}.csv"
        if not path.exists():
            return None
        try:
            text = read_bounded(path, MAX_CSV_BYTES, "exported CSV").decode("utf-8")
        except (InputFileError, UnicodeDecodeError) as exc:
            raise CompareError(f"book {self.name!r}: {str(exc).splitlines()[0]}") from None
        return [{escape.csv_value(k): escape.csv_value(v) if isinstance(v, str) else v for k, v in r.items()
                 if k is not None} for r in csv.DictReader(io.StringIO(text, newline=""))]

    @property
    def numbered(self) -> list[dict]:
        return self.manifest.get("numbered", [])


def check_name(name: str) -> str:
    """``name`` if it names a book (1-64 lowercase letters, digits, '-' or '_'); a path, ``..``
    or anything else is a one-line CompareError."""
    if not isinstance(name, str) or not BOOK_NAME.match(name):
        raise CompareError(f"{name!r} is not a book name: give the name of a built book under _build/ "
                           "(1-64 lowercase letters, digits, '-' or '_') or a scenario .yaml file")
    return name


def load_book(build_root: Path, name: str) -> Book:
    """The published book ``name`` under ``build_root`` (its manifest and folder); the name is
    checked (:func:`check_name`) and the folder must be a real folder inside ``build_root`` (not a
    link out of it)."""
    check_name(name)
    folder = build_root / name
    path = folder / "manifest.json"
    if folder.is_symlink() or (folder.exists() and folder.resolve().parent != build_root.resolve()):
        raise CompareError(f"{folder}: a link, not a book folder of {build_root}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CompareError(f"no built book {name!r} under {build_root} (build it with `scaletax build "
                           f"--name {name}`, or give a scenario file)") from None
    except (OSError, ValueError):
        raise CompareError(f"{path}: not a scaletax manifest") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("scenario"), dict):
        raise CompareError(f"{path}: not a scaletax manifest (no resolved scenario)")
    numbered = manifest.get("numbered", [])
    if not isinstance(numbered, list) or not all(
            isinstance(n, dict) and isinstance(n.get("label"), str) and LABEL.match(n["label"])
            and all(isinstance(n.get(k, ""), str) for k in ("kind", "page", "caption", "number"))
            for n in numbered):
        raise CompareError(f"{path}: not a scaletax manifest (a numbered entry without a valid label)")
    return Book(name, folder, manifest)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested scenario -> {"dotted.key": value}; lists stay whole."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def input_diff(a: dict, b: dict) -> list[dict]:
    """The scenario keys whose resolved values differ, with both values."""
    fa, fb = flatten(a), flatten(b)
    missing = object()
    rows = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, missing), fb.get(key, missing)
        if va != vb:
            rows.append({"key": key, "a": _show(va, missing), "b": _show(vb, missing)})
    return rows


def _show(v: Any, missing: object) -> str:
    if v is missing:
        return "(not set)"
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def _number(text: str | None) -> float | None:
    try:
        v = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def headline_labels(a: Book, b: Book) -> list[str]:
    """The tables of the summary page (the book's first page) present in both books."""
    def labels(book: Book) -> list[str]:
        nbs = book.manifest.get("notebooks")
        root = nbs[0].get("chapter") if isinstance(nbs, list) and nbs and isinstance(nbs[0], dict) else "summary"
        return [n["label"] for n in book.numbered if n.get("kind") == "table" and n.get("page") == root]
    in_b = set(labels(b))
    return [lab for lab in labels(a) if lab in in_b]


def headline_rows(a: Book, b: Book, label: str) -> list[dict]:
    """Every numeric cell of table ``label`` in both books: row, column, A (band), B (band), change.

    Rows are matched on the table's first column; a column ``c`` with ``c_low``/``c_high``
    beside it is one number with its band.
    """
    ra, rb = a.csv(label), b.csv(label)
    if not ra or not rb:
        return []
    key = next(iter(ra[0]))
    by_key = {r[key]: r for r in rb}
    cols = [c for c in ra[0] if c != key and not c.endswith(("_low", "_high"))]
    out = []
    for row in ra:
        other = by_key.get(row[key])
        if other is None:
            continue
        for c in cols:
            va, vb = _number(row.get(c)), _number(other.get(c))
            if va is None and vb is None:
                if row.get(c) != other.get(c):  # a text cell that changed (which GPU is cheapest)
                    out.append({"row": row[key], "column": c, "a": row.get(c), "b": other.get(c), "change": "changed"})
                continue
            change = None if va in (None, 0) or vb is None else (vb - va) / abs(va)
            out.append({"row": row[key], "column": c, "a": _band(row, c), "b": _band(other, c),
                        "change": "–" if change is None else f"{100 * change:+.1f}%",
                        "value_a": va, "value_b": vb})
    return out


def _band(row: dict, col: str):
    from scaletax.render.tables import band

    return band(_number(row.get(col)), _number(row.get(f"{col}_low")), _number(row.get(f"{col}_high")))


def overlay_rows(a: Book, b: Book, fig: KeyFigure) -> list[dict]:
    """The plotted rows of ``fig`` from both books, each tagged with its book."""
    out = []
    for book in (a, b):
        for r in book.csv(fig.label) or []:
            x, y = _number(r.get(fig.x)), _number(r.get(fig.y))
            if x is None or y is None:
                continue
            out.append({"book": book.name, "x": x, "y": y * fig.y_scale, "gpu": r.get(fig.series, ""),
                        "facet": r.get(fig.facet, "")})
    return out


def overlay_chart(fig: KeyFigure, rows: list[dict], names: tuple[str, str]) -> dict:
    """Both books in one chart (a Vega-Lite spec): the books' GPU colours and names, shape
    (points) or dash (lines) by book, one panel per facet value."""
    import altair as alt

    from scaletax.render import charts

    gpus = list(dict.fromkeys(r["gpu"] for r in rows))
    x = alt.X("x:Q", title=fig.x_title, scale=alt.Scale(type="log") if fig.log_x else alt.Undefined)
    y = alt.Y("y:Q", title=fig.y_title)
    color = alt.Color("gpu:N", title="GPU", scale=charts.gpu_color_scale(gpus), sort=gpus)
    base = alt.Chart(charts.data(rows))
    if fig.mark == "line":
        layer = base.mark_line(point=True).encode(
            x=x, y=y, color=color, detail="book:N",
            strokeDash=alt.StrokeDash("book:N", title="book",
                                      scale=alt.Scale(domain=list(names), range=[[1, 0], [5, 3]])))
    else:
        layer = base.mark_point(filled=True, size=70).encode(
            x=x, y=y, color=color, shape=alt.Shape("book:N", scale=alt.Scale(domain=list(names)), title="book"))
    chart = layer.properties(width=240, height=200).facet(column=alt.Column("facet:N", title=None))
    return charts.name_gpus(chart.to_dict())


def page(a: Book, b: Book) -> tuple[str, dict[str, bytes], list[dict]]:
    """The comparison page (MyST), its images, and the headline rows (for the JSON export)."""
    import vl_convert as vlc

    from scaletax.render import tables

    ma, mb = a.manifest, b.manifest
    t = escape.myst_text
    lines = [f"# Comparison: {t(a.name)} vs {t(b.name)}", "",
             f"Two scaletax books side by side: **{t(a.name)}** (A; commit {escape.myst_code(ma.get('git_commit', '?'))}, "
             f"built {t(ma.get('built_at', '?'))}) and **{t(b.name)}** (B; commit "
             f"{escape.myst_code(mb.get('git_commit', '?'))}, built {t(mb.get('built_at', '?'))}). Values are read "
             "from the two books' exported files; ranges in brackets are each book's band of the step-time model.", ""]
    diff = input_diff(ma["scenario"], mb["scenario"])
    lines += ["## Inputs that differ", ""]
    if diff:
        lines.append(tables.markdown(diff, {"key": "Scenario key", "a": f"A: {a.name}", "b": f"B: {b.name}"},
                                     label="tbl-cmp-inputs", caption="Scenario inputs whose resolved values differ.",
                                     widths=[30, 35, 35]))
    else:
        lines.append("The two resolved scenarios are identical.")
    lines += ["", "## Headline numbers", ""]
    headline: list[dict] = []
    for i, label in enumerate(headline_labels(a, b), 1):
        rows = headline_rows(a, b, label)
        caption = next((n.get("caption") or label for n in a.numbered if n["label"] == label), label)
        number = next((n.get("number", "") for n in a.numbered if n["label"] == label), "")
        headline += [{"table": label, **r} for r in rows]
        if rows:
            lines.append(tables.markdown(
                rows, {"row": "Row", "column": "Column", "a": f"A: {a.name}", "b": f"B: {b.name}", "change": "Change"},
                label=f"tbl-cmp-headline-{i}", long=True, widths=[20, 20, 22, 22, 16],
                caption=f"Book A's Table {number} ({caption.rstrip('.')}) in both books; change from A to B."))
            lines.append("")
    if not headline:
        lines.append("The books share no summary table to compare.")
    lines += ["", "## Key figures", ""]
    images: dict[str, bytes] = {}
    for fig in KEY_FIGURES:
        rows = overlay_rows(a, b, fig)
        if not rows:
            continue
        spec = overlay_chart(fig, rows, (a.name, b.name))
        name = f"{fig.label}-overlay.png"
        images[name] = vlc.vegalite_to_png(spec, scale=2.0)
        lines += [f"```{{figure}} {name}", f":name: cmp-{fig.label}", ":width: 100%", "",
                  t(f"{fig.title}: book A ({a.name}) and book B ({b.name}) in one chart."), "```", ""]
    return "\n".join(lines) + "\n", images, headline


def out_name(a: str, b: str) -> str:
    return f"compare-{a}-vs-{b}"


def _conf(title: str) -> str:
    """conf.py of the comparison: the book's MyST extensions and URL schemes (so its text is read
    as the book's is), a title escaped for LaTeX (Sphinx escapes ``project`` for HTML itself)."""
    import yaml

    from scaletax.report.book import CONFIG_YML

    book = yaml.safe_load(CONFIG_YML.read_text(encoding="utf-8"))
    cfg = {
        "project": title, "extensions": ["myst_parser"], "root_doc": "index", "html_theme": "alabaster",
        "numfig": True, "html_static_path": [], "latex_engine": "xelatex",
        "latex_documents": [("index", "book.tex", escape.latex_text(title), "scaletax", "howto")],
        "latex_elements": {"papersize": "a4paper", "pointsize": "10pt", "figure_align": "H"},
        "myst_enable_extensions": list(book["parse"]["myst_enable_extensions"]),
        "myst_url_schemes": list(book["sphinx"]["config"]["myst_url_schemes"]),
        "html_show_sourcelink": False, "html_copy_source": False,
        "release": __version__, "version": __version__, "today": dt.date.today().isoformat(),
    }
    return "# Generated by scaletax.report.compare; do not edit.\n" + "".join(
        f"{k} = {v!r}\n" for k, v in sorted(cfg.items()))


def compare(build_root: Path, a_name: str, b_name: str, pdf: bool = True) -> dict:
    """Build ``<build_root>/compare-A-vs-B/`` (index.html, compare-A-vs-B.pdf, headline.json,
    figures/); returns what was built. Raises CompareError, BuildError."""
    from scaletax.report.book import DOCUTILS_CONF, _publish, build_html, build_pdf, xelatex_available

    if check_name(a_name) == check_name(b_name):
        raise CompareError(f"compare needs two different books (got {a_name!r} twice)")
    a, b = load_book(build_root, a_name), load_book(build_root, b_name)
    name = out_name(a_name, b_name)
    text, images, headline = page(a, b)
    stage = Path(tempfile.mkdtemp(prefix=f".stage-{name}-", dir=build_root))
    try:
        src = stage / "src"
        src.mkdir()
        (src / "index.md").write_text(text, encoding="utf-8")
        (src / "conf.py").write_text(_conf(f"scaletax comparison: {a_name} vs {b_name}"), encoding="utf-8")
        (src / "docutils.conf").write_text(DOCUTILS_CONF, encoding="utf-8")  # as the book: no raw, no includes
        for fname, png in images.items():
            (src / fname).write_bytes(png)
        logs = build_root / ".logs" / name
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True)
        out = stage / "out"
        out.mkdir()
        build_html(src, out / "html", logs)
        pdf_status = "skipped (--no-pdf)"
        if pdf:
            if xelatex_available():
                build_pdf(src, out / f"{name}.pdf", logs)
                pdf_status = "built"
            else:
                pdf_status = "skipped (xelatex not installed)"
        (out / "figures").mkdir()
        for fname, png in images.items():
            (out / "figures" / fname).write_bytes(png)
        result = {"name": name, "a": a_name, "b": b_name, "pdf": pdf_status,
                  "inputs": input_diff(a.manifest["scenario"], b.manifest["scenario"]),
                  "headline": [{k: (str(v) if k in ("a", "b") else v) for k, v in r.items()} for r in headline],
                  "figures": sorted(images)}
        (out / "comparison.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n",
                                             encoding="utf-8")
        _publish(out, build_root / name)
        return result
    finally:
        shutil.rmtree(stage, ignore_errors=True)
