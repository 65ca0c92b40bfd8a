"""Reading input files safely: regular files only, of bounded size, refused at once otherwise.

Used for every file a user names (scenario YAML, runs tables): a FIFO would block forever,
``/dev/zero`` never ends, a 9 GB file would fill memory; each is refused before reading with
a one-line :class:`InputFileError` that states the limit.
"""
from __future__ import annotations

import os
import stat
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
