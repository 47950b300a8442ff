"""`ralph ab --repeat 2 --tool claude`: the real Claude Code CLI against the scripted API,
offline; the report has every quality and cost figure, and memory misses are counted from the
real stream (the scripted model reads only the index of progress.txt: no miss)."""

from __future__ import annotations

import json

import pytest
import story_project as sp
from e2e_support import claude_env, ralph_argv, run_pty
from fake_anthropic import FakeAnthropic

from orchestrator.reports.report import SUMMARY_ROWS


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_ab_repeat_two_with_the_real_claude_cli(tmp_path, cli_home, claude_bin):
    repo = sp.make_project(tmp_path / "calc", "claude")
    out_dir = tmp_path / "ab"
    argv = ralph_argv(
        "ab", "--tool", "claude", "--repeat", "2", "--parallel", "2", "--out", str(out_dir), "5"
    )
    with FakeAnthropic(sp.claude_script(repo), resolve_story=sp.claude_resolver) as api:
        code, out = run_pty(
            argv, cwd=repo, env=claude_env(cli_home, api.base_url, claude_bin), timeout=840
        )
    assert code == 0, out[-3000:]
    data = json.loads((out_dir / "ab-report.json").read_text())
    summary = data["summary"]
    assert summary["replicates"] == 2 and len(data["runs"]) == 2
    stories = len(sp.STORIES)
    for _, key, _ in SUMMARY_ROWS:  # every figure, for both arms, with an interval
        for arm in ("indexed", "full"):
            est = summary["figures"][key]["arms"][arm]
            assert est["n"] == 2 and est["low"] is not None, (key, arm, est)
    assert summary["figures"]["stories_passed"]["arms"]["indexed"]["values"] == [stories] * 2
    for run in data["runs"]:
        for arm in run["arms"]:
            t = arm["totals"]
            # Counted from the CLI's own stream-json, one transcript per iteration.
            assert t["streams_read"] == t["iterations"] == stories
            assert t["memory_misses"] == 0 and t["progress_reads_indexed"] == 0
            assert t["input_tokens"] > 0 and t["cost_usd"] > 0
    assert "No measurable difference in stories passed" in out
    for rep in ("rep-1", "rep-2"):
        for arm in ("indexed", "full"):
            assert (out_dir / rep / arm / "ledger.jsonl").is_file()
