"""ralph compact: ageing from the ledger, merging, log rotation, atomic journalled apply."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli, project, tokens
from orchestrator.memory import journal
from orchestrator.upkeep import audit, compact

TOPICS = {
    "Auth flow": "auth-flow.md",
    "Database schema": "db.md",
    "Build tooling": "build.md",
    "Legacy payments": "payments.md",
    "Codebase patterns": "codebase-patterns.md",
}


def entry(n: int) -> str:
    return f"## 2026-01-0{n} - US-00{n}\n- did story {n}\n- **Learnings:**\n  - fact {n}\n---\n"


def progress_text(topics: dict[str, str], entries: int = 5) -> str:
    rows = "".join(f"| {t} | ralph/references/{f} |\n" for t, f in topics.items())
    log = "\n".join(entry(n) for n in range(1, entries + 1))
    return (
        "# Ralph Progress Log\nStarted: today\n---\n\n## Progress Index\n"
        f"| Topic | Reference Path |\n|---|---|\n{rows}\n{log}"
    )


def make(
    tmp_path: Path,
    name: str = "p",
    topics: dict[str, str] = TOPICS,
    stories: list[tuple[str, list[str], list[str]]] | None = None,
) -> Path:
    root = tmp_path / name
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "prd.json").write_text('{"userStories": []}')
    (root / "ralph.yaml").write_text(
        "references:\n  stale_after: 3\n  always: [Codebase patterns]\nlog:\n  keep_entries: 2\n"
    )
    (root / "progress.txt").write_text(progress_text(topics))
    for topic, f in topics.items():
        p = root / "ralph/references" / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {topic}\n\n- [US-001] something about {topic.lower()}\n")
    if stories is None:
        stories = [
            ("US-001", ["Legacy payments"], []),
            ("US-002", ["Auth flow"], []),
            ("US-003", ["ralph/references/db.md"], []),
            ("US-004", [], ["Build tooling"]),
        ]
    ledger = root / "ralph/logs/ledger.jsonl"
    ledger.parent.mkdir(parents=True)
    with ledger.open("w") as f:
        for sid, sel, upd in stories:
            f.write(
                json.dumps(
                    {
                        "event": "iteration",
                        "run_id": "r1",
                        "story_id": sid,
                        "selected_references": sel,
                        "updated_references": upd,
                    }
                )
                + "\n"
            )
    return root


def tree(root: Path) -> dict[str, str]:
    """The project's files (not the token-count cache: a speed-up, not project state)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        # The project lock `compact --apply` takes and the token-count cache are not memory.
        if p.is_file()
        and ".git" not in p.parts
        and not p.name.startswith("ralph.lock")
        and p.relative_to(root).as_posix() != "ralph/logs/.gitignore"  # made with the lock
        and p.name != tokens.DISK_CACHE_FILE
    }


def test_ageing_archives_unused_references_and_keeps_them_findable(tmp_path: Path) -> None:
    root = make(tmp_path)
    proj = project.locate(root)
    plan = compact.plan(proj)
    assert [r.topic for r in plan.stale] == ["Legacy payments"]  # used only 4 stories ago
    compact.apply(proj, plan)
    text = (root / "progress.txt").read_text()
    assert (
        "| Legacy payments | ralph/references/archive/payments.md |" in text.split("## Archived")[1]
    )
    index = text.split("## Progress Index")[1].split("## Archived")[0]
    assert "Legacy payments" not in index and "Auth flow" in index
    assert not (root / "ralph/references/payments.md").exists()
    assert "legacy payments" in (root / "ralph/references/archive/payments.md").read_text()
    assert audit.check(project.locate(root)) == []  # still consistent


def test_ageing_waits_for_enough_history(tmp_path: Path) -> None:
    root = make(tmp_path, stories=[("US-001", ["Auth flow"], [])])
    plan = compact.plan(project.locate(root))
    assert plan.stale == [] and "fewer than references.stale_after (3)" in plan.stale_note


def test_log_rotation_moves_old_entries_verbatim(tmp_path: Path) -> None:
    root = make(tmp_path)
    compact.apply(project.locate(root), compact.plan(project.locate(root)))
    text = (root / "progress.txt").read_text()
    assert "US-004" in text and "US-005" in text
    assert "## 2026-01-01 - US-001" not in text
    archived = (root / "archive/progress-log.md").read_text()
    for n in (1, 2, 3):
        assert entry(n) in archived
    # Rotating again is a no-op; a later rotation appends, never truncates.
    assert compact.plan(project.locate(root)).rotated == 0


