"""Defects found by trying to break the merged trust fixes (issue 11) through the real CLI:
a tired user's odd files and a confused agent's odd index rows, each through a real `ralph`
process in a tmp git repo.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from run_helpers import make_project, ralph

RD = "scripts/ralph"


def no_traceback(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]


def _progress(root: Path, index_rows: list[str], log: str = "") -> Path:
    refs = root / "ralph" / "references"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "auth.md").write_text("# Auth\n\n- sessions live in redis\n")
    (refs / "db.md").write_text("# Database\n\n- migrations run with alembic\n")
    path = root / RD / "progress.txt"
    path.write_text(
        "# Ralph Progress Log\nStarted: today\n---\n\n## Progress Index\n"
        "| Topic | Reference Path |\n|---|---|\n" + "".join(r + "\n" for r in index_rows) + log
    )
    return path


def test_a_row_with_an_extra_cell_still_names_its_reference(tmp_path: Path) -> None:
    """`ralph status` and the loop read the first two cells of `| Auth | path | note |`; check
    flagged the row but then called auth.md an orphan and said to delete it."""
    root = make_project(tmp_path / "p")
    _progress(
        root,
        [
            "| Auth | ralph/references/auth.md | added by US-002 |",
            "| Database | ralph/references/db.md |",
        ],
    )
    out = ralph(root, "check")
    no_traceback(out)
    assert out.returncode == 1
    assert "[malformed-table]" in out.stdout
    assert "orphan-file" not in out.stdout, out.stdout
    assert "delete it" not in out.stdout, out.stdout


def test_a_four_cell_row_repeating_a_path_is_reported_as_a_duplicate(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    _progress(
        root,
        [
            "| Auth | ralph/references/auth.md |",
            "| Database | ralph/references/db.md |",
            "| Auth again | ralph/references/auth.md | a | b |",
        ],
    )
    out = ralph(root, "check")
    no_traceback(out)
    assert "[duplicate-path]" in out.stdout, out.stdout
    assert "orphan-file" not in out.stdout


def test_a_story_id_with_a_slash_is_a_story_id_for_check(tmp_path: Path) -> None:
    """prd.json may use `API/006`; a log entry headed with it has a story id."""
    root = make_project(tmp_path / "p", 1)
    prd_path = root / RD / "prd.json"
    prd = json.loads(prd_path.read_text())
    prd["userStories"][0]["id"] = "API/006"
    prd_path.write_text(json.dumps(prd, indent=2))
    _progress(
        root,
        ["| Auth | ralph/references/auth.md |", "| Database | ralph/references/db.md |"],
        "\n## 2026-12-01 16:51 - API/006\n- Implemented: the API\n"
        "\n## 2026-12-01 17:00 - nothing here\n- no id at all\n",
    )
    out = ralph(root, "check")
    no_traceback(out)
    assert "API/006" not in out.stdout, out.stdout
    assert "'## 2026-12-01 17:00 - nothing here' has no story id" in out.stdout


def test_a_quoted_password_in_a_story_is_masked_in_the_json_transcript(tmp_path: Path) -> None:
    """The prompt copy masked `password: "hunter2hunter2"`, but the transcript is stream-json,
    where the quotes are escaped (`\\"`, `\\\\\\"` inside a tool call's input): it stayed there."""
    root = make_project(tmp_path / "p", 1)
    prd_path = root / RD / "prd.json"
    prd = json.loads(prd_path.read_text())
    prd["userStories"][0]["description"] = 'Log in with password: "hunter2hunter2" as admin.'
    prd_path.write_text(json.dumps(prd, indent=2))
    subprocess.run(["git", "commit", "-qam", "secret"], cwd=root, check=True)
    out = ralph(root, "run", "--tool", "sim", "1")
    no_traceback(out)
    logs = root / "ralph" / "logs"
    written = [p for p in logs.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".log") for p in written), written
    leaks = [str(p) for p in written if "hunter2hunter2" in p.read_text(errors="replace")]
    assert not leaks, leaks


def test_a_wrong_flag_shows_the_commands_own_usage(tmp_path: Path) -> None:
    """`ralph migrate --apply` (compact's flag; migrate applies unless --dry-run) printed the
    top-level usage, which names no flag of migrate."""
    root = make_project(tmp_path / "p")
    out = ralph(root, "migrate", "--apply")
    no_traceback(out)
    assert out.returncode == 2
    assert "usage: ralph migrate" in out.stderr and "--dry-run" in out.stderr, out.stderr
    assert "ralph migrate: error: unrecognized arguments: --apply" in out.stderr
    out = ralph(root, "run", "--frob")
    assert out.returncode == 2 and "usage: ralph run" in out.stderr, out.stderr
    assert not (root / "ralph" / "logs").exists()


def test_a_file_where_the_references_folder_belongs_is_a_finding(tmp_path: Path) -> None:
    """`ralph check` said OK while every reference write of the run failed (EEXIST)."""
    root = make_project(tmp_path / "p")
    (root / "ralph").mkdir()
    (root / "ralph" / "references").write_text("not a folder\n")
    out = ralph(root, "check")
    no_traceback(out)
    assert out.returncode == 1, out.stdout
    assert "ralph/references: is not a folder" in out.stdout, out.stdout
    assert "[references-not-a-folder]" in out.stdout


def test_migrate_names_a_folder_called_progress_txt_as_a_folder(tmp_path: Path) -> None:
    """Every other command said "is a folder"; migrate said "no progress.txt to migrate"."""
    root = make_project(tmp_path / "p")
    (root / RD / "progress.txt").mkdir()
    out = ralph(root, "migrate")
    no_traceback(out)
    assert out.returncode == 2
    assert "progress.txt: is a folder" in out.stderr, out.stderr
    assert "no progress.txt to migrate" not in out.stderr


def test_compact_leaves_a_row_with_extra_cells_alone(tmp_path: Path) -> None:
    """With such rows read by check, compact tried to merge one into a near-duplicate and
    stopped with "index row ... vanished while compacting; retry" (retrying cannot help)."""
    root = make_project(tmp_path / "p")
    path = _progress(
        root,
        [
            "| Auth | ralph/references/auth.md |",
            "| Auth | ralph/references/db.md | moved here by US-004 |",
        ],
    )
    before = path.read_text()
    out = ralph(root, "compact", "--apply")
    no_traceback(out)
    assert out.returncode == 0, out.stderr
    assert path.read_text() == before
    assert (root / "ralph" / "references" / "db.md").is_file()
    out = ralph(root, "check")
    assert "[malformed-table]" in out.stdout
    assert "compact --apply" not in out.stdout, out.stdout
