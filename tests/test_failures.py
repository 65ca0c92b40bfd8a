"""Failures mid-build: concurrent builds of one name, SIGTERM, and clean-up."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SCALETAX, SMALL, run_cli

pytestmark = pytest.mark.book


def _slow_notebooks(tmp_path, seconds=120):
    slow = tmp_path / "slow-notebooks"
    shutil.copytree(ROOT / "notebooks", slow)
    src = (slow / "hardware.md").read_text()
    (slow / "hardware.md").write_text(src.replace("charts.setup()", f"charts.setup()\nimport time; time.sleep({seconds})", 1))
    return slow


def _wait_for(cond, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_same_name_refused_other_name_runs_and_sigterm_leaves_book_intact(built_book, tmp_path):
    build_dir = built_book["build_dir"]  # its execution cache makes the other builds quick
    ok = run_cli(["build", *SMALL, "--name", "shared", "--no-pdf"], build_dir)
    assert ok.returncode == 0, ok.stderr[-2000:]
    before = (build_dir / "shared" / "manifest.json").read_text()

    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), SCALETAX_NOTEBOOKS=str(_slow_notebooks(tmp_path)))
    first = subprocess.Popen(SCALETAX + ["build", *SMALL, "--name", "shared", "--no-pdf"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: list((build_dir / ".cache").glob(".tmp-hardware-*"))), "slow build never started"
        second = run_cli(["build", *SMALL, "--name", "shared", "--no-pdf"], build_dir)
        assert second.returncode == 2
        assert "another build of 'shared' is running" in second.stderr
        other = run_cli(["build", *SMALL, "--name", "elsewhere", "--no-pdf"], build_dir)
        assert other.returncode == 0, other.stderr[-2000:]
        assert (build_dir / "elsewhere" / "html" / "index.html").is_file()
        assert first.poll() is None, "the slow build should still be running"
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1
    assert "interrupted" in err and "left as it was" in err
    assert (build_dir / "shared" / "manifest.json").read_text() == before
    assert not list(build_dir.glob(".stage-*"))
    assert not list((build_dir / ".cache").glob(".tmp-*"))
    # the worker and its kernel are gone with the build
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "slow-notebooks") not in ps
    # and the lock is free again
    again = run_cli(["build", *SMALL, "--name", "shared", "--no-pdf"], build_dir)
    assert again.returncode == 0, again.stderr[-2000:]
