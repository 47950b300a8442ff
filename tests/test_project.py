from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, InputError
from orchestrator.project import locate


def git_init(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path.resolve()


def test_outside_git_root_and_ralph_dir_are_cwd(tmp_path: Path) -> None:
    p = locate(tmp_path)
    assert p.root == tmp_path.resolve() and p.ralph_dir == tmp_path.resolve()
    assert not p.in_git and p.config_path is None
    assert p.prd_path == p.ralph_dir / "prd.json"
    assert p.progress_path == p.ralph_dir / "progress.txt"
    assert p.archive_dir == p.ralph_dir / "archive"
    assert p.last_branch_path == p.ralph_dir / ".last-branch"
    assert p.logs_dir == p.root / "ralph" / "logs"
    assert p.ledger_path == p.logs_dir / "ledger.jsonl"
    assert p.lock_path.parent == p.logs_dir
    assert p.references.dir == p.root / "ralph" / "references"
    assert p.prompt_md is None and p.claude_md is None and p.template_path is None


def test_git_root_from_subfolder(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    sub = root / "src" / "deep"
    sub.mkdir(parents=True)
    p = locate(sub)
    assert p.in_git and p.root == root
    assert p.ralph_dir == sub.resolve()  # no scripts/ralph, no config: cwd (like ralph.sh)
    assert p.logs_dir == root / "ralph" / "logs"


def test_scripts_ralph_is_found_when_it_has_prd(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    legacy = root / "scripts" / "ralph"
    legacy.mkdir(parents=True)
    assert locate(root).ralph_dir == root  # no prd.json there yet
    (legacy / "prd.json").write_text("{}")
    (legacy / "CLAUDE.md").write_text("# instructions\n")
    p = locate(root / "scripts")
    assert p.ralph_dir == legacy
    assert p.claude_md == legacy / "CLAUDE.md" and p.prompt_md is None
    assert p.agent_instructions() == [legacy / "CLAUDE.md"]


def test_config_ralph_dir_beats_scripts_ralph(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    (root / "scripts" / "ralph").mkdir(parents=True)
    (root / "scripts" / "ralph" / "prd.json").write_text("{}")
    (root / "ralph.yaml").write_text(
        "ralph_dir: tools/loop\nlog:\n  dir: .ralph-logs\nreferences:\n  dir: docs/refs\n"
        "template: my-prompt.md\n"
    )
    p = locate(root / "scripts")
    assert p.ralph_dir == root / "tools" / "loop"
    assert p.config_path == root / "ralph.yaml"
    assert p.logs_dir == root / ".ralph-logs"
    assert p.references.dir == root / "docs" / "refs"
    assert p.template_path == root / "my-prompt.md"


def test_dir_flag_beats_everything_and_is_relative_to_cwd(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    (root / "ralph.yaml").write_text("ralph_dir: tools/loop\n")
    (root / "work").mkdir()
    p = locate(root / "work", ralph_dir="../elsewhere")
    assert p.ralph_dir == root / "elsewhere"


def test_dir_flag_pointing_at_a_file_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"--dir notes.txt: .* is a file, not a folder"):
        locate(tmp_path, ralph_dir="notes.txt")


def test_overrides_reach_the_config(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    (root / "ralph.yaml").write_text("tool: claude\nmax_iterations: 7\n")
    p = locate(root, overrides={"max_iterations": 2, "tool": None})
    assert p.config.max_iterations == 2 and p.config.tool == "claude"


def test_bad_config_stops_locate(tmp_path: Path) -> None:
    root = git_init(tmp_path / "repo")
    (root / "ralph.yaml").write_text("mode: sometimes\n")
    with pytest.raises(ConfigError, match="mode must be one of"):
        locate(root)


def test_project_is_frozen(tmp_path: Path) -> None:
    p = locate(tmp_path)
    with pytest.raises(AttributeError):
        p.root = tmp_path  # type: ignore[misc]
