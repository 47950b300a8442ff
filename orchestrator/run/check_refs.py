"""The post-story checks of the references and the Progress Index: deleted or wiped
references are restored (refloss: condensing is fine, losing most of a file is not), index
rows removed for existing references are put back, every row must point to a file inside
the references folder, and every reference created or changed must have a row."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.errors import PathEscapeError
from orchestrator.memory import areas, refloss
from orchestrator.memory.findings import Severity
from orchestrator.memory.progress import Progress
from orchestrator.memory.references import ReferenceStore
from orchestrator.memory.store import FastStore
from orchestrator.project import Project
from orchestrator.run.check_state import (
    CheckReport,
    Snapshot,
    read_or_none,
    reference_bytes,
    restore,
    unswap,
)


def check_references(
    snap: Snapshot, project: Project, report: CheckReport, progress: Progress | None
) -> None:
    store = project.references
    # Only the files whose stat changed since the snapshot are read (the agent's edits).
    after = reference_bytes(project, snap.seen)
    if _repair_references(snap, project, report, after):
        after = reference_bytes(project)  # again: repairs put the old versions back
    changed = sorted(p for p, d in after.items() if snap.references.get(p) != d)
    report.updated_references = changed
    if progress is None:
        return
    old_rows = {(r.topic, r.path) for r in snap.progress.index_rows}
    progress = _restore_rows(project, report, progress, old_rows)
    indexed = _check_rows(progress, store, old_rows, report, after)
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
        if now is None and _unswap_reference(project, report, index_path, data):
            tried = True
            continue
        if now is None:
            report.add(
                "reference_deleted",
                "warning",
                f"reference {index_path} was deleted; it was restored",
                "update references instead of deleting them (`ralph compact` retires stale ones)",
                index_path,
            )
        elif now == data:
            continue  # most references are untouched by an iteration: nothing to decode
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
        restore(project, report, target, data)
    return tried


def _unswap_reference(project: Project, report: CheckReport, index_path: str, data: bytes) -> bool:
    """A reference the agent replaced by a symlink out of the folder (or a FIFO...): put
    back as a regular file in place (check_state.unswap). Only when the folder holding it
    is still inside the references folder: a swapped folder is never written into."""
    path = project.root / index_path
    inside = os.path.realpath(project.references.dir)
    where = os.path.realpath(path.parent)
    if where != inside and not where.startswith(inside + os.sep):
        return False
    return unswap(project, report, path, data, None, "reference_replaced")


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
    restore(project, report, project.progress_path, repaired.render())
    return repaired


def _resolved(store: ReferenceStore, path: str) -> Path | None:
    try:
        return store.resolve(path)
    except PathEscapeError:
        return None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


class _Indexed:
    """The files the index rows point to: names under the references folder for the rows
    FastStore answers from its listing (strings: 10,000 Path objects cost a third of a
    second), Paths for any other row and for files listed by an area reference."""

    def __init__(self, fast: FastStore) -> None:
        self.fast = fast
        self.rels: set[str] = set()
        self.paths: set[Path] = set()

    def __contains__(self, target: Path) -> bool:
        if target in self.paths:
            return True
        folder = getattr(self.fast, "folder", None)
        head, path = f"{folder}{os.sep}", str(target)
        return (
            folder is not None
            and path.startswith(head)
            and (path[len(head) :].replace(os.sep, "/") in self.rels)
        )


def _check_rows(
    progress: Progress,
    store: ReferenceStore,
    old_rows: set[tuple[str, str]],
    report: CheckReport,
    files: dict[str, bytes] | None = None,
) -> _Indexed:
    """Validate the index table; return the files its rows point to. `files` is the
    folder's content as reference_bytes read it (by index path), when the caller has it."""
    _check_table_syntax(progress, report)
    seen: set[str] = set()
    fast = FastStore(store)  # store.resolve's answers, the folder listed once
    indexed = _Indexed(fast)
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
        rel = fast.plain_rel(row.path)
        data = files.get(f"{fast.rel_dir}/{rel}") if rel is not None and files else None
        if rel is not None and data is not None:  # a plain file of the folder, just read
            indexed.rels.add(rel)
            if b"eference" in data:  # areas.is_area's own first test, before decoding
                indexed.paths |= _nested_targets(store, fast.folder / rel, data)
            continue
        target = _row_target(fast, row.topic, row.path, severity, store, report)
        if target is not None:
            indexed.paths.add(target)
            indexed.paths |= _nested_targets(store, target)
    return indexed


def _row_target(
    fast: FastStore,
    topic: str,
    path: str,
    severity: Severity,
    store: ReferenceStore,
    report: CheckReport,
) -> Path | None:
    """The existing file a row points to, or None after reporting why there is none."""
    try:
        target = fast.resolve(path)
    except PathEscapeError as exc:
        report.add(
            "index_path_escapes",
            severity,
            str(exc),
            f"point the row at a file under {store.rel_dir}/",
            path,
        )
        return None
    if not target.is_file():
        report.add(
            "index_missing_file",
            severity,
            f"index row '{topic}' points to {path}, which does not exist",
            "create the file or fix the row's path",
            path,
        )
        return None
    return target


def _nested_targets(store: ReferenceStore, area: Path, data: bytes | None = None) -> set[Path]:
    """The files an area reference lists: indexed through it, not by a row of their own."""
    text = _text(data) if data is not None else read_or_none(area)
    out: set[Path] = set()
    for _topic, path in areas.nested_rows(text or ""):
        try:
            out.add(store.resolve(path))
        except PathEscapeError:
            continue  # `ralph check` names it; a listed path outside the folder indexes nothing
    return out


def _check_table_syntax(progress: Progress, report: CheckReport) -> None:
    for n, body in progress.malformed_index_lines():
        report.add(
            "index_malformed",
            "error",
            f"Progress Index line {n + 1} is not a table row: {body[:80]!r}",
            "write rows as '| Topic | ralph/references/<file>.md |'",
        )
