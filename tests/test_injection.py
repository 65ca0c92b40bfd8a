"""Scenario text stays text: no markup, directive, file or command reaches the book from input.

The escaping functions (scaletax.escape) and the generated pages are checked by parsing them the
way the book does (MyST through docutils), with raw HTML and file insertion still *enabled*, so
that the escaping alone must hold; the Sphinx setting that disables both is checked on its own.
"""
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml
from docutils import nodes
from docutils.core import publish_doctree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from myst_parser.parsers.docutils_ import Parser

from scaletax import escape
from scaletax.report import book
from scaletax.report.scenario import resolve

MYST = {"myst_enable_extensions": ["colon_fence", "dollarmath", "amsmath", "deflist", "substitution"],
        "raw_enabled": True, "file_insertion_enabled": True, "report_level": 5, "halt_level": 5}

#: The injection cases of the issue, and their relatives.
ATTACKS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "~~~{eval-rst}\n.. raw:: html\n   :file: /etc/passwd\n~~~",
    "~~~{eval-rst}\n.. raw:: html\n   :url: http://127.0.0.1:9/\n~~~",
    "```{literalinclude} /etc/passwd\n```",
    "```{include} /etc/passwd\n```",
    ":::{include} /etc/passwd\n:::",
    "{download}`/etc/passwd`",
    "{raw:html}`<b>x</b>`",
    "[click](javascript:alert(1)) <https://example.invalid/x>",
    "$x$ and $$y$$ and {{ title }} and @@commit@@",
    "`code` ``` x `` y",
    "# Heading\n\n- list\n1. item\n> quote",
    "&lt;script&gt; &amp; \\ \\\\ \\`",
    "$(touch /tmp/scaletax-pwned) `id`; rm -rf / #",
    "\\end{document} \\input{/etc/passwd} % { } ^ _ ~ & #",
    "(target)=\n% comment\n+++\n^^^",
    "a\n\n    indented code",
]

_SYNTAX = ["<", ">", "</", "<script>", "&", "&amp;", "`", "```", "~~~", ":::", "{", "}", "{raw}",
           "{eval-rst}", "{include}", "{download}", "$", "$$", "[", "](", ")", "!", "*", "_", "\\",
           "\n", "\n\n", "#", "-", "+", "|", "@@", ".. raw:: html", ".. include:: /etc/passwd",
           ":url: http://127.0.0.1/", ":file: /etc/passwd", "%", "^", "~", "=", "'", '"', "(x)=",
           "http://x.invalid", "javascript:", " ", "    "]
fuzz_text = st.lists(st.one_of(st.sampled_from(_SYNTAX), st.text(alphabet="abc xyz09", max_size=4)),
                     min_size=1, max_size=30).map("".join).filter(lambda s: s.strip())

_PASSWD = "root:x:0:0"


def _doctree(source: str):
    return publish_doctree(source, parser=Parser(), settings_overrides=MYST)


def _markup_nodes(tree) -> list:
    """Nodes that only markup can make (anything but paragraphs of text and literal code)."""
    bad = (nodes.raw, nodes.reference, nodes.image, nodes.target, nodes.math, nodes.math_block,
           nodes.substitution_reference, nodes.footnote_reference, nodes.section, nodes.title,
           nodes.bullet_list, nodes.enumerated_list, nodes.block_quote, nodes.comment,
           nodes.emphasis, nodes.strong, nodes.problematic, nodes.system_message)
    return [n for n in tree.findall() if isinstance(n, bad)]


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("text", ATTACKS)
def test_myst_text_renders_as_the_text_itself(text):
    tree = _doctree(escape.myst_text(text))
    assert _markup_nodes(tree) == []
    assert tree.astext() == _flat(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_text)
def test_fuzz_myst_text_and_code_and_fence(text):
    tree = _doctree("Before " + escape.myst_text(text) + " after.")
    assert _markup_nodes(tree) == []
    assert tree.astext() == _flat("Before " + _flat(text) + " after.")
    code = _doctree("See " + escape.myst_code(text) + ".")
    literals = list(code.findall(nodes.literal))
    assert len(literals) == 1 and literals[0].astext() == _flat(text)
    assert _markup_nodes(code) == []
    block = _doctree("Text.\n\n" + escape.myst_fence(text, "yaml") + "\n\nAfter.\n")
    blocks = list(block.findall(nodes.literal_block))
    assert len(blocks) == 1 and blocks[0].astext().strip("\n") == text.strip("\n")
    assert _markup_nodes(block) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(fuzz_text, st.text(max_size=20)), min_size=1, max_size=6))
