"""One loop per project: `with project_lock(project): ...`.

Two loops on one project would both pick the same story, both edit prd.json and
progress.txt, and interleave their commits. The lock is an OS file lock (flock, through the
filelock library) on `<log dir>/ralph.lock`: the kernel releases it when its holder dies,
however it dies, so a stale lock from a crashed or killed run is simply taken over. Who holds
it (pid, start time, command) is written to a side file, `ralph.lock.json`, only so the
second run can say who is in the way; the side file is never what decides.

Every command that writes memory (prd.json, progress.txt, references: `ralph compact
--apply`, `ralph migrate`, `ralph init`) takes the same lock with `memory_lock`: while a run
holds it, such a command refuses at once, naming the run's pid and what to do, instead of
moving entries the run's checks would then "restore" and blame on the agent.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import fsutil
from orchestrator.errors import LockHeld
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


def _lock(project: Project) -> filelock.BaseFileLock:
    # filelock is imported where a lock is taken or probed, not with this module: reading a
    # holder (`ralph status`, no live run) must not pay its ~20 ms of imports.
    import filelock

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


def _held_message(project: Project, action: str | None = None) -> str:
    holder = read_holder(project.lock_path)
    who = holder.describe() if holder else "pid unknown"
    hint = f" (kill {holder.pid})" if holder and holder.host == socket.gethostname() else ""
    if action is None:
        return (
            f"another ralph run ({who}) is using this project; wait for it or stop it{hint}. "
            f"Lock: {project.lock_path}"
        )
    return (
        f"{action}: refused, a ralph run ({who}) is using this project and its checks would "
        f"take these memory changes for the agent's. Nothing was changed. Run it again when "
        f"that run has finished, or stop the run first{hint}. Lock: {project.lock_path}"
    )


@contextmanager
def memory_lock(project: Project, action: str) -> Iterator[Holder | None]:
    """For commands that write memory outside a run: hold the project's lock for the block,
    or raise LockHeld (naming `action`, the run's pid and what to do) while a run holds it.

    Without a lock file no run has ever taken the lock here (a run creates it and it is
    kept), so none holds it now: the command then creates nothing beyond what it is asked to
    write (a refused `migrate`, a repeated `init` leave no lock file behind)."""
    if not project.lock_path.exists():
        yield None
        return
    with project_lock(project, command=action, action=action) as me:
        yield me


@contextmanager
def project_lock(
    project: Project, command: str | None = None, *, action: str | None = None
) -> Iterator[Holder]:
    """Hold the project's lock for the block, or raise LockHeld at once if another run has it."""
    lock = _lock(project)
    try:
        lock.acquire(timeout=0)
    except TimeoutError:  # filelock.Timeout
        raise LockHeld(_held_message(project, action)) from None
    me = Holder(
        pid=os.getpid(),
        started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=redact(command or " ".join(["ralph", *sys.argv[1:]])),
        host=socket.gethostname(),
        root=str(project.root),
    )
    side = holder_path(project.lock_path)
    try:
        fsutil.atomic_write_text(side, json.dumps(asdict(me)) + "\n")
        yield me
    finally:
        current = read_holder(project.lock_path)
        if current is not None and current.pid == me.pid:
            with suppress(OSError):
                side.unlink()
        lock.release()
