"""What the post-story checks compare and produce: the `Snapshot` taken before the agent
runs, prd.json as read after it (`PrdState`), the `CheckReport` of findings, and the one
repair primitive (`restore`: keep the agent's version under `<logs>/backups/`, then write
ours back atomically). The checks themselves are in `checks.py` and `check_refs.py`."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from orchestrator import fsutil, git, redact
from orchestrator.errors import FileError, InputError
from orchestrator.log import get_logger
from orchestrator.memory.findings import Finding, Severity
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.memory.seen import Seen
from orchestrator.memory.store import Memory
from orchestrator.project import Project, ensure_logs_dir

log = get_logger()


@dataclass(frozen=True)
class Snapshot:
    taken_at: str
    prd_text: str | None  # None: prd.json did not exist
    progress_text: str | None  # None: progress.txt did not exist
    references: dict[str, bytes]  # index path ("ralph/references/x.md") -> bytes
    head: str | None  # git HEAD, None outside git or before a first commit
    dirty: frozenset[str]  # paths `git status` already showed before the agent
    in_git: bool
    # The texts above, parsed once: prd None when prd.json is missing or invalid
    # (`prd_error` says why); progress parsed from "" when progress.txt is missing.
    prd: Prd | None = field(default=None, compare=False, repr=False)
    prd_error: str | None = None
    progress: Progress = field(default_factory=lambda: Progress.parse(""), compare=False)

    @property
    def prd_state(self) -> PrdState:
        """prd.json as the snapshot read it."""
        return PrdState(self.prd_text, self.prd, self.prd_error)

    # The references as read for `references`, by stat: the checks after the agent read
    # again only the files whose stat changed.
    seen: Seen = field(default_factory=Seen, compare=False, repr=False)
    # What prd.json and progress.txt were symlinks to (os.readlink), None for a regular
    # file: a link the agent made or re-pointed is never written through (see unswap).
    prd_link: str | None = None
    progress_link: str | None = None


class GitState(NamedTuple):
    """git HEAD (None outside git or before a first commit) and the paths `git status`
    shows modified or untracked, as the iteration already asked git for them."""

    head: str | None
    dirty: frozenset[str]


@dataclass(frozen=True)
class PrdState:
    """prd.json as read at one moment: its text (None: no file) and its parse (None when
    it does not parse; `error` says why)."""

    text: str | None
    prd: Prd | None
    error: str | None = None

    @classmethod
    def read(cls, path: Path, before: PrdState | None = None) -> PrdState:
        """`before`: prd.json as read earlier; the same text keeps its parse (a Prd is never
        edited in place: changes go to a new parse)."""
        try:
            text = read_or_none(path)
        except FileError as exc:
            if exc.errno != errno.EINVAL:  # not a FIFO, device or socket: a real failure
                raise
            return cls(None, None, str(exc))  # the checks put the file back (unswap)
        if text is None:  # missing, or a folder: Prd.load's message says which
            try:
                Prd.load(path)
            except InputError as exc:
                return cls(None, None, str(exc))
        if before is not None and text is not None and text == before.text:
            return before
        return cls.of(text, path)

    @classmethod
    def of(cls, text: str | None, path: Path) -> PrdState:
        if text is None:
            return cls(None, None)
        try:
            return cls(text, Prd.parse(text, path))
        except InputError as exc:
            return cls(text, None, str(exc))


@dataclass
class CheckReport:
    story_id: str
    story_passed: bool = False
    flipped: list[str] = field(default_factory=list)  # passes false -> true, file order
    reverted: list[str] = field(default_factory=list)  # passes true -> false
    findings: list[Finding] = field(default_factory=list)
    restored: bool = False
    restored_files: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)  # the agent's versions, kept in logs
    updated_references: list[str] = field(default_factory=list)
    new_entries: int = 0
    head_before: str | None = None
    head_after: str | None = None
    # prd.json as the checks leave it (repairs included); None when it is not readable.
    # Not part of the ledger's `checks` object.
    prd: Prd | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """No error-level finding (warnings and repairs alone keep a story ok)."""
        return not any(f.severity == "error" for f in self.findings)

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def add(
        self, kind: str, severity: Severity, message: str, fix: str = "", path: str | None = None
    ) -> None:
        self.findings.append(Finding(kind, severity, message, fix, path))

    def fix_notes(self) -> list[str]:
        """One short line per error/warning, for the next prompt when checks policy is retry."""
        notes = []
        for f in self.findings:
            if f.severity == "info":
                continue
            notes.append(f"{f.message}. Fix: {f.fix}" if f.fix else f.message)
        return notes

    def to_dict(self) -> dict[str, Any]:
        """The ledger's `checks` object."""
        return {
            "ok": self.ok,
            "story_id": self.story_id,
            "story_passed": self.story_passed,
            "flipped": self.flipped,
            "reverted": self.reverted,
            "restored": self.restored,
            "restored_files": self.restored_files,
            "backups": self.backups,
            "updated_references": self.updated_references,
            "new_entries": self.new_entries,
            "head_before": self.head_before,
            "head_after": self.head_after,
            "errors": len(self.errors()),
            "warnings": len(self.warnings()),
            "findings": [f.to_dict() for f in self.findings],
        }