def test_fuzz_shell_command_round_trips(words):
    words = [w.replace("\x00", "") for w in words]
    assert shlex.split(escape.shell_command(words)) == words


def _pages(tmp_path, text: str) -> dict[str, str]:
    """The generated pages (intro, reproduce, cite) filled for a scenario whose every text field,
    override and file name carries ``text``."""
    prices = resolve().economics.prices
    sets = [f"title={text}", f"question={text}", f"training.tokens_source={text}",
            f"economics.usd_per_mwh_source={text}", f"economics.energy.source={text}"]
    sets += [f"economics.prices.{g}.source={text}" for g in prices]
    scen = resolve(overrides=sets)
    path = tmp_path / f"plan `{text[:20]}` $(touch x).yaml"
    info = book.page_info("evil", scen, path, sets, "0123456789abcdef", "2026-12-01 10:00 UTC")
    tokens = book.page_tokens(info)
    pages = {name: book._fill((book.toc.BOOK_DIR / f"{name}.md").read_text(encoding="utf-8"), tokens)
             for name in ("intro", "reproduce", "cite")}
    pages["provenance"] = book._provenance_md(info)
    return {"pages": pages, "info": info, "scenario": scen, "sets": sets, "path": path}


def _check_pages(made, text):
    info, scen = made["info"], made["scenario"]
    for name, page in made["pages"].items():
        tree = _doctree(page)
        assert not list(tree.findall(nodes.raw)), name
        assert not list(tree.findall(nodes.system_message)), name
        for ref in tree.findall(nodes.reference):  # only the page's own links
            assert ref.get("refuri", "").endswith(".md") or ref.get("refid"), (name, ref)
        assert _PASSWD not in tree.astext(), name
        if name == "intro":
            para = next(s for s in tree.findall(nodes.section) if s.next_node(nodes.title).astext() == "The question")
            assert para.next_node(nodes.paragraph).astext() == _flat(text)
        if name == "reproduce":
            blocks = [b.astext() for b in tree.findall(nodes.literal_block)]
            assert len(blocks) == 2
            cmd = blocks[0].splitlines()[1]
            words = shlex.split(blocks[0].split("\n", 1)[1].removeprefix(".venv/bin/"))
            assert cmd.startswith(".venv/bin/scaletax build --scenario ")
            assert words[3] == info["scenario_file"]
            assert words[4:-2] == [w for s in made["sets"] for w in ("--set", s)]
            assert yaml.safe_load(blocks[1]) == scen.to_plain()
        if name in ("intro", "reproduce", "provenance"):
            assert _flat(info["scenario_file"]) in [lit.astext() for lit in tree.findall(nodes.literal)], name
        if name == "cite":
            bib, cite_one = [b.astext() for b in tree.findall(nodes.literal_block)]  # the book, one figure
            assert f"title       = {{{escape.latex_text(text)} (scenario {info['name']})}}," in bib
            assert cite_one == f"\\cite[Table~1.1]{{scaletax-{info['name']}-2026}}"


@pytest.mark.parametrize("text", ATTACKS)
def test_generated_pages_show_hostile_text_as_text(tmp_path, text):
    _check_pages(_pages(tmp_path, text), text)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fuzz_text.filter(lambda s: len(s) <= 2000))
def test_fuzz_generated_pages(tmp_path, text):
    _check_pages(_pages(tmp_path, text), text)


def test_template_values_are_not_filled_twice():
    assert book._fill("@@a@@ @@b@@", {"a": "@@b@@", "b": "B"}) == "@@b@@ B"
    with pytest.raises(book.BuildError, match="unfilled template token in page: @@c@@"):
        book._fill("@@c@@", {"a": ""})


