"""Scenario text printed into the book, escaped for where it lands: the one place that does it.

A scenario is untrusted input (planners share scenario files). Its text (title, question,
sources, the file name, overrides) reaches MyST pages, code blocks, table cells, LaTeX, BibTeX
and shell command lines. Each target gets one function here; nothing is filtered by a list of
bad sequences: every character that has a meaning in the target is escaped, so the text shows
as typed and never becomes markup, a directive, a file include or a shell command.

This module imports only the standard library, so that every layer (``render.tables`` too)
may use it.
"""
from __future__ import annotations

import html
import re
import shlex
import string

_ASCII_PUNCT = frozenset(string.punctuation)
_WS = re.compile(r"\s+")


def myst_text(text: str) -> str:
    """Inline MyST/CommonMark text that renders as ``text`` (whitespace runs become one space).

    Every ASCII punctuation character is backslash-escaped (CommonMark allows this for all of
    them), so no emphasis, link, role ``{x}`...```, math ``$``, substitution ``{{ }}``, HTML
    ``<tag>``, entity ``&x;``, fence, directive, heading or list can start from the text.
    """
    flat = _WS.sub(" ", str(text)).strip()
    return "".join("\\" + ch if ch in _ASCII_PUNCT else ch for ch in flat)


def myst_code(text: str) -> str:
    """An inline code span showing ``text`` literally (delimited by more backticks than any
    run inside it, CommonMark 6.1)."""
    flat = _WS.sub(" ", str(text)).strip()
    ticks = "`" * (_longest_run(flat, "`") + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def myst_fence(content: str, lang: str = "") -> str:
    """A fenced code block holding ``content`` literally: the fence is longer than any backtick
    run in the content, so the content cannot close it."""
    ticks = "`" * max(3, _longest_run(content, "`") + 1)
    return f"{ticks}{lang}\n{content}\n{ticks}"


def html_text(text: str) -> str:
    """Text for an HTML context that Sphinx templates insert unescaped (``<``, ``&``, quotes)."""
    return html.escape(str(text), quote=True)


_LATEX = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
}


def latex_text(text: str) -> str:
    """LaTeX (and BibTeX field) text that typesets as ``text`` under xelatex: the ten special
    characters replaced by their text commands; whitespace runs (a blank line would end the
    paragraph) become one space."""
    flat = _WS.sub(" ", str(text)).strip()
    return "".join(_LATEX.get(ch, ch) for ch in flat)


def shell_word(text: str) -> str:
    """One shell word that the shell passes through unchanged (``shlex.quote``)."""
    return shlex.quote(str(text))


def shell_command(words: list[str]) -> str:
    """A command line of words, each quoted for the shell (``shlex.join``)."""
    return shlex.join(str(w) for w in words)


def _longest_run(text: str, ch: str) -> int:
    runs = re.findall(re.escape(ch) + "+", text)
    return max((len(r) for r in runs), default=0)


__all__ = ["html_text", "latex_text", "myst_code", "myst_fence", "myst_text", "shell_command",
           "shell_word"]
