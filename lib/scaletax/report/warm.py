"""A warm ``python -m sphinx``: Sphinx and the book's extensions imported while the chapters run.

A :class:`Warm` process starts with the build, imports :data:`SPHINX_PRELOAD` (about 1.5 CPU s,
on the core the chapters leave free) and waits; when the HTML step comes it runs ``python -m
sphinx`` with the step's arguments, directory and log, as a fresh process would (same
environment, given at its start; ``sys.argv`` and ``sys.path[0]`` as ``-m`` sets them). It is a
session of its own and gets SIGKILL when the build dies; so do the ``-j`` workers Sphinx forks
(``lifecycle.forks_die_with_me``).
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from scaletax.report import lifecycle


def _redirect_output(log: str) -> None:
    """stdin from /dev/null, stdout and stderr into ``log`` (truncated)."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


#: What ``python -m sphinx`` imports to build the book (Sphinx, its builders, the book's
#: extensions and theme): a :class:`Warm` Sphinx imports them at the start of the build, while a
#: core is idle, instead of on the HTML step's critical path.
SPHINX_PRELOAD = (
    "sphinx.cmd.build", "sphinx.application", "sphinx.builders.html", "sphinx.builders.latex",
    "sphinx.ext.intersphinx", "myst_parser", "myst_nb", "myst_nb.sphinx_ext", "jupyter_book",
    "sphinx_book_theme", "pydata_sphinx_theme", "sphinx_togglebutton", "sphinx_copybutton", "sphinx_design",
    "sphinx_external_toc", "sphinxcontrib.bibtex", "sphinx_multitoc_numbering",
    "scaletax.report.sphinx_once", "scaletax.report.numbering", "scaletax.report.latex_paragraphs",
)


class Warm:
    """A process that imports ``preload`` now and, once :meth:`run` says so, runs ``python -m
    module *args`` in ``cwd`` with its output in ``log``: what a fresh ``python -m`` would do
    (same environment, given at the start; ``sys.argv`` and ``sys.path[0]`` as ``-m`` sets them),
    minus the imports. ``proc`` is its ``Popen`` (own session, SIGKILL when the build dies);
    :meth:`close` ends it unused."""

    def __init__(self, module: str, preload: tuple[str, ...], env: dict[str, str]):
        self.module = module
        with lifecycle.Interrupts.deferred():  # an interrupt during the fork: once proc is set
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scaletax.report.warm", "--warm", *preload], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=lifecycle.die_with_parent())

    def run(self, args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
        """Start the module (returns ``proc``; its exit status is the module's)."""
        msg = {"module": self.module, "args": [str(a) for a in args], "cwd": str(cwd), "log": str(log)}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.close()
        return self.proc

    def close(self) -> None:
        """End it if it was never run."""
        if self.proc.poll() is None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # end of input unused: it exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _warm_main(preload: list[str]) -> int:
    """:class:`Warm`'s process: import ``preload`` (a module that fails is left to the run to
    report), read one request, become ``python -m module args``."""
    import runpy

    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0
    req = json.loads(line)
    lifecycle.forks_die_with_me()  # Sphinx's -j workers die with it
    _redirect_output(req["log"])
    os.chdir(req["cwd"])
    sys.path[0] = req["cwd"]  # `python -m` puts the working directory first
    sys.argv = [req["module"], *req["args"]]
    try:
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


if __name__ == "__main__":  # python -m scaletax.report.warm --warm MODULE...
    code = _warm_main(sys.argv[2:])
    sys.exit(code)
