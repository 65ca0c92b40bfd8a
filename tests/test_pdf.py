"""The PDF page by page (poppler-utils): title, contents, chapters, captions, images, bibliography."""
import re
import subprocess

import pytest

from scaletax.report import chapters as toc

pytestmark = [pytest.mark.book, pytest.mark.pdf]


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
