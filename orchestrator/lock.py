"""One loop per project: `with project_lock(project): ...`.

Two loops on one project would both pick the same story, both edit prd.json and
progress.txt, and interleave their commits. The lock is an OS file lock (flock, through the
filelock library) on `<log dir>/ralph.lock`: the kernel releases it when its holder dies,
however it dies, so a stale lock from a crashed or killed run is simply taken over. Who holds
it (pid, start time, command) is written to a side file, `ralph.lock.json`, only so the
second run can say who is in the way; the side file is never what decides.

Every command that writes memory (prd.json, progress.txt, references: `ralph compact
--apply`, `ralph migrate`, `ralph init`) takes the same lock with `memory_lock`: while a run
or another such command holds it, it refuses at once, naming the holder's pid and command and
what to do, instead of moving entries the run's checks would then "restore" and blame on the
agent, or writing over a half-written migrate. Before a project's first run there is no log
folder yet: the project's folder in the user's cache is locked then (see `_held`), so two
first migrates, or a first migrate and a first run, still exclude each other.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import fsutil, tokens
from orchestrator.errors import LockHeld
from orchestrator.memory import journal
from orchestrator.project import ensure_logs_dir
from orchestrator.redact import redact

if TYPE_CHECKING:
    import filelock

    from orchestrator.project import Project


@dataclass(frozen=True)
class Holder:
    pid: int
    started: str  # ISO 8601, UTC
    command: str
    host: str
    root: str

    def describe(self) -> str:
        when = self.started.replace("T", " ").split(".")[0].removesuffix("+00:00") + " UTC"
        return f"pid {self.pid}, started {when}, command '{self.command}'"


def holder_path(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".json")


def read_holder(lock_path: Path) -> Holder | None:
    """Who wrote the side file last (may be a dead run's: check `is_locked` for the truth)."""
    try:
        data = json.loads(fsutil.read_text(holder_path(lock_path)))
        return Holder(**{k: data[k] for k in Holder.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _lock(project: Project, lock_path: Path | None = None) -> filelock.BaseFileLock:
    # filelock is imported where a lock is taken or probed, not with this module: reading a
    # holder (`ralph status`, no live run) must not pay its ~20 ms of imports.
    import filelock

    if lock_path is not None:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    else:
        lock_path = Path(project.lock_path)
        if lock_path.parent == Path(project.logs_dir):
            ensure_logs_dir(project)  # git-ignored from the first lock on
        else:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
    # preserve_lock_file: deleting a flock file on release lets a waiting process lock the
    # old inode while a newcomer locks a new one; keeping the (empty) file avoids that race.
    return filelock.FileLock(lock_path, timeout=0, thread_local=False, preserve_lock_file=True)


def is_locked(project: Project) -> bool:
    """True while some process holds the project's lock (for `ralph status`)."""
    lock = _lock(project)
    try:
        lock.acquire(timeout=0)
    except TimeoutError:  # filelock.Timeout is one
        return True
    lock.release()
    return False


def _held_message(lock_path: Path, action: str | None = None) -> str:
    holder = read_holder(lock_path)
    who = holder.describe() if holder else "pid unknown"
    hint = f" (kill {holder.pid})" if holder and holder.host == socket.gethostname() else ""
    is_run = holder is not None and holder.command.startswith("ralph run")
    if action is None:
        kind = "ralph run" if is_run else "ralph command"
        return (
            f"another {kind} ({who}) is using this project; wait for it or stop it{hint}. "
            f"Lock: {lock_path}"
        )
    why = " (a run's checks would take these memory changes for the agent's)" if is_run else ""
    return (
        f"{action}: refused, another ralph command is changing the memory ({who}){why}. "
        f"Nothing was changed. Run it again when that command has finished, or stop it "
        f"first{hint}. Lock: {lock_path}"
    )


@contextmanager
def memory_lock(project: Project, action: str, *, recovering: bool = False) -> Iterator[Holder]:
    """For commands that write memory outside a run: hold the project's lock for the block,
    or raise LockHeld (naming `action`, the holder's pid and command, what to do) while a run
    or another memory command holds it; then refuse (JournalPending) while an interrupted
    apply's journal is pending, unless `recovering` it. Before the project's first run only
    the cache lock is taken (see `_held`): nothing is added to the project."""
    with _held(project, action, action, create_logs=False) as me:
        if not recovering:
            journal.refuse_if_pending(project.ralph_dir, action)
        yield me


@contextmanager
def project_lock(
    project: Project, command: str | None = None, *, action: str | None = None
) -> Iterator[Holder]:
    """Hold the project's lock for the block, or raise LockHeld at once if another run has it;
    then refuse (JournalPending) while an interrupted apply's journal is pending."""
    with _held(project, command, action, create_logs=True) as me:
        journal.refuse_if_pending(project.ralph_dir, command or "ralph run")
        yield me


@contextmanager
def _held(
    project: Project, command: str | None, action: str | None, *, create_logs: bool
) -> Iterator[Holder]:
    """The lock is always taken. Whoever finds no log folder (a project that never ran, where
    people migrate) first locks the project's folder in the user's cache and holds it for the
    whole block; then the log folder's lock, if the folder exists or `create_logs`. Two
    commands thus always meet on one of the two locks, whichever made the folder first."""
    with ExitStack() as stack:
        me: Holder | None = None
        logs = Path(project.lock_path).parent
        if not logs.is_dir():
            cache, _ = tokens.project_cache_dir(logs)
            try:
                me = stack.enter_context(_hold(project, command, action, cache / "ralph.lock"))
            except OSError:
                # No usable user cache (a read-only home, another user's XDG_CACHE_HOME):
                # lock in the log folder instead, made now, git-ignored.
                create_logs = True
        if create_logs or logs.is_dir():
            me = stack.enter_context(_hold(project, command, action, None))
        assert me is not None  # one of the two branches ran
        yield me


@contextmanager
def _hold(
    project: Project, command: str | None, action: str | None, lock_path: Path | None
) -> Iterator[Holder]:
    lock = _lock(project, lock_path)
    path = Path(lock.lock_file)
    try:
        lock.acquire(timeout=0)
    except TimeoutError:  # filelock.Timeout
        raise LockHeld(_held_message(path, action)) from None
    me = Holder(
        pid=os.getpid(),
        started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=redact(command or " ".join(["ralph", *sys.argv[1:]])),
        host=socket.gethostname(),
        root=str(project.root),
    )
    side = holder_path(path)
    try:
        fsutil.atomic_write_text(side, json.dumps(asdict(me)) + "\n")
        yield me
    finally:
        current = read_holder(path)
        if current is not None and current.pid == me.pid:
            with suppress(OSError):
                side.unlink()
        lock.release()
