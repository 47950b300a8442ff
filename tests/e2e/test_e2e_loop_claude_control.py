"""`ralph run --tool claude` under pressure, with the real Claude Code CLI: a server error
retried with backoff, a run budget enforced from the cost the CLI reports, and Ctrl-C on the
real terminal while the agent is mid-request."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pexpect
import story_project as sp
from e2e_support import (
    claude_env,
    commit_subjects,
    iterations,
    processes_in,
    ralph_argv,
    read_ledger,
    run_pty,
)
from fake_anthropic import Fail, FailFirst, FakeAnthropic, Hang


def _prd_passes(repo: Path) -> list[bool]:
    prd = json.loads((repo / sp.RALPH_DIR / "prd.json").read_text())
    return [s["passes"] for s in prd["userStories"]]


def test_a_server_error_is_retried_with_backoff(tmp_path, cli_home, claude_bin):
    stories = sp.STORIES[:1]
    repo = sp.make_project(
        tmp_path / "calc", "claude", stories=stories, retries={"transient": 2, "backoff": 1}
    )
    turns = sp.claude_scripts(repo, stories)
    error = Fail(
        status=500, error_type="api_error", message="Internal server error", retry_after=None
    )
    turns["US-001"][0] = FailFirst(1, turns["US-001"][0], error)
    with FakeAnthropic(turns, resolve_story=sp.claude_resolver) as api:
        code, out = run_pty(
            ralph_argv("run", "3"),
            cwd=repo,
            timeout=240,
            env=claude_env(cli_home, api.base_url, claude_bin),
        )
    assert code == 0, out[-3000:]
    ledger = read_ledger(repo)
    [retry] = [r for r in ledger if r["event"] == "transient_retry"]
    assert retry["story_id"] == "US-001" and retry["exit_code"] == 1
    assert "500" in retry["error"] and retry["delay_s"] == 1
    assert [(r["outcome"], r["attempts"]) for r in iterations(ledger)] == [("passed", 2)]
    assert [r.status for r in api.main_requests()][0] == 500
    assert _prd_passes(repo) == [True]


def test_the_cost_budget_stops_the_run(tmp_path, cli_home, claude_bin):
    repo = sp.make_project(tmp_path / "calc", "claude")
    with FakeAnthropic(sp.claude_script(repo), resolve_story=sp.claude_resolver) as api:
        code, out = run_pty(
            ralph_argv("run", "--budget-usd", "0.01", "5"),
            cwd=repo,
            timeout=240,
            env=claude_env(cli_home, api.base_url, claude_bin),
        )
    assert code == 3, out[-3000:]  # budget exhausted
    ledger = read_ledger(repo)
    recs = iterations(ledger)
    # One story done (its cost, reported by the CLI, is over budget); no second session.
    assert [(r["story_id"], r["outcome"]) for r in recs] == [("US-001", "passed")]
    assert recs[0]["cost_usd"] > 0.01
    assert len(api.sessions()) == 1
    assert ledger[-1]["event"] == "run_end" and ledger[-1]["exit_code"] == 3
    assert _prd_passes(repo) == [True, False, False]


def test_ctrl_c_stops_the_agent_and_records_the_iteration(tmp_path, cli_home, claude_bin):
    stories = sp.STORIES[:1]
    repo = sp.make_project(tmp_path / "calc", "claude", stories=stories)
    turns = sp.claude_scripts(repo, stories)
    turns["US-001"][1] = Hang(120)  # the agent is waiting on the API when Ctrl-C comes
    with FakeAnthropic(turns, resolve_story=sp.claude_resolver) as api:
        argv = ralph_argv("run", "3")
        child = pexpect.spawn(
            argv[0],
            argv[1:],
            cwd=str(repo),
            timeout=120,
            env=claude_env(cli_home, api.base_url, claude_bin),
            encoding="utf-8",
            codec_errors="replace",
        )
        deadline = time.monotonic() + 90
        while not [r for r in api.main_requests() if r.played == "hang"]:
            assert time.monotonic() < deadline, child.before
            time.sleep(0.2)
        assert processes_in(repo)  # the CLI is running in the project
        child.sendintr()  # Ctrl-C on the real terminal
        child.expect(pexpect.EOF)
        child.close()
        assert processes_in(repo) == []  # the agent's process group went with it
    assert child.exitstatus == 130
    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"]) for r in recs] == [("US-001", "interrupted")]
    # Files as they were: prd.json untouched, no commit, progress.txt intact.
    assert _prd_passes(repo) == [False] and commit_subjects(repo) == ["initial"]
    assert (repo / sp.RALPH_DIR / "progress.txt").read_text() == sp.HEADER + "\n" + sp.INDEX
