"""Sphinx extension: what the book build looks up many times, looked up once.

Sphinx 7.4's ``{numref}`` resolution (``StandardDomain._resolve_numref_xref``) calls
``env.get_doctree(docname)`` for every reference, which unpickles the whole target page again
(0.1-1.2 MB of pickle each) only to read the target node's type and ids: 104 references cost
about 10 s of the HTML step and as much of the LaTeX one. Its figure numbering
(``TocTreeCollector.assign_figure_numbers``, after every read phase) unpickles every page once
more only to walk it (0.4 s for the default book). Here each doctree is unpickled once per build
(:func:`read_only`) for the lookups that only read it: numref targets, Sphinx's figure numbering,
and the figure numbers and caption list of :mod:`scaletax.report.numbering`. Every other caller of
``get_doctree`` (the writers, which change the tree they get) still gets its own fresh copy.

sphinxcontrib-bibtex asks pybtex for its plain-text backend on every citation reference, and each
ask scans the entry points of every installed distribution (about 40 ms); the class is
registered once as a pybtex runtime plugin (pybtex's own API), the same class the entry point
loads, so the lookup stops scanning.

Nothing in the output changes: the same nodes are read, only fewer times.
"""
from __future__ import annotations

import weakref

from docutils import nodes
from sphinx.domains.std import StandardDomain
from sphinx.environment.collectors.toctree import TocTreeCollector

#: (group, name) of the pybtex plugins sphinxcontrib-bibtex 2.7 looks up once per reference.
PYBTEX_PLUGINS = (("pybtex.backends", "plaintext"),)
#: Sphinx's own figure numbering, which :func:`assign_figure_numbers` runs on read-only doctrees.
SPHINX_ASSIGN_FIGURE_NUMBERS = TocTreeCollector.assign_figure_numbers

_DOCTREES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def read_only(env, docname: str) -> nodes.document:
    """The doctree of ``docname`` as read, unpickled once per build. Do not change it."""
    trees = _DOCTREES.setdefault(env, {})
    tree = trees.get(docname)
    if tree is None:
        tree = trees[docname] = env.get_doctree(docname)
    return tree


class ReadOnlyDoctrees:
    """The build environment as seen by code that only reads the doctrees it asks for:
    ``get_doctree`` answers from :func:`read_only`; every other attribute, read or set, is the
    environment's own."""

    def __init__(self, env):
        object.__setattr__(self, "_env", env)

    def get_doctree(self, docname: str) -> nodes.document:
        return read_only(self._env, docname)

    def __getattr__(self, name):
        return getattr(self._env, name)

    def __setattr__(self, name, value):
        setattr(self._env, name, value)


class OnceStandardDomain(StandardDomain):
    """Sphinx's standard domain, resolving ``{numref}`` on the read-only doctrees: the target
    node is only inspected (its type, its first id), never placed in the output."""

    def _resolve_numref_xref(self, env, fromdocname, builder, typ, target, node, contnode):
        return super()._resolve_numref_xref(ReadOnlyDoctrees(env), fromdocname, builder, typ, target,
                                            node, contnode)


def assign_figure_numbers(collector, env) -> list[str]:
    """Sphinx's figure numbering (``TocTreeCollector.assign_figure_numbers``) on the read-only
    doctrees: it only walks the pages, writing the numbers to ``env.toc_fignumbers``."""
    if not isinstance(env, ReadOnlyDoctrees):
        env = ReadOnlyDoctrees(env)
    return SPHINX_ASSIGN_FIGURE_NUMBERS(collector, env)


def _forget(app, env, docnames) -> None:
    """A new read phase may change any doctree: drop the copies of the last one."""
    _DOCTREES.pop(env, None)


def _register_pybtex_plugins(app) -> None:
    import pybtex.plugin

    for group, name in PYBTEX_PLUGINS:
        pybtex.plugin.register_plugin(group, name, pybtex.plugin.find_plugin(group, name), force=True)


def setup(app):
    app.add_domain(OnceStandardDomain, override=True)
    app.connect("env-before-read-docs", _forget)
    app.connect("builder-inited", _register_pybtex_plugins)
    TocTreeCollector.assign_figure_numbers = assign_figure_numbers  # every collector, the book's subclass too
    return {"parallel_read_safe": True, "parallel_write_safe": True}
