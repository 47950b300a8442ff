"""Many file writes and deletes that land all or not at all, recoverable after a crash.

Migrate and compact rewrite progress.txt and several references at once; a crash between two
renames must never leave the memory half old, half new. The journal (a folder beside the
memory) lists the operations and keeps backups, so `recover()` completes or undoes them.

The journal also records each target's digest before and after, so recovery never overwrites
a file somebody changed after the journal was written (a run, an editor): completing refuses
and names the file; undoing keeps the changed file and every other version beside it.

Its paths are relative to the project root (absolute only for a file outside the project, the
target of a symlinked memory file), so a project moved or copied with its pending journal is
recovered where it is now, never in the folder it was prepared in. A journal of an older
version holds absolute paths: they are used when they are this project's, and recovery
refuses, naming the journal, when they point elsewhere.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import fsutil, stopsignals
from orchestrator.errors import FileError, InputError, Interrupted

JOURNAL_DIR = ".ralph-journal"
KEPT_PREFIX = ".ralph-journal-kept-"
# Test seam: called with the number of renames done so far. The env variable is how tests
# kill a real subprocess between two renames (the crash the journal must survive).
after_rename: Callable[[int], None] | None = None
_KILL_ENV = "RALPH_TEST_KILL_AFTER_RENAMES"
# Test seam: seconds to sleep after each prepared file (a real signal can then land while
# the journal says "preparing").
_SLOW_ENV = "RALPH_TEST_SLOW_PREPARE"
_HOW = (
    "run `ralph compact --recover` to complete it, or `ralph compact --rollback` to undo it "
    "(neither overwrites a file changed since)"
)


class JournalPending(InputError):
    """An interrupted apply's journal is in the way of a command that reads or writes memory."""


class JournalConflict(InputError):
    """Completing an interrupted apply would overwrite a file changed after it was prepared."""


class JournalElsewhere(InputError):
    """An older version's journal (absolute paths) names the files of another folder: the
    project was moved or copied with it pending."""


# The keys of a journal operation that hold paths.
_PATH_KEYS = ("target", "tmp", "backup", "new_dir")
# The version of journal.json whose paths are relative to the project root.
_VERSION = 2


def pending(journal_root: Path) -> Path | None:
    """The journal folder of an interrupted apply, if any."""
    jdir = Path(journal_root) / JOURNAL_DIR
    return jdir if jdir.exists() else None


def pending_note(journal_root: Path) -> str | None:
    """One line for `ralph status` and the refusals: the interrupted apply and what to do."""
    jdir = pending(journal_root)
    if jdir is None:
        return None
    return f"{jdir}: an earlier memory apply was interrupted (files may be half-updated); {_HOW}"


def refuse_if_pending(journal_root: Path, action: str) -> None:
    """Raise JournalPending (exit 2) while an interrupted apply's journal is pending: a command
    that wrote memory now would build on half-updated files and make recovery unsafe."""
    note = pending_note(journal_root)
    if note is not None:
        raise JournalPending(f"{action}: refused, nothing was changed. {note}")


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return fsutil.read_bytes(path)
    except FileNotFoundError:
        return None


