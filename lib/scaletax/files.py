"""Reading and writing files safely.

Reading (:func:`read_bounded`): regular files only, of bounded size, refused at once otherwise.
Used for every file a user names (scenario YAML, runs tables): a FIFO would block forever,
``/dev/zero`` never ends, a 9 GB file would fill memory; each is refused before reading with
a one-line :class:`InputFileError` that states the limit.

Writing (:func:`replace_atomically`): a file other processes may read while it is written
(cache records, the vega bundle, ``predict``'s output) goes through a temporary file beside it
that is renamed over it, so a reader sees the old file or the new one, never a part.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


class InputFileError(ValueError):
    """An input file that cannot be read; the message is one line naming the file."""


def read_bounded(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path`` of at most ``limit`` bytes (``what`` names it in
    errors: "scenario file", "runs table"). Opened non-blocking, so a FIFO is refused at once."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputFileError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise InputFileError(f"{what} path is a folder, not a file: {path}") from None
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputFileError(f"{what} path is a folder, not a file: {path}")
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{what} {path} is not a regular file (a device, FIFO or socket)")
        if st.st_size > limit:
            raise InputFileError(f"{what} {path} is {st.st_size} bytes; the limit is {limit} bytes")
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise InputFileError(f"{what} {path} grew past the limit of {limit} bytes while being read")
    return data


def umask() -> int:
    """The process's file-mode creation mask (read from ``/proc/self/status`` where Linux has it,
    else set and restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def replace_atomically(path: Path | str, data: bytes | str, *, prefix: str = ".tmp-", suffix: str = ".tmp") -> None:
    """Write ``data`` (text as UTF-8) to ``path``: into a new temporary file in the same folder
    (``<prefix>...<suffix>``; callers put their pid in ``prefix`` where stale temporaries are
    cleaned by it), then ``os.replace`` over ``path``. The file gets the mode any new file gets
    (``0666`` less the umask: ``0644`` under ``022``; ``mkstemp`` alone makes it ``0600``). On any
    failure, the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o666 & ~umask())
            out.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
