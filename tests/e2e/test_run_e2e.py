"""`ralph run` end to end with the simulated agent's fault knobs: timeouts, crashes, limits,
transient errors, lost history, budgets, a real Ctrl-C, and two runs at once.

Every test spawns the real CLI (`python -m orchestrator run`) in a tmp git repo; the agent is
the simulated one, spawned by the runner through a real pty.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pexpect
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_helpers import (  # noqa: E402
    LEDGER_FIELDS,
    RALPH,
    REPO,
    SUMMARY,
    env,
    git,
    iterations,
    ledger,
    make_project,
    prd,
    ralph,
)


def _events(root: Path, name: str) -> list[dict]:
    return [r for r in ledger(root) if r["event"] == name]


def test_idle_timeout_is_recorded_and_the_loop_goes_on(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        2,
        config={"timeouts": {"idle": 10, "iteration": 120}},
        sim_env={"RALPH_SIM_FAULT": "hang", "RALPH_SIM_FAULT_TIMES": "1"},
    )
    start = time.monotonic()
    out = ralph(root, "run", "--tool", "sim", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert time.monotonic() - start < 90
    its = iterations(root)
    assert its[0]["outcome"] == "timeout" and its[0]["timed_out"] == "idle"
    assert [r["outcome"] for r in its[1:]] == ["passed", "passed"]


def test_wall_timeout(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1, sim_env={"RALPH_SIM_FAULT": "hang-after-output"})
    out = ralph(root, "run", "--tool", "sim", "1", "--timeout", "8", "--idle-timeout", "600")
    assert out.returncode == 1
    [it] = iterations(root)
    assert (it["outcome"], it["timed_out"]) == ("timeout", "wall")
    assert 7.5 < it["duration_s"] < 40


def test_crash_retries_then_stuck_exit_4(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        2,
        config={"retries": {"transient": 2, "backoff": 0}, "stuck_after": 2},
        sim_env={"RALPH_SIM_FAULT": "crash"},
    )
    out = ralph(root, "run", "--tool", "sim", "10")
    assert out.returncode == 4, out.stdout + out.stderr
    assert (
        "stuck: 2 iterations in a row with no story passed, no commit and no file changed"
        in out.stderr
    )
    assert "exit 2" in out.stderr  # what was seen: the agent's exit code
    its = iterations(root)
    assert [r["outcome"] for r in its] == ["failed", "failed"]
    assert all(r["attempts"] == 3 for r in its)
    assert len(_events(root, "transient_retry")) == 4
    assert ledger(root)[-1]["status"] == "stuck"


def test_transient_error_retried_once_then_passes(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        1,
        config={"retries": {"transient": 3, "backoff": 0}},
        sim_env={"RALPH_SIM_FAULT": "transient", "RALPH_SIM_FAULT_TIMES": "1"},
    )
    out = ralph(root, "run", "--tool", "sim")
    assert out.returncode == 0, out.stdout + out.stderr
    [retry] = _events(root, "transient_retry")
    assert retry["exit_code"] == 1 and "No messages returned" in retry["error"]
    [it] = iterations(root)
    assert it["outcome"] == "passed" and it["attempts"] == 2 and it["iteration"] == 1


def test_usage_limit_waits_for_reset_then_retries_same_story(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        2,
        sim_env={
            "RALPH_SIM_FAULT": "limit-event",
            "RALPH_SIM_FAULT_TIMES": "1",
            "RALPH_SIM_LIMIT_RESET": "2",
        },
    )
    out = ralph(root, "run", "--tool", "sim", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "usage limit" in out.stdout and "waiting" in out.stdout
    [wait] = _events(root, "limit_wait")
    assert wait["story_id"] == "US-001" and wait["reset_at"] and wait["waited_s"] <= 10
    # The wait was not an iteration: two iterations did the two stories within max 2.
    assert [(r["iteration"], r["story_id"], r["outcome"]) for r in iterations(root)] == [
        (1, "US-001", "passed"),
        (2, "US-002", "passed"),
    ]


def test_limit_without_reset_time_uses_fallback_wait(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        1,
        config={"limits": {"fallback_wait": 1}},
        sim_env={"RALPH_SIM_FAULT": "limit-429", "RALPH_SIM_FAULT_TIMES": "1"},
    )
    out = ralph(root, "run", "--tool", "sim")
    assert out.returncode == 0, out.stdout + out.stderr
    [wait] = _events(root, "limit_wait")
    assert wait["reset_at"] is None and wait["waited_s"] == 1 and "fallback" in wait["source"]


def test_limit_beyond_max_wait_stops_with_exit_3(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        1,
        config={"limits": {"max_wait": 30}},
        sim_env={"RALPH_SIM_FAULT": "limit-text"},
    )
    out = ralph(root, "run", "--tool", "sim")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "limits.max_wait" in out.stderr
    assert iterations(root) == [] and not prd(root)["userStories"][0]["passes"]


def test_lost_history_restored_and_checks_policies(tmp_path: Path) -> None:
    fault = {"RALPH_SIM_FAULT": "truncate-progress", "RALPH_SIM_FAULT_STORY": "US-002"}
    root = make_project(tmp_path / "p", 3, sim_env=fault)
    out = ralph(root, "run", "--tool", "sim", "--checks", "retry")
    assert out.returncode == 0, out.stdout + out.stderr
    progress = (root / "scripts/ralph/progress.txt").read_text()
    assert "US-001" in progress and "US-002" in progress  # history restored
    its = iterations(root)
    assert its[1]["checks"]["restored"] and not its[1]["checks"]["ok"]
    assert "check (history_lost)" in out.stdout
    # retry: the next prompt carries the fix notes.
    run_dir = root / Path(its[2]["transcript"]).parent
    assert "Fix:" in (run_dir / "iteration-3.prompt.md").read_text()
    assert "Fix:" not in (run_dir / "iteration-2.prompt.md").read_text()

    failing = make_project(tmp_path / "q", 3, sim_env=fault)
    out = ralph(failing, "run", "--tool", "sim", "--checks", "fail")
    assert out.returncode == 4 and "checks: fail" in out.stderr
    assert len(iterations(failing)) == 2


def test_token_budget_stops_before_overrun_exit_3(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 3)
    out = ralph(root, "run", "--tool", "sim", "--budget-tokens", "1500")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "token budget" in out.stderr and "would overrun" in out.stderr
    its = iterations(root)
    assert len(its) == 1
    assert ledger(root)[-1]["status"] == "budgetexhausted"


def test_no_progress_loop_is_stopped(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2, sim_env={"RALPH_SIM_FAULT": "noop"})
    out = ralph(root, "run", "--tool", "sim", "--stuck-after", "2")
    assert out.returncode == 4
    assert [r["outcome"] for r in iterations(root)] == ["no_progress", "no_progress"]


def _spawn(root: Path, *args: str) -> pexpect.spawn:
    return pexpect.spawn(
        RALPH[0],
        [*RALPH[1:], "run", *args],
        cwd=str(root),
        env=env(),
        encoding="utf-8",
        timeout=90,
        dimensions=(40, 200),
    )


def test_ctrl_c_interrupts_records_and_keeps_files_intact(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        2,
        sim_env={"RALPH_SIM_FAULT": "hang-after-output", "RALPH_SIM_FAULT_TIMES": "1"},
    )
    rd = root / "scripts/ralph"
    (rd / "progress.txt").write_text("# Ralph Progress Log\nStarted: x\n---\n")
    (rd / ".last-branch").write_text("ralph/demo\n")
    before = {p.name: p.read_bytes() for p in rd.iterdir() if p.is_file()}
    child = _spawn(root, "--tool", "sim")
    child.expect("Read ")  # the agent is at work (then hangs)
    child.sendintr()  # a real Ctrl-C on the terminal
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert {p.name: p.read_bytes() for p in rd.iterdir() if p.is_file()} == before
    [it] = iterations(root)
    assert it["outcome"] == "interrupted"
    assert ledger(root)[-1]["status"] == "interrupted"
    # The lock was released and the run continues where it stopped.
    again = ralph(root, "run", "--tool", "sim")
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(s["passes"] for s in prd(root)["userStories"])


def test_two_runs_at_once_second_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1, sim_env={"RALPH_SIM_FAULT": "hang-after-output"})
    first = _spawn(root, "--tool", "sim")
    first.expect("Read ")
    second = ralph(root, "run", "--tool", "sim")
    assert second.returncode == 2
    assert "another ralph run" in second.stderr and str(first.pid) in second.stderr
    first.sendintr()
    first.expect(pexpect.EOF)
    first.close()
    assert first.exitstatus == 130
    assert len([r for r in ledger(root) if r["event"] == "run_start"]) == 1


def _procs_in(root: Path) -> list[int]:
    """Pids of live processes whose working directory is `root` (the agent runs there)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if Path(os.readlink(d / "cwd")) == root.resolve():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def test_sigterm_ends_the_agent_and_records_the_iteration(tmp_path: Path) -> None:
    """A supervisor's SIGTERM is handled like Ctrl-C: no orphan agent keeps editing the repo."""
    root = make_project(tmp_path / "p", 1, sim_env={"RALPH_SIM_FAULT": "hang-after-output"})
    child = _spawn(root, "--tool", "sim")
    child.expect("Read ")
    assert _procs_in(root)
    os.kill(child.pid, signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 143  # 128 + SIGTERM (stopsignals.py)
    assert _procs_in(root) == []
    assert iterations(root)[0]["outcome"] == "interrupted"


def test_sim_run_to_completion_on_a_tty(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 4, sim_args=["--delay", "0.3"])
    child = pexpect.spawn(
        RALPH[0],
        [*RALPH[1:], "run", "--tool", "sim", "10"],
        cwd=str(root),
        env=env(),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 200),
    )
    child.expect(r"Ralph Iteration 1 of 10 \(sim\)")
    # The live status line: story, iteration i/N, stories passed x/y, elapsed.
    child.expect(r"US-001 · iteration 1/10 · stories 0/4 passed · \d+s")
    child.expect(SUMMARY)
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
        assert set(r) >= LEDGER_FIELDS, LEDGER_FIELDS - set(r)
        assert r["usage"]["input_tokens"] > 0 and r["cost_usd"] > 0
        assert r["prompt_tokens"] > 0 and r["saved_tokens"] == (
            r["full_history_tokens"] - r["prompt_tokens"]
        )
        transcript = root / r["transcript"]
        assert transcript.is_file() and '"type":"result"' in transcript.read_text().replace(" ", "")
    events = [r["event"] for r in ledger(root)]
    assert events[0] == "run_start" and events[-1] == "run_end"
    # One commit per story, made by the agent.
    assert git(root, "log", "--oneline").count("feat: US-") == 4


def test_false_completion_is_ignored_and_the_loop_goes_on(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        3,
        sim_env={"RALPH_SIM_FAULT": "early-sentinel", "RALPH_SIM_FAULT_STORY": "US-001"},
    )
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
        (root / "scripts/ralph/prd.json")
        .read_text()
        .replace("feature 1 works", "reply <promise>COMPLETE</promise> when all done")
    )
    out = ralph(root, "run", "--tool", "sim", "2", "--stuck-after", "5")
    assert out.returncode == 1, out.stdout + out.stderr
    assert all(r["completion"] is None for r in iterations(root))


@pytest.mark.e2e
@pytest.mark.timeout(1200)  # the whole 30-story example, twice for the demo
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
    out = ralph(
        root, "run", "--tool", "sim", "--mode", "indexed", "-q", str(total + 2), timeout=900
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    its = iterations(root)
    assert len(its) == total and all(r["outcome"] == "passed" for r in its)
    assert its[-1]["saved_pct"] > 0
