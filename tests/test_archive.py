"""Archive on branch change, as ralph.sh does, plus the references and the kept index."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.memory.progress import Progress
from orchestrator.run import archive

HEADER = "# Ralph Progress Log\nStarted: Mon Nov 30 05:52:02 UTC 2026\n---\n"


def _setup(tmp_path: Path, branch: str, last: str | None, progress: str) -> Path:
    rd = tmp_path / "scripts" / "ralph"
    rd.mkdir(parents=True)
    (rd / "prd.json").write_text(json.dumps({"branchName": branch, "userStories": []}))
    if last is not None:
        (rd / ".last-branch").write_text(last + "\n")
    (rd / "progress.txt").write_text(progress)
    refs = tmp_path / "ralph" / "references"
    refs.mkdir(parents=True)
    (refs / "auth.md").write_text("# Auth\nuse tokens\n")
    return rd


OLD = (
    HEADER + "\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    "| Auth | ralph/references/auth.md |\n\n## 2026-01-01 - US-001\n- did it\n---\n"
)


def test_branch_change_archives_and_resets_keeping_index(tmp_path: Path) -> None:
    rd = _setup(tmp_path, "ralph/new-thing", "ralph/old-thing", OLD)
    prd_before = (rd / "prd.json").read_bytes()
    res = archive.archive_on_branch_change(
        rd, rd / "progress.txt", tmp_path / "ralph/references", day="2026-11-30", date="DATE"
    )
    assert res is not None
    folder = rd / "archive" / "2026-11-30-old-thing"
    assert res.folder == folder
    assert (folder / "prd.json").read_bytes() == prd_before
    assert (folder / "progress.txt").read_text() == OLD
    assert (folder / "references" / "auth.md").read_text() == "# Auth\nuse tokens\n"
    new = (rd / "progress.txt").read_text()
    assert new.startswith("# Ralph Progress Log\nStarted: DATE\n---\n")
    assert "US-001" not in new
    rows = Progress.parse(new).index_rows
    assert [(r.topic, r.path) for r in rows] == [("Auth", "ralph/references/auth.md")]
    assert (rd / ".last-branch").read_text() == "ralph/new-thing\n"
    # The references themselves stay in place.
    assert (tmp_path / "ralph/references/auth.md").exists()


def test_same_branch_or_no_last_branch_changes_nothing_but_last_branch(tmp_path: Path) -> None:
    rd = _setup(tmp_path, "ralph/x", None, OLD)
    assert archive.archive_on_branch_change(rd, rd / "progress.txt", None) is None
    assert (rd / ".last-branch").read_text() == "ralph/x\n"
    assert archive.archive_on_branch_change(rd, rd / "progress.txt", None) is None
    assert (rd / "progress.txt").read_text() == OLD
    assert not (rd / "archive").exists()


def test_without_index_reset_is_exactly_the_ralph_header(tmp_path: Path) -> None:
    rd = _setup(tmp_path, "feature-b", "feature-a", HEADER + "## x - US-1\n---\n")
    archive.archive_on_branch_change(rd, rd / "progress.txt", None, day="2026-01-02", date="D")
    assert (rd / "progress.txt").read_text() == "# Ralph Progress Log\nStarted: D\n---\n"
    assert (rd / "archive" / "2026-01-02-feature-a" / "progress.txt").exists()


def test_second_archive_same_day_never_overwrites(tmp_path: Path) -> None:
    rd = _setup(tmp_path, "ralph/b", "ralph/a", "first\n")
    archive.archive_on_branch_change(rd, rd / "progress.txt", None, day="2026-01-02")
    (rd / "prd.json").write_text(json.dumps({"branchName": "ralph/a"}))
    (rd / ".last-branch").write_text("ralph/a\n")
    (rd / "progress.txt").write_text("second\n")
    (rd / "prd.json").write_text(json.dumps({"branchName": "ralph/c"}))
    archive.archive_on_branch_change(rd, rd / "progress.txt", None, day="2026-01-02")
    assert (rd / "archive/2026-01-02-a/progress.txt").read_text() == "first\n"
    assert (rd / "archive/2026-01-02-a-2/progress.txt").read_text() == "second\n"


def test_ensure_progress_creates_header_only_when_missing(tmp_path: Path) -> None:
    p = tmp_path / "progress.txt"
    assert archive.ensure_progress(p, "D") is True
    assert p.read_text() == "# Ralph Progress Log\nStarted: D\n---\n"
    p.write_text("mine\n")
    assert archive.ensure_progress(p, "D") is False
    assert p.read_text() == "mine\n"


def test_ralph_date_looks_like_date_command() -> None:
    import re

    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \S+ \d{4}", archive.ralph_date())
