"""Sphinx extension: a table that :mod:`scaletax.render.tablefit` marks small is set in the PDF's
smaller table font.

A chapter's table is a MyST ``list-table``; one too wide for the PDF line at the tables' font
carries the class :data:`tablefit.SMALL_CLASS`. The book allows no ``raw`` directive in a page
(``report/book.py``'s docutils.conf), so the switch is made here, on the LaTeX build only: a
LaTeX node before each such table sets the flag that ``tablefit.LATEX_TABLE_SETUP`` reads at the
table's start. The HTML is left as it is.
"""
from __future__ import annotations

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

from scaletax.render import tablefit


class SmallTables(SphinxPostTransform):
    """Put :data:`tablefit.SMALL_TABLE_TEX` before every table of class :data:`tablefit.SMALL_CLASS`."""

    default_priority = 400
    formats = ("latex",)

    def run(self, **kwargs) -> None:
        for table in list(self.document.findall(nodes.table)):
            if tablefit.SMALL_CLASS in table.get("classes", []):
                table.parent.insert(table.parent.index(table),
                                    nodes.raw("", tablefit.SMALL_TABLE_TEX, format="latex"))


def setup(app):
    app.add_post_transform(SmallTables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
