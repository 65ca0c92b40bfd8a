"""Sphinx extension: text pasted into a page keeps the PDF's paragraph whole.

A docutils text node holds a blank line only where text was put into the doctree as it is
instead of parsed: a glued value (``{glue:text}``), such as a sentence naming the scenario's own
model, whose name is the user's text. HTML shows a blank line inside text as a space; the LaTeX
writer copies it, and to TeX a blank line ends the paragraph, which breaks the inline command
around it (``\\DUrole{pasted-text}{...}``: "Paragraph ended before \\DUrole was complete") and the
whole PDF. For the LaTeX builder, every whitespace run with a blank line in a text node (outside
literal blocks, raw nodes, math and comments) becomes one space, as the HTML shows it.
"""
from __future__ import annotations

import re

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

#: A whitespace run holding a blank line (two line breaks with only spaces or tabs between).
BLANK_LINE = re.compile(r"[ \t]*\n[ \t]*\n\s*")
#: Elements whose text TeX gets verbatim or not at all: left as they are.
VERBATIM = (nodes.literal_block, nodes.raw, nodes.math, nodes.math_block, nodes.comment, nodes.doctest_block)


def one_paragraph(text: str) -> str:
    """``text`` with every whitespace run that holds a blank line as one space."""
    return BLANK_LINE.sub(" ", text)


class OneParagraph(SphinxPostTransform):
    """The post-transform of the LaTeX builder (module docstring)."""

    default_priority = 900
    builders = ("latex",)

    def run(self, **kwargs) -> None:
        for text in list(self.document.findall(nodes.Text)):
            if "\n" not in text or not BLANK_LINE.search(text):
                continue
            if any(isinstance(a, VERBATIM) for a in _ancestors(text)):
                continue
            text.parent.replace(text, nodes.Text(one_paragraph(str(text))))


def _ancestors(node: nodes.Node):
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


def setup(app):
    app.add_post_transform(OneParagraph)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
