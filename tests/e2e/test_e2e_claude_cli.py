"""The real Claude Code CLI, driven offline by the scripted Messages API (no `ralph` yet).

Proves the scripted server speaks what `claude -p` 2.1.x expects: it runs our tool calls for
real (Read, Write, Bash with git, Edit) in a real git repo, and its stream-json result line
reports the usage our server sent and a cost the CLI computed itself."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_support import claude_env, commit_subjects, init_repo, json_lines, run_pty
from fake_anthropic import Fail, FailFirst, FakeAnthropic, Text, ToolUse

CLAUDE_ARGS = [
    "-p",
    "--output-format",
    "stream-json",
    "--verbose",
    "--dangerously-skip-permissions",
]
PRD = {
    "project": "Demo",
    "branchName": "ralph/demo",
    "description": "demo",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add greeting module",
            "description": "greet()",
            "acceptanceCriteria": ["greet() returns Hello"],
            "priority": 1,
            "passes": False,
            "notes": "",
        },
    ],
}
HEADER = "# Ralph Progress Log\nStarted: Mon Nov 30 2026\n---\n"
# Opus 4.x list prices the CLI applies to usage it is told about (USD per token).
PRICE_IN, PRICE_OUT = 5e-6, 25e-6


def _story_script(repo: Path) -> list:
    entry = "## 2026-11-30 - US-001\\n- Added greet.py\\n---\\n"
    return [
        ToolUse("Read", {"file_path": str(repo / "prd.json")}, text="Reading the PRD."),
        ToolUse("Read", {"file_path": str(repo / "progress.txt")}),
        ToolUse(
            "Write",
            {"file_path": str(repo / "greet.py"), "content": "def greet():\n    return 'Hello'\n"},
        ),
        ToolUse(
            "Bash",
            {
                "command": "git add -A && git commit -q -m 'feat: US-001 - Add "
                "greeting module' && git log --oneline | head -1",
                "description": "Commit",
            },
        ),
        ToolUse(
            "Edit",
            {
                "file_path": str(repo / "prd.json"),
                "old_string": '"passes": false',
                "new_string": '"passes": true',
            },
        ),
        ToolUse(
            "Bash",
            {"command": f"printf '{entry}' >> progress.txt", "description": "Append progress"},
        ),
        Text("US-001 is done. <promise>COMPLETE</promise>"),
    ]


def _repo(tmp_path: Path) -> Path:
    return init_repo(
        tmp_path / "demo", {"prd.json": json.dumps(PRD, indent=2) + "\n", "progress.txt": HEADER}
    )


def test_claude_runs_a_story_against_the_scripted_api(tmp_path, cli_home, claude_bin):
    repo = _repo(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001 from prd.json.\n")
    with FakeAnthropic({"US-001": _story_script(repo)}) as api:
        code, out = run_pty(
            [claude_bin, *CLAUDE_ARGS],
            cwd=repo,
            stdin_path=prompt,
            env=claude_env(cli_home, api.base_url, claude_bin),
        )
    lines = json_lines(out)
    result = lines[-1]
    assert code == 0, out[-2000:]
    assert lines[0]["type"] == "system" and lines[0]["subtype"] == "init"
    assert result["type"] == "result" and result["is_error"] is False
    assert result["result"] == "US-001 is done. <promise>COMPLETE</promise>"
    assert result["num_turns"] == 7

    # The tools really ran: files, the commit, prd.json flipped, progress appended.
    assert (repo / "greet.py").read_text() == "def greet():\n    return 'Hello'\n"
    assert commit_subjects(repo) == ["feat: US-001 - Add greeting module", "initial"]
    assert json.loads((repo / "prd.json").read_text())["userStories"][0]["passes"] is True
    assert (
        repo / "progress.txt"
    ).read_text() == HEADER + "## 2026-11-30 - US-001\n- Added greet.py\n---\n"

    # One session, seven main-model calls; each carries the previous tool's real output.
    reqs = api.main_requests()
    assert len(api.sessions()) == 1 and [r.turn for r in reqs] == list(range(7))
    assert all(r.story_id == "US-001" and r.session_id == result["session_id"] for r in reqs)
    assert '"passes": false' in reqs[1].last_tool_result()
    assert "feat: US-001 - Add greeting module" in reqs[4].last_tool_result()
    sizes = [r.size for r in reqs]
    assert sizes == sorted(sizes) and sizes[0] > 50_000  # the CLI's own system prompt + tools

    # The result line's totals are what our server reported, and the cost follows from them.
    sent_in = sum(r.usage["input_tokens"] for r in reqs)
    sent_out = sum(r.usage["output_tokens"] for r in reqs)
    usage = result["usage"]
    assert usage["input_tokens"] == sent_in and usage["output_tokens"] == sent_out
    assert abs(result["total_cost_usd"] - (sent_in * PRICE_IN + sent_out * PRICE_OUT)) < 1e-6


def test_claude_reports_an_api_429_on_its_result_line(tmp_path, cli_home, claude_bin):
    repo = _repo(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    with FakeAnthropic({"US-001": [Fail(retry_after=30)]}) as api:
        code, out = run_pty(
            [claude_bin, *CLAUDE_ARGS],
            cwd=repo,
            stdin_path=prompt,
            env=claude_env(cli_home, api.base_url, claude_bin),
        )
    result = json_lines(out)[-1]
    assert code == 1
    assert result["is_error"] is True and result["api_error_status"] == 429
    assert "429" in result["result"] and "rate limit" in result["result"]
    assert [r.status for r in api.main_requests()] == [429]  # x-should-retry: false honoured


def test_claude_retries_a_retryable_429_by_itself(tmp_path, cli_home, claude_bin):
    repo = _repo(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Say hello for US-001.\n")
    turn = FailFirst(1, Text("hello"), Fail(retry_after=1, should_retry=True))
    with FakeAnthropic({"US-001": [turn]}) as api:
        code, out = run_pty(
            [claude_bin, *CLAUDE_ARGS],
            cwd=repo,
            stdin_path=prompt,
            env=claude_env(cli_home, api.base_url, claude_bin),
        )
    result = json_lines(out)[-1]
    assert code == 0 and result["is_error"] is False and result["result"] == "hello"
    reqs = api.main_requests()
    assert [r.status for r in reqs] == [429, 200]
    assert reqs[1].at - reqs[0].at >= 0.9  # it honoured retry-after: 1
