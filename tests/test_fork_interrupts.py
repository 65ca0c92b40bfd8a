"""An interrupt that arrives while the build forks a child (a kernel, Sphinx, latexmk)
is raised once the child exists and the build holds its handle, so the build stops it; the
child runs with the interrupt signals unblocked. Raised inside the fork itself, it would run in
CPython's at-fork hooks (logging's lock), be printed as an "Exception ignored" traceback and be
lost."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from scaletax.report import book, lifecycle

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _blocked(pid: int) -> set[int]:
    """Signal numbers blocked in process ``pid`` (``SigBlk`` of /proc/<pid>/status)."""
    for line in open(f"/proc/{pid}/status", encoding="ascii"):
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError("no SigBlk line")


def _signal_then_popen(started: list):
    real = subprocess.Popen

    def popen(cmd, **kwargs):
        if not kwargs.get("start_new_session"):  # not the build's child (ctypes' find_library)
            return real(cmd, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # the interrupt lands just as the fork starts
        proc = real(SLEEP, **kwargs)
        started.append(proc)
        return proc

    return popen


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
def test_a_signal_while_the_chapters_run_cancels_them_then_raises(tmp_path):
    """The chapters run on an event loop (``lifecycle.run_async``): a SIGTERM cancels it at a step
    of the loop (its ``finally`` stops what it started), then raises Interrupted; a kernel started
    meanwhile has the signals unblocked, and the build's handlers are back afterwards."""
    import asyncio

    seen: dict = {}

    async def chapters():
        proc = subprocess.Popen(SLEEP, start_new_session=True, preexec_fn=lifecycle.die_with_parent())
        seen["child_blocked"] = _blocked(proc.pid)
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        finally:
            seen["cancelled"] = True
            _reap(proc)

    with lifecycle.Interrupts() as intr:
        handler = signal.getsignal(signal.SIGTERM)
        with pytest.raises(lifecycle.Interrupted, match="SIGTERM"):
            lifecycle.run_async(chapters())
        assert signal.getsignal(signal.SIGTERM) == handler and intr.received == ["SIGTERM"]
    assert seen["cancelled"]
    assert not seen["child_blocked"] & {int(s) for s in lifecycle.SIGNALS}, seen
    assert not _blocked(os.getpid()) & {int(s) for s in lifecycle.SIGNALS}  # the mask is restored


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
def test_tool_fork_interrupted_kills_the_tool(tmp_path, monkeypatch):
    started: list = []
    monkeypatch.setattr(book.subprocess, "Popen", _signal_then_popen(started))
    try:
        with lifecycle.Interrupts(), pytest.raises(lifecycle.Interrupted, match="SIGTERM"):
            book._run(["sphinx-build"], tmp_path, tmp_path / "tool.log", "HTML build")
        assert len(started) == 1 and started[0].poll() is not None  # started, then stopped by _run
    finally:
        for proc in started:
            _reap(proc)
