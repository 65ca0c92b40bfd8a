"""Sphinx extension: one numbering scheme for the HTML and the PDF, and a list of what got which number.

In the PDF (Sphinx's LaTeX builder) the root page's title becomes the book's title and each of
its top-level sections becomes a numbered chapter, so the summary is Chapter 1 and the first
chapter of the table of contents is Chapter 2. Sphinx's HTML numbering leaves the root page out
(its tables are "Table 1", the first chapter is 1). This extension gives the HTML the PDF's
scheme: the root page's sections are numbered 1..k and every other page is shifted by k, before
figure and table numbers are derived from the section numbers. "Table 7.1" then names the same
table in both.

After any build it writes ``numbers-<builder>.json`` beside the doctree folder: for every numbered figure and
table, its label, kind, number, caption and page, which the book build uses to stamp the exported
PNG and CSV files and which the tests compare between the HTML and the PDF.
"""
from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

from scaletax import speedups

if speedups.on("sphinx_once"):
    from scaletax.report.sphinx_once import assign_figure_numbers, read_only
else:
    from sphinx.environment.collectors.toctree import TocTreeCollector

    assign_figure_numbers = TocTreeCollector.assign_figure_numbers

    def read_only(env, docname):
        return env.get_doctree(docname)

NUMBERS_FILE = "numbers-{builder}.json"


def _root_sections(env) -> list[str]:
    """Anchor names of the root page's top-level sections (the PDF's chapters)."""
    doctree = read_only(env, env.config.root_doc)
    top = next(iter(doctree.findall(nodes.section)), None)
    if top is None:
        return []
    return ["#" + s["ids"][0] for s in top.children if isinstance(s, nodes.section) and s["ids"]]


def _shift(value, k: int):
    if isinstance(value, (list, tuple)) and value:
        return type(value)([value[0] + k, *value[1:]])
    return value


def _renumber(app, env) -> list[str]:
    """Number the root page's sections 1..k, shift the other pages by k, redo figure numbers."""
    root = env.config.root_doc
    anchors = _root_sections(env)
    k = len(anchors)
    if not k or not env.config.numfig:
        return []
    for doc, secnums in env.toc_secnumbers.items():
        if doc != root:
            env.toc_secnumbers[doc] = {a: _shift(n, k) for a, n in secnums.items()}
    env.toc_secnumbers[root] = {a: (i + 1,) for i, a in enumerate(anchors)}
    # the numbers drawn in the sidebar, the headings and next/prev links live on toc nodes
    for doc in env.tocs:
        for ref in env.tocs[doc].findall(nodes.reference):
            if ref.get("secnumber"):
                ref["secnumber"] = _shift(ref["secnumber"], k)
        title = env.titles.get(doc)
        if title is not None and title.get("secnumber"):
            title["secnumber"] = _shift(title["secnumber"], k)
    assign_figure_numbers(None, env)  # Sphinx's, on the read-only doctrees
    return list(env.found_docs)


def _caption(node) -> str:
    for child in node.children:
        if isinstance(child, (nodes.caption, nodes.title)):
            return " ".join(child.astext().split())
    return ""


def collect(env) -> list[dict]:
    """Every numbered figure and table: label, kind, number ("3.2"), caption, page."""
    out = []
    for doc in sorted(env.toc_fignumbers):
        doctree = read_only(env, doc)
        by_id = {}
        for node in doctree.findall(lambda n: isinstance(n, (nodes.figure, nodes.table))):
            for i in node["ids"]:
                by_id[i] = node
        for kind, numbers in env.toc_fignumbers[doc].items():
            if kind not in ("figure", "table"):
                continue
            for ident, number in numbers.items():
                node = by_id.get(ident)
                label = next(iter(node["names"]), ident) if node is not None else ident
                out.append({"label": label, "kind": kind, "number": ".".join(map(str, number)),
                            "caption": _caption(node) if node is not None else "", "page": doc})
    return sorted(out, key=lambda r: (r["kind"], [int(x) for x in r["number"].split(".")]))


def _write_numbers(app, exc) -> None:
    if exc is not None:
        return
    path = Path(app.doctreedir).parent / NUMBERS_FILE.format(builder=app.builder.name)
    path.write_text(json.dumps(collect(app.env), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def setup(app):
    if speedups.on("sphinx_once"):
        app.setup_extension("scaletax.report.sphinx_once")  # the read-only doctrees it uses
    app.connect("env-get-updated", _renumber, priority=900)
    app.connect("build-finished", _write_numbers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