# --------------------------------------------------------------------------- reading


def git_head(project: Project) -> str | None:
    return git.head(project.root) if project.in_git else None


def git_dirty(project: Project) -> frozenset[str]:
    """Paths git reports as modified/untracked (ignored files excluded by git itself)."""
    entries = git.status(project.root) if project.in_git else None
    return frozenset(e.path for e in entries or ())


def read_or_none(path: Path) -> str | None:
    try:
        return fsutil.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        return None


def reference_bytes(
    project: Project, known: Seen | None = None, into: Seen | None = None
) -> dict[str, bytes]:
    """Every reference's bytes by index path. `known`: files read a moment ago, reused when
    their stat is unchanged (memory.seen); `into` records this read for the next one."""
    files = project.references.indexed_names()
    if known is None:
        known = Seen()  # knows nothing: every file is read
    return {index_path: known.read_bytes(p, into) for index_path, p in files}


def snapshot(
    project: Project,
    prd: Prd | None = None,
    memory: Memory | None = None,
    *,
    git_state: GitState | None = None,
) -> Snapshot:
    """What verify() compares against; take it right before the agent runs.

    `prd` and `memory` are what the iteration already read a moment ago (the story was
    picked from that prd.json, the prompt built from that progress.txt): their texts are
    used as they are, so neither file is read or parsed a second time. `git_state` is git's
    answer of the same moment (HEAD, dirty paths), when the caller already asked."""
    if git_state is None:
        git_state = GitState(git_head(project), git_dirty(project))
    # The loop's prd is never edited, so render() gives back the exact bytes read.
    before = PrdState(prd.render(), prd) if prd is not None else PrdState.read(project.prd_path)
    if memory is not None and fsutil.present(project.progress_path):
        progress_text: str | None = memory.progress_text
        progress = memory.progress
    else:
        progress_text = read_or_none(project.progress_path)
        progress = Progress.parse(progress_text or "")
    seen = Seen()
    known = memory.seen if memory is not None else None
    return Snapshot(
        taken_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        prd_text=before.text,
        progress_text=progress_text,
        references=reference_bytes(project, known, into=seen),
        head=git_state.head if project.in_git else None,
        dirty=git_state.dirty if project.in_git else frozenset(),
        in_git=project.in_git,
        prd=before.prd,
        prd_error=before.error,
        progress=progress,
        seen=seen,
        prd_link=link_of(project.prd_path),
        progress_link=link_of(project.progress_path),
    )


def link_of(path: Path) -> str | None:
    """Where the symlink `path` points (as written in the link); None when not a link."""
    try:
        return os.readlink(path)
    except OSError:  # absent, or not a symlink
        return None


# --------------------------------------------------------------------------- repairs


def _backup_agent_version(project: Project, report: CheckReport, path: Path) -> None:
    """Keep the agent's version of a file we are about to repair, under <logs>/backups/."""
    if not path.is_file():
        return
    _keep_backup(project, report, path.name, fsutil.read_text(path))