def test_a_log_without_an_index_keeps_its_entries_where_the_agent_reads_them(
    tmp_path: Path,
) -> None:
    # Never migrated: the learnings are in the entries only, and a Ralph agent reads
    # progress.txt, never the archive. Rotating them out hid them.
    root = make(tmp_path, topics={})
    log = root / "progress.txt"
    index = "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    log.write_text(log.read_text().replace(index, ""))
    before = tree(root)
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "compact", "--apply"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "kept 3 old log entries: this log has no Progress Index" in out.stdout
    assert "ralph migrate" in out.stdout and "rotate:" not in out.stdout
    assert tree(root) == before


def test_near_duplicates_merge_keeping_every_bullet(tmp_path: Path) -> None:
    topics = {
        "Auth flow": "auth-flow.md",
        "Auth flows": "auth-flows.md",
        "Build": "build.md",
        "Codebase patterns": "codebase-patterns.md",
    }
    root = make(tmp_path, topics=topics, stories=[])
    (root / "ralph/references/auth-flows.md").write_text(
        "# Auth flows\n\n- [US-009] tokens expire after 30 min\n  (refresh on 401)\n"
    )
    proj = project.locate(root)
    plan = compact.plan(proj)
    assert [(a.topic, b.topic) for a, b in plan.merges] == [("Auth flow", "Auth flows")]
    assert "duplicate-topic" in [f.kind for f in audit.check(proj)]
    compact.apply(proj, plan)
    merged = (root / "ralph/references/auth-flow.md").read_text()
    assert "- [US-001] something about auth flow" in merged
    assert "- [US-009] tokens expire after 30 min\n  (refresh on 401)" in merged
    assert not (root / "ralph/references/auth-flows.md").exists()
    assert (root / "ralph/references/archive/merged/auth-flows.md").exists()
    assert audit.check(project.locate(root)) == []


def test_oversized_listed(tmp_path: Path) -> None:
    root = make(tmp_path)
    (root / "ralph/references/db.md").write_text("# Database schema\n" + "- a fact\n" * 400)
    plan = compact.plan(project.locate(root))
    assert [r.topic for r, _n in plan.oversized] == ["Database schema"]


def test_cli_dry_run_writes_nothing_then_apply(tmp_path: Path, monkeypatch, capsys) -> None:
    root = make(tmp_path)
    before = tree(root)
    monkeypatch.chdir(root)
    assert cli.main(["compact"]) == 0
    out = capsys.readouterr().out
    assert "archive (stale): Legacy payments" in out and "rotate: 3" in out and "->" in out
    assert tree(root) == before
    assert cli.main(["compact", "--apply"]) == 0
    assert tree(root) != before
    assert cli.main(["check"]) == 0
    after = tree(root)
    assert cli.main(["compact", "--apply"]) == 0 and tree(root) == after


def test_failure_between_renames_rolls_back(tmp_path: Path, monkeypatch) -> None:
    root = make(tmp_path)
    before = tree(root)
    proj = project.locate(root)
    plan = compact.plan(proj)
    assert len(plan.writes) >= 3

    def boom(done: int) -> None:
        if done == 2:
            raise OSError("disk full (injected)")

    monkeypatch.setattr(journal, "after_rename", boom)
    with pytest.raises(OSError):
        compact.apply(proj, plan)
    assert tree(root) == before  # as it was, not half-done
    assert not list(root.rglob("*.ralph-new"))


