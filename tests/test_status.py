"""`ralph status`: stories, the index, references with sizes, the last run from the ledger."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from run_helpers import make_project, ralph

from orchestrator import ledger
from orchestrator.project import locate
from orchestrator.run import status

PROGRESS = (
    "# Ralph Progress Log\nStarted: x\n---\n\n## Progress Index\n"
    "| Topic | Reference Path |\n|---|---|\n"
    "| Auth flow | ralph/references/auth-flow.md |\n"
    "| Gone | ralph/references/gone.md |\n"
    "| Escape | ../../etc/passwd |\n"
    "\n## 2026-01-01 - US-001\n- did it\n---\n"
)


def _project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "p", 3)
    (root / "scripts/ralph/progress.txt").write_text(PROGRESS)
    refs = root / "ralph/references"
    refs.mkdir(parents=True)
    (refs / "auth-flow.md").write_text("# Auth flow\n" + "- tokens expire after one hour\n" * 20)
    (refs / "orphan.md").write_text("# Orphan\n- not indexed\n")
    data = json.loads((root / "scripts/ralph/prd.json").read_text())
    data["userStories"][0]["passes"] = True
    (root / "scripts/ralph/prd.json").write_text(json.dumps(data, indent=2))
    with ledger.Ledger(root / "ralph/logs/ledger.jsonl", run_id="old") as led:
        led.iteration({"iteration": 1, "story_id": "US-001", "outcome": "failed"})
    with ledger.Ledger(root / "ralph/logs/ledger.jsonl", run_id="new") as led:
        led.event("run_start")
        led.iteration(
            {
                "iteration": 1,
                "story_id": "US-001",
                "outcome": "passed",
                "prompt_tokens": 1000,
                "full_history_tokens": 4000,
                "cost_usd": 0.25,
                "usage": {
                    "input_tokens": 100,
                    "output_tokens": 50,
                    "cache_read_tokens": 900,
                    "cache_write_tokens": 0,
                },
                "duration_s": 61,
            }
        )
        led.event("run_end", status="exhausted", exit_code=1)
    return root


def test_collect(tmp_path: Path) -> None:
    st = status.collect(locate(_project(tmp_path)))
    assert st["stories"]["passed"] == 1 and st["stories"]["total"] == 3
    assert st["stories"]["next"]["id"] == "US-002"
    refs = {r["path"]: r for r in st["references"]}
    assert refs["ralph/references/auth-flow.md"]["tokens"] > 100
    assert refs["ralph/references/gone.md"]["note"] == "missing file"
    assert "outside" in refs["../../etc/passwd"]["note"]
    assert refs["ralph/references/orphan.md"]["note"] == "not in the index"
    last = st["last_run"]
    assert (last["run_id"], last["status"], last["iterations"], last["passed"]) == (
        "new",
        "exhausted",
        1,
        1,
    )
    assert last["saved_pct"] == 75.0 and last["input_tokens"] == 1000


def test_cli_prints_and_changes_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}
    out = ralph(root, "status")
    assert out.returncode == 0, out.stderr
    assert "stories: 1/3 passed · next: US-002 Add feature 2" in out.stdout
    assert "auth-flow.md" in out.stdout and "not in the index" in out.stdout
    assert "last run new (exhausted): 1 iteration(s), 1 passed" in out.stdout
    assert "saved 75%" in out.stdout and "$0.25" in out.stdout
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}
    # The one file status may write: the token-count cache in the logs folder.
    cache = [p for p in after if p.name == "token-counts.json"]
    assert [p.parent.name for p in cache] == ["logs"]
    assert {p: b for p, b in after.items() if p not in cache} == before
    js = json.loads(ralph(root, "status", "--json").stdout)
    assert js["stories"]["pending"] == ["US-002", "US-003"]


def test_a_long_index_shows_its_rows_with_a_note_and_a_count_of_the_rest(
    tmp_path: Path,
) -> None:
    """60 topics: the table shows TABLE_ROWS of them, the missing file and the orphan
    among them wherever they sit, and says how many more `--all` lists."""
    from orchestrator.commands.status import TABLE_ROWS

    root = _project(tmp_path)
    refs = root / "ralph/references"
    rows = "".join(f"| Topic {n:02} | ralph/references/t{n:02}.md |\n" for n in range(60))
    for n in range(60):
        if n != 55:  # t55.md is missing
            (refs / f"t{n:02}.md").write_text(f"# Topic {n}\n- fact {n}\n")
    progress = root / "scripts/ralph/progress.txt"
    progress.write_text(PROGRESS.replace("| Escape | ../../etc/passwd |\n", ""))
    text = progress.read_text().replace("| Gone | ralph/references/gone.md |\n", rows)
    progress.write_text(text)
    out = ralph(root, "status")
    assert out.returncode == 0, out.stderr
    listed = [ln for ln in out.stdout.splitlines() if "ralph/references/" in ln]
    assert len(listed) == TABLE_ROWS
    assert any("t55.md" in ln and "missing file" in ln for ln in listed)
    assert any("orphan.md" in ln and "not in the index" in ln for ln in listed)
    assert "… and 22 more: `ralph status --all` lists them" in out.stdout
    everything = ralph(root, "status", "--all")
    assert len([ln for ln in everything.stdout.splitlines() if "ralph/references/" in ln]) == 62
    assert "more:" not in everything.stdout


def test_a_project_that_never_ran_stays_clean_for_git(tmp_path: Path) -> None:
    """status, prompt and check read; on a project with no log folder yet they make none
    (a bare `ralph/logs/token-counts.json` would be caught by the user's `git add -A`)."""
    root = make_project(tmp_path / "p", 2)
    rd = root / "ralph"
    (rd / "references").mkdir(parents=True)
    (root / "scripts" / "ralph" / "prd.json").rename(rd / "prd.json")
    (root / ".gitignore").unlink()  # the user's project does not ignore ralph/logs/
    (rd / "references" / "auth.md").write_text("# Auth\n\n- [US-001] tokens: auth.ts\n")
    (rd / "progress.txt").write_text(
        "# Ralph Progress Log\n\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
        "| Auth | ralph/references/auth.md |\n\n## 2026-01-01 - US-001\n- done\n"
    )
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "memory"], cwd=root, check=True)  # never ran
    for cmd in ("status", "prompt", "check"):
        out = ralph(root, cmd, "--dir", "ralph")
        assert out.returncode in (0, 1), out.stderr
        porcelain = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert porcelain == "", (cmd, porcelain)