def _keep_backup(project: Project, report: CheckReport, name: str, text: str) -> None:
    """Write `text` as the backup `name` of this story under <logs>/backups/.

    The name is built from the story id, which is user text (`API/006`, `../../x`), so it
    goes through fsutil.safe_name; the copy goes to a fresh name, never over an older one."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    folder = project.logs_dir / "backups"
    stem = fsutil.safe_name(f"{stamp}-{report.story_id}")
    target = folder / f"{stem}-{fsutil.safe_name(name)}"
    n = 1
    while target.exists():
        target = folder / f"{stem}-{n}-{fsutil.safe_name(name)}"
        n += 1
    ensure_logs_dir(project)
    folder.mkdir(parents=True, exist_ok=True)
    # Redacted like every file under the logs: a secret the agent wrote into the memory
    # must not survive in our copy (the user's file itself is restored, not redacted).
    redact.write_text(target, text)
    report.backups.append(project.rel(target))


def swapped(path: Path, link_before: str | None) -> str | None:
    """What the agent left at `path` in place of the file the snapshot saw, when writing
    there would go somewhere else or block: "a symlink to X" (a link it made or re-pointed),
    "a FIFO (named pipe)", a device, a socket. None for a regular file, the snapshot's own
    link, a folder (reported by the reads) or nothing at all."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        return None if target == link_before else f"a symlink to {target}"
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    return fsutil.kind_of(st.st_mode)


def unswap(
    project: Project,
    report: CheckReport,
    path: Path,
    data: str | bytes | None,
    link_before: str | None,
    kind: str = "",
) -> bool:
    """Put back the file the snapshot saw when the agent replaced it by a symlink of its own
    or a FIFO/device/socket (see `swapped`); True when it did. The replacement is never read
    nor written through: a link's target outside the project stays untouched, a FIFO would
    block. The link's target is kept as a backup note; `data` None (no file before) removes
    the replacement; the user's own link, when the agent re-pointed it, is put back.
    `kind`: the finding's kind (default `<file stem>_replaced`)."""
    what = swapped(path, link_before)
    if what is None:
        return False
    # Named by its folder: project.rel resolves, and this path is a link out of the project.
    shown = (Path(project.rel(path.parent)) / path.name).as_posix()
    if what.startswith("a symlink"):
        with _reported_backup_failure(project, report, path):
            _keep_backup(project, report, f"{path.name}.symlink.txt", f"{shown}: {what}\n")
    if link_before is not None:
        fresh = path.with_name(f".{path.name}.ralph-link")
        fresh.unlink(missing_ok=True)
        os.symlink(link_before, fresh)
        os.replace(fresh, path)
        put_back = f"its symlink to {link_before} was put back"
    elif data is not None:
        raw = data.encode("utf-8", errors="surrogateescape") if isinstance(data, str) else data
        fsutil.atomic_write_bytes(path, raw, follow=False)
        put_back = "the previous version was restored as a regular file"
    else:
        os.unlink(path)
        put_back = "it was removed (there was no such file before)"
    untouched = " (the link's target was neither read nor changed)" if "symlink" in what else ""
    report.add(
        kind or f"{fsutil.safe_name(path.stem)}_replaced",
        "error",
        f"the agent replaced {shown} with {what}; {put_back}{untouched}",
        f"never replace {path.name}: edit it in place",
        shown,
    )
    report.restored = True
    if shown not in report.restored_files:
        report.restored_files.append(shown)
    log.info("checks.unswapped", path=str(path), story=report.story_id, was=what)
    return True


@contextlib.contextmanager
def _reported_backup_failure(project: Project, report: CheckReport, path: Path) -> Iterator[None]:
    """A failure to keep the agent's version (disk full, an unwritable logs folder) is
    reported, never allowed to stop the repair."""
    try:
        yield
    except OSError as exc:
        log.warning("checks.backup_failed", path=str(path), error=str(exc))
        report.add(
            "backup_failed",
            "warning",
            f"the agent's version of {project.rel(path)} could not be kept ({exc})",
            f"check that {project.rel(project.logs_dir)}/backups/ is writable",
            project.rel(path),
        )


def restore(project: Project, report: CheckReport, path: Path, data: str | bytes) -> None:
    # The restore matters more than the backup: a failure to keep the agent's version (disk
    # full, an unwritable logs folder) is reported, never allowed to stop the repair.
    # A second repair of the same file (history, then an index row) keeps only the first
    # backup: that one is the agent's version, the later one would be our own.
    first = project.rel(path) not in report.restored_files
    if first:
        with _reported_backup_failure(project, report, path):
            _backup_agent_version(project, report, path)
    if isinstance(data, str):
        fsutil.atomic_write_text(path, data)
    else:
        fsutil.atomic_write_bytes(path, data)
    report.restored = True
    if first:
        report.restored_files.append(project.rel(path))
    # info, not warning: the finding itself is what the user sees (once) on the console.
    log.info("checks.restored", path=str(path), story=report.story_id)
