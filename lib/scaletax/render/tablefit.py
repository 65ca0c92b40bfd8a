"""Column widths of a book table, so that no PDF cell clips its text.

A PDF table (Sphinx's LaTeX ``\\X{w}{total}`` columns) gives each column its share of the line;
a number or a word wider than its column runs under the next cell's background, and the page
shows "8,19" for 8,192. :func:`layout` returns the ``:widths:`` of a table: the author's
proportions (or the text's own, when none are given) raised, column by column, to what the
column's widest unbreakable piece of text needs, the other columns giving up the difference;
a table too wide for that at the tables' font (:data:`NORMAL`) is set smaller (:data:`SMALL`).

The sizes are those of the book's PDF tables (:data:`LATEX_TABLE_SETUP`, added to the LaTeX
preamble by ``report/book.py``): cells in ``\\footnotesize`` (8 pt) with 3 pt of padding each
side, or ``\\scriptsize`` (7 pt) with 2 pt for a table of class :data:`SMALL_CLASS`, on an A4 page's
450 pt line; text widths are the advance widths of the PDF's fonts (FreeSerif in cells, FreeSans
in the header).
"""
from __future__ import annotations

import re
from typing import NamedTuple, Sequence

LINE_PT = 450.0  # \linewidth of the book's PDF (A4, Sphinx's 1 in margins, rounded to monospace)
RULE_PT = 0.4
SLACK_PT = 1.5  # kept free in every column, for what the estimate misses (kerning, bold)
SCALE = 1000  # the widths are integers out of this


class Font(NamedTuple):
    size_pt: float  # the cells' font size
    tabcolsep_pt: float  # padding each side of a cell


NORMAL = Font(8.0, 3.0)  # \footnotesize
SMALL = Font(7.0, 2.0)  # \scriptsize

LATEX_TABLE_SETUP = r"""
\makeatletter
\newif\ifscaletaxsmalltable
\newcommand\scaletaxtablefont{\ifscaletaxsmalltable\scriptsize\setlength{\tabcolsep}{%gpt}%%
  \global\scaletaxsmalltablefalse\else\footnotesize\setlength{\tabcolsep}{%gpt}\fi}
\g@addto@macro\sphinxattablestart{\scaletaxtablefont}
\g@addto@macro\sphinxatlongtablestart{\scaletaxtablefont}
\newcolumntype{\X}[2]{>{\raggedright\arraybackslash}p{\dimexpr
      (\linewidth-\spx@arrayrulewidth)*#1/#2-\tw@\tabcolsep-\spx@arrayrulewidth\relax}}
\makeatother
""" % (SMALL.tabcolsep_pt, NORMAL.tabcolsep_pt)
"""The PDF tables: a smaller font and padding than the text's, cells set ragged right."""

SMALL_CLASS = "scaletax-small"
"""The class of a table set in :data:`SMALL` (``report/tablefont.py`` puts
:data:`SMALL_TABLE_TEX` before it in the PDF)."""
SMALL_TABLE_TEX = "\\global\\scaletaxsmalltabletrue"
"""LaTeX that sets the next table in :data:`SMALL`."""

_CHARS = ' !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~–×≤≥−→·±…—’“”'
#: advance widths of :data:`_CHARS`, thousandths of the font size
_SERIF = dict(zip(_CHARS, (
    250, 333, 400, 500, 500, 833, 778, 200, 333, 333, 500, 564, 250, 333, 250, 296, 500,
    500, 500, 500, 500, 500, 500, 500, 500, 500, 250, 250, 564, 564, 564, 444, 865, 721,
    631, 670, 719, 610, 564, 722, 714, 327, 385, 709, 611, 881, 725, 724, 576, 723, 667,
    529, 606, 721, 701, 947, 714, 701, 613, 333, 296, 333, 469, 500, 250, 435, 500, 444,
    499, 444, 373, 467, 498, 278, 348, 513, 258, 779, 489, 491, 500, 499, 345, 367, 283,
    490, 468, 683, 482, 471, 417, 480, 200, 480, 500, 500, 564, 636, 636, 564, 900, 250,
    564, 1000, 1000, 200, 400, 400,
)))
_SANS = dict(zip(_CHARS, (
    250, 333, 333, 556, 556, 889, 667, 200, 333, 333, 389, 584, 278, 333, 250, 278, 556,
    556, 556, 556, 556, 556, 556, 556, 556, 556, 250, 250, 584, 584, 584, 556, 1015, 666,
    664, 709, 698, 633, 599, 765, 721, 278, 528, 674, 563, 846, 730, 784, 656, 784, 709,
    667, 632, 720, 645, 937, 657, 678, 615, 278, 278, 277, 469, 556, 250, 543, 559, 506,
    559, 533, 280, 550, 536, 222, 243, 514, 214, 812, 537, 534, 559, 559, 332, 493, 280,
    537, 496, 722, 476, 478, 486, 333, 250, 333, 500, 500, 584, 584, 584, 584, 987, 250,
    584, 680, 1000, 250, 400, 400,
)))
_WIDE = 1000  # a character not in the table: as wide as an em

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # [text](url) -> text
_ROLE = re.compile(r"\{(\w+)\}`([^`]*)`")  # {cite}`key` -> [Author, year]
_ESCAPE = re.compile(r"\\(.)")


