"""`ralph run` through real processes: a tty via pexpect, the simulated agent, tmp git repos."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pexpect
import pytest
from run_helpers import REPO, RALPH, env, git, iterations, ledger, make_project, prd, ralph

from orchestrator.commands import run as run_cmd

LEDGER_FIELDS = {
    "event", "ts", "run_id", "iteration", "story_id", "story_title", "mode", "agent", "model",
    "prompt_tokens", "full_history_tokens", "saved_tokens", "saved_pct",
    "selected_references", "usage", "cost_usd", "duration_s", "exit_code", "outcome",
    "checks", "updated_references",
}


def test_sim_run_to_completion_on_a_tty(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 4, sim_args=["--delay", "0.3"])
    child = pexpect.spawn(RALPH[0], [*RALPH[1:], "run", "--tool", "sim", "10"], cwd=str(root),
                          env=env(), encoding="utf-8", timeout=120, dimensions=(40, 200))
    child.expect(r"Ralph Iteration 1 of 10 \(sim\)")
    # The live status line: story, iteration i/N, stories passed x/y, elapsed.
    child.expect(r"US-001 · iteration 1/10 · stories 0/4 passed · \d+s")
    child.expect(r"US-001 passed · prompt [\d.k]+ tok \(full history [\d.k]+: saved \d+%\) · "
                 r"agent [\d.k]+ in / [\d.k]+ out · \$[\d.]+ · \d+s")
    child.expect(r"stories 1/4 passed")
    child.expect("Ralph completed all tasks!")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert all(s["passes"] for s in prd(root)["userStories"])
    its = iterations(root)
    assert [r["story_id"] for r in its] == ["US-001", "US-002", "US-003", "US-004"]
    assert all(r["outcome"] == "passed" and r["committed"] for r in its)
    for r in its:
        assert LEDGER_FIELDS <= set(r), LEDGER_FIELDS - set(r)
        assert r["usage"]["input_tokens"] > 0 and r["cost_usd"] > 0
        assert r["prompt_tokens"] > 0 and r["saved_tokens"] == (
            r["full_history_tokens"] - r["prompt_tokens"])
        transcript = root / r["transcript"]
        assert transcript.is_file() and '"type":"result"' in transcript.read_text().replace(
            " ", "")
    events = [r["event"] for r in ledger(root)]
    assert events[0] == "run_start" and events[-1] == "run_end"
    # One commit per story, made by the agent.
    assert git(root, "log", "--oneline").count("feat: US-") == 4


def test_without_a_tty_no_status_line_and_progress_header(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    out = ralph(root, "run", "--tool=sim")
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout and "iteration 1/10 ·" not in out.stdout
    assert "Ralph Iteration 2 of 10 (sim)" in out.stdout
    progress = (root / "scripts/ralph/progress.txt").read_text()
    assert progress.startswith("# Ralph Progress Log\nStarted: ")
    assert progress.splitlines()[2] == "---"
    assert (root / "scripts/ralph/.last-branch").read_text() == "ralph/demo\n"
    # The table at the end, with the totals row.
    assert "total" in out.stdout and "2 pass" in out.stdout


@pytest.mark.parametrize(("words", "tool", "max_iter", "ignored"), [
    ([], None, None, []),
    (["--tool", "claude", "20"], "claude", 20, []),
    (["--tool=amp", "5"], "amp", 5, []),
    (["5", "--tool", "sim", "7"], "sim", 7, []),       # the last number wins
    (["3", "please", "--tool=codex"], "codex", 3, ["please"]),
    (["12", "--mode", "full"], None, 12, []),
])
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
    root = make_project(tmp_path / "p", 3)
    out = ralph(root, "run", "1", "--tool", "sim", "2", "extra")
    assert out.returncode == 1, out.stderr
    assert "Ralph reached max iterations (2)" in out.stdout
    assert "ignored argument 'extra'" in out.stderr
    assert [s["passes"] for s in prd(root)["userStories"]] == [True, True, False]
    end = ledger(root)[-1]
    assert end["event"] == "run_end" and end["status"] == "exhausted" and end["exit_code"] == 1
    # Running again continues with the story that is left.
    again = ralph(root, "run", "--tool", "sim")
    assert again.returncode == 0
    assert [r["story_id"] for r in iterations(root)] == ["US-001", "US-002", "US-003"]


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
    old_progress = ("# Ralph Progress Log\nStarted: then\n---\n\n## Progress Index\n"
                    "| Topic | Reference Path |\n|---|---|\n| Auth | ralph/references/auth.md |\n"
                    "\n## 2026-01-01 - US-009\n- old work\n---\n")
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
    assert "| Auth | ralph/references/auth.md |" in new     # the index is kept
    assert (rd / ".last-branch").read_text() == "ralph/second-feature\n"


def test_false_completion_is_ignored_and_the_loop_goes_on(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 3, sim_env={"RALPH_SIM_FAULT": "early-sentinel",
                                                    "RALPH_SIM_FAULT_STORY": "US-001"})
    out = ralph(root, "run", "--tool", "sim")
    assert out.returncode == 0, out.stderr
    assert "false completion" in out.stdout
    its = iterations(root)
    assert its[0]["completion"] == "false"
    assert its[-1]["completion"] == "complete"
    assert len(its) == 3 and all(s["passes"] for s in prd(root)["userStories"])


def test_echoed_sentinel_in_output_does_not_complete(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2, sim_env={"RALPH_SIM_FAULT": "echo-prompt,noop"})
    (root / "scripts/ralph/prd.json").write_text(
        (root / "scripts/ralph/prd.json").read_text().replace(
            "feature 1 works", "reply <promise>COMPLETE</promise> when all done"))
    out = ralph(root, "run", "--tool", "sim", "2", "--stuck-after", "5")
    assert out.returncode == 1, out.stdout + out.stderr
    assert all(r["completion"] is None for r in iterations(root))


def test_recipe_box_example_if_present(tmp_path: Path) -> None:
    src = REPO / "examples" / "recipe-box"
    if not (src / "scripts/ralph/prd.json").is_file():
        pytest.skip("examples/recipe-box not in this checkout")
    root = tmp_path / "recipe-box"
    shutil.copytree(src, root)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    total = len(json.loads((root / "scripts/ralph/prd.json").read_text())["userStories"])
    out = ralph(root, "run", "--tool", "sim", "-q", str(total + 2), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    its = iterations(root)
    assert len(its) == total and all(r["outcome"] == "passed" for r in its)
    assert its[-1]["saved_pct"] > 0
