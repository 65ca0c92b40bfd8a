"""A build tool that fails says why in one line: its first error, or what ran out (issue 35: a
full disk during Sphinx said only "exit status 1", with an empty log), and the log's last lines."""
import shutil
import sys
from collections import namedtuple

import pytest

from scaletax.report import book

Usage = namedtuple("Usage", "total used free")


def _fail(tmp_path, code: str):
    log = tmp_path / "html.log"
    with pytest.raises(book.BuildError) as exc:
        book._run([sys.executable, "-c", code], tmp_path, log, "HTML build")
    assert "\n" not in str(exc.value)
    return str(exc.value), log


def test_a_full_disk_with_an_empty_log_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(book.shutil, "disk_usage", lambda p: Usage(10 * 1024**3, 10 * 1024**3 - 4096, 4096))
    msg, log = _fail(tmp_path, "import sys; sys.exit(1)")
    assert msg == (f"HTML build failed: the disk is full (0.0 MiB free where it writes, {tmp_path}); "
                   f"log tail: the log is empty; full log: {log}")


def test_enospc_in_the_log_is_a_full_disk_with_the_tail(tmp_path):
    assert shutil.disk_usage(tmp_path).free > book.LOW_DISK_BYTES
    msg, log = _fail(tmp_path, "print('reading sources... [ 50%] hardware'); print('writing output...');"
                               "print('OSError: [Errno 28] No space left on device'); raise SystemExit(2)")
    assert msg == (f"HTML build failed: the disk is full (No space left on device, writing under {tmp_path}); "
                   "log tail: reading sources... [ 50%] hardware | writing output... | OSError: [Errno 28] No space "
                   f"left on device; full log: {log}")


def test_a_file_size_limit_is_named(tmp_path):
    msg, _ = _fail(tmp_path, "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096));"
                             "f = open('big', 'w'); f.write('x' * 100_000); f.close()")
    assert msg.startswith("HTML build failed: a file outgrew the file size limit (File too large); log tail: ")


def test_an_ordinary_failure_names_its_first_error_and_the_tail(tmp_path):
    msg, log = _fail(tmp_path, "print('a'); print('x.md:3: WARNING: undefined label: y'); print('b'); raise SystemExit(1)")
    assert msg == (f"HTML build failed: x.md:3: WARNING: undefined label: y; log tail: a | x.md:3: WARNING: "
                   f"undefined label: y | b; full log: {log}")


@pytest.mark.pdf
def test_a_glued_sentence_with_blank_lines_keeps_the_pdf(tmp_path):
    """A glued sentence naming the user's model, whose name holds a blank line, broke xelatex
    ("Paragraph ended before \\DUrole was complete"): the LaTeX builder joins it (report/latex_paragraphs)."""
    import subprocess

    import nbformat
    from myst_nb.ext.glue import GLUE_PREFIX

    from conftest import require_tools

    require_tools("xelatex", "latexmk", "pdftotext")
    sentence = "Model A\n\n- list\n\n\n# heading\ntrains in 15 days"
    nb = nbformat.v4.new_notebook()
    out = nbformat.v4.new_output("display_data", data={GLUE_PREFIX + "text/plain": repr(sentence)},
                                 metadata={"scrapbook": {"name": "s", "mime_prefix": GLUE_PREFIX}})
    nb.cells = [nbformat.v4.new_markdown_cell("# Page\n\nThe plan: {glue:text}`s` and more."),
                nbformat.v4.new_code_cell("glue('s', s, display=False)", outputs=[out])]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "index.ipynb")
    (src / "conf.py").write_text("extensions = ['myst_nb', 'scaletax.report.latex_paragraphs']\n"
                                 "nb_execution_mode = 'off'\nlatex_engine = 'xelatex'\n"
                                 "latex_documents = [('index', 'book.tex', 'T', 'a', 'manual')]\n")
    latex = tmp_path / "latex"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "latex", "-q", str(src), str(latex)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tex = (latex / "book.tex").read_text()
    assert "\\DUrole{pasted-text}{Model A \\sphinxhyphen{} list \\# heading\ntrains in 15 days}" in tex
    proc = subprocess.run(["latexmk", "-pdfxe", "-interaction=nonstopmode", "-halt-on-error", "book.tex"], cwd=latex,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = subprocess.run(["pdftotext", str(latex / "book.pdf"), "-"], capture_output=True, text=True).stdout
    assert "The plan: Model A - list # heading trains in 15 days and more." in " ".join(text.split())
