"""Failures mid-build: concurrent builds of one name, SIGTERM, and clean-up."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

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
    ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "slow-notebooks") not in ps
    # and the lock is free again
    again = run_cli(["build", *SMALL, "--name", "shared", "--no-pdf"], build_dir)
    assert again.returncode == 0, again.stderr[-2000:]


def _descendants(pid):
    """Every process below ``pid`` (children, theirs, ...), from /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        me = todo.pop()
        kids = [c for c, p in parent.items() if p == me]
        out += kids
        todo += kids
    return out


def _cwd(pid):
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _alive(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_no_op_rebuild_keeps_the_manifest_of_the_real_build(built_book):
    manifest = built_book["dir"] / "manifest.json"
    before = manifest.read_bytes()
    proc = run_cli(["build", *SMALL, "--name", "small", "--jobs", "2"], built_book["build_dir"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "up to date" in proc.stderr
    assert manifest.read_bytes() == before
    record = json.loads(before)
    assert all(n["execution"].get("executed_at") for n in record["notebooks"])


def test_two_quick_sigterms_leave_the_book(built_book, tmp_path):
    _signal_builds(built_book, tmp_path, sigkill=False)


def test_sigkill_leaves_no_orphans_and_the_next_build_cleans_up(built_book, tmp_path):
    _signal_builds(built_book, tmp_path, sigkill=True)


def _signal_builds(built_book, tmp_path, sigkill: bool):
    build_dir = built_book["build_dir"]
    ok = run_cli(["build", *SMALL, "--name", "killed", "--no-pdf"], build_dir)
    assert ok.returncode == 0, ok.stderr[-2000:]
    before = (build_dir / "killed" / "manifest.json").read_text()
    slow = _slow_notebooks(tmp_path)
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), SCALETAX_NOTEBOOKS=str(slow))

    def start():
        return subprocess.Popen(SCALETAX + ["build", *SMALL, "--name", "killed", "--no-pdf"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # two SIGTERMs in quick succession: one line, exit 1, the book as it was
    first = start()
    try:
        assert _wait_for(lambda: list((build_dir / ".cache").glob(".tmp-hardware-*"))), "slow build never started"
        first.send_signal(signal.SIGTERM)
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 1, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("scaletax: error: build interrupted")
    assert (build_dir / "killed" / "manifest.json").read_text() == before

    if not sigkill:
        return
    # SIGKILL: no clean-up runs, yet the workers and kernels die with it; the next build cleans up
    second = start()
    try:
        assert _wait_for(lambda: list((build_dir / ".cache").glob(".tmp-hardware-*"))), "slow build never started"
        # the slow chapter's kernel (working in its .tmp-hardware-* folder) is up: every process
        # the build started (kernels, their training workers, Sphinx) is a descendant
        assert _wait_for(lambda: any(".tmp-hardware-" in _cwd(p) for p in _descendants(second.pid)), 60)
        family = _descendants(second.pid)
        second.kill()
        second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
    assert _wait_for(lambda: not [p for p in family if _alive(p)], 30), [p for p in family if _alive(p)]
    assert (build_dir / "killed" / "manifest.json").read_text() == before
    assert list(build_dir.glob(".stage-killed-*")) and list((build_dir / ".cache").glob(".tmp-hardware-*"))
    again = run_cli(["build", *SMALL, "--name", "killed", "--no-pdf"], build_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not list(build_dir.glob(".stage-*")) and not list((build_dir / ".cache").glob(".tmp-*"))


def _cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _marked(marker):
    """Live processes whose environment holds ``marker`` (every process a build starts inherits
    it, whoever its parent is by now)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(int(entry)):
            try:
                if marker.encode() in open(f"/proc/{entry}/environ", "rb").read():
                    out.append(int(entry))
            except OSError:
                continue
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
@pytest.mark.parametrize("sig,phase", [(signal.SIGKILL, "read"), (signal.SIGKILL, "write"), (signal.SIGKILL, "read"),
                                       (signal.SIGTERM, "read"), (signal.SIGINT, "write")])
def test_a_signal_during_the_html_step_leaves_no_process_and_no_book(built_book, sig, phase):
    """Issue 35 item 9: the build killed while Sphinx runs (reading the pages, or writing them):
    no process the build started outlives it, and no book is published."""
    build_dir = built_book["build_dir"]  # chapters cached: the build goes straight to the HTML step
    name = f"html-{sig.name.lower()}-{phase}-{os.urandom(3).hex()}"
    marker = f"SCALETAX_TEST_FAMILY={name}"
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), SCALETAX_TEST_FAMILY=name)
    proc = subprocess.Popen(SCALETAX + ["build", *SMALL, "--name", name, "--no-pdf", "--jobs", "2"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def in_phase():
        sphinx = [p for p in _descendants(proc.pid) if " sphinx" in _cmdline(p)]
        if phase == "read":
            return bool(sphinx)
        return bool(sphinx) and any(build_dir.glob(".stage-*/out/html/*.html"))

    try:
        assert _wait_for(in_phase, 600), f"never saw Sphinx in the {phase} phase"
        assert _marked(marker), "the marker does not reach the build's processes"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _wait_for(lambda: not _marked(marker), 30), [(p, _cmdline(p)) for p in _marked(marker)]
    assert not (build_dir / name).exists()
    if sig != signal.SIGKILL:
        assert proc.returncode == 1, err
        assert err.strip().splitlines()[-1].startswith("scaletax: error: build interrupted"), err[-2000:]


def test_a_full_disk_during_execution_is_one_line_with_a_log(tmp_path):
    """Files cannot grow past 256 KiB (RLIMIT_FSIZE: writes fail as on a full disk)."""
    import resource

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    build_dir = tmp_path / "build"
    env = dict(os.environ, SCALETAX_BUILD_DIR=str(build_dir), PYTHONUNBUFFERED="1")
    proc = subprocess.run(SCALETAX + ["build", *SMALL, "--name", "full", "--no-pdf", "--jobs", "1"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1800, preexec_fn=small_disk)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("scaletax: error: "), last
    import re

    found = re.search(r"(?:log: |the traceback: )(\S+)$", last)
    assert found, last
    log = Path(found.group(1))
    assert log.is_file() and log.stat().st_size > 0, last
    assert not (build_dir / "full").exists()
