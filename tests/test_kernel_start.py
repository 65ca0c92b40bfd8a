"""A chapter whose kernel dies before it answers kernel_info (no cell ran) gets one more kernel: such
a start fails for the machine's reasons, not the chapter's (seen once in CI, 2026-12-04). A kernel
that keeps dying is still a one-line failure, with the kernel's own log kept."""
import asyncio
import json
import os
import sys
import textwrap

import nbformat
import pytest

from test_cache import NOTEBOOK
from scaletax.report import chapters as toc
from scaletax.report import execute


def _kernelspec(root, marker, always: bool):
    """A "python3" kernel spec that exits at once (the first time only, unless ``always``), then runs ipykernel."""
    script = root / "flaky_kernel.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        marker = {str(marker)!r}
        if {always!r} or not os.path.exists(marker):
            open(marker, "a").close()
            sys.exit(1)
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", sys.argv[1]])
    """), encoding="utf-8")
    spec = root / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, str(script), "{connection_file}"],
                                                  "display_name": "flaky", "language": "python"}), encoding="utf-8")
    return root / "jupyter"


def _job(tmp_path, monkeypatch):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    (nbdir / "tiny.md").write_text(NOTEBOOK, encoding="utf-8")  # test_cache's tiny chapter: prints 1
    monkeypatch.setattr(toc, "NOTEBOOK_DIR", nbdir)
    work = tmp_path / "work"
    work.mkdir()
    return execute._Job(toc.Chapter("tiny", reads=(), data=()), {}, {}, "base", work=work)


def test_a_kernel_that_dies_at_start_is_started_again(tmp_path, monkeypatch):
    marker = tmp_path / "died-once"
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path, marker, always=False)))
    job = _job(tmp_path, monkeypatch)
    status = asyncio.run(execute._execute(job, dict(os.environ)))
    assert status["error"] is None and marker.exists()
    nb = nbformat.read(job.work / "notebook.ipynb", as_version=4)
    assert [o.get("text") for c in nb.cells if c.cell_type == "code" for o in c.outputs] == ["1\n"]
    assert "the kernel died before it answered" in (job.work / execute.KERNEL_LOG).read_text(encoding="utf-8")


def test_a_kernel_that_keeps_dying_fails_in_one_line_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path, tmp_path / "died", always=True)))
    job = _job(tmp_path, monkeypatch)
    status = asyncio.run(execute._execute(job, dict(os.environ)))
    assert status["error"] == "RuntimeError: Kernel died before replying to kernel_info"
    log_dir = tmp_path / "logs"
    with pytest.raises(execute.ChapterFailed):
        execute._finish(job, status, tmp_path / "cache", log_dir, tmp_path / "out")
    assert (log_dir / "tiny.ipynb").exists()
    assert "starting another" in (log_dir / "tiny.kernel.log").read_text(encoding="utf-8")
