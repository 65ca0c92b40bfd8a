"""Numbered tables for the book: a MyST ``list-table`` with a label and a caption.

The table is emitted as a ``text/markdown`` output that myst-nb parses as MyST, so it is
numbered ("Table N") and referencable in HTML and PDF alike; the same rows are saved as
``<label>.csv`` beside the figures.

Every header, cell and caption is text (:func:`scaletax.escape.myst_cell`): a model name, a
source or an assumption from a scenario shows as typed and never becomes markup. A cell that
is meant as MyST (a link to a source, a citation) is a :class:`scaletax.escape.Markup`, made by
the functions of :mod:`scaletax.escape`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from scaletax import escape
from scaletax.render.charts import _figures_dir, write_csv


def fmt(value: Any, digits: int = 3) -> str:
    """A cell as text: numbers to ``digits`` significant figures with thousands separators."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value == 0:
            return "0"
        mag = math.floor(math.log10(abs(value)))
        decimals = max(0, digits - 1 - mag)
        return f"{value:,.{decimals}f}"
    return value if isinstance(value, str) else str(value)  # a Markup cell stays one


class Band(str):
    """A table cell ``"160 (141–173)"`` that keeps its numbers: the text is what the page shows,
    ``value``, ``low`` and ``high`` are what the exported CSV holds (columns ``<key>``,
    ``<key>_low``, ``<key>_high``). Appending text (a ``" *"`` mark) keeps the numbers."""

    value: float | None
    low: float | None
    high: float | None

    def __new__(cls, text: str, value=None, low=None, high=None):
        obj = super().__new__(cls, text)
        obj.value, obj.low, obj.high = value, low, high
        return obj

    def __add__(self, other: str) -> "Band":
        return Band(str(self) + other, self.value, self.low, self.high)

    def __reduce__(self):
        return (Band, (str(self), self.value, self.low, self.high))


def _num(v: Any) -> float | None:
    if v is None:
        return None
    v = v.item() if hasattr(v, "item") else v
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def band(value: Any, low: Any, high: Any, digits: int = 3) -> Band:
    """``value (low–high)`` to ``digits`` significant figures, as a :class:`Band` cell;
    "–" when there is no value, the value alone when there is no band."""
    value, low, high = _num(value), _num(low), _num(high)
    if value is None:
        return Band("–")
    if low is None or high is None:
        return Band(fmt(value, digits), value)
    return Band(f"{fmt(value, digits)} ({fmt(low, digits)}–{fmt(high, digits)})", value, low, high)


def csv_rows(rows: Sequence[dict]) -> list[dict]:
    """Rows for a CSV: each :class:`Band` cell becomes numeric ``key``, ``key_low``, ``key_high``
    (for every row of a column that holds a band anywhere), so the data reads back as numbers."""
    banded = {k for r in rows for k, v in r.items() if isinstance(v, Band)}
    out = []
    for r in rows:
        row: dict = {}
        for k, v in r.items():
            if k in banded:
                b = v if isinstance(v, Band) else None
                row[k] = b.value if b is not None else _num(v)
                row[f"{k}_low"] = b.low if b is not None else None
                row[f"{k}_high"] = b.high if b is not None else None
            else:
                row[k] = v
        out.append(row)
    return out


def markdown(rows: Sequence[dict], columns: dict[str, str], *, label: str, caption: str,
             formats: dict[str, Callable[[Any], str]] | None = None,
             widths: Sequence[int] | None = None, long: bool = False) -> str:
    """MyST list-table source for ``rows``; ``columns`` maps row key -> header text.

    Headers, cells and the caption are text unless they are :class:`~scaletax.escape.Markup`
    (:func:`scaletax.escape.myst_cell`); the fence (tildes) is longer than any run of them inside.
    ``long=True`` lets the table break across PDF pages (LaTeX longtable).
    """
    formats = formats or {}
    head = [f":name: {label}", ":header-rows: 1"]
    if long:
        head.append(":class: longtable")
    if widths:
        head.append(":widths: " + " ".join(str(int(w)) for w in widths))
    keys = list(columns)
    body = ["* - " + "\n  - ".join(escape.myst_cell(columns[k]) or " " for k in keys)]
    for row in rows:
        cells = [formats.get(k, fmt)(row.get(k)) for k in keys]
        body.append("* - " + "\n  - ".join(escape.myst_cell(c) or " " for c in cells))
    text = "\n".join([*head, "", *body])
    fence = escape.fence_for(escape.myst_cell(caption) + "\n" + text, "~")  # the caption may hold backticks
    return "\n".join([f"{fence}{{list-table}} {escape.myst_cell(caption)}", text, fence])


class Table:
    """Displays as MyST markdown (numbered table) in a notebook output."""

    def __init__(self, source: str):
        self.source = source

    def _repr_markdown_(self) -> str:
        return self.source

    def __repr__(self) -> str:  # stable text/plain (no memory address: builds must be byte-identical)
        return self.source.splitlines()[0].lstrip("~").removeprefix("{list-table} ")


def table(rows: Sequence[dict], columns: dict[str, str], *, label: str, caption: str,
          formats: dict[str, Callable[[Any], str]] | None = None,
          widths: Sequence[int] | None = None, long: bool = False, empty: str | None = None,
          keys: Sequence[str] = ()) -> Table:
    """Build a numbered table and save its rows to ``<label>.csv``; display the result.

    ``keys``: columns of the rows written to the CSV before the displayed ones but not shown
    (the ids a row is about: model, GPU, GPU count, precision), so that the same quantity can be
    found in every file that states it. With no rows, ``empty`` (the reason, e.g. "no model
    fits") fills the first column of a single row, so the numbered table stays in place; without
    ``empty`` that is an error.
    """
    if not rows:
        if empty is None:
            raise ValueError(f"table {label}: no rows")
        first = next(iter(columns))
        rows = [{k: (empty if k == first else None) for k in columns}]
    cols = [*[k for k in keys if k not in columns], *columns]
    write_csv(_figures_dir() / f"{label}.csv", csv_rows([{k: r.get(k) for k in cols} for r in rows]))
    return Table(markdown(rows, columns, label=label, caption=caption, formats=formats, widths=widths,
                          long=long))
