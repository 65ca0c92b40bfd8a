"""The PDF page by page (poppler-utils): title, contents, chapters, captions, images, bibliography,
and the same number and caption for every figure and table as in the HTML."""
import html as html_lib
import json
import re
import subprocess

import pytest

from book_tables import shown_tables
from conftest import require_tools
from scaletax.render import tablefit
from scaletax.report import chapters as toc
from scaletax.report.exports import png_text

pytestmark = [pytest.mark.book, pytest.mark.pdf]


@pytest.fixture(autouse=True)
def _poppler_and_tex():
    require_tools("pdftotext", "pdfinfo", "pdfimages", "xelatex", "latexmk")


def _pages(pdf):
    n = int(re.search(r"Pages:\s+(\d+)", subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True,
                                                          check=True).stdout).group(1))
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    pages = text.split("\f")
    assert len(pages) >= n
    return pages[:n]


def _chapter_title(slug):
    """The chapter heading LaTeX prints: the page title, or for the root page (whose title
    becomes the book's) its first section."""
    src = (toc.NOTEBOOK_DIR / f"{slug}.md").read_text()
    level = "##" if slug == toc.ROOT_PAGE else "#"
    return re.search(rf"^{level} (.+)$", src, re.M).group(1)


def test_pdf_structure_page_by_page(built_book):
    pdf = built_book["dir"] / "small.pdf"
    pages = _pages(pdf)
    assert "The scale tax" in pages[0] and "Release" in pages[0], "title page"
    contents = next(i for i, p in enumerate(pages) if re.search(r"Hardware: what each GPU brings\s*\.*\s*\d+", p))
    assert contents <= 3, "table of contents near the front"
    joined = [re.sub(r"\s+", " ", p) for p in pages]
    for ch in toc.CHAPTERS:
        title = _chapter_title(ch.slug).upper()
        assert any(title in p.upper() for p in joined[contents + 1:]), f"chapter {ch.slug} missing"
    body = " ".join(joined)
    # every figure and table of the book is captioned with a number
    n_figs = len(list((built_book["dir"] / "figures").glob("fig-*.png")))
    n_tbls = len(list((built_book["dir"] / "figures").glob("tbl-*.csv")))
    assert len(set(re.findall(r"Fig\. (\d+\.\d+)", body))) == n_figs
    assert len(set(re.findall(r"Table (\d+\.\d+):", body))) == n_tbls
    # the bibliography is there and citations resolved
    assert re.search(r"BIBLIOGRAPHY", body.upper())
    assert "Williams" in body and "Roofline" in body
    assert "[?]" not in body
    # no raw chart reprs or unrendered markup
    for bad in ("alt.Chart(", "{glue", "```", ":::", "{numref}", "@@"):
        assert bad not in body, bad


