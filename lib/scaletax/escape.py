"""Text printed into the book, escaped for where it lands: the one place that does it.

A scenario is untrusted input (planners share scenario files). Its text (title, question,
sources, the names and notes of the user's own models and GPUs, the file name, overrides)
reaches MyST pages and table cells, captions, LaTeX, BibTeX, HTML, script data, CSV cells and
shell command lines. Each target gets one function here; nothing is filtered by a list of bad
sequences: every character that has a meaning in the target is escaped, so the text shows as
typed and never becomes markup, a directive, math, a file include, a formula or a command.

Text is escaped by default. MyST that the book's own code writes around text (a link to a
source, a citation) is a :class:`Markup`, made only by the functions here, which escape every
piece of text they are given: a table cell or caption that is a plain ``str`` is text, whatever
it holds (``render.tables`` escapes it); only a :class:`Markup` reaches the page as MyST.

This module imports only the standard library, so that every layer (the model's CSV writer,
``render.tables``, the chapters, the report) uses it.
"""
from __future__ import annotations

import csv
import html
import io
import json
import re
import shlex
import string
from typing import Any, Sequence
from urllib.parse import quote, urlsplit

_ASCII_PUNCT = frozenset(string.punctuation)
_WS = re.compile(r"\s+")


class Markup(str):
    """MyST source the book's code wrote, any text in it escaped (:func:`markup`,
    :func:`myst_link`, :func:`myst_role`): a table cell or caption of this type is placed as it
    is; a plain ``str`` is escaped as text (:func:`myst_cell`). ``text`` is what it reads as in
    plain text (an exported CSV's cell): a link's text and its URL, a citation's key."""

    text: str

    def __new__(cls, source: str, text: str):
        obj = super().__new__(cls, source)
        obj.text = text
        return obj

    def __reduce__(self):
        return (Markup, (str(self), self.text))

    def __repr__(self) -> str:
        return f"Markup({str.__repr__(self)})"


def plain(value: Any) -> Any:
    """``value`` as plain text where it is a :class:`Markup` (its ``text``), else unchanged."""
    return value.text if isinstance(value, Markup) else value


def _escape_punct(text: str) -> str:
    return "".join("\\" + ch if ch in _ASCII_PUNCT else ch for ch in text)


def myst_text(text: Any) -> str:
    """Inline MyST/CommonMark text that renders as ``text`` (whitespace runs become one space).

    Every ASCII punctuation character is backslash-escaped (CommonMark 2.4 allows this for all
    of them, and markdown-it and the MyST plugins read ``\\x`` before any rule of their own), so
    no emphasis, link, image, role ``{x}`...```, math ``$``, substitution ``{{ }}``, HTML
    ``<tag>``, entity ``&x;``, fence, directive, heading, list or table can start from the text.
    """
    return _escape_punct(_WS.sub(" ", str(text)).strip())


def myst_cell(value: Any) -> str:
    """A table cell or caption: a :class:`Markup` as written (on one line), anything else as
    :func:`myst_text`."""
    if isinstance(value, Markup):
        return _WS.sub(" ", str(value)).strip()
    return myst_text(value)


def markup(*parts: Any) -> Markup:
    """MyST of ``parts`` joined: each :class:`Markup` part as written, every other part escaped
    as text (spaces kept at the joins)."""
    out = "".join(str(p) if isinstance(p, Markup) else _escape_punct(_WS.sub(" ", str(p))) for p in parts)
    return Markup(out.strip(), "".join(str(plain(p)) for p in parts).strip())


_ROLES = frozenset({"cite", "cite:p", "cite:t", "numref", "ref", "doc"})
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*\Z")


def myst_role(role: str, target: str) -> Markup:
    """A MyST role of the book (``{cite}`key```, ``{numref}`label```) on a target of letters,
    digits and ``_ . : / -`` (a key or label, never text). Raises ValueError otherwise."""
    if role not in _ROLES:
        raise ValueError(f"myst_role: unknown role {role!r}")
    if not _TARGET.match(str(target)):
        raise ValueError(f"myst_role: {role} target {target!r} is not a key or label")
    return Markup(f"{{{role}}}`{target}`", str(target))


#: Characters kept as they are in a link destination (RFC 3986 reserved and unreserved, and
#: ``%`` of an existing escape); everything else (space, ``<>"`{}|\\^``, non-ASCII) is percent-encoded.
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~-._"


def myst_link(text: Any, url: str) -> Markup:
    """A MyST link showing ``text`` (escaped) to an ``http``/``https`` ``url`` (percent-encoded
    inside ``<...>``, so no character of it can end the destination). Raises ValueError for any
    other scheme (``javascript:``, ``file:``) or a URL without a host."""
    url = str(url).strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise ValueError(f"myst_link: not an http(s) URL: {url[:80]!r}")
    return Markup(f"[{myst_text(text)}](<{quote(url, safe=_URL_SAFE)}>)", f"{text} <{url}>" if str(text) != url else url)


