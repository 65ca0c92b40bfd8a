"""report/sphinx_once.py: each doctree unpickled once for reference resolution and figure
numbering, pybtex plugins looked up once, one doctree folder for the HTML and the LaTeX build,
Sphinx's parallel read with the book's extensions; the output unchanged."""
import base64
import io
import json

import nbformat
import pytest
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util.docutils import docutils_namespace, patch_docutils

from scaletax.report import book, sphinx_once
from scaletax.report.scenario import resolve

#: A 1x1 PNG: the image rendering of the notebook output (the LaTeX builder picks it).
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC")


def _project(src, refs: int) -> None:
    """Three pages under a numbered toctree: a figure and a table on ``a``, a figure on ``b``
    (from an SVG), and a notebook ``c`` whose figure is a notebook output with an HTML and a
    PNG rendering; ``refs`` copies of the paragraph of numbered references on ``a`` and ``c``."""
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['myst_nb', 'scaletax.report.sphinx_once']\n"
                                 "numfig = True\nnb_execution_mode = 'off'\nroot_doc = 'index'\n"
                                 "html_theme = 'basic'\n")
    (src / "index.rst").write_text("Book\n====\n\n.. toctree::\n   :numbered:\n\n   a\n   b\n   c\n")
    (src / "pic.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>')
    para = "See :numref:`fig-b`, :numref:`tbl-a` and :numref:`fig-c`.\n\n"
    (src / "a.rst").write_text(
        "Page A\n======\n\n" + para * refs
        + ".. _tbl-a:\n\n.. table:: Table on A\n\n   = =\n   x y\n   = =\n   1 2\n   = =\n")
    (src / "b.rst").write_text("Page B\n======\n\n.. _fig-b:\n\n.. figure:: pic.svg\n\n   Figure on B\n\n"
                               "Back to :numref:`tbl-a`.\n")
    nb = nbformat.v4.new_notebook()
    html = '<div id="chart">chart</div>'
    out = nbformat.v4.new_output("display_data", data={"text/html": html, "image/png": base64.b64encode(PNG).decode(),
                                                       "text/plain": "chart"})
    nb.cells = [nbformat.v4.new_markdown_cell("# Page C\n\n" + "{numref}`fig-b` and {numref}`tbl-a`.\n\n" * refs),
                nbformat.v4.new_code_cell("chart", outputs=[out]),
                nbformat.v4.new_markdown_cell("```{figure} pic.svg\n:name: fig-c\n\nFigure on C\n```")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "c.ipynb")


def _build(src, out, doctrees, builder="html", once=True, fresh=True):
    """Build in this process; returns the number of ``env.get_doctree`` calls (doctree unpickles)."""
    conf = (src / "conf.py").read_text()
    if not once:
        (src / "conf.py").write_text(conf.replace(", 'scaletax.report.sphinx_once'", ""))
    calls = []
    real = BuildEnvironment.get_doctree

    def counting(self, docname):
        calls.append(docname)
        return real(self, docname)

    warnings = io.StringIO()
    try:
        BuildEnvironment.get_doctree = counting
        with patch_docutils(src), docutils_namespace():
            app = Sphinx(str(src), str(src), str(out), str(doctrees), builder, status=None, warning=warnings,
                         freshenv=fresh, warningiserror=True, keep_going=False)
            app.build()
    finally:
        BuildEnvironment.get_doctree = real
        (src / "conf.py").write_text(conf)
    assert app.statuscode == 0, warnings.getvalue()
    return len(calls)


def _pages(folder, suffix):
    return {p.name: p.read_bytes() for p in sorted(folder.glob(f"*{suffix}"))}


def test_numrefs_resolve_to_the_same_html_with_one_unpickle_per_page(tmp_path):
    calls = {}
    for refs in (1, 6):
        src = tmp_path / f"src{refs}"
        _project(src, refs)
        for once in (False, True):
            out = tmp_path / f"html-{refs}-{once}"
            calls[refs, once] = _build(src, out, tmp_path / f"dt-{refs}-{once}", once=once)
        plain, fast = _pages(tmp_path / f"html-{refs}-False", ".html"), _pages(tmp_path / f"html-{refs}-True", ".html")
        assert plain == fast  # byte for byte, every page
        a = fast["a.html"].decode()
        for ref in ("Fig. 2.1", "Table 1.1", "Fig. 3.1"):
            assert a.count(f'<span class="std std-numref">{ref}</span>') == refs
        c = fast["c.html"].decode()
        assert c.count('<span class="std std-numref">Fig. 2.1</span>') == refs
    # Sphinx unpickles the target page once per reference; the extension once per page
    assert calls[6, False] - calls[1, False] == 5 * 5
    assert calls[6, True] == calls[1, True] < calls[1, False]
    # the 4 pages once each for every lookup that only reads them (figure numbers, numrefs), and
    # the root once more by Sphinx's section numbering; the writers reuse the serial read's trees
    assert calls[1, True] == 4 + 1


def test_figure_numbering_walks_read_only_doctrees(tmp_path):
    """Sphinx's figure numbering reads each page from the read-only doctrees, and numbers the
    figures and tables as Sphinx's own does."""
    from sphinx.environment.collectors.toctree import TocTreeCollector

    assert TocTreeCollector.assign_figure_numbers is sphinx_once.assign_figure_numbers  # set by setup
    src = tmp_path / "src"
    _project(src, 1)
    _build(src, tmp_path / "html", tmp_path / "dt")
    with patch_docutils(src), docutils_namespace():  # the built environment, loaded, not built again
        env = Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "dt"), "html", status=None,
                     warning=io.StringIO(), freshenv=False).env
    seen = []
    env.get_doctree = lambda docname: seen.append(docname) or BuildEnvironment.get_doctree(env, docname)
    sphinx_once._forget(None, env, [])
    numbered = dict(env.toc_fignumbers)
    env.toc_fignumbers = {}
    sphinx_once.assign_figure_numbers(None, env)
    assert env.toc_fignumbers == numbered and numbered["a"] == {"table": {"id1": (1, 1)}}
    sphinx_once.assign_figure_numbers(None, sphinx_once.ReadOnlyDoctrees(env))
    assert sorted(seen) == ["a", "b", "c", "index"]  # once each, for both walks


