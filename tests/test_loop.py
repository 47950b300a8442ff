"""Loop pieces without spawning an agent: progress detection, attempt assessment, limit waits,
the stuck breaker. Whole runs through the CLI are in test_run_cli.py and tests/e2e/."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from run_helpers import git, make_project

from orchestrator import git as orchestrator_git
from orchestrator import ledger
from orchestrator.agents import get_agent, limits
from orchestrator.agents.base import AgentResult, Usage
from orchestrator.agents.runner import RunOutcome
from orchestrator.errors import BudgetExhausted, Stuck
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.project import locate
from orchestrator.run.display import Display
from orchestrator.run.iteration import Attempt, Context, Iteration, WorkState
from orchestrator.run.loop import Loop, RunOptions

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)


def _attempt(
    *,
    exit_code: int | None = 0,
    passed: bool = False,
    all_passed: bool = False,
    final: str | None = "done",
    error: str | None = None,
    timed_out=None,
    interrupted: bool = False,
    changed: bool = False,
    limit=None,
    output: str = "",
) -> Attempt:
    result = AgentResult(
        final_message=final,
        usage=Usage(10, 5),
        cost_usd=0.1,
        is_error=error is not None,
        error=error,
        limit=limit,
    )
    before = WorkState("a", "t1")
    after = WorkState("a", "t2" if changed else "t1")
    return Attempt(
        n=1,
        outcome=RunOutcome(exit_code, output, timed_out, interrupted, 1.0),
        result=result,
        passed=passed,
        all_passed=all_passed,
        prd_error=None,
        before=before,
        after=after,
        transcript=Path("x.log"),
    )


def test_outcomes() -> None:
    assert _attempt(passed=True).outcome_name() == "passed"
    assert _attempt().outcome_name() == "no_progress"
    assert _attempt(exit_code=1, error="boom").outcome_name() == "failed"
    assert _attempt(timed_out="idle", exit_code=-15).outcome_name() == "timeout"
    assert _attempt(timed_out="wall", exit_code=-15, passed=True).outcome_name() == "passed"
    assert _attempt(interrupted=True, passed=True).outcome_name() == "interrupted"


def test_completion_only_from_final_message_and_prd() -> None:
    sentinel = "<promise>COMPLETE</promise>"
    assert _attempt(final=f"all done {sentinel}", all_passed=True).completion() == "complete"
    assert _attempt(final=f"all done {sentinel}", all_passed=False).completion() == "false"
    # Echoed in the output (a prompt, a tool result) but not in the final message: nothing.
    assert _attempt(final="ok", output=f"... {sentinel} ...", all_passed=True).completion() is None
    # On a line of its own (in a code block, in bold) it is a claim too.
    assert _attempt(final=f"Done.\n```\n{sentinel}\n```\n").completion() == "false"
    assert _attempt(final=f"Done.\n**{sentinel}**\nBye").completion() == "false"
    # Mentioned inside a sentence it claims nothing: no false completion is counted.
    said = f"US-001 is done; stories remain, so I will not print {sentinel} yet."
    assert _attempt(final=said, all_passed=False).completion() is None


def test_transient_and_limit_classification() -> None:
    assert _attempt(exit_code=1, error="No messages returned").transient
    assert _attempt(exit_code=2, error="crash").transient  # crashed, no change
    assert not _attempt(exit_code=2, error="crash", changed=True).transient
    assert not _attempt(exit_code=0).transient
    sig = limits.LimitSignal(None, "429", "rate")
    assert _attempt(exit_code=1, error="429", limit=sig).limit is sig
    assert not _attempt(exit_code=1, error="429", limit=sig).transient
    assert _attempt(passed=True, limit=sig).limit is None  # work done: go on


def test_workstate_sees_edits_to_dirty_files_and_ignores_logs(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    (root / "a.txt").write_text("one")
    s1 = WorkState.capture(root, ["ralph/logs"])
    (root / "a.txt").write_text("two")  # still just "?? a.txt" for git status
    s2 = WorkState.capture(root, ["ralph/logs"])
    assert s1.tree != s2.tree
    (root / "ralph/logs").mkdir(parents=True)
    (root / "ralph/logs/x.log").write_text("noise")
    (root / ".gitignore").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "x")
    s3 = WorkState.capture(root, ["ralph/logs"])
    (root / "ralph/logs/x.log").write_text("more noise")
    assert WorkState.capture(root, ["ralph/logs"]).tree == s3.tree
    assert s3.head != s1.head


def test_workstate_sees_edits_to_modified_tracked_files_and_diffs_only_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracked file already modified, edited again, is progress though `git status` says
    the same; a mode change too. A clean tree asks git for no diff at all, a dirty one a diff
    of its changed paths only (a name with pathspec characters taken literally)."""
    root = make_project(tmp_path / "p", 1)
    for name in ("a.txt", "b*.txt", "c.txt"):
        (root / name).write_text("zero\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "files")
    diffs: list[list[str]] = []
    real = orchestrator_git.output

    def spy(args, cwd):
        if args[0] == "diff":
            diffs.append(list(args))
        return real(args, cwd)

    monkeypatch.setattr(orchestrator_git, "output", spy)
    clean = WorkState.capture(root, ["ralph/logs"])
    assert diffs == [] and clean.dirty == frozenset()
    (root / "b*.txt").write_text("one\n")
    s1 = WorkState.capture(root, ["ralph/logs"])
    assert diffs[-1][-1] == ":(literal)b*.txt" and len(diffs[-1]) == 6
    (root / "b*.txt").write_text("two\n")  # still " M b*.txt" for git status
    s2 = WorkState.capture(root, ["ralph/logs"])
    assert s1.tree != s2.tree != clean.tree
    (root / "b*.txt").chmod(0o755)
    assert WorkState.capture(root, ["ralph/logs"]).tree != s2.tree
    assert s2.dirty == frozenset({"b*.txt"})


def record(**fields) -> ledger.IterationRecord:
    """An iteration record with plain values, `fields` overriding them."""
    base = {
        "iteration": 1,
        "story_id": "US-001",
        "story_title": "First",
        "mode": "indexed",
        "agent": "sim",
        "model": None,
        "prompt_tokens": 100,
        "prompt_tokens_estimated": True,
        "full_history_tokens": 400,
        "selected_references": [],
        "usage": None,
        "cost_usd": None,
        "duration_s": 1.0,
        "exit_code": 0,
        "outcome": "no_progress",
        "timed_out": None,
        "killed_processes": [],
        "attempts": 1,
        "completion": None,
        "committed": False,
        "files_changed": False,
        "error": None,
        "checks": {},
        "updated_references": [],
        "transcript": "ralph/logs/x/iteration-1.log",
    }
    return ledger.IterationRecord(**{**base, **fields})


class _Sleeps(list):
    def __call__(self, secs: float) -> None:
        self.append(secs)


@pytest.fixture
def loop(tmp_path: Path) -> Loop:
    root = make_project(
        tmp_path / "p", 2, config={"limits": {"max_wait": 600, "fallback_wait": 90}}
    )
    project = locate(root)
    lp = Loop(
        project,
        RunOptions(tool="sim", display=Display(quiet=True), sleep=_Sleeps(), now=lambda: NOW),
    )
    yield lp
    lp.ledger.close()


class _It:
    n = 1

    class story:  # noqa: N801 - stands in for a prd.Story
        id = "US-001"


def test_limit_wait_uses_reset_time_else_fallback(loop: Loop) -> None:
    sig = limits.LimitSignal(NOW + timedelta(seconds=120), "resets soon", "usage")
    waited = loop._wait_for_limit(_It, _attempt(exit_code=1, error="x", limit=sig), 0)
    assert waited == 122  # the stated reset, plus a 2 s margin
    waited = loop._wait_for_limit(
        _It, _attempt(exit_code=1, error="x", limit=limits.LimitSignal(None, "429")), 0
    )
    assert waited == 90
    assert sum(loop.options.sleep) == pytest.approx(122 + 90, abs=2)
    waits = [r for r in ledger.read(loop.ledger.path) if r["event"] == "limit_wait"]
    assert [w["source"].startswith("no reset") for w in waits] == [False, True]


def test_limit_reset_just_passed_rechecks_with_growing_capped_waits(loop: Loop) -> None:
    # "resets 1pm (UTC)" still shown at 13:42: retry soon, back off while it persists.
    sig = limits.LimitSignal(NOW - timedelta(minutes=42), "resets 1pm (UTC)", "usage")
    waits = [loop._wait_for_limit(_It, _attempt(exit_code=1, limit=sig), 0) for _ in range(4)]
    assert waits == [60, 90, 90, 90]  # limits.recheck doubling, capped at fallback_wait
    sources = [r["source"] for r in ledger.read(loop.ledger.path) if r["event"] == "limit_wait"]
    assert sources[-1].endswith("has passed: recheck 4")
    # A fresh future reset starts the backoff over.
    future = limits.LimitSignal(NOW + timedelta(seconds=10), "resets soon", "usage")
    assert loop._wait_for_limit(_It, _attempt(exit_code=1, limit=future), 0) == 12
    assert loop._wait_for_limit(_It, _attempt(exit_code=1, limit=sig), 0) == 60


def test_limit_wait_beyond_max_wait_stops(loop: Loop) -> None:
    sig = limits.LimitSignal(NOW + timedelta(hours=5), "resets 11am", "usage")
    with pytest.raises(BudgetExhausted, match="limits.max_wait"):
        loop._wait_for_limit(_It, _attempt(exit_code=1, error="x", limit=sig), 0)
    # Waits add up: a second wait that would pass max_wait stops too.
    with pytest.raises(BudgetExhausted):
        loop._wait_for_limit(
            _It, _attempt(exit_code=1, error="x", limit=limits.LimitSignal(None, "429")), 550
        )


def test_stuck_breaker_counts_only_consecutive_no_progress(loop: Loop) -> None:
    def rec(i: int, outcome: str, changed: bool = False) -> ledger.IterationRecord:
        return record(iteration=i, outcome=outcome, files_changed=changed)

    loop._check_stuck(rec(1, "no_progress"))
    loop._check_stuck(rec(2, "failed", changed=True))  # a file changed: progress
    loop._check_stuck(rec(3, "no_progress"))
    loop._check_stuck(rec(4, "no_progress"))
    with pytest.raises(Stuck, match=r"3 iterations in a row.*#3 US-001.*#5 US-001"):
        loop._check_stuck(rec(5, "timeout"))


def test_each_iteration_parses_prd_and_progress_once_before_and_once_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prd.json is parsed once before an iteration (the loop's, which picks the story) and
    once after (the agent's result, which the post-story checks reuse); progress.txt once
    before (the prompt's memory, which the snapshot reuses) and once after (the checks).
    A real run with the sim agent; the parsers are wrapped with counters."""
    calls = {"prd": 0, "progress": 0}
    prd_parse, progress_parse = Prd.parse.__func__, Progress.parse.__func__

    def counting(key, parse):
        def wrapper(cls, *args, **kwargs):
            calls[key] += 1
            return parse(cls, *args, **kwargs)

        return classmethod(wrapper)

    monkeypatch.setattr(Prd, "parse", counting("prd", prd_parse))
    monkeypatch.setattr(Progress, "parse", counting("progress", progress_parse))
    per_iteration, one_iteration = [], Loop._one_iteration

    def measured(self, prd, story):
        before = dict(calls)
        try:
            return one_iteration(self, prd, story)
        finally:
            per_iteration.append({k: calls[k] - before[k] for k in calls})

    monkeypatch.setattr(Loop, "_one_iteration", measured)
    root = make_project(tmp_path / "p", 1)
    monkeypatch.chdir(root)
    lp = Loop(locate(root), RunOptions(tool="sim", display=Display(quiet=True), sleep=_Sleeps()))
    summary = lp.run()
    assert summary.status == "complete" and summary.passed == 1
    # Inside the iteration: prd.json after the agent; progress.txt before and after. The
    # "before" prd.json parse is the loop's own, made to pick the story.
    assert per_iteration == [{"prd": 1, "progress": 2}]
    # The whole run: prd.json read once before the agent (the start-up check, whose parse
    # picks the story) and once after (the checks' parse, which says the run is complete).
    assert calls["prd"] == 2


def _first_iteration(tmp_path: Path) -> tuple[Iteration, Prd]:
    """Iteration 1 of a two-story project, prepared (prompt and snapshot), not spawned."""
    project = locate(make_project(tmp_path / "p", 2))
    prd = Prd.load(project.prd_path)
    story = prd.next_story()
    assert story is not None
    ctx = Context(
        project=project,
        agent=get_agent("sim", project.config.agent("sim")),
        display=Display(quiet=True),
        run_dir=tmp_path / "run",
        mode="indexed",
        max_iterations=3,
    )
    return Iteration(ctx, 1, story, prd), prd


def test_an_attempt_that_left_prd_and_progress_untouched_parses_neither_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that did not get as far as its story: prd.json and progress.txt read after
    it are the texts read before, so their parses are reused; the checks still run."""
    it, prd = _first_iteration(tmp_path)
    parses = []
    monkeypatch.setattr(Prd, "parse", classmethod(lambda cls, *a, **k: parses.append("prd")))
    monkeypatch.setattr(
        Progress, "parse", classmethod(lambda cls, *a, **k: parses.append("progress"))
    )
    attempt = it._assess(RunOutcome(0, "", None, False, 1.0), AgentResult(), it.start, Path("t"))
    report = it.verify(attempt)
    assert parses == [] and attempt.outcome_name() == "no_progress"
    assert report.prd is prd and not report.story_passed and report.ok


def test_a_prd_json_broken_by_the_agent_is_an_error_then_restored(tmp_path: Path) -> None:
    """The iteration's own path without a spawn: prd.json is read once after the agent
    (here: left as broken JSON), that read is an `error` attempt, and the checks reuse it to
    restore the snapshot's prd.json; all_passed follows the restored file."""
    it, _ = _first_iteration(tmp_path)
    project = it.project
    before = project.prd_path.read_text()
    project.prd_path.write_text('{"userStories": [')  # what a careless agent leaves
    attempt = it._assess(RunOutcome(0, "", None, False, 1.0), AgentResult(), it.start, Path("t"))
    assert attempt.outcome_name() == "error" and "invalid JSON" in (attempt.prd_error or "")
    report = it.verify(attempt)
    assert [f.kind for f in report.errors()] == ["prd_invalid"]
    assert project.prd_path.read_text() == before
    assert report.prd is it.snapshot.prd and not attempt.all_passed and not attempt.passed
    assert it.record(attempt).outcome == "error"
