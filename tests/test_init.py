from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.config import load_config
from orchestrator.memory.markdown import unclosed_fence
from orchestrator.memory.progress import Progress
from orchestrator.upkeep.scaffold import add_context_indexing, context_section

RALPH = Path(sys.executable).with_name("ralph")


def git_init(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path.resolve()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def ralph(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RALPH), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=120,
        check=False,
    )


def test_init_in_a_git_repo_creates_everything_then_changes_nothing(tmp_path: Path) -> None:
    root = git_init(tmp_path / "app")
    (root / ".gitignore").write_text("node_modules")  # no trailing newline
    out = ralph(root, "init")
    assert out.returncode == 0, out.stderr
    assert "created  ralph.yaml" in out.stdout
    assert "created  prd.json" in out.stdout
    files = snapshot(root)
    assert set(files) == {
        ".gitignore",
        "ralph.yaml",
        "prd.json",
        "progress.txt",
        "ralph/references/.gitkeep",
    }
    progress = Progress.parse(files["progress.txt"].decode())
    assert files["progress.txt"].startswith(b"# Ralph Progress Log\nStarted: ")
    assert progress.has_index and progress.index_rows == []
    assert json.loads(files["prd.json"])["userStories"][0]["passes"] is False
    assert (
        files[".gitignore"] == b"node_modules\n# ralph-index logs (ledger, transcripts, "
        b"backups)\n/ralph/logs/\n"
    )
    assert load_config(root / "ralph.yaml", {}).ralph_dir is None
    # git agrees the logs are ignored
    (root / "ralph" / "logs").mkdir()
    (root / "ralph" / "logs" / "ledger.jsonl").write_text("{}\n")
    ignored = subprocess.run(["git", "check-ignore", "-q", "ralph/logs/ledger.jsonl"], cwd=root)
    assert ignored.returncode == 0
    (root / "ralph" / "logs" / "ledger.jsonl").unlink()
    (root / "ralph" / "logs").rmdir()  # a log folder would rightly get the lock file

    again = ralph(root, "init")
    assert again.returncode == 0
    assert "Nothing to do: already initialised." in again.stdout
    assert snapshot(root) == files


def test_init_outside_git_with_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--dir", "scripts/ralph"]) == 0
    out = capsys.readouterr().out
    assert "not a git repository" in out and "Ralph folder: scripts/ralph/" in out
    assert (tmp_path / "scripts" / "ralph" / "prd.json").is_file()
    assert (tmp_path / "scripts" / "ralph" / "progress.txt").is_file()
    assert (tmp_path / "ralph" / "references" / ".gitkeep").is_file()
    assert (tmp_path / ".gitignore").read_text().endswith("/ralph/logs/\n")
    # ralph.yaml remembers the folder, so later commands find it without --dir
    assert load_config(tmp_path / "ralph.yaml", {}).ralph_dir == "scripts/ralph"
    before = snapshot(tmp_path)
    assert main(["init"]) == 0
    assert snapshot(tmp_path) == before


def test_existing_files_are_kept_and_reported(tmp_path: Path) -> None:
    root = git_init(tmp_path / "app")
    legacy = root / "scripts" / "ralph"
    legacy.mkdir(parents=True)
    (legacy / "prd.json").write_text('{"userStories": []}\n')
    (legacy / "progress.txt").write_text("# Ralph Progress Log\nStarted: x\n---\n\n## old\n")
    (root / "ralph.yaml").write_text("tool: claude\n")
    before = {k: v for k, v in snapshot(root).items()}
    out = ralph(root, "init")
    assert out.returncode == 0, out.stderr
    assert "kept     scripts/ralph/prd.json" in out.stdout
    assert "kept     ralph.yaml" in out.stdout
    assert "no Progress Index yet: `ralph migrate` adds one" in out.stdout
    after = snapshot(root)
    for name, data in before.items():
        assert after[name] == data, name


def test_force_keeps_a_bak_of_what_it_replaces(tmp_path: Path) -> None:
    root = git_init(tmp_path / "app")
    (root / "ralph.yaml").write_text("tool: claude\n")
    (root / "prd.json").write_text('{"userStories": [], "mine": true}\n')
    (root / "prd.json.bak").write_text("an older backup\n")
    out = ralph(root, "init", "--force")
    assert out.returncode == 0, out.stderr
    assert "replaced ralph.yaml" in out.stdout
    assert (root / "ralph.yaml.bak").read_text() == "tool: claude\n"
    # an existing .bak is never replaced: the next free name is used
    assert (root / "prd.json.bak").read_text() == "an older backup\n"
    assert (root / "prd.json.bak.1").read_text() == '{"userStories": [], "mine": true}\n'
    assert "US-001" in (root / "prd.json").read_text()