class Transaction:
    """Many file writes/deletes that land all or not at all (recoverable after a crash).

    prepare: every new content goes to a temp file beside its target, every existing target
    is copied to the journal's backup folder, and journal.json lists the operations with the
    targets' digests; then the renames run. If the process dies between renames, `recover()`
    completes the renames from the journal (or restores the backups). An error or a stop
    signal while preparing, or an error during the renames, rolls back at once.
    """

    def __init__(self, journal_root: Path, root: Path | None = None) -> None:
        """`root`: the project root the journal's paths are relative to (default: the
        journal root itself)."""
        self.dir = Path(journal_root).absolute() / JOURNAL_DIR
        self.root = Path(root or journal_root).absolute()
        self.ops: list[tuple[Path, bytes | None]] = []

    def write(self, path: Path, text: str) -> None:
        # Through a symlink to its file: the link stays a link (fsutil.write_target).
        target = fsutil.write_target(Path(path).absolute())
        self.ops.append((target, text.encode("utf-8", errors="surrogateescape")))

    def delete(self, path: Path) -> None:
        self.ops.append((Path(path).absolute(), None))

    def commit(self) -> None:
        if self.dir.exists():
            raise JournalPending(f"{self.dir}: an earlier apply was interrupted; {_HOW}")
        recs = self._records()
        try:
            with stopsignals.interrupt_on_stop_signals():
                self._prepare(recs)
        except BaseException as exc:
            with stopsignals.deferred():
                _discard(self.dir, recs)
            raise _explain(exc) from None
        with stopsignals.deferred():  # the renames are quick: never cut them in half
            done = 0
            try:
                for rec in recs:
                    _perform(rec)
                    done += 1
                    _fault_point(done)
            except BaseException:
                _undo(self.dir, recs)
                raise
        shutil.rmtree(self.dir, ignore_errors=True)

    def _records(self) -> list[dict[str, Any]]:
        txid = uuid.uuid4().hex[:8]
        recs: list[dict[str, Any]] = []
        for n, (target, data) in enumerate(self.ops):
            old = _read(target)
            recs.append(
                {
                    "target": str(target),
                    "delete": data is None,
                    "tmp": None
                    if data is None
                    else str(target.parent / f".{target.name}.{txid}-{n}.ralph-new"),
                    "backup": None
                    if old is None
                    else str(self.dir / "backup" / f"{n}-{target.name}"),
                    "before": _digest(old),
                    "after": _digest(data),
                    "link": os.readlink(target) if data is None and target.is_symlink() else None,
                    "new_dir": _first_missing(target.parent),
                    "_old": old,
                    "_new": data,
                }
            )
        return recs

    def _prepare(self, recs: list[dict[str, Any]]) -> None:
        fsutil.make_owned_dir(self.dir)  # an interrupted apply's journal stays out of git
        (self.dir / "backup").mkdir(parents=True, exist_ok=True)
        _save_journal(self.dir, "preparing", recs, self.root)
        slow = float(os.environ.get(_SLOW_ENV) or 0)
        for rec in recs:
            if rec["backup"]:
                fsutil.atomic_write_bytes(Path(rec["backup"]), rec["_old"])
            if rec["tmp"]:
                _write_new(Path(rec["tmp"]), Path(rec["target"]), rec["_new"])
            if slow:
                time.sleep(slow)
        _save_journal(self.dir, "prepared", recs, self.root)


def _first_missing(folder: Path) -> str | None:
    """The outermost folder of `folder`'s path that does not exist yet (the apply creates it)."""
    missing = None
    for parent in [folder, *folder.parents]:
        if parent.exists():
            break
        missing = parent
    return None if missing is None else str(missing)


def _remove_new_dirs(rec: dict[str, Any]) -> None:
    """Remove the folders the apply created for this target, if they are empty again."""
    top = rec.get("new_dir")
    if not top:
        return
    folder = Path(rec["target"]).parent
    while True:
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (or gone): leave it
        if str(folder) == top or folder == folder.parent:
            return
        folder = folder.parent


