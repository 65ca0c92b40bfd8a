"""Publishing cannot lose a book: a fault or a kill at every step of the swap leaves the old
book or the new one whole; what a killed build leaves is cleaned by the next; children die
with the build."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scaletax.report import book, lifecycle

STEPS_EXCHANGE = ["begin", "exchanged"]
STEPS_FALLBACK = ["begin", "journal", "old-moved", "new-moved", "journal-removed"]
#: the book at the final path once the next build has recovered, by step cut
EXPECT = {"begin": "old", "exchanged": "new", "journal": "old", "old-moved": "old",
          "new-moved": "new", "journal-removed": "new"}


def _make_book(folder: Path, tag: str) -> Path:
    (folder / "html").mkdir(parents=True)
    (folder / "html" / "index.html").write_text(f"<p>{tag}</p>")
    (folder / "manifest.json").write_text(json.dumps({"tag": tag}))
    return folder


def _which(final: Path) -> str:
    """'old' or 'new' when ``final`` is a whole book, else fails."""
    assert (final / "html" / "index.html").is_file(), f"no book at {final}"
    tag = json.loads((final / "manifest.json").read_text())["tag"]
    assert (final / "html" / "index.html").read_text() == f"<p>{tag}</p>"
    return tag


class Fault(Exception):
    pass


def _setup(tmp_path):
    root = tmp_path / "build"
    final = _make_book(root / "mybook", "old")
    stage = _make_book(root / ".stage-mybook-p1-x" / "out", "new")
    return root, final, stage


@pytest.mark.parametrize("exchange,steps", [(True, STEPS_EXCHANGE), (False, STEPS_FALLBACK)])
def test_a_fault_at_every_publish_step_leaves_a_whole_book(tmp_path, monkeypatch, exchange, steps):
    if exchange and not book._exchange(tmp_path, tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) not available here")
    for i, step in enumerate(steps):
        case = tmp_path / f"case{i}"
        root, final, stage = _setup(case)

        def fault(name, at=step):
            if name == at:
                raise Fault(name)

        monkeypatch.setattr(book, "_publish_step", fault)
        with pytest.raises(Fault):
            book._publish(stage, final, use_exchange=exchange)
        if exchange:  # one atomic step: a whole book at once, before any recovery
            assert _which(final) == EXPECT[step], step
        book.recover(root, "mybook")  # what the next build of the name does first
        assert _which(final) == EXPECT[step], step
        assert not list(root.glob(".trash-*")) and not list(root.glob(".publish-*")), step


@pytest.mark.parametrize("exchange,step", [(e, s) for e, steps in ((True, STEPS_EXCHANGE), (False, STEPS_FALLBACK))
                                           for s in steps])
def test_sigkill_at_every_publish_step_leaves_a_whole_book(tmp_path, exchange, step):
    """A real SIGKILL (no clean-up runs) at each step; the next build's recovery completes it."""
    root, final, stage = _setup(tmp_path)
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from scaletax.report import book
        def step(name):
            if name == {step!r}:
                os.kill(os.getpid(), signal.SIGKILL)
        book._publish_step = step
        book._publish(Path({str(stage)!r}), Path({str(final)!r}), use_exchange={exchange!r})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if exchange:
        assert _which(final) == EXPECT[step]
    book.recover(root, "mybook")
    assert _which(final) == EXPECT[step]
    assert not list(root.glob(".trash-*"))


def test_signals_during_the_swap_are_held_back(tmp_path, monkeypatch):
    root, final, stage = _setup(tmp_path)
    seen = []

    def send_term(name):
        if name == "begin":
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-swap: must wait for its end
        seen.append(name)

    monkeypatch.setattr(book, "_publish_step", send_term)
    with lifecycle.Interrupts() as intr:
        book._publish(stage, final)
    assert _which(final) == "new"
    assert intr.received == ["SIGTERM"] and not intr.armed  # recorded, the book is out
    assert seen[0] == "begin" and len(seen) >= 2


def test_second_signal_does_not_cut_the_clean_up():
    with lifecycle.Interrupts() as intr:
        with pytest.raises(lifecycle.Interrupted, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)  # the second one is only recorded
        time.sleep(0.05)
    assert intr.received == ["SIGTERM", "SIGTERM"]


def test_recover_restores_a_trash_left_by_an_older_build(tmp_path):
    root = tmp_path
    _make_book(root / ".trash-mybook-4242", "old")
    assert book.recover(root, "mybook").startswith("restored the previous book")
    assert _which(root / "mybook") == "old"


def test_stale_folders_of_dead_builds_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = [tmp_path / f".stage-other-p{dead}-abc123", tmp_path / ".stage-legacy-abc123"]
    alive = tmp_path / f".stage-other-p{os.getppid()}-abc123"  # a running process's
    mine_other_name = tmp_path / f".stage-mybook-p{os.getppid()}-zz"  # same name, lock is ours
    for p in stale + [alive, mine_other_name]:
        p.mkdir()
    removed = lifecycle.remove_stale(tmp_path, (".stage-*",), owned=(".stage-mybook-*",))
    assert set(removed) == set(stale) | {mine_other_name}
    assert alive.exists()


def test_children_die_with_the_build(tmp_path):
    """SIGKILL of the build kills its Popen children (PR_SET_PDEATHSIG)."""
    pidfile = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from scaletax.report import lifecycle
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             start_new_session=True, preexec_fn=lifecycle.die_with_parent())
        open({str(pidfile)!r}, "w").write(str(p.pid))
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                break
            time.sleep(0.05)
        child = int(pidfile.read_text())
        parent.kill()
        parent.wait()
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            if Path(f"/proc/{child}/stat").exists() and Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
                break  # a zombie: dead, waiting for its reaper
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the child outlived the build")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_up_to_date_check_leaves_the_published_manifest_as_it_is(tmp_path):
    final = _make_book(tmp_path / "mybook", "old")
    record = {"tag": "old", "book_sha256": "k", "figures": [], "pdf": "skipped",
              "notebooks": [{"chapter": "c", "status": "executed", "seconds": 12.5,
                             "execution": {"executed_at": "2026-12-01 09:00:00 UTC", "seconds": 12.5}}]}
    (final / "manifest.json").write_text(json.dumps(record))
    before = (final / "manifest.json").read_bytes()
    got = book._up_to_date(final, "k", "2026-12-01 10:00 UTC")
    assert got["up_to_date"] and got["notebooks"][0]["status"] == "reused"
    assert (final / "manifest.json").read_bytes() == before  # the real execution record stays
    record["figures"] = ["fig-1.png"]  # a figure the book lacks: not up to date, rebuild
    (final / "manifest.json").write_text(json.dumps(record))
    assert book._up_to_date(final, "k", "2026-12-01 10:00 UTC") is None