def test_unknown_example_is_a_usage_error(tmp_path: Path) -> None:
    out = ralph(tmp_path, "init", "--example", "nope")
    assert out.returncode == 2
    assert "--example nope: unknown example; choose one of example" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_ralph_yaml_stops_init(tmp_path: Path) -> None:
    (tmp_path / "ralph.yaml").write_text("max_iterations: many\n")
    out = ralph(tmp_path, "init")
    assert out.returncode == 2
    assert "ralph.yaml: max_iterations must be an integer, got 'many'" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ralph.yaml"]


def test_context_indexing_is_appended_once_with_diff_and_backup(tmp_path: Path) -> None:
    root = git_init(tmp_path / "app")
    legacy = root / "scripts" / "ralph"
    legacy.mkdir(parents=True)
    (legacy / "prd.json").write_text('{"userStories": []}\n')
    original = "# Ralph Agent Instructions\n\nImplement one story.\n"
    (legacy / "prompt.md").write_text(original)
    (legacy / "CLAUDE.md").write_text("# Claude\n\n## Context Indexing\nalready here\n")
    out = ralph(root, "init")
    assert out.returncode == 0, out.stderr
    assert "+## Context Indexing" in out.stdout and "--- prompt.md (before)" in out.stdout
    text = (legacy / "prompt.md").read_text()
    assert text.startswith(original) and text.count("## Context Indexing") == 1
    assert "Promote only decisions" in text
    assert (legacy / "prompt.md.bak").read_text() == original
    assert (legacy / "CLAUDE.md").read_text() == "# Claude\n\n## Context Indexing\nalready here\n"
    assert not (legacy / "CLAUDE.md.bak").exists()
    after = snapshot(root)
    assert ralph(root, "init").returncode == 0
    assert snapshot(root) == after


def test_context_indexing_lands_after_an_open_code_block_in_the_files_line_endings(
    tmp_path: Path,
) -> None:
    root = git_init(tmp_path / "app")
    legacy = root / "scripts" / "ralph"
    legacy.mkdir(parents=True)
    (legacy / "prd.json").write_text('{"userStories": []}\n')
    original = "\ufeff# Agent\r\n```bash\r\nnpm test\r\n".encode()
    (legacy / "CLAUDE.md").write_bytes(original)
    out = ralph(root, "init")
    assert out.returncode == 0, out.stderr
    data = (legacy / "CLAUDE.md").read_bytes()
    assert data.startswith(original)
    assert b"\n" not in data.replace(b"\r\n", b"")  # every line ends as the file's did
    text = data.decode().replace("\r\n", "\n")
    assert unclosed_fence(text) is None
    assert text.index("## Context Indexing") > text.index("```", text.index("npm test"))


def test_context_section_uses_the_configured_references_folder(tmp_path: Path) -> None:
    p = tmp_path / "prompt.md"
    p.write_text("no newline at end")
    action = add_context_indexing(p, "docs/memory")
    assert action.kind == "updated"
    text = p.read_text()
    assert text.startswith("no newline at end\n\n## Context Indexing\n")
    assert "docs/memory/<topic>.md" in text and "ralph/references" not in text
    assert add_context_indexing(p, "docs/memory").kind == "unchanged"
    assert context_section().startswith("## Context Indexing\n")


def test_unknown_key_in_existing_ralph_yaml_is_a_warning_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "ralph.yaml").write_text("tool: claude\nbudget:\n  promt_tokens: 3\n")
    out = ralph(tmp_path, "init")
    assert out.returncode == 0
    assert (
        "ralph: warning: ralph.yaml: unknown key 'budget.promt_tokens' "
        "(did you mean 'budget.prompt_tokens'?)"
    ) in out.stderr
    assert "kept     ralph.yaml" in out.stdout


def test_dir_flag_differing_from_ralph_yaml_is_pointed_out(tmp_path: Path) -> None:
    (tmp_path / "ralph.yaml").write_text("ralph_dir: loop\n")
    out = ralph(tmp_path, "init", "--dir", "other")
    assert out.returncode == 0
    assert "its ralph_dir is 'loop': set it to this folder or pass --dir" in out.stdout
    assert (tmp_path / "other" / "prd.json").is_file()
    assert not (tmp_path / "loop").exists()
