"""`ralph run --tool claude` end to end: our loop, the real Claude Code CLI on a real pty,
the scripted Messages API on loopback, a real git repo. One server drives the whole run
(each session's story is read from its prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import story_project as sp
from e2e_support import (
    claude_env,
    commit_subjects,
    iterations,
    json_lines,
    processes_in,
    ralph_argv,
    read_ledger,
    run_pty,
)
from fake_anthropic import Fail, FailFirst, FakeAnthropic, Hang, Text, ToolUse

PRICE_IN, PRICE_OUT = 5e-6, 25e-6  # what the CLI charges for the Opus usage we report
SECRET = "sk-ant-api03-" + "Zx9Qw2Er7Ty4Ui1Op0As8Df5Gh3Jk6Lz" * 2 + "-AbCdEf12"


def _run(repo: Path, cli_home: Path, api: FakeAnthropic, claude_bin: str, *args: str):
    env = claude_env(cli_home, api.base_url, claude_bin)
    return run_pty(ralph_argv("run", *args), cwd=repo, env=env, timeout=240)


def _prd_passes(repo: Path) -> list[bool]:
    prd = json.loads((repo / sp.RALPH_DIR / "prd.json").read_text())
    return [s["passes"] for s in prd["userStories"]]


def _result_line(repo: Path, rec: dict) -> dict:
    lines = json_lines((repo / rec["transcript"]).read_text())
    return next(ln for ln in reversed(lines) if ln.get("type") == "result")


def _leak_key(story: sp.Story, turns: list) -> list:
    # The agent prints its API key (a tool result in its stream-json output).
    if story.id != "US-001":
        return turns
    return [
        turns[0],
        ToolUse("Bash", {"command": "printenv ANTHROPIC_API_KEY", "description": "env"}),
        *turns[1:],
    ]


def test_three_stories_end_to_end(tmp_path, cli_home, claude_bin):
    repo = sp.make_project(tmp_path / "calc", "amp")  # --tool beats ralph.yaml's tool
    script = sp.claude_script(repo, edit=_leak_key)
    with FakeAnthropic(script, resolve_story=sp.claude_resolver, cache_read_ratio=0.25) as api:
        env = dict(claude_env(cli_home, api.base_url, claude_bin), ANTHROPIC_API_KEY=SECRET)
        code, out = run_pty(
            ralph_argv("run", "--tool", "claude", "5"), cwd=repo, env=env, timeout=240
        )
    assert code == 0, out[-3000:]
    assert "Ralph completed all tasks!" in out
    # The CLI resets terminal modes on exit; that must not reach the user's screen as junk.
    assert "\x1b[?" not in out

    # The key really came back from the tool, yet no log, transcript or screen shows it.
    assert SECRET in api.main_requests("US-001")[2].last_tool_result()
    logs = [p for p in (repo / "ralph" / "logs").rglob("*") if p.is_file()]
    assert len(logs) >= 7 and not [p for p in logs if SECRET in p.read_text(errors="replace")]
    assert SECRET not in out
    first = (repo / iterations(read_ledger(repo))[0]["transcript"]).read_text()
    assert '"stdout":"[REDACTED]"' in first  # the line is kept, the secret is not

    # The work: code, commits, prd.json, references, index rows, progress entries.
    assert commit_subjects(repo) == [
        "feat: US-003 - Add multiplication",
        "feat: US-002 - Add subtraction",
        "feat: US-001 - Add addition",
        "initial",
    ]
    assert _prd_passes(repo) == [True, True, True]
    calc = (repo / "calc.py").read_text()
    assert all(f"def {s.func}(a, b):" in calc for s in sp.STORIES)
    progress = (repo / sp.RALPH_DIR / "progress.txt").read_text()
    assert progress.startswith(sp.HEADER)
    for story in sp.STORIES:
        assert (repo / sp.ref_path(story)).read_text() == f"# {story.topic}\n- {story.learning}\n"
        assert f"| {story.topic} | {sp.ref_path(story)} |" in progress
        assert sp.entry(story) in progress

    # One CLI session per story, each told apart by its session header.
    sessions = api.sessions()
    assert [reqs[0].story_id for reqs in sessions.values()] == ["US-001", "US-002", "US-003"]

    # The ledger: agent-reported usage and cost from the CLI's real result line, checks ok.
    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"]) for r in recs] == [
        ("US-001", "passed"),
        ("US-002", "passed"),
        ("US-003", "passed"),
    ]
    for rec, reqs in zip(recs, sessions.values(), strict=True):
        result = _result_line(repo, rec)
        sent_in = sum(r.usage["input_tokens"] for r in reqs)
        sent_cache = sum(r.usage["cache_read_input_tokens"] for r in reqs)
        sent_out = sum(r.usage["output_tokens"] for r in reqs)
        assert rec["usage"] == {
            "input_tokens": sent_in,
            "output_tokens": sent_out,
            "cache_read_tokens": sent_cache,
            "cache_write_tokens": 0,
        }
        assert result["usage"]["input_tokens"] == sent_in and sent_cache > 0
        assert rec["cost_usd"] == result["total_cost_usd"] > 0
        assert rec["agent"] == "claude" and rec["committed"] is True
        assert rec["checks"]["ok"] is True and rec["checks"]["findings"] == []
        assert rec["checks"]["updated_references"] == [sp.ref_path(sp.story_by_id(rec["story_id"]))]
    # Cost: the CLI prices fresh input, cache reads (a tenth) and output itself.
    first = recs[0]["usage"]
    expected = (
        first["input_tokens"] * PRICE_IN
        + first["cache_read_tokens"] * PRICE_IN / 10
        + first["output_tokens"] * PRICE_OUT
    )
    assert abs(recs[0]["cost_usd"] - expected) < 1e-6
    assert recs[-1]["completion"] == "complete"
    end = read_ledger(repo)[-1]
    assert end["event"] == "run_end" and end["exit_code"] == 0
    assert end["totals"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in recs))

    # `ralph status` reads the same truth back: stories, index, the run's reported cost.
    code, status = run_pty(ralph_argv("status"), cwd=repo, env=env, timeout=60)
    assert code == 0, status
    assert "stories: 3/3 passed" in status and "index 3 rows" in status
    assert f"${end['totals']['cost_usd']:.2f}" in status
    print(
        "\nrequest bytes per iteration (first request of each session):",
        [(reqs[0].story_id, reqs[0].size) for reqs in sessions.values()],
    )


def test_a_429_makes_the_loop_wait_and_retry_the_story(tmp_path, cli_home, claude_bin):
    stories = sp.STORIES[:1]
    repo = sp.make_project(tmp_path / "calc", "claude", stories=stories)
    turns = sp.claude_scripts(repo, stories)
    # The first request is rejected; the CLI gives up at once (x-should-retry: false).
    turns["US-001"][0] = FailFirst(1, turns["US-001"][0], Fail(retry_after=1))
    with FakeAnthropic(turns, resolve_story=sp.claude_resolver) as api:
        code, out = _run(repo, cli_home, api, claude_bin, "5")
    assert code == 0, out[-3000:]
    ledger = read_ledger(repo)
    waits = [r for r in ledger if r["event"] == "limit_wait"]
    assert len(waits) == 1 and waits[0]["story_id"] == "US-001"
    assert "429" in waits[0]["raw"] and waits[0]["waited_s"] >= 1  # limits.fallback_wait
    recs = iterations(ledger)
    # The wait is not an iteration: one iteration, passed on its second attempt.
    assert [(r["story_id"], r["outcome"], r["attempts"]) for r in recs] == [("US-001", "passed", 2)]
    reqs = api.main_requests("US-001")
    assert reqs[0].status == 429 and {r.status for r in reqs[1:]} == {200}
    assert reqs[1].at - reqs[0].at >= 1
    assert len({r.session_id for r in reqs}) == 2  # the story was retried in a fresh session
    assert _prd_passes(repo) == [True]


def test_a_hung_api_hits_the_idle_timeout(tmp_path, cli_home, claude_bin):
    stories = sp.STORIES[:1]
    repo = sp.make_project(tmp_path / "calc", "claude", stories=stories, timeouts={"idle": 8})
    turns = sp.claude_scripts(repo, stories)
    turns["US-001"][0] = FailFirst(1, turns["US-001"][0], Hang(120))
    with FakeAnthropic(turns, resolve_story=sp.claude_resolver) as api:
        code, out = _run(repo, cli_home, api, claude_bin, "3")
        # The hung CLI and its whole process group are gone, not left running.
        assert processes_in(repo) == []
    assert code == 0, out[-3000:]
    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"], r["timed_out"]) for r in recs] == [
        ("US-001", "timeout", "idle"),
        ("US-001", "passed", None),
    ]
    assert 8 <= recs[0]["duration_s"] < 40
    assert [r.played for r in api.main_requests()][:2] == ["hang", "tool_use:Read"]
    assert _prd_passes(repo) == [True]


def test_false_completion_and_truncated_history(tmp_path, cli_home, claude_bin):
    """US-001 claims completion while US-002 remains; US-002 rewrites progress.txt with
    only its own entry and does not claim completion. The loop goes on, the checks put the
    history back, and the run ends with exit 0 because prd.json says every story passes."""
    stories = sp.STORIES[:2]
    repo = sp.make_project(tmp_path / "calc", "claude", stories=stories)
    turns = sp.claude_scripts(repo, stories)
    turns["US-001"][-1] = Text("All done! <promise>COMPLETE</promise>")
    turns["US-002"] = sp.claude_turns(repo, stories[1], stories=stories, truncate_progress=True)
    # The last story ends without the sentinel: prd.json alone says the work is done.
    turns["US-002"][-1] = Text("US-002 done.")
    with FakeAnthropic(turns, resolve_story=sp.claude_resolver) as api:
        code, out = _run(repo, cli_home, api, claude_bin, "5")
    assert code == 0, out[-3000:]
    assert "false completion" in out
    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"], r["completion"]) for r in recs] == [
        ("US-001", "passed", "false"),
        ("US-002", "passed", None),
    ]
    assert "Ralph completed all tasks!" in out
    assert len(api.sessions()) == 2
    assert _prd_passes(repo) == [True, True]

    assert recs[0]["checks"]["restored"] is False
    assert recs[1]["checks"]["restored"] is True
    kinds = [f["kind"] for f in recs[1]["checks"]["findings"]]
    assert "history_lost" in kinds
    progress = (repo / sp.RALPH_DIR / "progress.txt").read_text()
    s1, s2 = stories
    # US-001's entry and index row survived intact; US-002's own entry is kept after them.
    assert f"| {s1.topic} | {sp.ref_path(s1)} |" in progress
    assert sp.entry(s1) in progress
    assert sp.entry(s2) in progress
    assert progress.index(sp.entry(s1)) < progress.index(sp.entry(s2))
    # The agent's version is kept as a backup, never just dropped.
    backups = recs[1]["checks"]["backups"]
    assert backups and (repo / backups[0]).read_text() == sp.HEADER + "\n" + sp.entry(s2)


def test_a_sentinel_with_no_work_ends_on_max_iterations(tmp_path, cli_home, claude_bin):
    stories = sp.STORIES[:1]
    repo = sp.make_project(tmp_path / "calc", "claude", stories=stories, stuck_after=5)
    lie = {"US-001": [Text("<promise>COMPLETE</promise>")]}
    with FakeAnthropic(lie, resolve_story=sp.claude_resolver) as api:
        code, out = _run(repo, cli_home, api, claude_bin, "2")
    assert code == 1, out[-3000:]
    assert "max iterations" in out
    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"], r["completion"]) for r in recs] == [
        ("US-001", "no_progress", "false"),
        ("US-001", "no_progress", "false"),
    ]
    assert _prd_passes(repo) == [False]
