"""After every story: did the agent leave the project in a state the next iteration can trust?

`snapshot(project)` records what matters before the agent runs; `verify(snap, project, story)`
compares afterwards and returns a `CheckReport` of findings (kind, severity, message, fix).

What is checked: which stories flipped to `passes: true` (more than one is suspicious);
prd.json is still valid and still lists every story; progress.txt gained an entry for the
story; nothing that existed in progress.txt was deleted or altered outside the index table;
the index table parses; every row points to an existing file inside the references folder;
every reference created or changed has a row; no reference was wiped (refloss: condensing is
fine, losing most lines and most distinctive terms is not) and no row of an existing
reference was removed; a passed story was committed and left a clean working tree.

Users' history is precious, so losses are repaired, not just reported: lost progress.txt
lines are put back (the agent's additions are kept after them), a deleted or wiped
reference, a removed index row and a deleted progress.txt are restored, a broken prd.json
is replaced by the snapshot (with the story's pass kept when it can be). The agent's version
is saved under `<log dir>/backups/` first (a failure there is reported, never allowed to stop
the repair) and the report says `restored: true`. Every write is atomic.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from orchestrator import fsutil, git, redact
from orchestrator.errors import InputError, PathEscapeError
from orchestrator.log import get_logger
from orchestrator.memory import areas, refloss
from orchestrator.memory.history import merge_history
from orchestrator.memory.markdown import malformed_rows, split_lines
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.progress import Progress, entry_from
from orchestrator.memory.store import FastStore
from orchestrator.project import ensure_logs_dir

if TYPE_CHECKING:
    from orchestrator.agents.base import AgentResult
    from orchestrator.memory.references import ReferenceStore
    from orchestrator.project import Project

log = get_logger()

Severity = Literal["error", "warning", "info"]


@dataclass
class Finding:
    kind: str
    severity: Severity
    message: str
    fix: str = ""
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Snapshot:
    taken_at: str
    prd_text: str | None  # None: prd.json did not exist
    progress_text: str | None  # None: progress.txt did not exist
    references: dict[str, bytes]  # index path ("ralph/references/x.md") -> bytes
    head: str | None  # git HEAD, None outside git or before a first commit
    dirty: frozenset[str]  # paths `git status` already showed before the agent
    in_git: bool


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


# --------------------------------------------------------------------------- git


def git_head(project: Project) -> str | None:
    return git.head(project.root) if project.in_git else None


def git_dirty(project: Project) -> frozenset[str]:
    """Paths git reports as modified/untracked (ignored files excluded by git itself)."""
    entries = git.status(project.root) if project.in_git else None
    return frozenset(e.path for e in entries or ())


# --------------------------------------------------------------------------- snapshot


def _read_or_none(path: Path) -> str | None:
    try:
        return fsutil.read_text(path)
    except (FileNotFoundError, IsADirectoryError):
        return None


def _reference_bytes(project: Project) -> dict[str, bytes]:
    store = project.references
    return {index_path: p.read_bytes() for index_path, p in store.indexed_files()}


def snapshot(project: Project) -> Snapshot:
    """What verify() compares against; take it right before the agent runs."""
    return Snapshot(
        taken_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        prd_text=_read_or_none(project.prd_path),
        progress_text=_read_or_none(project.progress_path),
        references=_reference_bytes(project),
        head=git_head(project),
        dirty=git_dirty(project),
        in_git=project.in_git,
    )


# --------------------------------------------------------------------------- repairs


def _backup_agent_version(project: Project, report: CheckReport, path: Path) -> None:
    """Keep the agent's version of a file we are about to repair, under <logs>/backups/.

    The name is built from the story id, which is user text (`API/006`, `../../x`), so it
    goes through fsutil.safe_name; the copy goes to a fresh name, never over an older one."""
    if not path.is_file():
        return
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    folder = project.logs_dir / "backups"
    stem = fsutil.safe_name(f"{stamp}-{report.story_id}")
    target = folder / f"{stem}-{fsutil.safe_name(path.name)}"
    n = 1
    while target.exists():
        target = folder / f"{stem}-{n}-{fsutil.safe_name(path.name)}"
        n += 1
    ensure_logs_dir(project)
    folder.mkdir(parents=True, exist_ok=True)
    # Redacted like every file under the logs: a secret the agent wrote into the memory
    # must not survive in our copy (the user's file itself is restored, not redacted).
    redact.write_text(target, fsutil.read_text(path))
    report.backups.append(project.rel(target))


def _restore(project: Project, report: CheckReport, path: Path, data: str | bytes) -> None:
    # The restore matters more than the backup: a failure to keep the agent's version (disk
    # full, an unwritable logs folder) is reported, never allowed to stop the repair.
    # A second repair of the same file (history, then an index row) keeps only the first
    # backup: that one is the agent's version, the later one would be our own.
    first = project.rel(path) not in report.restored_files
    try:
        if first:
            _backup_agent_version(project, report, path)
    except OSError as exc:
        log.warning("checks.backup_failed", path=str(path), error=str(exc))
        report.add(
            "backup_failed",
            "warning",
            f"the agent's version of {project.rel(path)} could not be kept ({exc})",
            f"check that {project.rel(project.logs_dir)}/backups/ is writable",
            project.rel(path),
        )
    if isinstance(data, str):
        fsutil.atomic_write_text(path, data)
    else:
        fsutil.atomic_write_bytes(path, data)
    report.restored = True
    if first:
        report.restored_files.append(project.rel(path))
    # info, not warning: the finding itself is what the user sees (once) on the console.
    log.info("checks.restored", path=str(path), story=report.story_id)


# --------------------------------------------------------------------------- prd.json


def _check_prd(snap: Snapshot, project: Project, report: CheckReport) -> None:
    if snap.prd_text is None:
        report.add(
            "prd_missing",
            "error",
            "prd.json did not exist before the iteration",
            "create it (`ralph init`)",
            project.rel(project.prd_path),
        )
        return
    shown = project.rel(project.prd_path)
    try:
        before = Prd.parse(snap.prd_text, project.prd_path)
    except InputError as exc:  # already broken before the agent ran: nothing to compare
        report.add("prd_invalid_before", "warning", str(exc), "fix prd.json", shown)
        return
    now_text = _read_or_none(project.prd_path)
    if now_text is None:
        report.add(
            "prd_deleted",
            "error",
            "the agent deleted prd.json; it was restored",
            "never delete prd.json; only set the story's passes to true",
            shown,
        )
        _restore(project, report, project.prd_path, snap.prd_text)
        return
    try:
        after = Prd.parse(now_text, project.prd_path)
    except InputError as exc:
        report.add(
            "prd_invalid",
            "error",
            f"prd.json was left invalid ({exc}); the previous version was restored",
            "edit prd.json only to set passes: true, keeping it valid JSON",
            shown,
        )
        _restore(project, report, project.prd_path, snap.prd_text)
        return
    _compare_stories(before, after, project, report)


def _compare_stories(before: Prd, after: Prd, project: Project, report: CheckReport) -> None:
    old = {s.id: s.passes for s in before.stories}
    new = {s.id: s.passes for s in after.stories}
    report.flipped = [s.id for s in after.stories if s.passes and old.get(s.id) is False]
    report.reverted = [i for i, p in old.items() if p and new.get(i) is False]
    report.story_passed = new.get(report.story_id, False) and not old.get(report.story_id, False)
    shown = project.rel(project.prd_path)
    removed = [i for i in old if i not in new]
    if removed:
        report.add(
            "stories_removed",
            "error",
            f"prd.json lost stories {', '.join(removed)}; "
            "the previous prd.json was restored (passes kept)",
            "never remove stories from prd.json",
            shown,
        )
        for sid in report.flipped:
            if sid in old:
                before.mark_passed(sid)
        _restore(project, report, project.prd_path, before.render())
    others = [i for i in report.flipped if i != report.story_id]
    if others:
        report.add(
            "several_passed",
            "warning",
            f"stories other than {report.story_id} were marked passing: {', '.join(others)}",
            "implement one story per iteration",
            shown,
        )
    if report.reverted:
        report.add(
            "passes_reverted",
            "warning",
            f"stories went back to passes: false: {', '.join(report.reverted)}",
            "leave other stories' passes as they are",
            shown,
        )
    if not report.story_passed:
        report.add("not_passed", "info", f"{report.story_id} is not marked passing", "", shown)


# --------------------------------------------------------------------------- progress.txt


def _check_progress(snap: Snapshot, project: Project, report: CheckReport) -> Progress | None:
    path, shown = project.progress_path, project.rel(project.progress_path)
    now = _read_or_none(path)
    if now is None:
        if snap.progress_text is not None:
            report.add(
                "progress_deleted",
                "error",
                "the agent deleted progress.txt; it was restored",
                "never delete progress.txt; append to it",
                shown,
            )
            _restore(project, report, path, snap.progress_text)
            return Progress.parse(snap.progress_text)
        severity: Severity = "error" if report.story_passed else "info"
        report.add(
            "progress_missing",
            severity,
            "progress.txt does not exist",
            "append your progress entry to progress.txt",
            shown,
        )
        return None
    if snap.progress_text is not None:
        merged, lost = merge_history(snap.progress_text, now)
        if lost:
            report.add(
                "history_lost",
                "error",
                f"{len(lost)} line(s) of earlier progress.txt history were deleted or "
                "altered; they were restored and your additions kept",
                "only append to progress.txt and edit only the index table",
                shown,
            )
            _restore(project, report, path, merged)
            now = merged
    progress = Progress.parse(now)
    _check_entry(snap, progress, report, shown)
    return progress


def _check_entry(snap: Snapshot, progress: Progress, report: CheckReport, shown: str) -> None:
    # rstrip: appending after an entry moves the blank line between them into the old one.
    # Texts first: only the new entries are read (reading 3,000 took seconds per iteration).
    old = {t.rstrip() for t in Progress.parse(snap.progress_text or "").entry_texts}
    new = [entry_from(t) for t in progress.entry_texts if t.rstrip() not in old]
    report.new_entries = len(new)
    sid = report.story_id.lower()
    mine = [e for e in new if sid in e.heading.lower() or sid in (i.lower() for i in e.story_ids)]
    if report.story_passed and not mine:
        report.add(
            "no_progress_entry",
            "error",
            f"progress.txt gained no entry for {report.story_id}",
            f"append '## <date> - {report.story_id}' with what was done, files changed "
            "and learnings",
            shown,
        )


# --------------------------------------------------------------------------- references


def _check_references(
    snap: Snapshot, project: Project, report: CheckReport, progress: Progress | None
) -> None:
    store = project.references
    after = _reference_bytes(project)
    if _repair_references(snap, project, report, after):
        after = _reference_bytes(project)  # again: repairs put the old versions back
    changed = sorted(p for p, d in after.items() if snap.references.get(p) != d)
    report.updated_references = changed
    if progress is None:
        return
    old_rows = {(r.topic, r.path) for r in Progress.parse(snap.progress_text or "").index_rows}
    progress = _restore_rows(project, report, progress, old_rows)
    indexed = _check_rows(progress, store, old_rows, report)
    for index_path in changed:
        if store.resolve(index_path) not in indexed:
            report.add(
                "reference_unindexed",
                "error",
                f"reference {index_path} has no row in the Progress Index",
                f"add '| <Topic> | {index_path} |' to the index table in progress.txt",
                index_path,
            )


def _repair_references(
    snap: Snapshot, project: Project, report: CheckReport, after: dict[str, bytes]
) -> bool:
    """Put back references the agent deleted or wiped (refloss.assess: not condensed).
    True when it tried to (the folder may have changed)."""
    tried = False
    for index_path, data in snap.references.items():
        now = after.get(index_path)
        if now is None:
            report.add(
                "reference_deleted",
                "warning",
                f"reference {index_path} was deleted; it was restored",
                "update references instead of deleting them (`ralph compact` retires stale ones)",
                index_path,
            )
        else:
            loss = refloss.assess(_text(data), _text(now))
            if loss is None:
                continue
            report.add(
                "reference_wiped",
                "error",
                f"reference {index_path} lost most of its content ({loss.describe()}); "
                "the previous version was restored and the agent's kept in the backups",
                "add to references or condense them keeping every fact; never empty them",
                index_path,
            )
        try:
            target = project.references.resolve(index_path)
        except PathEscapeError as exc:  # the folder itself was swapped for a symlink out
            report.add("reference_unrestorable", "error", str(exc), "", index_path)
            continue
        tried = True
        _restore(project, report, target, data)
    return tried


def _restore_rows(
    project: Project, report: CheckReport, progress: Progress, old_rows: set[tuple[str, str]]
) -> Progress:
    """Put back index rows the agent removed while their reference still exists: a row is
    how the next prompt finds the reference, so losing it loses the memory."""
    store = project.references
    rows = progress.index_rows
    # A row still there, topic and path alike, was not lost: only the others are resolved
    # (10,000 rows took 20,000 path resolutions per iteration).
    gone = old_rows - {(r.topic, r.path) for r in rows}
    if not gone:
        return progress
    kept = {_resolved(store, r.path) for r in rows} - {None}
    repaired = progress
    lost = []
    for topic, path in sorted(gone):
        target = _resolved(store, path)
        if target is None or target in kept or not target.is_file():
            continue
        repaired = repaired.with_index_row(topic, path)
        kept.add(target)
        lost.append(f"'{topic}' ({path})")
    if not lost:
        return progress
    report.add(
        "index_row_lost",
        "error",
        f"the Progress Index lost {len(lost)} row(s) for existing references: "
        f"{', '.join(lost)}; they were restored",
        "keep one index row per reference; edit a row's topic or path in place",
        project.rel(project.progress_path),
    )
    _restore(project, report, project.progress_path, repaired.render())
    return repaired


def _resolved(store: ReferenceStore, path: str) -> Path | None:
    try:
        return store.resolve(path)
    except PathEscapeError:
        return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _check_rows(
    progress: Progress, store: ReferenceStore, old_rows: set[tuple[str, str]], report: CheckReport
) -> set[Path]:
    """Validate the index table; return the files its rows point to."""
    _check_table_syntax(progress, report)
    indexed: set[Path] = set()
    seen: set[str] = set()
    fast = FastStore(store)  # store.resolve's answers, the folder listed once
    for row in progress.index_rows:
        # Rows the agent added or changed are its errors; older ones are only reminders.
        severity: Severity = "warning" if (row.topic, row.path) in old_rows else "error"
        if row.topic.lower() in seen:
            report.add(
                "index_duplicate_topic",
                "warning",
                f"index topic '{row.topic}' appears more than once",
                "keep one row per topic",
                row.path,
            )
        seen.add(row.topic.lower())
        try:
            target = fast.resolve(row.path)
        except PathEscapeError as exc:
            report.add(
                "index_path_escapes",
                severity,
                str(exc),
                f"point the row at a file under {store.rel_dir}/",
                row.path,
            )
            continue
        if not target.is_file():
            report.add(
                "index_missing_file",
                severity,
                f"index row '{row.topic}' points to {row.path}, which does not exist",
                "create the file or fix the row's path",
                row.path,
            )
            continue
        indexed.add(target)
        indexed |= _nested_targets(store, target)
    return indexed


def _nested_targets(store: ReferenceStore, area: Path) -> set[Path]:
    """The files an area reference lists: indexed through it, not by a row of their own."""
    text = _read_or_none(area)
    out: set[Path] = set()
    for _topic, path in areas.nested_rows(text or ""):
        try:
            out.add(store.resolve(path))
        except PathEscapeError:
            continue  # `ralph check` names it; a listed path outside the folder indexes nothing
    return out


def _check_table_syntax(progress: Progress, report: CheckReport) -> None:
    for n, body in malformed_rows(split_lines(progress.index_text)):
        report.add(
            "index_malformed",
            "error",
            f"Progress Index line {n + 1} is not a table row: {body[:80]!r}",
            "write rows as '| Topic | ralph/references/<file>.md |'",
        )


# --------------------------------------------------------------------------- git


def _check_git(snap: Snapshot, project: Project, report: CheckReport, title: str) -> None:
    report.head_before = snap.head
    report.head_after = git_head(project)
    if not snap.in_git:
        report.add("no_git", "info", "not a git repository: commit checks skipped")
        return
    moved = report.head_after is not None and report.head_after != snap.head
    if not report.story_passed:
        if moved:
            report.add(
                "commit_without_pass",
                "info",
                f"commits were made but {report.story_id} is not marked passing",
            )
        return
    if not moved:
        report.add(
            "no_commit",
            "error",
            f"{report.story_id} passed but nothing was committed",
            f"commit the work: git add -A && git commit -m 'feat: {report.story_id} - {title}'",
        )
        return
    span = f"{snap.head}..HEAD" if snap.head else "HEAD"
    subjects = git.output(["log", "--format=%s", span], project.root) or ""
    if report.story_id.lower() not in subjects.lower():
        report.add(
            "commit_message",
            "warning",
            f"no new commit message names {report.story_id}",
            f"use 'feat: {report.story_id} - {title}'",
        )
    _check_clean(snap, project, report)


def _check_clean(snap: Snapshot, project: Project, report: CheckReport) -> None:
    ours = set(report.restored_files)
    logs = project.rel(project.logs_dir).rstrip("/") + "/"
    left = sorted(
        p for p in git_dirty(project) - snap.dirty if p not in ours and not p.startswith(logs)
    )
    if left:
        more = f" (+{len(left) - 5} more)" if len(left) > 5 else ""
        report.add(
            "uncommitted",
            "warning",
            f"uncommitted changes after the commit: {', '.join(left[:5])}{more}",
            "commit all of the story's changes (or git-ignore generated files)",
        )


# --------------------------------------------------------------------------- verify


def verify(
    snap: Snapshot, project: Project, story: Story | str, result: AgentResult | None = None
) -> CheckReport:
    """Check the iteration's work against `snap`, repairing lost history; see module doc.

    `result` (the agent's AgentResult) is accepted for the loop's convenience and unused.
    """
    story_id = story if isinstance(story, str) else story.id
    title = "" if isinstance(story, str) else story.title
    report = CheckReport(story_id=story_id)
    _check_prd(snap, project, report)
    progress = _check_progress(snap, project, report)
    _check_references(snap, project, report, progress)
    _check_git(snap, project, report, title or "<title>")
    for f in report.findings:
        if f.severity != "info":
            log.debug("checks.finding", kind=f.kind, severity=f.severity, story=story_id)
    return report
