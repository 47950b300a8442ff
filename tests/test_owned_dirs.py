"""What ralph-index writes never shows up in git, from the first command on, without any
edit of the user's .gitignore: each folder we own carries a `.gitignore` of `*`.

Real git repositories, real `ralph` processes; the agent that "commits all changes" is a
real script that runs `git add -A` (tests/fakes/commit_all_agent.py).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import yaml
from run_helpers import git, make_project, ralph

from orchestrator import fsutil, project

FAKES = Path(__file__).resolve().parent / "fakes"


def bare_project(root: Path, n: int = 3, config: dict | None = None) -> Path:
    """make_project without the /ralph/logs/ line in .gitignore (a ralph.sh user's repo)."""
    make_project(root, n, config=config)
    (root / ".gitignore").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "no .gitignore")
    return root


def porcelain(root: Path) -> list[str]:
    return git(root, "status", "--porcelain", "--untracked-files=all").splitlines()


def use_commit_all_agent(root: Path) -> None:
    cfg = yaml.safe_load((root / "ralph.yaml").read_text())
    cfg["agents"]["commitall"] = {
        "command": [sys.executable, str(FAKES / "commit_all_agent.py"), "scripts/ralph"]
    }
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    git(root, "commit", "-qam", "commit-all agent")


def test_sim_run_leaves_only_what_ralph_sh_would(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "p")
    res = ralph(root, "run", "--tool", "sim", "2")
    assert res.returncode == 1, res.stderr  # 2 of 3 stories: iterations used up
    # ralph.sh writes .last-branch into the Ralph folder too and leaves it to the user.
    assert porcelain(root) == ["?? scripts/ralph/.last-branch"]
    assert not (root / ".gitignore").exists()  # the user's .gitignore was not created
    logs = root / "ralph" / "logs"
    assert (logs / ".gitignore").read_text() == fsutil.IGNORE_ALL
    assert (logs / "ledger.jsonl").is_file() and (logs / "ralph.lock").is_file()
    assert git(root, "check-ignore", "ralph/logs/ledger.jsonl").strip() == "ralph/logs/ledger.jsonl"


def test_agent_that_commits_all_changes_commits_nothing_of_ours(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "p")
    use_commit_all_agent(root)
    res = ralph(root, "run", "--tool", "commitall", "2")
    assert res.returncode == 1, res.stdout + res.stderr
    tracked = git(root, "ls-files").splitlines()
    assert "us-001.txt" in tracked and "us-002.txt" in tracked
    assert not [p for p in tracked if p.startswith("ralph/")], tracked
    # Same as under ralph.sh: it wrote .last-branch before the agent's `git add -A`.
    assert "scripts/ralph/.last-branch" in tracked
    assert porcelain(root) == []


def test_status_on_a_fresh_project_leaves_the_tree_clean(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "p")
    res = ralph(root, "status")
    assert res.returncode == 0, res.stderr
    assert porcelain(root) == []


def test_log_folder_of_an_older_version_gets_its_gitignore(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "p", n=1)
    old = root / "ralph" / "logs"
    old.mkdir(parents=True)
    (old / "ledger.jsonl").write_text("")
    assert porcelain(root) == ["?? ralph/logs/ledger.jsonl"]
    assert ralph(root, "run", "--tool", "sim", "1").returncode == 0
    assert porcelain(root) == ["?? scripts/ralph/.last-branch"]


def test_a_gitignore_the_user_put_in_the_log_folder_is_kept(tmp_path: Path) -> None:
    root = bare_project(tmp_path / "p")
    logs = root / "ralph" / "logs"
    logs.mkdir(parents=True)
    (logs / ".gitignore").write_text("ledger.jsonl\n")
    assert ralph(root, "run", "--tool", "sim", "1").returncode == 1
    assert (logs / ".gitignore").read_text() == "ledger.jsonl\n"


def test_log_dir_holding_the_users_files_is_never_hidden(tmp_path: Path) -> None:
    # ralph.yaml refuses such a log.dir when it knows the folders (tests/test_config.py);
    # a Ralph folder found by searching (tools/ralph) is only known here.
    root = bare_project(tmp_path / "p", config={"log": {"dir": "tools"}})
    git(root, "mv", "scripts", "tools")
    git(root, "commit", "-qm", "Ralph folder in tools/")
    proj = project.locate(root)
    assert proj.ralph_dir == root / "tools" / "ralph"
    project.ensure_logs_dir(proj)
    assert not (root / "tools" / ".gitignore").exists()
    assert porcelain(root) == []


def test_concurrent_creation_gives_one_folder_with_its_gitignore(tmp_path: Path) -> None:
    target = tmp_path / "a" / "logs"
    errors: list[BaseException] = []

    def make() -> None:
        try:
            fsutil.make_owned_dir(target)
        except BaseException as exc:  # collected: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert (target / ".gitignore").read_text() == fsutil.IGNORE_ALL
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["logs"]  # no temp left