def test_sphinx_reads_the_docutils_conf_that_disables_raw_and_includes(tmp_path):
    """The generated docutils.conf is honoured by Sphinx: a page of the book's own making
    that tried raw HTML or file inclusion would get nothing from them."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['myst_parser']\nmyst_enable_extensions = ['colon_fence']\n")
    (src / "docutils.conf").write_text(book.DOCUTILS_CONF)
    (src / "index.md").write_text(
        "# T\n\n```{raw} html\n<script>window.pwned=1</script>\n```\n\n```{include} /etc/passwd\n```\n\n"
        "```{literalinclude} /etc/passwd\n```\n\n```{eval-rst}\n.. raw:: html\n   :file: /etc/passwd\n```\n")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "out" / "index.html").read_text()
    assert "window.pwned" not in page and _PASSWD not in page
    assert "disabled" in proc.stderr  # Sphinx says what it refused


@pytest.mark.skipif(shutil.which("xelatex") is None, reason="xelatex not installed")
def test_latex_title_compiles_and_typesets_as_typed(tmp_path):
    titles = [t for t in ATTACKS] + ["Costs: 100% of $5 & #1 ~ ^_^ {x} \\\\ \\par"]
    body = "\n".join(f"\\noindent[{i}] {escape.latex_text(t)}\\par" for i, t in enumerate(titles))
    doc = ("\\documentclass{article}\n\\usepackage{fontspec}\n\\title{" + escape.latex_text(titles[-1])
           + "}\n\\begin{document}\n\\maketitle\n" + body + "\n\\end{document}\n")
    (tmp_path / "t.tex").write_text(doc)
    proc = subprocess.run(["xelatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "t.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    if shutil.which("pdftotext"):
        out = subprocess.run(["pdftotext", "t.pdf", "-"], cwd=tmp_path, capture_output=True, text=True).stdout
        assert _PASSWD not in out
        assert "[15] \\end{document} \\input{/etc/passwd} % { } ^ _ ~ & #" in _flat(out).replace("ˆ", "^").replace("˜", "~")


# ---------------------------------------------------------------------------------------
# The generated pages through Sphinx (a whole book from hostile text: tests/test_fuzz_doors.py)
# ---------------------------------------------------------------------------------------
MARK = "zqx"
QUESTION = f"Q{MARK}2 <img src=x onerror=alert(1)> ~~~{{eval-rst}}\n.. raw:: html\n   :file: /etc/passwd\n~~~"


def _pages_only_project(tmp_path, title, question, scenario_file, sets):
    """The book's generated sources (pages, toc, conf.py, docutils.conf) with a one-line page in
    place of every executed chapter: the hand-written and generated pages as Sphinx builds them."""
    scen = resolve(overrides=[f"title={title}", f"question={question}"])
    info = book.page_info("hostile", scen, scenario_file, sets, "0123456789abcdef", "2026-12-01 10:00 UTC")
    src = tmp_path / "src"
    book.stage_sources(src, [], info)
    for ch in book.toc.CHAPTERS:
        (src / f"{ch.slug}.md").write_text(f"# {ch.slug}\n\nChapter.\n")
    return src


@pytest.mark.book
def test_hostile_title_question_and_file_name_in_html_and_pdf(tmp_path):
    from bs4 import BeautifulSoup

    title = f"T{MARK} <script>window.{MARK}=1</script> & \"q\" ' \\end{{document}} $x$ {{{{t}}}} % ~ ^ _ #"
    question = QUESTION
    sets = [f"title={title}", "economics.usd_per_mwh_source=$(id)"]
    src = _pages_only_project(tmp_path, title, question, tmp_path / f"p `{MARK}` $(touch {MARK}).yaml", sets)
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src), str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "html_title" not in proc.stderr
    for page in ("intro", "reproduce", "cite", "search"):
        soup = BeautifulSoup((out / f"{page}.html").read_text(encoding="utf-8"), "html.parser")
        assert title in soup.title.get_text(), page  # shown as typed, escaped once
        assert not [s for s in soup.find_all("script") if MARK in s.get_text()], page
        brand = soup.find(class_="logo__title")
        assert brand is not None and brand.get_text() == title and not brand.find_all(True), page
        for el in soup.find_all(True):
            assert not any(MARK in (" ".join(v) if isinstance(v, list) else str(v)) for v in el.attrs.values()), \
                (page, el.name)
    intro = BeautifulSoup((out / "intro.html").read_text(encoding="utf-8"), "html.parser")
    assert _flat(question) in _flat(intro.get_text()) and _PASSWD not in intro.get_text()
    repro = BeautifulSoup((out / "reproduce.html").read_text(encoding="utf-8"), "html.parser")
    cmd = next(p.get_text() for p in repro.find_all("pre") if "scaletax build" in p.get_text())
    words = shlex.split(cmd.split(".venv/bin/", 1)[1])
    assert words[words.index("--set") + 1] == sets[0] and words[-1] == "hostile"
    assert not list(tmp_path.glob(f"{MARK}*"))
    if shutil.which("xelatex") and shutil.which("latexmk"):
        latex = tmp_path / "latex"
        proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "latex", "-q", str(src), str(latex)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        proc = subprocess.run(["latexmk", "-pdfxe", "-interaction=nonstopmode", "-halt-on-error", "book.tex"],
                              cwd=latex, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:]
        if shutil.which("pdftotext"):
            first = subprocess.run(["pdftotext", "-l", "1", str(latex / "book.pdf"), "-"], capture_output=True,
                                   text=True).stdout
            for part in (f"T{MARK}", "<script>", "& \"q\"", "\\end{document} $x$ {{t}} %"):
                assert part in _flat(first), (part, first[:300])
