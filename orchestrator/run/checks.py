"""After every story: did the agent leave the project in a state the next iteration can trust?

`snapshot(project)` records what matters before the agent runs; `verify(snap, project, story)`
compares afterwards and returns a `CheckReport` of findings (kind, severity, message, fix).
The snapshot, the report and the repair primitive are in `check_state.py`, the checks of the
references and the index in `check_refs.py`; prd.json, progress.txt and git are checked here.

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
is replaced by the snapshot (with the story's pass kept when it can be). prd.json or
progress.txt replaced by a symlink the agent made (or a FIFO) is put back as the regular file
it was, never read nor written through. The agent's version
is saved under `<log dir>/backups/` first (a failure there is reported, never allowed to stop
the repair) and the report says `restored: true`. Every write is atomic.
"""

from __future__ import annotations

from orchestrator import git
from orchestrator.log import get_logger
from orchestrator.memory.findings import Finding, Severity
from orchestrator.memory.history import merge_history
from orchestrator.memory.markdown import unclosed_fence
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.progress import Progress, entry_from
from orchestrator.project import Project
from orchestrator.run.check_refs import check_references
from orchestrator.run.check_state import (
    CheckReport,
    GitState,
    PrdState,
    Snapshot,
    git_dirty,
    git_head,
    read_or_none,
    restore,
    snapshot,
    unswap,
)

__all__ = ["CheckReport", "Finding", "Snapshot", "merge_history", "snapshot", "verify"]

log = get_logger()


# --------------------------------------------------------------------------- prd.json


def _check_prd(snap: Snapshot, project: Project, report: CheckReport, now: PrdState) -> None:
    report.prd = now.prd  # as the agent left it, unless a repair below puts another back
    shown = project.rel(project.prd_path)
    if snap.prd_text is None:
        report.add(
            "prd_missing",
            "error",
            "prd.json did not exist before the iteration",
            "create it (`ralph init`)",
            shown,
        )
        return
    if snap.prd is None:  # already broken before the agent ran: nothing to compare
        report.add("prd_invalid_before", "warning", snap.prd_error or "", "fix prd.json", shown)
        return
    if now.text is None:
        report.add(
            "prd_deleted",
            "error",
            "the agent deleted prd.json; it was restored",
            "never delete prd.json; only set the story's passes to true",
            shown,
        )
    elif now.prd is None:
        report.add(
            "prd_invalid",
            "error",
            f"prd.json was left invalid ({now.error}); the previous version was restored",
            "edit prd.json only to set passes: true, keeping it valid JSON",
            shown,
        )
    else:
        _compare_stories(snap, now.prd, project, report)
        return
    restore(project, report, project.prd_path, snap.prd_text)
    report.prd = snap.prd


def _compare_stories(snap: Snapshot, after: Prd, project: Project, report: CheckReport) -> None:
    assert snap.prd is not None and snap.prd_text is not None
    old = {s.id: s.passes for s in snap.prd.stories}
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
        # A copy of the snapshot's parse: that one stays what prd.json was before.
        repaired = Prd.parse(snap.prd_text, project.prd_path)
        for sid in report.flipped:
            if sid in old:
                repaired.mark_passed(sid)
        restore(project, report, project.prd_path, repaired.render())
        report.prd = repaired
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
    now = read_or_none(path)
    if now is None:
        if snap.progress_text is not None:
            report.add(
                "progress_deleted",
                "error",
                "the agent deleted progress.txt; it was restored",
                "never delete progress.txt; append to it",
                shown,
            )
            restore(project, report, path, snap.progress_text)
            return snap.progress
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
            restore(project, report, path, merged)
            now = merged
    if now == snap.progress_text:  # untouched: the snapshot's parse, nothing new in it
        _check_entry(snap, snap.progress, report, shown)
        return snap.progress
    progress = Progress.parse(now).with_rows_of(snap.progress)
    _check_entry(snap, progress, report, shown)
    _check_fence(snap, now, report, shown)
    return progress


def _check_fence(snap: Snapshot, now: str, report: CheckReport, shown: str) -> None:
    """A fence the agent opened and never closed: ralph reads on, the next agent sees code."""
    line = unclosed_fence(now)
    old_lines = (snap.progress_text or "").count("\n")
    if line is not None and line > old_lines:
        report.add(
            "unclosed_fence",
            "warning",
            f"progress.txt line {line} opens a code fence that is never closed",
            "close the fence with ``` on a line of its own",
            shown,
        )


def _check_entry(snap: Snapshot, progress: Progress, report: CheckReport, shown: str) -> None:
    # rstrip: appending after an entry moves the blank line between them into the old one.
    # Texts first: only the new entries are read (reading 3,000 took seconds per iteration).
    if progress is snap.progress:
        new = []
    else:
        old = {t.rstrip() for t in snap.progress.entry_texts}
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


# --------------------------------------------------------------------------- git


def _check_git(
    snap: Snapshot, project: Project, report: CheckReport, title: str, now: GitState | None
) -> None:
    report.head_before = snap.head
    report.head_after = now.head if now is not None else git_head(project)
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
    _check_clean(snap, project, report, now)


def _check_clean(
    snap: Snapshot, project: Project, report: CheckReport, now: GitState | None
) -> None:
    # `now` was taken before any repair: a repair writes only the files it restores (left
    # out below) and backups under the logs folder (left out too), so it is still exact.
    ours = set(report.restored_files)
    logs = project.rel(project.logs_dir).rstrip("/") + "/"
    dirty = now.dirty if now is not None else git_dirty(project)
    left = sorted(p for p in dirty - snap.dirty if p not in ours and not p.startswith(logs))
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
    snap: Snapshot,
    project: Project,
    story: Story | str,
    *,
    after: PrdState | None = None,
    git_after: GitState | None = None,
) -> CheckReport:
    """Check the iteration's work against `snap`, repairing lost history; see module doc.

    `after` is prd.json as the caller already read it once the agent was done (the loop
    does, to see whether the story passed); None reads it here. `report.prd` is prd.json as
    the checks leave it. `git_after` is git's HEAD and dirty paths once the agent was
    done, when the caller asked already (None asks here)."""
    story_id = story if isinstance(story, str) else story.id
    title = "" if isinstance(story, str) else story.title
    report = CheckReport(story_id=story_id)
    # First of all, before any read: a symlink the agent put in place of prd.json or
    # progress.txt would have the repairs below write through it (out of the project), a
    # FIFO would block their reads.
    if unswap(project, report, project.prd_path, snap.prd_text, snap.prd_link):
        after = snap.prd_state
    unswap(project, report, project.progress_path, snap.progress_text, snap.progress_link)
    _check_prd(snap, project, report, after or PrdState.read(project.prd_path))
    progress = _check_progress(snap, project, report)
    check_references(snap, project, report, progress)
    _check_git(snap, project, report, title or "<title>", git_after)
    for f in report.findings:
        if f.severity != "info":
            log.debug("checks.finding", kind=f.kind, severity=f.severity, story=story_id)
    return report
