"""Many file writes and deletes that land all or not at all, recoverable after a crash.

Migrate and compact rewrite progress.txt and several references at once; a crash between two
renames must never leave the memory half old, half new. The journal (a folder beside the
memory) lists the operations and keeps backups, so `recover()` completes or undoes them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import fsutil
from orchestrator.errors import InputError

JOURNAL_DIR = ".ralph-journal"
# Test seam: called with the number of renames done so far. The env variable is how tests
# kill a real subprocess between two renames (the crash the journal must survive).
after_rename: Callable[[int], None] | None = None
_KILL_ENV = "RALPH_TEST_KILL_AFTER_RENAMES"


class Transaction:
    """Many file writes/deletes that land all or not at all (recoverable after a crash).

    prepare: every new content goes to a temp file beside its target, every existing target
    is copied to the journal's backup folder, and journal.json lists the operations; then the
    renames run. If the process dies between renames, `recover()` completes the renames from
    the journal (or restores the backups); an exception inside `commit` rolls back at once.
    """

    def __init__(self, journal_root: Path) -> None:
        self.dir = Path(journal_root) / JOURNAL_DIR
        self.ops: list[dict[str, Any]] = []

    def write(self, path: Path, text: str) -> None:
        self.ops.append({"target": str(Path(path).absolute()), "text": text})

    def delete(self, path: Path) -> None:
        self.ops.append({"target": str(Path(path).absolute()), "text": None})

    def commit(self) -> None:
        if self.dir.exists():
            raise InputError(
                f"{self.dir}: an earlier apply was interrupted; run `ralph compact --recover` "
                "to complete it (or `--rollback` to undo it) first"
            )
        ops = self._prepare()
        done = 0
        try:
            for op in ops:
                _perform(op)
                done += 1
                _fault_point(done)
        except BaseException:
            _rollback(self.dir, ops)
            raise
        shutil.rmtree(self.dir, ignore_errors=True)

    def _prepare(self) -> list[dict[str, Any]]:
        txid = uuid.uuid4().hex[:8]
        fsutil.make_owned_dir(self.dir)  # an interrupted apply's journal stays out of git
        (self.dir / "backup").mkdir(parents=True)
        ops: list[dict[str, Any]] = []
        for n, op in enumerate(self.ops):
            target = Path(op["target"])
            rec = {"target": str(target), "delete": op["text"] is None, "tmp": None, "backup": None}
            if op["text"] is not None:
                rec["tmp"] = str(target.parent / f".{target.name}.{txid}-{n}.ralph-new")
            if target.exists():
                rec["backup"] = str(self.dir / "backup" / f"{n}-{target.name}")
            ops.append(rec)
        _save_journal(self.dir, "preparing", ops)
        for op, rec in zip(self.ops, ops, strict=True):
            if rec["backup"]:
                shutil.copy2(rec["target"], rec["backup"])
            if rec["tmp"]:
                Path(rec["tmp"]).parent.mkdir(parents=True, exist_ok=True)
                fsutil.atomic_write_text(Path(rec["tmp"]), op["text"])
        _save_journal(self.dir, "prepared", ops)
        return ops


def _save_journal(jdir: Path, state: str, ops: list[dict[str, Any]]) -> None:
    fsutil.atomic_write_text(jdir / "journal.json", json.dumps({"state": state, "ops": ops}))


def _perform(rec: dict[str, Any]) -> None:
    target = Path(rec["target"])
    if rec["delete"]:
        target.unlink(missing_ok=True)
    elif rec["tmp"] and Path(rec["tmp"]).exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(rec["tmp"], target)


def _fault_point(done: int) -> None:
    if after_rename is not None:
        after_rename(done)
    if os.environ.get(_KILL_ENV) == str(done):
        os.kill(os.getpid(), signal.SIGKILL)


def _rollback(jdir: Path, ops: list[dict[str, Any]]) -> None:
    for rec in reversed(ops):
        target = Path(rec["target"])
        if rec["backup"] and Path(rec["backup"]).exists():
            fsutil.atomic_write_bytes(target, Path(rec["backup"]).read_bytes())
        elif not rec["backup"]:
            target.unlink(missing_ok=True)
        if rec["tmp"]:
            Path(rec["tmp"]).unlink(missing_ok=True)
    shutil.rmtree(jdir, ignore_errors=True)


def pending(journal_root: Path) -> Path | None:
    """The journal folder of an interrupted apply, if any."""
    jdir = Path(journal_root) / JOURNAL_DIR
    return jdir if jdir.exists() else None


def recover(journal_root: Path, *, rollback: bool = False) -> str | None:
    """Finish (default) or undo an interrupted apply. Returns what was done, or None."""
    jdir = pending(journal_root)
    if jdir is None:
        return None
    try:
        journal = json.loads((jdir / "journal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        shutil.rmtree(jdir, ignore_errors=True)  # died before anything was listed or renamed
        return "discarded an apply that had not started writing"
    ops = journal["ops"]
    if journal["state"] != "prepared" or rollback:
        _rollback(jdir, ops)
        return f"rolled back an interrupted apply ({len(ops)} file operations)"
    for rec in ops:
        _perform(rec)
    shutil.rmtree(jdir, ignore_errors=True)
    return f"completed an interrupted apply ({len(ops)} file operations)"
