"""orchestrator.git against real git in tmp dirs (the helpers are thin; git is the subject)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator import git

ME = git.Identity("Test Person", "test@example.invalid")


def sh(root: Path, *args: str) -> str:
    """Plain git, independent of the module under test, for setting up and checking."""
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    return root


def test_outside_git_every_question_has_no_answer(tmp_path: Path) -> None:
    assert git.toplevel(tmp_path) is None
    assert git.head(tmp_path) is None
    assert git.git_dir(tmp_path) is None
    assert git.status(tmp_path) is None
    assert git.is_clean(tmp_path) is False
    assert git.is_ignored(tmp_path, "x.log") is False
    assert git.output(["status"], tmp_path) is None


def test_run_raises_when_checked_and_reports_when_not(tmp_path: Path) -> None:
    with pytest.raises(git.GitError, match=r"git rev-parse HEAD failed in .*not a git repo"):
        git.run(["rev-parse", "HEAD"], tmp_path)
    out = git.run(["rev-parse", "HEAD"], tmp_path, check=False)
    assert out.returncode != 0 and "not a git repository" in out.stderr


def test_toplevel_from_a_subfolder_and_git_dir(repo: Path) -> None:
    sub = repo / "a" / "b"
    sub.mkdir(parents=True)
    assert git.toplevel(sub) == repo.resolve()
    assert git.git_dir(sub) == (repo / ".git").resolve()


def test_head_before_and_after_the_first_commit(repo: Path) -> None:
    assert git.head(repo) is None
    (repo / "f.txt").write_text("one\n")
    assert git.is_clean(repo) is False
    git.commit_all(repo, "first", ME)
    assert git.head(repo) == sh(repo, "rev-parse", "HEAD").strip()
    assert git.is_clean(repo) is True
    # The identity went on the commit only, never into the repository's config.
    assert sh(repo, "log", "-1", "--format=%an <%ae>|%s").strip() == (
        "Test Person <test@example.invalid>|first"
    )
    assert "Test Person" not in (repo / ".git" / "config").read_text()


def test_status_lists_modified_untracked_and_renamed_with_their_source(repo: Path) -> None:
    (repo / "keep.txt").write_text("k\n")
    (repo / "old name.txt").write_text("r\n")
    (repo / ".gitignore").write_text("*.log\n")
    git.commit_all(repo, "base", ME)
    (repo / "keep.txt").write_text("changed\n")
    (repo / "new dir").mkdir()
    (repo / "new dir" / "n.txt").write_text("n\n")
    (repo / "skip.log").write_text("ignored\n")
    sh(repo, "mv", "old name.txt", "moved.txt")
    entries = {e.path: e for e in git.status(repo) or []}
    assert set(entries) == {"keep.txt", "new dir/n.txt", "moved.txt"}
    assert entries["keep.txt"].code == " M" and entries["keep.txt"].orig is None
    assert entries["new dir/n.txt"].code == "??"
    assert entries["moved.txt"].code[0] == "R" and entries["moved.txt"].orig == "old name.txt"


def test_is_ignored_follows_gitignore_even_for_tracked_paths(repo: Path) -> None:
    (repo / ".gitignore").write_text("/ralph/logs/\n")
    assert git.is_ignored(repo, "ralph/logs/ledger.jsonl") is True
    assert git.is_ignored(repo, "ralph/prd.json") is False


def test_output_is_none_when_git_is_missing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo))  # no git on PATH
    assert git.output(["status"], repo) is None
    assert git.head(repo) is None
    with pytest.raises(git.GitError, match="cannot run git"):
        git.run(["status"], repo)


def test_undecodable_path_bytes_do_not_crash(repo: Path) -> None:
    name = b"caf\xe9.txt"  # Latin-1, not UTF-8
    try:
        (repo / name.decode("utf-8", "surrogateescape")).write_text("x")
    except (OSError, UnicodeEncodeError):
        pytest.skip("file system refuses non-UTF-8 names")
    entries = git.status(repo) or []
    assert len(entries) == 1 and entries[0].path.startswith("caf")


def test_tracked_files_are_what_git_tracks(repo: Path, tmp_path: Path) -> None:
    (repo / "src" / "api").mkdir(parents=True)
    (repo / "src" / "api" / "user profile.ts").write_text("x\n")
    (repo / "notes.txt").write_text("untracked\n")
    sh(repo, "add", "src")
    sh(repo, "commit", "-qm", "add")
    files = git.tracked_files(repo)
    assert "src/api/user profile.ts" in files  # -z: names with spaces kept whole
    assert "notes.txt" not in files
    assert git.tracked_files(repo, limit=1) == files[:1]
    assert git.tracked_files(tmp_path / "nowhere") == []
