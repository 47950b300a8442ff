"""Atomic writes: all or nothing, and the file's mode is the one the user expects."""

from __future__ import annotations

import importlib.resources
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import errors, fsutil
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


def test_read_refuses_a_fifo_at_once_and_names_it(tmp_path: Path) -> None:
    from orchestrator.errors import FileError, InputError

    fifo = tmp_path / "prd.json"
    os.mkfifo(fifo)
    with pytest.raises(FileError, match=r"prd\.json: is a FIFO") as info:
        read_text(fifo)  # would block forever with a plain open()
    assert isinstance(info.value, InputError) and isinstance(info.value, OSError)


def test_a_file_is_read_in_one_call_and_a_sizeless_one_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 references are read per iteration: one read each, none only to meet the end.
    A file whose stat says 0 bytes (procfs) is still read until the end."""
    calls: list[int] = []
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        calls.append(n)
        return real(fd, n)

    (tmp_path / "r.md").write_bytes(b"x" * 70_000)
    monkeypatch.setattr(os, "read", counting)
    data, st = fsutil.read_bytes_stat(tmp_path / "r.md")
    assert data == b"x" * 70_000 and st.st_size == 70_000 and len(calls) == 1
    (tmp_path / "empty.md").write_bytes(b"")
    assert fsutil.read_bytes(tmp_path / "empty.md") == b""
    if Path("/proc/self/status").is_file():
        assert b"Pid:" in fsutil.read_bytes("/proc/self/status")


def test_present_tells_absent_from_broken(tmp_path: Path) -> None:
    from orchestrator.errors import FileError
    from orchestrator.fsutil import present

    assert present(tmp_path / "nothing.txt") is False
    (tmp_path / "f.txt").write_text("x")
    assert present(tmp_path / "f.txt") is True
    (tmp_path / "d").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for name, what in [("d", "a folder"), ("loop", "ELOOP"), ("dangling", "pointing nowhere")]:
        with pytest.raises(FileError, match=what):
            present(tmp_path / name)


def test_a_failed_write_names_the_file_and_the_fix(tmp_path: Path) -> None:
    from orchestrator.errors import FileError

    (tmp_path / "ralph").write_text("a file where the logs folder should be\n")
    target = tmp_path / "ralph" / "logs" / "ledger.jsonl"
    with pytest.raises(FileError, match=r"ledger\.jsonl: cannot write it: .*Fix: ") as info:
        atomic_write_text(target, "x\n")
    assert info.value.filename == str(target)


def test_shipped_data_falls_back_to_the_source_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a clone's root `orchestrator/` shadows the installed package, which is the only
    place `orchestrator.bundled_examples` exists: the repository's folder serves instead."""

    def missing(package: str) -> None:
        raise ModuleNotFoundError(package)

    monkeypatch.setattr(importlib.resources, "files", missing)
    root = Path(fsutil.__file__).resolve().parent.parent  # the checkout (or site-packages)
    examples = fsutil.shipped("orchestrator.bundled_examples", "examples")
    assert Path(str(examples)) == root / "examples"
    assert Path(str(fsutil.shipped_templates())) == root / "templates"
    if (root / "examples").is_dir():  # run from a checkout: the folder really serves
        assert (root / "examples" / "recipe-box" / "ralph.yaml").is_file()


def test_examples_module_runs_from_the_clone_root(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.sim.examples", "recipe-box", str(tmp_path / "rb")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "rb" / "ralph.yaml").is_file()


def test_a_write_goes_through_a_symlink_which_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "shared" / "progress.txt"
    real.parent.mkdir()
    real.write_text("old\n")
    hop = tmp_path / "hop.txt"
    hop.symlink_to(real)
    link = tmp_path / "ralph" / "progress.txt"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(hop, link.parent))  # a relative link to a link
    atomic_write_text(link, "new\n", backup=True)
    assert link.is_symlink() and hop.is_symlink() and real.read_text() == "new\n"
    assert (tmp_path / "ralph" / "progress.txt.bak").read_text() == "old\n"
    assert sorted(p.name for p in real.parent.iterdir()) == ["progress.txt"]  # no temp left
    dangling = tmp_path / "ralph" / "prd.json"
    dangling.symlink_to(tmp_path / "shared" / "prd.json")
    atomic_write_text(dangling, "{}\n")  # creates the file the link names
    assert dangling.is_symlink() and (tmp_path / "shared" / "prd.json").read_text() == "{}\n"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(errors.FileError, match="symlink loop"):
        atomic_write_text(loop, "x")
