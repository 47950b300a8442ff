"""Archive the previous feature's files when prd.json names a new branch (as ralph.sh does).

Same rule as ralph.sh: only when prd.json and `.last-branch` both exist and prd.json's
`branchName` differs from the last branch: copy prd.json and progress.txt into
`archive/<YYYY-MM-DD>-<last branch without "ralph/">/`, then reset progress.txt to the
Ralph header. `.last-branch` is written on every run.

Differences, on purpose:
- the archive also holds a copy of the references folder (`references/`), so the state the
  old feature ended with can be read later;
- the reset keeps the `## Progress Index` table: a new branch is a new feature, but the
  references are project knowledge, so they stay and stay indexed; only the narrative log
  (and Codebase Patterns, which go with it into the archive) starts over;
- an existing archive folder is never overwritten: a second archive on the same day gets a
  `-2`, `-3`… suffix.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator import fsutil
from orchestrator.log import get_logger
from orchestrator.memory import progress

log = get_logger()


def ralph_date() -> str:
    """What `$(date)` prints in the C locale: `Mon Nov 30 05:52:02 UTC 2026`."""
    return time.strftime("%a %b %e %H:%M:%S %Z %Y")


def branch_of(prd_path: Path) -> str | None:
    """prd.json's branchName, or None when absent or unreadable (ralph.sh: `// empty`)."""
    try:
        data = json.loads(fsutil.read_text(prd_path))
    except (OSError, ValueError):
        return None
    name = data.get("branchName") if isinstance(data, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() else None


def folder_name(last_branch: str, day: str) -> str:
    short = last_branch[len("ralph/") :] if last_branch.startswith("ralph/") else last_branch
    # A branch like "feat/x" would nest folders (and "../x" would leave the archive): keep
    # the archive one level deep, its name made safe like every name built from user text.
    return fsutil.safe_name(f"{day}-{short}")


def _free_folder(base: Path) -> Path:
    if not base.exists():
        return base
    n = 2
    while base.with_name(f"{base.name}-{n}").exists():
        n += 1
    return base.with_name(f"{base.name}-{n}")


def reset_text(old_text: str | None, date: str | None = None) -> str:
    """A fresh progress.txt: the Ralph header, plus the old index table if there was one."""
    fresh = progress.new_progress_text(date)
    if not old_text:
        return fresh
    old = progress.Progress.parse(old_text)
    if not old.index_rows:
        return fresh
    new = progress.Progress.parse(progress.new_progress_text(date, with_index=True))
    for row in old.index_rows:
        new = new.with_index_row(row.topic, row.path)
    return new.render()


@dataclass
class ArchiveResult:
    folder: Path
    last_branch: str
    branch: str
    copied: list[str]


def archive_on_branch_change(
    ralph_dir: Path,
    progress_path: Path,
    references_dir: Path | None,
    *,
    day: str | None = None,
    date: str | None = None,
) -> ArchiveResult | None:
    """Archive and reset if the branch changed; always record the current branch.

    Returns what was archived, or None. Paths are passed in (not a Project) so the rule can
    be tested and reused on any folder.
    """
    prd_path = ralph_dir / "prd.json"
    last_path = ralph_dir / ".last-branch"
    result = None
    # One read of prd.json (3,000 stories: 30 ms a parse): archiving copies it, never edits it.
    branch = branch_of(prd_path) if prd_path.exists() else None
    if branch and last_path.exists():
        last = fsutil.read_text(last_path).strip()
        if last and branch != last:
            result = _archive(
                ralph_dir,
                prd_path,
                progress_path,
                references_dir,
                last,
                branch,
                day or time.strftime("%Y-%m-%d"),
                date,
            )
    if branch:
        fsutil.atomic_write_text(last_path, branch + "\n")
    return result


def _archive(
    ralph_dir: Path,
    prd_path: Path,
    progress_path: Path,
    references_dir: Path | None,
    last: str,
    branch: str,
    day: str,
    date: str | None,
) -> ArchiveResult:
    folder = _free_folder(ralph_dir / "archive" / folder_name(last, day))
    folder.mkdir(parents=True)
    copied = []
    for src in (prd_path, progress_path):
        if src.exists():
            shutil.copy2(src, folder / src.name)
            copied.append(src.name)
    if references_dir is not None and references_dir.is_dir():
        # The references' own archive/ (compaction) is history already kept in place.
        shutil.copytree(
            references_dir, folder / "references", ignore=shutil.ignore_patterns("archive")
        )
        copied.append("references/")
    old_text = fsutil.read_text(progress_path) if progress_path.exists() else None
    fsutil.atomic_write_text(progress_path, reset_text(old_text, date))
    log.info("archived previous run", last_branch=last, branch=branch, folder=str(folder))
    return ArchiveResult(folder=folder, last_branch=last, branch=branch, copied=copied)


def ensure_progress(progress_path: Path, date: str | None = None) -> bool:
    """Create progress.txt with the Ralph header when missing. True if created."""
    if progress_path.exists():
        return False
    fsutil.atomic_write_text(progress_path, progress.new_progress_text(date))
    return True
