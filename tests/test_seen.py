"""memory.seen: a file read a moment ago is reused only while its stat says it is unchanged."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from run_helpers import opened_files

from orchestrator import fsutil
from orchestrator.errors import FileError
from orchestrator.memory import seen as seen_mod
from orchestrator.memory.seen import Seen


def test_unchanged_files_are_reused_changed_and_replaced_ones_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seen_mod, "RACY_NS", 0)  # the files below are milliseconds old
    files = {n: tmp_path / f"{n}.md" for n in "abcd"}
    for n, p in files.items():
        p.write_bytes(f"{n} old \xff\n".encode("latin-1"))  # not UTF-8: bytes kept exactly
    time.sleep(0.05)  # coarser than any timestamp tick of the test's file system
    first = Seen()
    for p in files.values():
        first.read_bytes(p, into=first)
    assert len(first) == 4
    time.sleep(0.05)
    files["b"].write_bytes(b"b new \xfe\n")  # same size, in place
    old = files["c"].stat()
    files["c"].write_bytes(b"c NEW \xfe\n")
    os.utime(files["c"], ns=(old.st_atime_ns, old.st_mtime_ns))  # mtime put back: ctime moves
    fsutil.atomic_write_bytes(files["d"], b"d new \xfe\n")  # a new inode
    opened = opened_files(monkeypatch)
    second = Seen()
    got = {n: first.read_bytes(p, into=second) for n, p in files.items()}
    assert got == {
        "a": b"a old \xff\n",
        "b": b"b new \xfe\n",
        "c": b"c NEW \xfe\n",
        "d": b"d new \xfe\n",
    }
    assert sorted(opened) == ["b.md", "c.md", "d.md"]


def test_a_file_changed_just_before_the_read_is_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Racily clean, as git says: a write in the same timestamp tick as the read keeps the
    stat, so a file this fresh is read again every time."""
    p = tmp_path / "fresh.md"
    p.write_text("one\n")
    first = Seen()
    assert first.read_bytes(p, into=first) == b"one\n"
    assert len(first) == 0
    opened = opened_files(monkeypatch)
    p.write_text("two\n")
    assert first.read_bytes(p) == b"two\n" and opened == ["fresh.md"]


def test_whole_second_timestamps_get_the_wide_window() -> None:
    """A file system that stores seconds only (ext3, HFS+, FAT) cannot tell two writes in
    the same second apart: such a file is trusted only once it is older than 2 s."""
    now = time.time_ns()
    whole = (now // 1_000_000_000 - 1) * 1_000_000_000  # a second boundary 1-2 s ago
    fine = now - 500_000_000

    def st(ns: int) -> os.stat_result:
        return os.stat_result((0o100644, 7, 1, 1, 0, 0, 3, 0, 0, 0, 0, 0, ns, ns, ns, ns))

    assert seen_mod._racy(st(whole), now)
    assert not seen_mod._racy(st(fine), now)
    assert seen_mod._racy(st(now - 50_000_000), now)
    assert not seen_mod._racy(st(whole - 2_000_000_000), now)


def test_errors_are_fsutils(tmp_path: Path) -> None:
    """A missing file or a folder in a file's place: fsutil.read_bytes's errors."""
    with pytest.raises(FileNotFoundError):
        Seen().read_bytes(tmp_path / "gone.md")
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(FileError):
        Seen().read_bytes(tmp_path / "dir.md")
