"""Adversarial cases for the ralph.sh drop-in: git-ignored logs, `--compat`, the Ralph-folder
search and the fast CLI. Each case runs real `ralph` processes on real git repositories
(pexpect for the pty and signal cases) and checks: no traceback, no hang, a clear message
where something is refused, and nothing of ours in the user's git history.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import yaml
from run_helpers import env, git, make_project, ralph

from orchestrator import fsutil

FAKES = Path(__file__).resolve().parents[1] / "fakes"
COMMIT_ALL = [sys.executable, str(FAKES / "commit_all_agent.py"), "scripts/ralph"]


def bare(root: Path, n: int = 2, **config) -> Path:
    """A ralph.sh user's repo: scripts/ralph/prd.json, no .gitignore, a commit-all agent."""
    make_project(root, n, config=config)
    (root / ".gitignore").unlink()
    cfg = yaml.safe_load((root / "ralph.yaml").read_text())
    cfg["agents"]["commitall"] = {"command": COMMIT_ALL}
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "ralph.sh user")
    return root


def tracked(root: Path) -> list[str]:
    return git(root, "ls-files").splitlines()


def no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stderr[-3000:]


# ---- git-ignored logs ----------------------------------------------------------------------


def test_root_gitignore_unignoring_our_folder_does_not_win(tmp_path: Path) -> None:
    # A user's `!` rules at the root are overridden by the folder's own `*` (git reads the
    # deepest .gitignore last), so `git add -A` still takes nothing of ours.
    root = bare(tmp_path / "p")
    (root / ".gitignore").write_text("!ralph/\n!ralph/logs/\n!ralph/logs/**\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "negations")
    res = ralph(root, "run", "--tool", "commitall", "2")
    no_traceback(res)
    assert not [p for p in tracked(root) if p.startswith("ralph/logs")]


def test_deleted_gitignore_of_the_log_folder_comes_back_on_the_next_run(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", n=3)
    assert ralph(root, "run", "--tool", "commitall", "1").returncode == 1
    (root / "ralph" / "logs" / ".gitignore").unlink()
    res = ralph(root, "run", "--tool", "commitall", "1")
    no_traceback(res)
    assert (root / "ralph" / "logs" / ".gitignore").read_text() == fsutil.IGNORE_ALL
    assert not [p for p in tracked(root) if p.startswith("ralph/logs")]


def test_custom_hidden_log_dir_is_ignored_too(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", log={"dir": ".cache/ralph-logs"})
    res = ralph(root, "run", "--tool", "commitall", "2")
    no_traceback(res)
    assert (root / ".cache" / "ralph-logs" / "ledger.jsonl").is_file()
    assert not [p for p in tracked(root) if p.startswith(".cache")]


def test_log_dir_at_the_root_never_hides_the_project(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", log={"dir": "."})
    res = ralph(root, "run", "--tool", "commitall", "1")
    no_traceback(res)
    # Refused before anything is written: no ledger among the user's files, no `*` here.
    assert res.returncode == 2 and "log.dir must be a folder of its own" in res.stderr
    assert not (root / ".gitignore").exists() and not (root / "ledger.jsonl").exists()
    assert "scripts/ralph/prd.json" in tracked(root)


def test_log_folder_that_is_a_file_is_one_clear_error(tmp_path: Path) -> None:
    root = bare(tmp_path / "p")
    (root / "ralph").mkdir()
    (root / "ralph" / "logs").write_text("not a folder\n")
    res = ralph(root, "run", "--tool", "commitall", "1")
    no_traceback(res)
    assert res.returncode == 2
    assert "ralph/logs: is a file" in res.stderr and "log.dir" in res.stderr
    assert (root / "ralph" / "logs").read_text() == "not a folder\n"


def test_crash_leftover_temp_folder_does_not_block_or_show(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", n=1)
    stale = root / "ralph" / ".logs.abc123.new"  # what a kill during creation leaves
    stale.mkdir(parents=True)
    (stale / ".gitignore").write_text(fsutil.IGNORE_ALL)
    res = ralph(root, "run", "--tool", "commitall", "1")
    no_traceback(res)
    assert res.returncode == 0
    assert git(root, "status", "--porcelain") == ""


# ---- --compat -----------------------------------------------------------------------------


def test_compat_after_the_number_and_with_quiet(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", n=3)
    res = ralph(root, "run", "2", "-q", "--tool", "commitall", "--compat")
    no_traceback(res)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert "Iteration 2 complete. Continuing..." in lines
    assert lines[-2] == "Ralph reached max iterations (2) without completing all tasks."


def test_compat_keeps_130_for_ctrl_c(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", n=1)
    cfg = yaml.safe_load((root / "ralph.yaml").read_text())
    cfg["agents"]["slow"] = {"command": ["sh", "-c", "echo started; sleep 60"]}
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    child = pexpect.spawn(
        sys.executable,
        ["-m", "orchestrator", "run", "--compat", "--tool", "slow", "1"],
        cwd=str(root),
        env=env(),
        encoding="utf-8",
        timeout=60,
    )
    child.expect("started")
    child.kill(signal.SIGINT)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "Traceback" not in (child.before or "")


def test_compat_config_value_that_is_not_a_boolean(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", compat="sometimes")
    res = ralph(root, "run", "--tool", "commitall", "1")
    no_traceback(res)
    assert res.returncode == 2 and "compat" in res.stderr


def test_compat_with_prd_already_complete(tmp_path: Path) -> None:
    root = bare(tmp_path / "p", n=1)
    prd = root / "scripts" / "ralph" / "prd.json"
    data = json.loads(prd.read_text())
    data["userStories"][0]["passes"] = True
    prd.write_text(json.dumps(data))
    res = ralph(root, "run", "--compat", "--tool", "commitall", "3")
    no_traceback(res)
    assert res.returncode == 0
    assert res.stdout.splitlines()[-2:] == [
        "Ralph completed all tasks!",
        "Completed at iteration 0 of 3",
    ]


# ---- finding the Ralph folder --------------------------------------------------------------


def _repo(root: Path) -> Path:
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def _prd(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    story = {"id": "US-001", "title": "t", "priority": 1, "passes": False}
    (folder / "prd.json").write_text(json.dumps({"userStories": [story]}))


def _status(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "status", "--json", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_symlink_loop_in_the_tree_does_not_hang_the_search(tmp_path: Path) -> None:
    root = _repo(tmp_path / "p")
    _prd(root / "tools" / "ralph")
    os.symlink(root, root / "loop")
    os.symlink(root / "tools", root / "tools" / "again")
    res = _status(root)
    no_traceback(res)
    assert json.loads(res.stdout)["prd"] == "tools/ralph/prd.json"


def test_folder_name_with_spaces_and_unicode(tmp_path: Path) -> None:
    root = _repo(tmp_path / "p")
    _prd(root / "my ralph é")
    res = _status(root)
    no_traceback(res)
    assert json.loads(res.stdout)["prd"] == "my ralph é/prd.json"
    assert "my ralph é" in res.stderr


def test_prd_json_that_is_a_folder_is_no_candidate(tmp_path: Path) -> None:
    root = _repo(tmp_path / "p")
    (root / "tools" / "ralph" / "prd.json").mkdir(parents=True)
    _prd(root / "ralph")
    res = _status(root)
    no_traceback(res)
    assert json.loads(res.stdout)["prd"] == "ralph/prd.json"


def test_two_folders_with_only_progress_txt_are_ambiguous(tmp_path: Path) -> None:
    root = _repo(tmp_path / "p")
    for d in ("scripts/ralph", "tools/ralph"):
        (root / d).mkdir(parents=True)
        (root / d / "progress.txt").write_text("# Ralph Progress Log\n")
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator", "migrate", "--dry-run"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    no_traceback(res)
    assert res.returncode == 2
    assert "scripts/ralph" in res.stderr and "tools/ralph" in res.stderr
    assert "--dir" in res.stderr


def test_missing_prd_message_names_a_flag_that_works(tmp_path: Path) -> None:
    root = _repo(tmp_path / "p")
    elsewhere = root / "plans" / "deep" / "x"  # depth 3: not searched
    _prd(elsewhere)
    res = _status(root)
    no_traceback(res)
    assert res.returncode == 2 and "--dir" in res.stderr and "--ralph-dir" not in res.stderr
    fixed = _status(root, "--dir", "plans/deep/x")
    assert fixed.returncode == 0, fixed.stderr


# ---- the fast CLI --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,code",
    [
        (["--version", "run"], 0),
        (["", "run"], 2),
        (["--", "run"], 2),
        (["run", "--version"], 2),
        (["-x"], 2),
    ],
)
def test_odd_top_level_arguments(tmp_path: Path, argv: list[str], code: int) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    no_traceback(res)
    assert res.returncode == code, res.stderr