def _write_new(tmp: Path, target: Path, data: bytes) -> None:
    """Write the temp file itself (no second temp beside it: its name is in the journal,
    so an interrupted write is found and removed; the usual mode, 0666 minus umask)."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if target.exists():
        # The new version keeps the user's file mode (an executable stays executable).
        shutil.copymode(target, tmp)


def _explain(exc: BaseException) -> BaseException:
    """The error to show for a failed or interrupted preparation (already rolled back)."""
    undone = "Nothing was changed: the apply was rolled back."
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted(f"interrupted while preparing the apply. {undone}")
    if isinstance(exc, OSError):
        path = Path(exc.filename) if exc.filename else None
        code = exc.errno or 0
        if path is not None and path.name.endswith(".ralph-new"):
            # The temp file never existed for the user: name its folder, where the fix is.
            err = fsutil.file_error(path.parent, OSError(code, os.strerror(code)), "write in")
            text = str(err).rstrip(".")
            return FileError(f"{text}. {undone}", path=str(path.parent), errno=code)
        text = str(fsutil.file_error(path, exc, "write")) if path else str(exc)
        return FileError(f"{text.rstrip('.')}. {undone}", path=str(path or ""), errno=code)
    return exc


def _save_journal(jdir: Path, state: str, recs: list[dict[str, Any]], root: Path) -> None:
    ops = [
        {k: _stored(v, root) if k in _PATH_KEYS else v for k, v in rec.items() if k[0] != "_"}
        for rec in recs
    ]
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    body = {
        "version": _VERSION,
        "state": state,
        "prepared_at": when,
        # Where the project root is seen from the journal's folder: recovery finds the
        # root again wherever the project has been moved or copied since.
        "root": os.path.relpath(root, jdir.parent),
        "ops": ops,
    }
    fsutil.atomic_write_text(jdir / "journal.json", json.dumps(body, indent=1))


def _stored(path: str | None, root: Path) -> str | None:
    """A path as journal.json keeps it: relative (posix) inside the project root, absolute
    outside it (a symlinked memory file's target)."""
    if path is None or not Path(path).is_relative_to(root):
        return path
    return Path(path).relative_to(root).as_posix()


def _loaded(jdir: Path, journal: dict[str, Any], root: Path | None) -> list[dict[str, Any]]:
    """journal.json's operations with absolute paths in the project as it is now."""
    ops: list[dict[str, Any]] = journal["ops"]
    for rec in ops:
        rec.setdefault("link", None)
    if journal.get("version", 1) >= _VERSION:
        base = Path(os.path.normpath(jdir.parent / journal["root"]))
        for rec in ops:
            for key in _PATH_KEYS:
                if rec.get(key) is not None:
                    rec[key] = str(base / rec[key])  # an absolute one stays as it is
        return ops
    _refuse_if_elsewhere(jdir, ops, Path(root or jdir.parent))
    return ops


def _refuse_if_elsewhere(jdir: Path, ops: list[dict[str, Any]], root: Path) -> None:
    """An older journal's absolute paths are this project's when its backups are in this
    journal folder and every target without a backup is inside the project root."""
    here = os.path.realpath(jdir)
    top = os.path.realpath(root)
    foreign = [
        rec["target"]
        for rec in ops
        if (
            os.path.realpath(Path(rec["backup"]).parent.parent) != here
            if rec.get("backup")
            else not Path(os.path.realpath(rec["target"])).is_relative_to(top)
        )
    ]
    if foreign:
        where = os.path.commonpath(foreign)
        raise JournalElsewhere(
            f"{jdir / 'journal.json'}: this interrupted apply was prepared by an older "
            f"ralph-index for the files under {where}, not this project ({top}): the project "
            "was moved or copied with it pending. Nothing was changed. Fix: run `ralph compact "
            "--recover` (or --rollback) in the folder it was prepared in (move the project "
            "back there if it was moved); in a copy whose original is recovered, check the "
            f"memory files and remove {jdir}"
        )


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


def _discard(jdir: Path, ops: list[dict[str, Any]]) -> None:
    """Undo an apply that never reached its renames: remove the temp files and the journal.
    Targets are never touched (a half-copied backup must never be "restored")."""
    _remove_stray_temps(ops)
    for rec in ops:
        if rec["tmp"]:
            Path(rec["tmp"]).unlink(missing_ok=True)
        _remove_new_dirs(rec)
    shutil.rmtree(jdir, ignore_errors=True)


# mkstemp's part of a temp file's name: "." + 8 random characters + ".tmp".
_MKSTEMP_TAIL = len(".12345678.tmp")


def _remove_stray_temps(ops: list[dict[str, Any]]) -> None:
    """Remove the hidden temp files (`.<tmp name>.<random>.tmp`) that older versions wrote
    each `.ralph-new` file through (fsutil.atomic_write_bytes): a kill while writing one
    left it behind, unnamed by the journal but named after an entry of it."""
    wanted: dict[Path, set[str]] = {}
    for rec in ops:
        if rec["tmp"]:
            tmp = Path(rec["tmp"])
            wanted.setdefault(tmp.parent, set()).add(tmp.name)
    for folder, names in wanted.items():
        try:
            present = os.listdir(folder)  # one listing per folder, not one per entry
        except OSError:
            continue
        for name in present:
            if name.startswith(".") and name.endswith(".tmp") and name[1:-_MKSTEMP_TAIL] in names:
                (folder / name).unlink(missing_ok=True)


def _before(rec: dict[str, Any]) -> str | None:
    """The target's digest when the journal was prepared (older journals: its backup's)."""
    if "before" in rec:
        return rec["before"]  # type: ignore[no-any-return]
    return _digest(_read(Path(rec["backup"]))) if rec["backup"] else None


def _after(rec: dict[str, Any]) -> str | None:
    if "after" in rec:
        return rec["after"]  # type: ignore[no-any-return]
    tmp = Path(rec["tmp"]) if rec["tmp"] else None
    return _digest(_read(tmp)) if tmp and tmp.exists() else None


def _changed(rec: dict[str, Any]) -> bool:
    """True when the target is neither as it was before the apply nor as the apply left it:
    somebody changed it after the journal was prepared."""
    now = _digest(_read(Path(rec["target"])))
    return now not in (_before(rec), _after(rec))


def _to_do(rec: dict[str, Any]) -> bool:
    """Whether completing the apply would still write or delete this target."""
    if rec["delete"]:
        return os.path.lexists(rec["target"])
    return bool(rec["tmp"]) and Path(rec["tmp"]).exists()


def _complete(jdir: Path, ops: list[dict[str, Any]], when: str) -> str:
    changed = [rec for rec in ops if _to_do(rec) and _changed(rec)]
    if changed:
        names = ", ".join(rec["target"] for rec in changed)
        backups = "; ".join(f"{r['target']}: {r['backup']}" for r in changed if r["backup"])
        raise JournalConflict(
            f"refused to complete the interrupted apply (journal {jdir}, prepared {when}): "
            f"{names} changed after it was prepared, and completing it would overwrite that "
            "change. Nothing was changed. Run `ralph compact --rollback` to undo the apply and "
            "keep the current files (every old and prepared version is then kept in a "
            f"{KEPT_PREFIX}* folder beside the journal)"
            + (f", or put the old file back ({backups}) and run --recover again" if backups else "")
        )
    for rec in ops:
        _perform(rec)
    shutil.rmtree(jdir, ignore_errors=True)
    return f"completed an interrupted apply ({len(ops)} file operations)"


def _restore(rec: dict[str, Any]) -> None:
    """Put back the target as it was before the apply (it is exactly as the apply left it)."""
    target = Path(rec["target"])
    if rec["link"] is not None:
        target.unlink(missing_ok=True)
        os.symlink(rec["link"], target)
    elif rec["backup"]:
        fsutil.atomic_write_bytes(target, fsutil.read_bytes(Path(rec["backup"])))
    else:
        target.unlink(missing_ok=True)  # the apply created it


def _undo(jdir: Path, ops: list[dict[str, Any]]) -> str:
    """Roll back renames that happened; a target changed since the journal stays as it is,
    and then every prepared version is kept beside the backups for the user."""
    changed = [rec for rec in ops if _changed(rec)]
    changed_ids = {id(rec) for rec in changed}
    keep = jdir / "new"
    if changed:
        keep.mkdir(parents=True, exist_ok=True)
    for n, rec in reversed(list(enumerate(ops))):
        if id(rec) in changed_ids:
            pass  # keep the user's current file; its old version is in backup/
        elif _after(rec) != _before(rec) and _digest(_read(Path(rec["target"]))) == _after(rec):
            if changed and not rec["delete"]:
                shutil.copy2(rec["target"], keep / f"{n}-{Path(rec['target']).name}")
            _restore(rec)
        tmp = Path(rec["tmp"]) if rec["tmp"] else None
        if tmp is not None and tmp.exists():
            if changed:
                os.replace(tmp, keep / f"{n}-{Path(rec['target']).name}")
            else:
                tmp.unlink()
        _remove_new_dirs(rec)
    _remove_stray_temps(ops)
    done = f"rolled back an interrupted apply ({len(ops)} file operations)"
    if not changed:
        shutil.rmtree(jdir, ignore_errors=True)
        return done
    kept = jdir.with_name(KEPT_PREFIX + uuid.uuid4().hex[:8])
    os.replace(jdir, kept)
    names = ", ".join(rec["target"] for rec in changed)
    return (
        f"{done}; kept as they are now, because they changed after the apply was prepared: "
        f"{names}. The old versions are in {kept}/backup, the prepared ones in {kept}/new"
    )


def recover(journal_root: Path, *, rollback: bool = False, root: Path | None = None) -> str | None:
    """Finish (default) or undo an interrupted apply. Returns what was done, or None.
    Raises JournalConflict (nothing changed) when finishing would overwrite a file changed
    after the journal was prepared, JournalElsewhere when an older version's journal names
    another folder's files. `root`: the project root (default: the journal root)."""
    jdir = pending(journal_root)
    if jdir is None:
        return None
    try:
        journal = json.loads((jdir / "journal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        # journal.json is written (atomically) before any temp file: nothing was written.
        shutil.rmtree(jdir, ignore_errors=True)
        return "discarded an apply that had not started writing"
    ops = _loaded(jdir, journal, root)
    with stopsignals.deferred():
        if journal["state"] != "prepared":
            _discard(jdir, ops)
            return "rolled back an apply interrupted while preparing (no memory file had changed)"
        if rollback:
            return _undo(jdir, ops)
        return _complete(jdir, ops, journal.get("prepared_at", "earlier"))