def test_missing_prd_is_an_input_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    (root / "scripts/ralph/prd.json").unlink()
    out = ralph(root, "status", "--dir", "scripts/ralph")
    assert out.returncode == 2 and "prd.json" in out.stderr


def test_a_pasted_megabyte_without_blank_lines_is_read(tmp_path: Path) -> None:
    """1.3 MB of pasted test output in one entry, no blank line in it: status and prompt
    count it (they once died in a RecursionError, exit 70, and so did every run)."""
    root = make_project(tmp_path / "p", 2)
    progress = root / "scripts" / "ralph" / "progress.txt"
    paste = "".join(f"PASS tests/test_{n}.py ok\n" for n in range(55_000))
    with progress.open("a") as f:
        f.write("\n## 2026-01-01 - US-001\n- ran the suite\n" + paste + "\n")
    for args in (("status",), ("prompt", "--json")):
        out = ralph(root, *args)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr and "internal error" not in out.stderr


def test_files_rows_reach_by_a_symlink_or_a_bare_name_are_not_called_unindexed(
    tmp_path: Path,
) -> None:
    import os

    root = _project(tmp_path)
    refs = root / "ralph/references"
    (refs / "target.md").write_text("# Target\n- linked\n")
    os.symlink("target.md", refs / "link.md")
    (refs / "bare.md").write_text("# Bare\n- by name\n")
    progress = root / "scripts/ralph/progress.txt"
    progress.write_text(
        progress.read_text().replace(
            "| Gone | ralph/references/gone.md |\n",
            "| Gone | ralph/references/gone.md |\n| Link | ralph/references/link.md |\n"
            "| Bare | bare.md |\n",
        )
    )
    st = status.collect(locate(root))
    notes = {r["path"]: r["note"] for r in st["references"]}
    assert notes["ralph/references/link.md"] == "" and notes["bare.md"] == ""
    assert [p for p, n in notes.items() if n == "not in the index"] == [
        "ralph/references/orphan.md"
    ]


def test_topics_paths_and_a_project_name_with_brackets_are_printed_as_written(
    tmp_path: Path,
) -> None:
    """Square brackets are rich markup: `[/x]` in a topic or the project's name stopped
    `ralph status` with a MarkupError, and `[bold]` vanished from the table."""
    root = _project(tmp_path)
    progress = root / "scripts/ralph/progress.txt"
    text = progress.read_text().replace(
        "| Gone | ralph/references/gone.md |\n",
        "| [bold]Auth[/bold] | ralph/references/[red]b.md |\n| weird [/x] topic | x.md |\n",
    )
    progress.write_text(text)
    prd_file = root / "scripts/ralph/prd.json"
    data = json.loads(prd_file.read_text())
    data["project"], data["branchName"] = "Acme [/v2]", "ralph/[red]x"
    prd_file.write_text(json.dumps(data, indent=2))
    out = ralph(root, "status", COLUMNS="200")
    assert out.returncode == 0, out.stderr
    assert "Acme [/v2] · branch ralph/[red]x" in out.stdout
    assert "[bold]Auth[/bold]" in out.stdout and "ralph/references/[red]b.md" in out.stdout
    assert "weird [/x] topic" in out.stdout


def test_a_missing_file_is_shown_before_the_area_rows_whose_note_only_informs(
    tmp_path: Path,
) -> None:
    """What `ralph migrate` writes for a big history: area references listing their topics.
    Their rows carry notes that only inform ("area: lists topics", "in area X"); the table
    must still show the missing file and the orphan that need the user, and count only
    such rows in its last line."""
    root = _project(tmp_path)
    refs = root / "ralph/references"
    index = ""
    for a in range(3):
        rows = ""
        for n in range(20):
            (refs / f"a{a}t{n:02}.md").write_text(f"# Topic {a}.{n}\n- fact {n}\n")
            rows += f"| Topic {a}.{n:02} | ralph/references/a{a}t{n:02}.md |\n"
        body = f"# Area {a}\n\n| Topic | Reference Path |\n|---|---|\n{rows}"
        (refs / f"area-{a}.md").write_text(body)
        index += f"| Area {a} | ralph/references/area-{a}.md |\n"
    (refs / "a2t19.md").unlink()  # listed by the last area, behind 60 informing rows
    progress = root / "scripts/ralph/progress.txt"
    text = PROGRESS.replace("| Escape | ../../etc/passwd |\n", "")
    progress.write_text(text.replace("| Gone | ralph/references/gone.md |\n", index))
    out = ralph(root, "status", COLUMNS="200")
    assert out.returncode == 0, out.stderr
    listed = [ln for ln in out.stdout.splitlines() if "ralph/references/" in ln]
    assert any("a2t19.md" in ln and "missing file" in ln for ln in listed)
    assert any("orphan.md" in ln and "not in the index" in ln for ln in listed)
    # 65 rows (4 in the index, 60 the areas list, the orphan): 25 more, none flagged.
    assert "… and 25 more: `ralph status --all` lists them" in out.stdout
