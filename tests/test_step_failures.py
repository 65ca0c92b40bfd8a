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
