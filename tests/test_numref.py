"""Every ``{numref}`` of the book resolves: in the HTML to its target's own number (the one its
caption shows), and in the PDF to the same number."""
import collections
import re
import subprocess
from urllib.parse import urlsplit

import pytest

from conftest import require_tools
from scaletax.report import chapters as toc

pytestmark = pytest.mark.book

_REF = re.compile(r"^(Fig\.|Table) (\d+\.\d+)$")


def _numrefs_in_sources() -> int:
    pages = [toc.NOTEBOOK_DIR / f"{ch.slug}.md" for ch in toc.CHAPTERS] + sorted(toc.BOOK_DIR.glob("*.md"))
    return sum(p.read_text(encoding="utf-8").count("{numref}`") for p in pages)


def html_numrefs(html_dir) -> list[tuple[str, str, str]]:
    """(page, text, target's caption number) of every numbered reference of the HTML."""
    from bs4 import BeautifulSoup

    soups = {p.name: BeautifulSoup(p.read_text(encoding="utf-8"), "html.parser")
             for p in sorted(html_dir.glob("*.html"))}
    out = []
    for name, soup in soups.items():
        for span in soup.select("span.std-numref"):
            link = span.find_parent("a")
            assert link is not None and link.get("href"), f"{name}: unresolved reference {span.get_text()!r}"
            url = urlsplit(link["href"])
            target = soups[url.path or name].find(id=url.fragment)
            assert target is not None, f"{name}: {link['href']} points nowhere"
            number = target.select_one("span.caption-number")
            assert number is not None, f"{name}: {link['href']} has no caption number"
            out.append((name, span.get_text(), number.get_text().strip()))
    return out


def test_every_numref_in_the_html_shows_its_targets_number(built_book):
    refs = html_numrefs(built_book["dir"] / "html")
    assert len(refs) == _numrefs_in_sources()  # none lost, none doubled
    for page, text, number in refs:
        assert _REF.match(text), f"{page}: {text!r}"
        assert text == number, f"{page}: the reference says {text!r}, its target is {number!r}"


_NUMBER = re.compile(r"(Fig\.|Table) (\d+\.\d+)(?![\d.]\d)")


def _html_mentions(html_dir) -> collections.Counter:
    """How often each "Fig. 3.2" / "Table 3.2" is written in the pages' text, captions' own
    numbers left out: every numbered reference, and the few the prose names as an example."""
    from bs4 import BeautifulSoup

    found = collections.Counter()
    for page in sorted(html_dir.glob("*.html")):
        article = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").find("article")
        if article is None:
            continue
        for tag in article.select("script, style, span.caption-number"):
            tag.decompose()
        text = re.sub(r"\s+", " ", article.get_text(" "))
        found.update(f"{m.group(1)} {m.group(2)}" for m in _NUMBER.finditer(text))
    return found


def test_every_numref_in_the_pdf_shows_the_htmls_number(built_book):
    """The PDF's references are LaTeX's ``\\ref`` of the same labels: each number is written as
    often in the PDF as in the HTML's pages (its caption and the "continued" lines of a long
    table aside), and no reference is left as "??"."""
    require_tools("pdftotext", "xelatex", "latexmk")
    book = built_book["dir"]
    refs = collections.Counter(text for _, text, _ in html_numrefs(book / "html"))
    html = _html_mentions(book / "html")
    assert all(html[k] >= n for k, n in refs.items())  # every reference is in the page text
    text = subprocess.run(["pdftotext", str(book / f"{book.name}.pdf"), "-"], capture_output=True, text=True,
                          check=True).stdout
    assert "??" not in text
    pdf = collections.Counter(f"{m.group(1)} {m.group(2)}" for m in _NUMBER.finditer(re.sub(r"\s+", " ", text)))
    for line in text.splitlines():
        if re.match(r"(Fig\.|Table) \d+\.\d+ – continued from previous page", line.strip()):
            pdf[" ".join(line.split()[:2])] -= 1
    kinds = {"figure": "Fig.", "table": "Table"}
    for n in built_book["manifest"]["numbered"]:  # the caption of each figure and table
        pdf[f"{kinds[n['kind']]} {n['number']}"] -= 1
    assert min(pdf.values()) >= 0 and +pdf == html
