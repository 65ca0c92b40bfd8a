"""scaletax.files.replace_atomically: a reader sees the old file or the new, never a part."""
from __future__ import annotations

import os

import pytest

from scaletax import files


def test_replace_writes_text_and_bytes(tmp_path):
    path = tmp_path / "out.json"
    files.replace_atomically(path, '{"a": "é"}')
    assert path.read_bytes() == '{"a": "é"}'.encode("utf-8")
    files.replace_atomically(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "seconds.json"
    path.write_text("old", encoding="utf-8")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        files.replace_atomically(path, "new", prefix=".tmp-p1-", suffix=".js")
    assert path.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seconds.json"]


def test_temporary_is_named_by_prefix_and_suffix_in_the_same_folder(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    files.replace_atomically(tmp_path / "x.csv", "a,b\n", prefix=".x.csv.", suffix=".tmp")
    (folder, name, dst), = seen
    assert folder == str(tmp_path) and name.startswith(".x.csv.") and name.endswith(".tmp")
    assert str(dst) == str(tmp_path / "x.csv")


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_mode_the_umask_gives_any_file(tmp_path, mask, mode):
    """Like ``open(path, "w")``: 0666 less the umask (mkstemp alone made every output 0600)."""
    old = os.umask(mask)
    try:
        assert files.umask() == mask
        files.replace_atomically(tmp_path / "out.csv", "a,b\n")
        with open(tmp_path / "plain.csv", "w") as fh:
            fh.write("a,b\n")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "out.csv").st_mode & 0o777 == mode == os.stat(tmp_path / "plain.csv").st_mode & 0o777