def myst_code(text: Any) -> str:
    """An inline code span showing ``text`` literally (delimited by more backticks than any
    run inside it, CommonMark 6.1)."""
    flat = _WS.sub(" ", str(text)).strip()
    ticks = "`" * (_longest_run(flat, "`") + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def myst_fence(content: str, lang: str = "") -> str:
    """A fenced code block holding ``content`` literally: the fence is longer than any backtick
    run in the content, so the content cannot close it."""
    ticks = fence_for(content)
    return f"{ticks}{lang}\n{content}\n{ticks}"


def fence_for(body: str, char: str = "`") -> str:
    """A fence of ``char`` (backticks or tildes) around ``body`` (a directive's or a code
    block's): at least three, and more than any run of ``char`` in it, so no line of it closes
    the fence. A directive whose argument is text takes tildes: CommonMark 4.5 ends a backtick
    fence's info string at its first backtick, a tilde fence's never."""
    return char * max(3, _longest_run(body, char) + 1)


def html_text(text: Any) -> str:
    """Text for an HTML context that Sphinx templates insert unescaped (``<``, ``&``, quotes)."""
    return html.escape(str(text), quote=True)


def script_json(obj: Any) -> str:
    """``obj`` as JSON to place inside an HTML ``<script>`` element: ``<``, ``>`` and ``&`` as
    ``\\u`` escapes (JSON and JavaScript read them back as the same characters), so no text in it
    can end the element (``</script>``) or open a comment (``<!--``); the line separators U+2028
    and U+2029 too. Keys sorted: the same object gives the same bytes."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def expr_string(text: Any) -> str:
    """A string literal of a Vega (JavaScript) expression holding ``text``: JSON, every
    non-ASCII character as a ``\\u`` escape."""
    return json.dumps(str(text), ensure_ascii=True)


_LATEX = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
}


def latex_text(text: Any) -> str:
    """LaTeX (and BibTeX field) text that typesets as ``text`` under xelatex: the ten special
    characters replaced by their text commands; whitespace runs (a blank line would end the
    paragraph) become one space."""
    flat = _WS.sub(" ", str(text)).strip()
    return "".join(_LATEX.get(ch, ch) for ch in flat)


#: A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection": ``=``,
#: ``+``, ``-``, ``@``, tab, carriage return; line feed and the full-width forms as well).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: Text that is a number (a sign, digits with thousands commas, a decimal point, an exponent, a
#: percent sign): no formula can be spelled with these characters alone.
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?\Z")


def csv_cell(text: Any) -> str:
    """A text cell a spreadsheet shows as text: one that would start a formula gets a leading
    apostrophe (``=HYPERLINK(..)`` -> ``'=HYPERLINK(..)``), and so does one that starts with an
    apostrophe, so that :func:`csv_value` reads every cell back as written; text that is a number
    (``-1.5e3``, ``+1.7%``) is kept."""
    text = str(text)
    if text.startswith("'") or (text.startswith(FORMULA_START) and not _NUMBER.match(text)):
        return "'" + text
    return text


def csv_line(cells: Sequence[Any]) -> str:
    """One CSV record (``,``-separated, ending in ``\\n``) of ``cells`` as given (text through
    :func:`csv_cell` first). A record with a carriage return in a cell is quoted whole: Python's
    writer quotes only the characters of its line terminator, and a bare ``\\r`` would end the
    record for a reader."""
    buf = io.StringIO()
    quote = any(isinstance(c, str) and "\r" in c for c in cells)
    csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL if quote else csv.QUOTE_MINIMAL).writerow(cells)
    return buf.getvalue()


def csv_value(cell: str) -> str:
    """The text :func:`csv_cell` was given (one leading apostrophe removed)."""
    return cell[1:] if cell.startswith("'") else cell


def shell_word(text: Any) -> str:
    """One shell word that the shell passes through unchanged (``shlex.quote``)."""
    return shlex.quote(str(text))


def shell_command(words: list[str]) -> str:
    """A command line of words, each quoted for the shell (``shlex.join``)."""
    return shlex.join(str(w) for w in words)


def _longest_run(text: str, ch: str) -> int:
    runs = re.findall(re.escape(ch) + "+", text)
    return max((len(r) for r in runs), default=0)


__all__ = ["FORMULA_START", "Markup", "csv_cell", "csv_line", "csv_value", "expr_string", "fence_for", "html_text", "latex_text",
           "markup", "myst_cell", "myst_code", "myst_fence", "myst_link", "myst_role", "myst_text",
           "plain", "script_json", "shell_command", "shell_word"]
