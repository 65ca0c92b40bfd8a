"""The tables a built book displays, read back from its executed notebooks (``html/_sources``):
for the tests that check what the PDF shows of them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, NamedTuple

from scaletax.render import tablefit


class ShownTable(NamedTuple):
    label: str
    headers: list[str]
    rows: list[list[str]]  # cell texts as the MyST source has them
    fit: tablefit.Layout  # the widths (none: Sphinx's own) and font the table was given


def shown_tables(book: Path) -> Iterator[ShownTable]:
    """Every numbered table of the book in ``book`` (a built book's folder)."""
    for nb in sorted((book / "html" / "_sources").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                src = "".join(out.get("data", {}).get("text/markdown", ""))
                if not (src[:3] in ("```", "~~~") and src.lstrip("`~").startswith("{list-table}")):
                    continue
                lines = src.splitlines()[1:-1]
                label = next(ln.split()[1] for ln in lines if ln.startswith(":name:"))
                small = any(ln.startswith(":class:") and tablefit.SMALL_CLASS in ln.split() for ln in lines)
                widths = next(([int(w) for w in ln.split()[1:]] for ln in lines if ln.startswith(":widths:")), [])
                rows: list[list[str]] = []
                for ln in lines:
                    if ln.startswith("* - "):
                        rows.append([ln[4:]])
                    elif ln.startswith("  - "):
                        rows[-1].append(ln[4:])
                yield ShownTable(label, rows[0], rows[1:], tablefit.Layout(widths, tablefit.SMALL if small else tablefit.NORMAL))
