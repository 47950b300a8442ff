"""Finding the Ralph folder from the project root when nothing names it (real `ralph`
processes in real git repositories)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import project

PRD = {
    "project": "demo",
    "branchName": "ralph/demo",
    "userStories": [{"id": "US-001", "title": "t", "priority": 1, "passes": False}],
}
LOG = "# Ralph Progress Log\nStarted: x\n---\n\n## 2026-01-01 - US-001\n- did it\n"


def repo(root: Path) -> Path:
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def put(folder: Path, prd: bool = True, progress: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if prd:
        (folder / "prd.json").write_text(json.dumps(PRD))
    if progress:
        (folder / "progress.txt").write_text(LOG)


def ralph(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_prd(cwd: Path) -> str:
    res = ralph(cwd, "status", "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["prd"]


def test_tools_ralph_is_found_from_the_root_and_named(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / "tools" / "ralph")
    res = ralph(root, "status", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["prd"] == "tools/ralph/prd.json"
    assert res.stderr.count("\n") == 1 and "using the Ralph folder tools/ralph" in res.stderr


def test_folder_with_only_progress_txt_is_found_by_migrate(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / "scripts" / "ralph", prd=False, progress=True)
    res = ralph(root, "migrate", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "scripts/ralph/progress.txt" in res.stdout
    assert "no progress.txt" not in res.stdout + res.stderr


def test_two_candidates_is_an_error_listing_them_and_the_flag(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / "tools" / "ralph")
    put(root / "app" / "loop")
    res = ralph(root, "status")
    assert res.returncode == 2
    assert "tools/ralph" in res.stderr and "app/loop" in res.stderr and "--dir" in res.stderr
    assert "Traceback" not in res.stderr
    assert status_prd(root / "app" / "loop") == "app/loop/prd.json"  # cwd settles it
    res = ralph(root, "status", "--json", "--dir", "app/loop")
    assert json.loads(res.stdout)["prd"] == "app/loop/prd.json"


def test_scripts_ralph_keeps_its_precedence(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / "scripts" / "ralph")
    put(root / "tools" / "ralph")
    res = ralph(root, "status", "--json")
    assert json.loads(res.stdout)["prd"] == "scripts/ralph/prd.json"
    assert res.stderr == ""  # the default place needs no note


@pytest.mark.parametrize(
    "skipped", ["node_modules/pkg", ".venv/lib", "ralph/logs", "a/b/c", "build/x"]
)
def test_dependencies_our_folders_and_deep_folders_are_not_candidates(
    tmp_path: Path, skipped: str
) -> None:
    root = repo(tmp_path / "p")
    put(root / "tools" / "ralph")
    put(root / skipped)
    assert status_prd(root) == "tools/ralph/prd.json"


def test_hidden_dot_ralph_is_a_usual_place(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / ".ralph")
    assert status_prd(root) == ".ralph/prd.json"


def test_prd_json_beats_a_lone_progress_txt_elsewhere(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    put(root / "tools" / "ralph")
    put(root / "docs", prd=False, progress=True)
    assert status_prd(root) == "tools/ralph/prd.json"


def test_search_is_bounded(tmp_path: Path) -> None:
    root = repo(tmp_path / "p")
    for i in range(3000):
        (root / f"d{i:04d}").mkdir()
    put(root / "zzz" / "ralph")  # beyond the entry budget: not found, nothing hangs
    assert project.search(root, project.load_config(None, {})) is None
