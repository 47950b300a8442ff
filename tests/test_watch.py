"""Watching a run from another process: `ralph status` says a run is live, `ralph status
--follow` shows it (rich Live on a terminal, plain lines in a pipe) and exits when it ends."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pexpect
from run_helpers import RALPH, env, make_project, ralph

from orchestrator import ledger
from orchestrator.project import locate
from orchestrator.run import watch


def _start_slow_run(tmp_path: Path, stories: int = 2) -> tuple[Path, subprocess.Popen]:
    """A real `ralph run --tool sim` whose agent pauses after each step (a few seconds per
    iteration), started in its own process; returns once it holds the project lock."""
    root = make_project(tmp_path / "p", stories, sim_args=["--delay", "0.25"])
    proc = subprocess.Popen(
        [*RALPH, "run", "--tool", "sim"],
        cwd=root,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    side = root / "ralph" / "logs" / "ralph.lock.json"
    deadline = time.monotonic() + 30
    while not (side.exists() and list((root / "ralph" / "logs").glob("*/iteration-1.log"))):
        assert proc.poll() is None, "the run ended before it could be watched"
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    return root, proc


def test_status_says_a_run_is_live_and_follow_pipes_plain_lines(tmp_path: Path) -> None:
    root, proc = _start_slow_run(tmp_path, stories=3)
    try:
        follow = subprocess.Popen(
            [*RALPH, "status", "--follow", "--interval", "0.2"],
            cwd=root,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        live = json.loads(ralph(root, "status", "--json").stdout)["live"]
        assert live["pid"] == proc.pid and live["story_id"] in ("US-001", "US-002", "US-003")
        assert live["since"] and live["iteration"] == int(live["story_id"][-1])
        res = ralph(root, "status")
        assert res.returncode == 0, res.stderr
        assert "run live: " in res.stdout and f"pid {proc.pid}" in res.stdout
        # The run goes on meanwhile: which story is live depends on the machine's speed.
        assert re.search(r"story US-00([123]) · iteration \1/10", res.stdout), res.stdout

        out, err = follow.communicate(timeout=120)
        assert follow.returncode == 0, err
        assert "\x1b[" not in out  # a pipe gets no control codes
        assert f"live run {live['run_id']} · pid {proc.pid} · sim" in out
        assert "story US-003 Add feature 3 · iteration 3/10" in out
        assert "US-003 is done" in out  # the agent's own lines, through its display filter
        assert out.rstrip().splitlines()[-1].startswith("ended: complete (exit 0)")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    after = ralph(root, "status")
    assert "run live" not in after.stdout and "(complete)" in after.stdout


def test_follow_in_a_terminal_updates_in_place_and_exits_with_the_run(tmp_path: Path) -> None:
    root, proc = _start_slow_run(tmp_path)
    try:
        child = pexpect.spawn(
            sys.executable,
            [*RALPH[1:], "status", "--follow", "--interval", "0.2"],
            cwd=str(root),
            env=env(COLUMNS="120", LINES="40"),
            encoding="utf-8",
            dimensions=(40, 120),
            timeout=90,
        )
        child.expect("story US-001 Add feature 1")
        child.expect(r"tokens [\d.k]+")
        child.expect("story US-002")
        child.expect("ended: complete")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_follow_without_a_live_run_says_so(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    res = ralph(root, "status", "--follow")
    assert res.returncode == 0 and "no run is live" in res.stdout


def test_view_counts_waits_and_spend_from_the_ledger(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2)
    proj = locate(root)
    with ledger.Ledger(proj.ledger_path, run_id="r1") as led:
        led.event("run_start", agent="sim", max_iterations=5, budget={"run_tokens": 10000})
        led.event("iteration_start", iteration=1, story_id="US-001", story_title="A")
        led.iteration(
            {
                "iteration": 1,
                "story_id": "US-001",
                "outcome": "passed",
                "prompt_tokens": 500,
                "full_history_tokens": 2000,
                "usage": {"input_tokens": 1000, "output_tokens": 200},
                "cost_usd": 0.5,
            }
        )
        led.event("iteration_start", iteration=2, story_id="US-002", story_title="B")
        led.event(
            "limit_wait",
            iteration=2,
            story_id="US-002",
            kind="session",
            waited_s=600,
            reset_at="2026-12-01T16:00:00+00:00",
            usage={"input_tokens": 300, "output_tokens": 0},
            cost_usd=0.1,
        )
    view = watch.build(proj, ledger.read(proj.ledger_path), "r1", live=True)
    assert (view.story_id, view.iteration, view.in_iteration) == ("US-002", 2, True)
    assert view.spent_tokens == 1500 and round(view.spent_cost, 2) == 0.6
    now = datetime.now(timezone.utc)
    text = "\n".join(watch.facts(view, now))
    assert "tokens 1.5k of 10.0k (15%)" in text or "tokens 1.5k of 10k (15%)" in text
    assert "saved 75%" in text
    assert "waiting: usage limit (session): 10m00s left" in text or "9m59s left" in text
    assert "waiting" not in "\n".join(watch.facts(view, now + timedelta(minutes=11)))


def test_transcript_tail_reads_only_whole_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "iteration-1.log"
    log.write_text("x" * 70000 + "\nfirst\nsecond\npart")
    tail = watch.TranscriptTail(lambda s: s.strip() or None, keep=3)
    assert tail.poll(log) == ["first", "second"]  # the cut-off start is not a line
    with log.open("a") as f:
        f.write("ial\nthird\n")
    assert tail.poll(log) == ["partial", "third"]
    assert list(tail.last) == ["second", "partial", "third"]


def test_follow_shows_a_usage_limit_wait_with_its_countdown(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        1,
        sim_args=["--fault", "limit-event", "--fault-times", "1", "--limit-reset", "4"],
    )
    proc = subprocess.Popen(
        [*RALPH, "run", "--tool", "sim"],
        cwd=root,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        side = root / "ralph" / "logs" / "ralph.lock.json"
        deadline = time.monotonic() + 30
        while not side.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        follow = ralph(root, "status", "--follow", "--interval", "0.2", timeout=120)
        assert follow.returncode == 0, follow.stderr
        waits = [line for line in follow.stdout.splitlines() if "waiting: usage limit" in line]
        assert waits, follow.stdout
        assert re.search(r"waiting: usage limit \(\w+\): \d+s left, resets 20\d\d-", waits[0])
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
