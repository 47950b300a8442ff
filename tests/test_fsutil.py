"""Atomic writes: all or nothing, and the file's mode is the one the user expects."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.fsutil import (
    atomic_write_bytes,
    atomic_write_text,
    read_text,
    relative_inside,
    safe_name,
)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_file_gets_umask_mode_and_existing_mode_is_kept(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        atomic_write_text(new, "x")
        assert _mode(new) == 0o644
        script = tmp_path / "run.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        atomic_write_text(script, "#!/bin/sh\necho hi\n")
        assert _mode(script) == 0o755
    finally:
        os.umask(old)


def test_bytes_round_trip_exactly_with_backup(tmp_path: Path) -> None:
    p = tmp_path / "progress.txt"
    p.write_bytes(b"a\r\nb\n")
    atomic_write_text(p, read_text(p) + "c\r\n", backup=True)
    assert p.read_bytes() == b"a\r\nb\nc\r\n"
    assert (tmp_path / "progress.txt.bak").read_bytes() == b"a\r\nb\n"


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "prd.json"
    p.write_text("old")

    with pytest.raises(TypeError):
        atomic_write_bytes(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["prd.json"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ralph/references", "ralph/references"),
        ("a\\b.md", "a/b.md"),
        ("./x", "x"),
        ("", None),
        ("  ", None),
        ("/etc", None),
        ("a/../../b", None),
        ("..", None),
    ],
)
def test_relative_inside_refuses_what_could_leave_the_folder(
    given: str, expected: str | None
) -> None:
    got = relative_inside(given)
    assert (got.as_posix() if got is not None else None) == expected


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("US-001", "US-001"),
        ("API/006", "API-006"),
        ("../../x", "x"),
        ("a b\tc\nd", "a-b-c-d"),
        ("Ünïcode/ßtory", "Unicode-tory"),
        (".hidden", "hidden"),
        ("-rf", "rf"),
        ("a..b", "a.b"),
        ("feat\\win", "feat-win"),
    ],
)
def test_safe_name(text: str, name: str) -> None:
    assert safe_name(text) == name


def test_safe_name_never_empty_never_long_and_a_file_name(tmp_path: Path) -> None:
    for text in ("", "...", "東京", "/", "L" * 1000, "é" * 300, "a\x00b"):
        name = safe_name(text)
        assert name and len(name) <= 80 and "/" not in name and name not in (".", "..")
        (tmp_path / name).write_text("ok")  # the filesystem takes it
    assert safe_name("東京") != safe_name("大阪")