def _kill_mid_apply(root: Path, after: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, RALPH_TEST_KILL_AFTER_RENAMES=str(after))
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "compact", "--apply"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("after", [1, 3])
def test_killed_apply_is_completed_by_recover(tmp_path: Path, after: int) -> None:
    expected_root = make(tmp_path, "twin")
    compact.apply(project.locate(expected_root), compact.plan(project.locate(expected_root)))
    expected = tree(expected_root)

    root = make(tmp_path)
    res = _kill_mid_apply(root, after)
    assert res.returncode == -signal.SIGKILL
    assert (root / journal.JOURNAL_DIR).is_dir()
    chk = subprocess.run(
        [sys.executable, "-m", "orchestrator", "check"], cwd=root, capture_output=True, text=True
    )
    assert chk.returncode == 1 and "interrupted-apply" in chk.stdout
    rec = subprocess.run(
        [sys.executable, "-m", "orchestrator", "compact", "--recover"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert rec.returncode == 0 and "completed an interrupted apply" in rec.stdout
    assert tree(root) == expected  # as it should be


def test_killed_apply_can_be_rolled_back(tmp_path: Path, monkeypatch) -> None:
    root = make(tmp_path)
    before = tree(root)
    assert _kill_mid_apply(root, 2).returncode == -signal.SIGKILL
    monkeypatch.chdir(root)
    assert cli.main(["compact", "--rollback"]) == 0
    assert tree(root) == before  # as it was


def test_crash_while_preparing_leaves_files_as_they_were(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("old")
    txn = journal.Transaction(tmp_path)
    txn.write(target, "new")
    txn.write(tmp_path / "b.txt", "created")
    txn._prepare(txn._records())  # files prepared, then the process "dies" before any rename
    jfile = tmp_path / journal.JOURNAL_DIR / "journal.json"
    record = json.loads(jfile.read_text())
    record["state"] = "preparing"
    jfile.write_text(json.dumps(record))
    assert "rolled back" in journal.recover(tmp_path)
    assert target.read_text() == "old" and not (tmp_path / "b.txt").exists()
    assert not list(tmp_path.glob(".*.ralph-new")) and journal.pending(tmp_path) is None


def test_commit_refuses_while_a_journal_is_pending(tmp_path: Path) -> None:
    (tmp_path / journal.JOURNAL_DIR).mkdir()
    txn = journal.Transaction(tmp_path)
    txn.write(tmp_path / "x", "y")
    with pytest.raises(Exception, match="interrupted"):
        txn.commit()
    assert not (tmp_path / "x").exists()


SHRINK = """\
import re, sys
prompt = sys.stdin.read()
path = re.search(r"^File: (.+)$", prompt, re.M).group(1)
lines = open(path).read().splitlines()
keep = lines[:1] if {keep_title} else ["# Something else"]
for ln in lines[1:]:
    if ln not in keep:
        keep.append(ln)
open(path, "w").write("\\n".join(keep) + "\\n")
print("removed duplicates")
"""


@pytest.mark.parametrize("keep_title", [True, False])
def test_agent_condenses_an_oversized_reference(
    tmp_path: Path, monkeypatch, capsys, keep_title: bool
) -> None:
    root = make(tmp_path)
    (root / "shrink.py").write_text(SHRINK.format(keep_title=keep_title))
    with (root / "ralph.yaml").open("a") as f:
        f.write(f"agents:\n  shrinker:\n    command: [{json.dumps(sys.executable)}, shrink.py]\n")
    big = "# Database schema\n" + "- [US-003] migrations live in db/migrations/\n" * 300
    (root / "ralph/references/db.md").write_text(big)
    monkeypatch.chdir(root)
    assert cli.main(["compact", "--agent", "shrinker"]) == 0  # dry run: asks nothing
    assert (root / "ralph/references/db.md").read_text() == big
    rc = cli.main(["compact", "--agent", "shrinker", "--apply"])
    out = capsys.readouterr().out
    originals = list((root / "ralph/references/archive/originals").glob("db.*.md"))
    assert len(originals) == 1 and originals[0].read_text() == big  # original kept
    now = (root / "ralph/references/db.md").read_text()
    if keep_title:
        assert rc == 0 and "condensed ralph/references/db.md" in out
        assert now == "# Database schema\n- [US-003] migrations live in db/migrations/\n"
    else:
        assert rc == 1 and "refused" in out and now == big  # topic lost: put back


def test_references_newer_than_the_ledger_stories_are_not_aged(tmp_path: Path) -> None:
    """Right after `ralph migrate`, old ledger stories never had the chance to select the
    new references: nothing is stale until stale_after stories ran since."""
    root = make(tmp_path)
    ledger = root / "ralph/logs/ledger.jsonl"
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    ledger.write_text(
        "".join(json.dumps({**r, "ts": "2020-01-01T00:00:00Z"}) + "\n" for r in lines)
    )
    assert compact.plan(project.locate(root)).stale == []
    ledger.write_text(
        "".join(json.dumps({**r, "ts": "2999-01-01T00:00:00Z"}) + "\n" for r in lines)
    )
    assert [r.topic for r in compact.plan(project.locate(root)).stale] == ["Legacy payments"]