def test_pdf_has_one_image_per_chart(built_book):
    pdf = built_book["dir"] / "small.pdf"
    out = subprocess.run(["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True).stdout
    images = [ln for ln in out.splitlines()[2:] if ln.split()[2:3] == ["image"]]
    n_figs = len(list((built_book["dir"] / "figures").glob("fig-*.png")))
    assert len(images) == n_figs


def _words(text, n=8):
    """The first ``n`` words of a caption, letters and digits only (PDF and HTML typeset
    dashes, quotes and line breaks differently)."""
    return re.findall(r"[A-Za-z0-9]+", text)[:n]


def html_numbers(html_dir):
    """{("Fig."|"Table", "3.2"): caption} from every page of the HTML."""
    found = {}
    pat = re.compile(r'<span class="caption-number">(Fig\.|Table) (\d+(?:\.\d+)*) </span>'
                     r'<span class="caption-text">(.*?)</(?:figcaption|caption)>', re.S)
    for page in sorted(html_dir.glob("*.html")):
        for kind, num, cap in pat.findall(page.read_text(encoding="utf-8")):
            text = html_lib.unescape(re.sub(r"<[^>]+>", "", cap))
            assert (kind, num) not in found, f"{kind} {num} twice in the HTML"
            found[(kind, num)] = text
    return found


def pdf_numbers(pdf):
    """{("Fig."|"Table", "3.2"): caption start} from the PDF's text: a caption starts a line
    with "Table 3.2: " (a reference in running text sits mid-line)."""
    lines = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout.splitlines()
    found = {}
    for i, line in enumerate(lines):
        m = re.match(r"(Fig\.|Table) (\d+\.\d+):(?:\s+(.*)|$)", line.strip())
        if m:
            found.setdefault((m.group(1), m.group(2)), " ".join([m.group(3) or "", *lines[i + 1:i + 4]]))
    return found


def test_figures_and_tables_have_the_same_numbers_and_captions_in_html_and_pdf(built_book):
    book = built_book["dir"]
    in_html = html_numbers(book / "html")
    in_pdf = pdf_numbers(book / "small.pdf")
    n_exported = len(list((book / "figures").glob("fig-*.png"))) + len(list((book / "figures").glob("tbl-*.csv")))
    assert len(in_html) == n_exported
    assert set(in_html) == set(in_pdf)
    for key, caption in in_html.items():
        assert _words(in_pdf[key]) == _words(caption), f"{key[0]} {key[1]}: HTML {caption[:60]!r}, PDF {in_pdf[key][:60]!r}"
    # the exported files and the manifest carry the same numbers
    manifest = json.loads((book / "manifest.json").read_text())
    # the summary is Chapter 1 in both: its headline table is Table 1.1 (the How to cite example)
    assert next(n["number"] for n in manifest["numbered"] if n["label"] == "tbl-sum-headline") == "1.1"
    kinds = {"figure": "Fig.", "table": "Table"}
    assert {(kinds[n["kind"]], n["number"]) for n in manifest["numbered"]} == set(in_html)
    for n in manifest["numbered"]:
        if n["kind"] == "figure":
            title = png_text((book / "figures" / f"{n['label']}.png").read_bytes())["Title"]
            assert title.startswith(f"Figure {n['number']}: ") and _words(title, 9)[3:] == _words(in_html[("Fig.", n["number"])], 6)
        meta = json.loads((book / "figures" / f"{n['label']}.csv-metadata.json").read_text())
        assert meta["dc:title"].split(":")[0] == ("Figure " if n["kind"] == "figure" else "Table ") + n["number"]
        assert "small" in meta["scaletax:scenario"] and manifest["git_commit"] in meta["dc:source"]


def _body(page):
    """A page's lines without the running header (the title and release) and footer (page
    number and chapter)."""
    lines = [ln.strip() for ln in page.splitlines() if ln.strip()]
    if lines and "Release" in lines[0]:
        lines = lines[1:]
    if lines and re.fullmatch(r"\d+|[ivxlc]+|\d+\s{2,}.*|.*\S\s{2,}\d+", lines[-1]):
        lines = lines[:-1]
    return lines


def test_no_page_holds_only_a_provenance_box_or_a_bare_chapter_title(built_book):
    pages = _pages(built_book["dir"] / "small.pdf")
    for number, page in enumerate(pages, 1):
        body = _body(page)
        if any(ln.startswith("Provenance") for ln in body):
            assert len(body) > 4, f"page {number} holds only the provenance box: {body}"
        if body[:1] == ["CHAPTER"]:
            assert len(body) > 3, f"page {number} holds only a chapter title: {body}"


def _joined_words(text):
    """Whitespace words of ``text``, a line broken after a dash joined again (a cell's lines come
    one after the other in the PDF's content order), quotes and compatibility forms normalized."""
    import unicodedata

    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"(\S[-\u2013\u2014])\s+", r"\1", text).split()


def test_every_number_of_every_table_is_whole_in_the_pdf(built_book):
    """Tables 8.6, 8.21-8.22 and 4.1 showed "8,19", "16,3", "131,(" and "GB2( NVL" (issue 33): a
    cell wider than its column ran into the next one. Every word with a digit of every table cell
    is found whole in the PDF's text, and LaTeX reports no table cell wider than its column."""
    book = built_book["dir"]
    pdf_words = set(_joined_words(subprocess.run(["pdftotext", "-raw", str(book / "small.pdf"), "-"],
                                                 capture_output=True, text=True, check=True).stdout))
    tables, checked, missing = list(shown_tables(book)), 0, {}
    assert len(tables) > 20
    for t in tables:
        for cell in [c for row in [t.headers, *t.rows] for c in row]:
            for w in _joined_words(tablefit.visible(cell)):
                if any(ch.isdigit() for ch in w):
                    checked += 1
                    if w not in pdf_words:
                        missing.setdefault(t.label, []).append(w)
    assert checked > 1000 and missing == {}
    # an overfull box set in a table font (footnotesize or scriptsize) is a cell wider than its column
    log = built_book["xelatex_log"]
    assert log is not None, "the small book's build wrote no xelatex.log"
    sizes = {f"{f.size_pt:g}" for f in (tablefit.NORMAL, tablefit.SMALL)}
    boxes = re.findall(r"Overfull \\hbox \([\d.]+pt too wide\) in paragraph[^\n]*\n([^\n]*)", log)
    font_size = re.compile(r"/(\d+(?:\.\d+)?)[ |]")  # "\TU/FreeSerif(0)/m/n/8 8,192|": 8 pt
    assert [box for box in boxes if (m := font_size.search(box)) and m.group(1) in sizes] == []
