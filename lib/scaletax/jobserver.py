"""Job slots shared by every process of a build: a GNU make style jobserver on a named pipe.

The build runner (``report/execute.py``) makes a FIFO holding one byte per slot (``--jobs``)
and names it in ``SCALETAX_JOBSERVER``. It takes a slot before it starts a chapter and puts it
back when the chapter's process ends. A chapter that splits its work over processes (the
precision experiment's trainings) lends its own slot back while it waits on them (:func:`lend`)
and every worker holds a slot for each piece of work (:func:`slot`), so the chapters and the
workers together never run more CPU-bound processes than there are slots, and a freed slot
goes to the next piece of work. The runner's chapters come first: while one is ready to start
and no slot is free the runner marks the pipe wanted (``<pipe>.want``, :meth:`Server.want`), and
a worker does not take a new slot while the mark is there, so the short pieces of work (trainings
of a second or two) fill the cores around the chapters and the build does not end on one long
chapter started last. Without ``SCALETAX_JOBSERVER`` (a notebook run by hand, the tests) both
are no-ops.
"""
from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from scaletax import speedups

ENV = "SCALETAX_JOBSERVER"
#: Environment variable with the build's ``--jobs``: the most slots one chapter's work may use.
WORKERS_ENV = "SCALETAX_WORKERS"
_TOKEN = b"+"


class Server:
    """The runner's end: a FIFO at ``path`` holding ``slots`` tokens; ``take`` never blocks."""

    def __init__(self, path: Path, slots: int):
        if slots < 1:
            raise ValueError(f"a jobserver needs at least one slot, got {slots}")
        self.path = Path(path)
        os.mkfifo(self.path, 0o600)
        # O_RDWR: opening does not wait for a peer, and the pipe never sees end-of-file
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        os.write(self._fd, _TOKEN * slots)
        self._wanted = False

    def take(self) -> bool:
        """Take one slot if one is free (True), else False at once."""
        try:
            return len(os.read(self._fd, 1)) == 1
        except BlockingIOError:
            return False

    def give(self) -> None:
        """Put one slot back."""
        os.write(self._fd, _TOKEN)

    def want(self, wanted: bool) -> None:
        """Mark (or unmark) that the runner waits for a slot: workers let it go first."""
        if wanted != self._wanted:
            if wanted:
                _want(self.path).touch()
            else:
                _want(self.path).unlink(missing_ok=True)
            self._wanted = wanted

    def close(self) -> None:
        os.close(self._fd)
        self.path.unlink(missing_ok=True)
        _want(self.path).unlink(missing_ok=True)


def _want(path: Path) -> Path:
    return path.with_name(path.name + ".want")


#: How often a worker looks again whether the runner still waits for a slot (seconds).
_WANT_POLL_S = 0.05


def _fd() -> int | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


#: How long a waiting process sleeps on the pipe before it looks whether the build still runs.
_WAIT_S = 0.5


def _take(fd: int) -> None:
    """Take one slot, waiting for one; RuntimeError once the runner removed the pipe (the build
    ended or was interrupted), so that no worker waits forever on a pipe nobody fills."""
    path = Path(os.environ[ENV])
    while True:
        try:
            if os.read(fd, 1):
                return
        except BlockingIOError:  # none free (or another process took it first)
            pass
        if not path.exists():
            raise RuntimeError(f"the build's job slots ({path}) are gone: the build ended")
        select.select([fd], [], [], _WAIT_S)


@contextlib.contextmanager
def slot():
    """Hold one of the build's slots for the block (wait until one is free and the runner does
    not wait for one)."""
    fd = _fd()
    if fd is None:
        yield
        return
    try:
        want = _want(Path(os.environ[ENV]))
        while want.exists():
            time.sleep(_WANT_POLL_S)
        _take(fd)
        try:
            yield
        finally:
            os.write(fd, _TOKEN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def lend():
    """Give the caller's own slot back for the block (while it waits on its workers), then
    wait to take one again."""
    fd = _fd()
    if fd is None:
        yield
        return
    try:
        os.write(fd, _TOKEN)
        try:
            yield
        finally:
            _take(fd)
    finally:
        os.close(fd)


def workers() -> int:
    """Slots one chapter's split work may use at once: ``SCALETAX_WORKERS`` (the build's
    ``--jobs``), else 1 (a notebook run by hand, the tests: no split)."""
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "1")))
    except ValueError:
        return 1


def _take_unless(fd: int, done: Callable[[], bool]) -> bool:
    """Take one slot once one is free and the runner does not wait for one (True), or give up
    as soon as ``done()`` (False): a helper never waits past the end of the work."""
    want = _want(Path(os.environ[ENV]))
    while not done():
        if want.exists():  # the runner goes first (the pipe may hold its token: no select on it)
            time.sleep(_WANT_POLL_S)
            continue
        try:
            if os.read(fd, 1):
                return True
        except BlockingIOError:
            pass
        select.select([fd], [], [], _WANT_POLL_S)  # until a slot comes back, or a look at done()
    return False


T = TypeVar("T")
R = TypeVar("R")


def map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:  # noqa: A001 (the builtin's meaning)
    """``[fn(x) for x in items]``, the items shared out between the caller (in its own slot) and
    up to :func:`workers` - 1 helper threads, each working only while it holds a slot it found
    free. For numpy-heavy, independent items (numpy releases the GIL in its array loops); the
    results, and the exception raised (the first item's in order), are those of the plain loop.
    Without a build's jobserver, the plain loop."""
    items = list(items)
    if not speedups.on("jobserver") and speedups.on("threads") and min(workers(), len(items)) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(workers(), len(items))) as pool:
            return list(pool.map(fn, items))
    helpers = min(workers(), len(items)) - 1 if os.environ.get(ENV) and speedups.on("threads") else 0
    if helpers <= 0:
        return [fn(x) for x in items]
    results: list = [None] * len(items)
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    todo = iter(range(len(items)))
    left = [len(items)]  # items not yet claimed

    def claim() -> int | None:
        with lock:
            if errors:
                return None
            i = next(todo, None)
            if i is not None:
                left[0] -= 1
            return i

    def work() -> None:
        while (i := claim()) is not None:
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 (raised by the caller, in order)
                with lock:
                    errors[i] = exc

    def helper() -> None:
        try:
            fd = _fd()
        except OSError:  # the build's pipe is gone: the caller does the work
            return
        try:
            if _take_unless(fd, lambda: left[0] == 0 or bool(errors)):
                try:
                    work()
                finally:
                    os.write(fd, _TOKEN)
        finally:
            os.close(fd)

    threads = [threading.Thread(target=helper, name=f"scaletax-jobserver-map-{k}", daemon=True)
               for k in range(helpers)]
    for t in threads:
        t.start()
    try:
        work()
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[min(errors)]
    return results
