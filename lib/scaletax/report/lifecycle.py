"""Process lifetime and temporary folders of a build: nothing outlives it, nothing is left behind.

- :func:`die_with_parent` (a ``preexec_fn``): a kernel, Sphinx or latexmk gets SIGKILL when the
  build process dies, whatever killed it (``prctl(PR_SET_PDEATHSIG)``, Linux).
- :class:`Interrupts`: SIGINT, SIGTERM and SIGHUP become one :class:`Interrupted` exception
  (later signals are recorded, not raised, so clean-up cannot be cut short), and
  :meth:`Interrupts.deferred` holds them back during a step that must not be cut in half;
  :func:`run_async` runs an asyncio coroutine (the chapters) with the same signals cancelling it
  at a step of its event loop, so its ``finally`` blocks stop what it started.
- :func:`temp_name` / :func:`remove_stale`: temporary folders carry the pid of the build that
  made them (``<prefix>p<pid>-<random>``); the next build removes those whose build is gone.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import signal
from pathlib import Path

PR_SET_PDEATHSIG = 1
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PID = re.compile(r"p(\d+)-[A-Za-z0-9_]+$")
_libc = None


def _prctl():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc.prctl


def die_with_parent():
    """A ``preexec_fn`` for build children: SIGKILL when this process dies (no-op off Linux).
    The child also unblocks the interrupt signals, which a parent forking inside
    :meth:`Interrupts.deferred` holds blocked (a signal mask survives ``exec``)."""
    parent = os.getpid()
    prctl = _prctl()

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        try:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (AttributeError, OSError):
            return
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def run_async(main):
    """``asyncio.run(main)``, cancelled by SIGINT, SIGTERM or SIGHUP, then :class:`Interrupted`
    (inside an :class:`Interrupts` block, whose handlers it puts back). The handlers only
    schedule the cancellation on the event loop, so nothing is raised inside a fork, and the loop
    refuses handlers of its own (nbclient adds some that kill its kernel and let the run go on):
    the ``finally`` blocks of ``main`` stop what it started."""
    import asyncio

    class Loop(asyncio.SelectorEventLoop):
        def add_signal_handler(self, sig, callback, *args):
            raise RuntimeError("run_async handles the signals")  # nbclient then adds none

    got: list[str] = []
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    result = None
    with asyncio.Runner(loop_factory=Loop) as runner:
        loop = runner.get_loop()
        task = None

        def handler(signum, frame) -> None:
            got.append(signal.Signals(signum).name)
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

        async def guarded():
            nonlocal task
            task = asyncio.current_task()
            if got:  # a signal before the task existed
                main.close()
                raise asyncio.CancelledError
            return await main

        try:
            for s in SIGNALS:
                signal.signal(s, handler)
            result = runner.run(guarded())
        except BaseException:
            if not got:  # not a signal's cancellation (what it ended with, e.g. a dead kernel, is its effect)
                raise
        finally:
            for s, h in saved.items():
                signal.signal(s, h)
    if not got:
        return result
    cur = Interrupts.current
    if cur is not None:
        cur.received.extend(got)
        if not cur.armed:
            return None
        cur.raised = True
    raise Interrupted(got[0])


class Interrupted(BaseException):
    """The build got SIGINT, SIGTERM or SIGHUP; ``str()`` is the signal name."""


class Interrupts:
    """Context manager: turn the build's first interrupt signal into :class:`Interrupted`.

    Once :meth:`disarm` is called (the book is published, or the build is cleaning up), signals
    are only recorded in :attr:`received`: nothing is left that an interrupt should cut."""

    current: "Interrupts | None" = None
    _deferring = 0

    def __init__(self) -> None:
        self.received: list[str] = []
        self.armed = True
        self.raised = False
        self._old: dict = {}

    def _handler(self, signum, frame):
        self.received.append(signal.Signals(signum).name)
        if self.armed and not self.raised and not Interrupts._deferring:
            self.raised = True
            raise Interrupted(self.received[0])

    def disarm(self) -> None:
        self.armed = False

    def __enter__(self) -> "Interrupts":
        self._old = {s: signal.signal(s, self._handler) for s in SIGNALS}
        Interrupts.current = self
        return self

    def __exit__(self, *exc) -> None:
        Interrupts.current = None
        for s, h in self._old.items():
            signal.signal(s, h)

    @staticmethod
    @contextlib.contextmanager
    def deferred(disarm_after: bool = False):
        """Hold SIGINT/SIGTERM/SIGHUP until the block is done: the handler only records them
        (whichever thread the kernel delivers them to) and the main thread's mask blocks them;
        the first is raised after the block, unless ``disarm_after`` (the block finished the
        build's work) leaves it recorded only."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        Interrupts._deferring += 1
        ok = False
        try:
            yield
            ok = True
        finally:
            cur = Interrupts.current
            if disarm_after and cur is not None:
                cur.disarm()
            Interrupts._deferring -= 1
            signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a blocked signal is handled here
            if ok and cur is not None and cur.armed and cur.received and not cur.raised \
                    and not Interrupts._deferring:
                cur.raised = True
                raise Interrupted(cur.received[0])


def temp_name(prefix: str) -> str:
    """Prefix for ``tempfile.mkdtemp`` naming this process: ``<prefix>p<pid>-``."""
    return f"{prefix}p{os.getpid()}-"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(folder: Path, patterns: tuple[str, ...], owned: tuple[str, ...] = ()) -> list[Path]:
    """Remove entries of ``folder`` matching ``patterns`` whose build process is gone, and those
    matching ``owned`` (the caller holds the lock they belong to) unless they are its own.
    Entries without a pid in their name (older builds) count as gone. Returns what was removed."""
    removed = []
    if not folder.is_dir():
        return removed
    me = f"p{os.getpid()}-"
    for pattern in patterns + owned:
        for path in folder.glob(pattern):
            m = _PID.search(path.name)
            mine = me in path.name
            if pattern in owned:
                stale = not mine
            else:
                stale = m is None or not _alive(int(m.group(1)))
            if stale:
                _remove(path)
                removed.append(path)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


__all__ = ["Interrupted", "Interrupts", "die_with_parent", "remove_stale", "run_async", "temp_name"]
