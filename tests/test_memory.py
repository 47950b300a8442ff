from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator import tokens
from orchestrator.memory.progress import Progress, new_progress_text
from orchestrator.memory.references import ReferenceStore
from orchestrator.memory.store import Memory


def make_project(root: Path, progress_text: str | None) -> SimpleNamespace:
    progress_path = root / "progress.txt"
    if progress_text is not None:
        progress_path.write_text(progress_text)
    return SimpleNamespace(
        root=root,
        progress_path=progress_path,
        references=ReferenceStore(root),
        config=SimpleNamespace(encoding="cl100k_base"),
    )


def indexed(rows: list[tuple[str, str]]) -> str:
    p = Progress.parse(new_progress_text("Mon Jan 1"))
    for topic, path in rows:
        p = p.with_index_row(topic, path)
    return p.append_entry("## 2026-01-01 - US-001\n- did it\n---\n").render()


def test_loads_existing_and_missing_references(tmp_path: Path) -> None:
    text = indexed([("Auth", "ralph/references/auth.md"), ("DB", "ralph/references/db.md")])
    project = make_project(tmp_path, text)
    project.references.write("ralph/references/auth.md", "# Auth\nUse JWT.\n")
    memory = Memory.load(project)
    assert memory.progress_text == text
    assert memory.progress.render() == text
    auth, db = memory.references
    assert (auth.topic, auth.exists, auth.text) == ("Auth", True, "# Auth\nUse JWT.\n")
    assert auth.tokens == tokens.count("# Auth\nUse JWT.\n", "cl100k_base") > 0
    assert (db.topic, db.exists, db.text, db.tokens) == ("DB", False, "", 0)
    assert memory.reference("auth") is auth and memory.existing == [auth]
    assert memory.full_history_tokens() == tokens.count(text, "cl100k_base")
    assert memory.full_history_tokens("o200k_base") == tokens.count(text, "o200k_base")


def test_missing_progress_is_empty_memory(tmp_path: Path) -> None:
    memory = Memory.load(make_project(tmp_path, None))
    assert memory.progress_text == "" and memory.references == []
    assert memory.full_history_tokens() == 0
    assert not (tmp_path / "progress.txt").exists()  # loading creates nothing


def test_an_escaping_row_is_left_out_naming_progress_line_and_row(tmp_path: Path) -> None:
    """Never read; not fatal either (a confused agent's row must not stop a night's run)."""
    project = make_project(tmp_path, indexed([("Evil", "../../etc/passwd"), ("Ok", "ok.md")]))
    memory = Memory.load(project)
    assert [r.topic for r in memory.references] == ["Ok"]
    (msg,) = memory.refused
    line = (tmp_path / "progress.txt").read_text().splitlines().index("| Evil | ../../etc/passwd |")
    assert f"progress.txt:{line + 1}: " in msg and "'Evil'" in msg and "`..`" in msg


def test_with_real_project_in_git_repo(tmp_path: Path) -> None:
    """Through project.locate in a real git repo."""
    project_mod = pytest.importorskip("orchestrator.project")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "progress.txt").write_text(indexed([("API errors", "api-errors.md")]))
    (tmp_path / "ralph" / "references").mkdir(parents=True)
    (tmp_path / "ralph" / "references" / "api-errors.md").write_text("retry 429s\n")
    project = project_mod.locate(tmp_path)
    memory = Memory.load(project)
    assert [(r.topic, r.exists, r.text) for r in memory.references] == [
        ("API errors", True, "retry 429s\n")
    ]


def test_cli_status_shows_index_and_references(tmp_path: Path) -> None:
    """Through the real `ralph` CLI: index rows, reference sizes, escapes flagged."""
    import json
    import sys

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "prd.json").write_text(
        json.dumps({"userStories": [{"id": "US-001", "title": "t", "passes": False}]})
    )
    text = indexed(
        [("Auth", "ralph/references/auth.md"), ("DB", "db.md"), ("Evil", "../../etc/passwd")]
    )
    (tmp_path / "progress.txt").write_text(text)
    ReferenceStore(tmp_path).write("ralph/references/auth.md", "# Auth\nUse JWT.\n")
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "status", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert [r["topic"] for r in st["index"]] == ["Auth", "DB", "Evil"]
    refs = {r["topic"]: r for r in st["references"]}
    assert refs["Auth"]["exists"] and refs["Auth"]["tokens"] > 0
    assert not refs["DB"]["exists"] and refs["DB"]["note"] == "missing file"
    assert refs["Evil"]["note"] == "path outside the references folder"
    assert st["memory"]["entries"] == 1
    assert (tmp_path / "progress.txt").read_text() == text  # status changes nothing


def test_a_run_goes_on_past_an_escaping_row_and_asks_the_agent_to_fix_it(
    tmp_path: Path,
) -> None:
    """Through `ralph run` with the simulated agent: every story is done, the row is read
    by no iteration, and every prompt says which row to fix."""
    from run_helpers import git, iterations, make_project, ralph

    root = make_project(tmp_path / "p", 2, config={"mode": "indexed"})
    (root / "scripts" / "ralph" / "progress.txt").write_text(
        "# Ralph Progress Log\n\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
        "| Evil | ../../etc/passwd |\n\n---\n"
    )
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "index")
    out = ralph(root, "run", "--tool", "sim", "4", timeout=240)
    assert out.returncode == 0, out.stderr
    assert [r["story_id"] for r in iterations(root)] == ["US-001", "US-002"]
    prompts = sorted((root / "ralph" / "logs").rglob("*.prompt.md"))
    assert len(prompts) == 2
    for p in prompts:
        text = p.read_text()
        assert "progress.txt:6: Progress Index row 'Evil'" in text
        assert "root:" not in text  # /etc/passwd never read into a prompt
    assert "Traceback" not in out.stderr
