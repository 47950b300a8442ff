"""`ralph run` through real processes (the simulated agent, tmp git repos): ralph.sh argument
forms, exit codes, archive on branch change, the ledger record and the one-line summary.
Longer runs (a tty, faults, Ctrl-C, the example project) are in tests/e2e/test_run_e2e.py."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest
from run_helpers import LEDGER_FIELDS, SUMMARY, iterations, ledger, make_project, prd, ralph

from orchestrator.commands import run as run_cmd
from orchestrator.ledger import IterationRecord


def test_one_story_run_without_a_tty(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    out = ralph(root, "run", "--tool=sim")
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout and "iteration 1/10 ·" not in out.stdout
    assert "Ralph Iteration 1 of 10 (sim)" in out.stdout
    assert re.search(SUMMARY, out.stdout), out.stdout
    [rec] = iterations(root)
    assert set(rec) >= LEDGER_FIELDS, LEDGER_FIELDS - set(rec)
    assert rec["outcome"] == "passed" and rec["usage"]["output_tokens"] > 0
    assert rec["checks"]["ok"] and rec["committed"] and rec["completion"] == "complete"
    # The ledger line is IterationRecord.to_json() whole: it reads back into one, and
    # serialises again to the same keys, in the same order, with the same values.
    body = {k: v for k, v in rec.items() if k not in ("event", "ts", "run_id")}
    derived = ("saved_tokens", "saved_pct")
    again = IterationRecord(**{k: v for k, v in body.items() if k not in derived}).to_json()
    assert list(again.items()) == list(body.items())
    progress = (root / "scripts/ralph/progress.txt").read_text()
    assert progress.startswith("# Ralph Progress Log\nStarted: ")
    assert progress.splitlines()[2] == "---"
    assert (root / "scripts/ralph/.last-branch").read_text() == "ralph/demo\n"
    # The table at the end, with the totals row.
    assert "total" in out.stdout and "1 pass" in out.stdout


@pytest.mark.parametrize(
    ("fault", "completion"), [("early-sentinel", "false"), ("mention-sentinel", None)]
)
def test_only_a_sentinel_the_agent_states_is_a_claim_of_completion(
    tmp_path: Path, fault: str, completion: str | None
) -> None:
    root = make_project(tmp_path / "p", 2)
    out = ralph(root, "run", "--tool=sim", "1", RALPH_SIM_FAULT=fault)
    [rec] = iterations(root)
    assert rec["outcome"] == "passed" and rec["completion"] == completion
    assert ("false completion" in out.stdout + out.stderr) == (completion == "false")


@pytest.mark.parametrize(
    ("words", "tool", "max_iter", "ignored"),
    [
        ([], None, None, []),
        (["--tool", "claude", "20"], "claude", 20, []),
        (["--tool=amp", "5"], "amp", 5, []),
        (["5", "--tool", "sim", "7"], "sim", 7, []),  # the last number wins
        (["3", "please", "--tool=codex"], "codex", 3, ["please"]),
        (["12", "--mode", "full"], None, 12, []),
    ],
)
def test_ralph_sh_argument_forms(words, tool, max_iter, ignored) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run_cmd.register(sub)
    args = parser.parse_args(["run", *words])
    got_max, got_ignored = run_cmd._merge_rest(args)
    assert (args.tool, got_max, got_ignored) == (tool, max_iter, ignored)
    if "--mode" in words:
        assert args.mode == "full"


def test_iterations_exhausted_exit_1_and_last_number_wins(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    out = ralph(root, "run", "3", "--tool", "sim", "1", "extra")
    assert out.returncode == 1, out.stderr
    assert "Ralph reached max iterations (1)" in out.stdout
    assert "ignored argument 'extra'" in out.stderr
    assert [s["passes"] for s in prd(root)["userStories"]] == [True, False]
    end = ledger(root)[-1]
    assert end["event"] == "run_end" and end["status"] == "exhausted" and end["exit_code"] == 1
    # Running again continues with the story that is left.
    again = ralph(root, "run", "--tool", "sim")
    assert again.returncode == 0
    assert [r["story_id"] for r in iterations(root)] == ["US-001", "US-002"]


def test_default_tool_from_ralph_yaml_else_amp(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1, config={"tool": "sim"})
    assert ralph(root, "run").returncode == 0
    assert iterations(root)[0]["agent"] == "sim"
    bare = make_project(tmp_path / "q", 1)
    (bare / "ralph.yaml").unlink()
    out = ralph(bare, "run", PATH="/nonexistent")
    assert out.returncode == 2
    assert "agent 'amp' not found on PATH" in out.stderr


def test_missing_binary_exit_2_changes_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2, branch="ralph/new")
    rd = root / "scripts/ralph"
    (rd / ".last-branch").write_text("ralph/old\n")
    before = {p.name: p.read_bytes() for p in rd.iterdir() if p.is_file()}
    out = ralph(root, "run", "--tool", "claude", PATH=str(Path(sys.executable).parent))
    assert out.returncode == 2
    assert "agent 'claude' not found on PATH" in out.stderr
    assert {p.name: p.read_bytes() for p in rd.iterdir() if p.is_file()} == before
    assert not (rd / "archive").exists() and not (rd / "progress.txt").exists()


def test_unknown_tool_is_a_usage_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    out = ralph(root, "run", "--tool", "nope")
    assert out.returncode == 2 and "unknown agent 'nope'" in out.stderr


def test_archive_on_branch_change_then_run(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1, branch="ralph/second-feature")
    rd = root / "scripts/ralph"
    (rd / ".last-branch").write_text("ralph/first-feature\n")
    old_progress = (
        "# Ralph Progress Log\nStarted: then\n---\n\n## Progress Index\n"
        "| Topic | Reference Path |\n|---|---|\n| Auth | ralph/references/auth.md |\n"
        "\n## 2026-01-01 - US-009\n- old work\n---\n"
    )
    (rd / "progress.txt").write_text(old_progress)
    refs = root / "ralph/references"
    refs.mkdir(parents=True)
    (refs / "auth.md").write_text("# Auth\n- tokens expire\n")
    prd_before = (rd / "prd.json").read_text()
    out = ralph(root, "run", "--tool", "sim", "1")
    assert out.returncode == 0, out.stderr
    assert "Archiving previous run: ralph/first-feature" in out.stdout
    [folder] = (rd / "archive").iterdir()
    assert folder.name.endswith("-first-feature")
    assert (folder / "progress.txt").read_text() == old_progress
    assert (folder / "prd.json").read_text() == prd_before
    assert (folder / "references/auth.md").is_file()
    new = (rd / "progress.txt").read_text()
    assert new.startswith("# Ralph Progress Log\nStarted: ") and "US-009" not in new
    assert "| Auth | ralph/references/auth.md |" in new  # the index is kept
    assert (rd / ".last-branch").read_text() == "ralph/second-feature\n"