def visible(text: str) -> str:
    """The text a cell shows: a link's words, a citation as a short bracket, no escapes or
    emphasis marks."""
    text = _LINK.sub(r"\1", text)
    text = _ROLE.sub(lambda m: "[Author, 2024]" if m.group(1).startswith("cite") else m.group(2), text)
    text = _ESCAPE.sub(r"\1", text).replace("**", "").replace("`", "")
    return text


def text_pt(text: str, header: bool = False, font: Font = NORMAL) -> float:
    """Width of ``text`` on one line, in points, in ``font``: in FreeSerif (a cell) or FreeSans
    (a ``header``)."""
    advance = _SANS if header else _SERIF
    return sum(advance.get(c, _WIDE) for c in text) * font.size_pt / 1000


def pieces(text: str) -> list[str]:
    """The pieces LaTeX will not break: words, split after hyphens and dashes."""
    return [p for word in visible(text).split() for p in re.findall(r"[^-–—]*[-–—]?", word) if p]


def _widest(texts: Sequence[str], hyphenate: bool, header: bool, font: Font) -> float:
    """The widest piece of ``texts``; with ``hyphenate``, a word of letters longer than six is
    taken as breakable after its first half (TeX hyphenates it)."""
    return max((text_pt(_hyphenated(p, hyphenate), header, font) for t in texts for p in pieces(t)),
               default=0.0)


def _hyphenated(piece: str, hyphenate: bool) -> str:
    """The wider half of a long word of letters, with its hyphen (TeX can break it there or
    near); any other piece whole."""
    if hyphenate and len(piece) > 6 and piece.isalpha():
        return piece[: (len(piece) + 1) // 2] + "-"
    return piece


def _column_pt(ncols: int, font: Font) -> float:
    """The line left for text once ``ncols`` columns have their padding and rules."""
    return LINE_PT - RULE_PT - ncols * (2 * font.tabcolsep_pt + RULE_PT)


def _fill(want: list[float], need: list[float], room: float) -> list[float]:
    """Shares of ``room`` in proportion to ``want``, none below its ``need``."""
    fixed: dict[int, float] = {}
    while True:
        free = room - sum(fixed.values())
        rest = [i for i in range(len(want)) if i not in fixed]
        total = sum(want[i] for i in rest) or 1.0
        short = [i for i in rest if free * want[i] / total < need[i]]
        if not short or free <= 0:
            return [fixed.get(i, max(free, 0.0) * want[i] / total) for i in range(len(want))]
        for i in short:
            fixed[i] = need[i]


class Layout(NamedTuple):
    widths: list[int]  # the table's :widths:
    font: Font


def layout(headers: Sequence[str], rows: Sequence[Sequence[str]],
           given: Sequence[float] | None = None) -> Layout:
    """The widths and font of a table of ``headers`` and ``rows`` (cell texts as shown):
    ``given``'s proportions, or the text's own (each column's longest cell), raised to fit each
    column's widest unbreakable piece. Where that does not fit the line, long words are taken as
    hyphenated (the header's first, then the cells'), then the font is :data:`SMALL`; where
    nothing fits, the widths are in proportion to what each column needs."""
    n = len(headers)
    cols = [[str(r[i]) for r in rows] for i in range(n)]
    for font in (NORMAL, SMALL):
        room = _column_pt(n, font)
        for head, cell in ((False, False), (True, False), (True, True)):
            need = [max(_widest(col, cell, False, font), _widest([h], head, True, font)) + SLACK_PT
                    for h, col in zip(headers, cols)]
            if sum(need) <= room:
                break
        else:
            continue
        break
    else:
        given, need = need, [0.0] * n
    if given:
        want = [float(w) for w in given]
    else:
        want = [max([text_pt(visible(c), False, font) for c in col] + [_widest([h], True, True, font)]) + 1.0
                for h, col in zip(headers, cols)]
    share = _fill(want, need, room)
    # a column's width is its text's share plus its padding and rule
    full = [s + 2 * font.tabcolsep_pt + RULE_PT for s in share]
    total = sum(full)
    return Layout([max(1, round(SCALE * f / total)) for f in full], font)


def overflows(headers: Sequence[str], rows: Sequence[Sequence[str]], fit: Layout) -> list[str]:
    """The pieces of text wider than their column in ``fit`` (none: the table fits), words of
    letters taken as hyphenated."""
    total, font, bad = sum(fit.widths), fit.font, []
    for i, w in enumerate(fit.widths):
        space = (LINE_PT - RULE_PT) * w / total - 2 * font.tabcolsep_pt - RULE_PT
        for j, t in enumerate([headers[i], *[str(r[i]) for r in rows]]):
            for p in pieces(t):
                pt = text_pt(_hyphenated(p, True), j == 0, font)
                if pt > space + 0.01:
                    bad.append(f"column {i + 1} ({headers[i]!r}): {p!r} needs {pt:.1f} pt of {space:.1f}")
    return bad