def test_latex_build_on_the_html_doctrees_writes_the_same_tex(tmp_path):
    """Nothing read depends on the builder (myst-nb picks HTML or PNG when writing): the LaTeX
    build that reuses the HTML build's doctrees writes what a LaTeX build of its own writes."""
    src = tmp_path / "src"
    _project(src, 2)
    (src / "conf.py").write_text((src / "conf.py").read_text()
                                 + "latex_documents = [('index', 'book.tex', 'Book', 'me', 'manual')]\n")
    shared = tmp_path / "shared"
    _build(src, tmp_path / "out" / "html", shared)
    reused = _build(src, tmp_path / "shared-latex", shared, builder="latex", fresh=False)
    _build(src, tmp_path / "own-latex", tmp_path / "own", builder="latex")
    tex = (tmp_path / "shared-latex" / "book.tex").read_text()
    assert tex == (tmp_path / "own-latex" / "book.tex").read_text()
    assert _pages(tmp_path / "shared-latex", ".png") == _pages(tmp_path / "own-latex", ".png")
    assert "sphinxincludegraphics" in tex and 'id="chart"' not in tex  # the PNG, not the HTML
    assert reused > 0
    assert book.doctree_dir(src) == src.parent / "doctrees"


def _numbered_project(src, bad: bool = False) -> None:
    """Seven pages under a numbered toctree, with the book's section numbering extension;
    ``bad``: one page has a directive Sphinx cannot know."""
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['myst_parser', 'sphinx_multitoc_numbering', "
                                 "'scaletax.report.numbering']\nnumfig = True\nroot_doc = 'index'\n"
                                 "html_theme = 'basic'\n")
    names = [f"p{i}" for i in range(6)]
    (src / "index.md").write_text("# Book\n\n```{toctree}\n:numbered:\n\n" + "\n".join(names) + "\n```\n")
    for i, name in enumerate(names):
        body = f"# Page {i}\n\n```{{figure}} pic.svg\n:name: fig-{name}\n\nFigure of {name}\n```\n\n"
        body += "See {numref}`fig-p0` and {numref}`fig-p5`.\n"
        if bad and i == 3:
            body += "\n```{nosuchdirective}\nx\n```\n"
        (src / f"{name}.md").write_text(body)
    (src / "pic.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>')


def _html(folder, bad: bool = False):
    """The book's HTML step (``book.build_html``) on a :func:`_numbered_project` of its own
    (its own doctree folder); returns the output folder."""
    (folder / "logs").mkdir(parents=True)
    _numbered_project(folder / "src", bad)
    book.build_html(folder / "src", folder / "html", folder / "logs")
    return folder / "html"


def test_the_html_step_numbers_across_the_toctree_and_fails_on_a_page_warning(tmp_path):
    """With the book's numbering extensions figures are numbered across the toctree, and a
    page's warning fails the build (``-W``) with the warning in its one line."""
    html = _html(tmp_path / "ok")
    assert "Fig. 6.1" in (html / "p0.html").read_text()  # numbered across the toctree
    with pytest.raises(book.BuildError, match=r"HTML build failed: .*p3\.md:11: WARNING: Unknown "
                                              r"directive type: 'nosuchdirective'"):
        _html(tmp_path / "bad", bad=True)


def test_read_only_doctrees_unpickle_once_per_build():
    class Env:
        def __init__(self):
            self.calls = []
            self.toc_fignumbers = {}

        def get_doctree(self, docname):
            self.calls.append(docname)
            return object()

    env = Env()
    first = sphinx_once.read_only(env, "a")
    assert sphinx_once.read_only(env, "a") is first and env.calls == ["a"]
    view = sphinx_once.ReadOnlyDoctrees(env)
    assert view.get_doctree("a") is first and view.get_doctree("b") is not first and env.calls == ["a", "b"]
    view.toc_fignumbers = {"a": {}}  # a write through the view lands on the environment
    assert env.toc_fignumbers == {"a": {}} and view.calls is env.calls
    sphinx_once._forget(None, env, [])  # a new read phase: read again
    assert sphinx_once.read_only(env, "a") is not first and env.calls == ["a", "b", "a"]


def test_pybtex_plugin_is_found_without_scanning_entry_points(monkeypatch):
    import pybtex.plugin

    expected = next(iter(pybtex.plugin.entry_points(group="pybtex.backends", name="plaintext"))).load()
    sphinx_once._register_pybtex_plugins(None)

    def scan(**kwargs):
        raise AssertionError(f"entry points scanned: {kwargs}")

    monkeypatch.setattr(pybtex.plugin, "entry_points", scan)
    for group, name in sphinx_once.PYBTEX_PLUGINS:
        assert pybtex.plugin.find_plugin(group, name) is expected


def test_generated_conf_loads_the_extension_before_the_numbering(tmp_path):
    info = book.page_info("t", resolve(), book.toc.ROOT / "data/scenarios/default.yaml", (), "abc",
                          "2026-12-01 10:00 UTC")
    conf = book._sphinx_conf(tmp_path, info)
    line = next(ln for ln in conf.splitlines() if ln.startswith("extensions = "))
    extensions = json.loads(line.split(" = ", 1)[1].replace("'", '"'))
    assert extensions[-2:] == [book.ONCE_EXTENSION, book.NUMBERING_EXTENSION]
