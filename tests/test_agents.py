"""Agent adapters: parse the real recorded transcripts, and run fake CLIs (replaying those
transcripts, checking the flags the real CLIs require) through the real pty runner."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator.agents import base, runner
from orchestrator.agents.base import AgentSettings, Usage, available, get_agent
from orchestrator.errors import AgentNotFound, ConfigError

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
from install import fixtures_dir, install  # noqa: E402

FIX = fixtures_dir()
needs_fixtures = pytest.mark.skipif(FIX is None, reason="shared/fixtures not found")
SENTINEL = "<promise>COMPLETE</promise>"


def fixture_text(rel: str) -> str:
    return (FIX / rel).read_text(encoding="utf-8")


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    """A PATH holding only our fakes and the system tools (no real agent CLIs)."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return d


def jsonl(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


# ---- Claude -------------------------------------------------------------------------------
@needs_fixtures
def test_claude_parses_recorded_story():
    agent = get_agent("claude", None, check=False)
    result = agent.parse(fixture_text("claude-code/story-complete.stream.jsonl"), 0)
    assert result.final_message.endswith(SENTINEL)
    assert result.usage == Usage(116522, 240, 0, 0)
    assert result.usage.prompt_tokens == 116522
    assert result.cost_usd == pytest.approx(0.58861)
    assert result.num_turns == 6
    assert result.model == "claude-opus-4-8[1m]"
    assert not result.is_error and result.limit is None and result.exit_code == 0


@needs_fixtures
def test_claude_parses_recorded_429():
    agent = get_agent("claude", None, check=False)
    result = agent.parse(fixture_text("claude-code/rate-limited-429.stream.jsonl"), 1)
    assert result.is_error and result.http_status == 429
    assert "Request rejected (429)" in result.error
    assert result.limit is not None and result.limit.reset_at is None
    assert result.usage.total_tokens == 0 and result.cost_usd == 0


@needs_fixtures
def test_claude_without_result_line_counts_each_message_once():
    lines = fixture_text("claude-code/story-complete.stream.jsonl").splitlines()[:-1]
    result = get_agent("claude", None, check=False).parse("\n".join(lines) + "\nKilled\n", 137)
    assert result.is_error and "no result line" in result.error and "Killed" in result.error
    # msg_0 appears on two lines with the same usage: counted once. The six messages sum to
    # exactly the session total the result line would have reported.
    assert result.usage.input_tokens == 116522
    assert result.final_message.endswith(SENTINEL)


@needs_fixtures
def test_claude_display_is_readable():
    agent = get_agent("claude", None, check=False)
    shown = [
        agent.display(ln)
        for ln in fixture_text("claude-code/story-complete.stream.jsonl").splitlines()
    ]
    shown = [s for s in shown if s]
    assert shown[0] == "⏺ session started (claude-opus-4-8[1m])"
    assert "assistant: Reading the PRD." in shown
    assert "⏺ Read /home/user/demo/prd.json" in shown
    assert "⏺ Write /home/user/demo/greet.py" in shown
    assert any(s.startswith("⏺ Bash: git add -A && git commit") for s in shown)
    assert "⏺ Edit /home/user/demo/prd.json" in shown
    assert shown[-1] == "✓ done: 6 turns, 116522 in / 240 out tokens, $0.5886"
    assert not any(s.lstrip().startswith("{") for s in shown)
    assert agent.display("") is None


def test_claude_argv_env_and_settings(tmp_path):
    prompt = tmp_path / "p.md"
    prompt.write_text("do it")
    agent = get_agent(
        "claude", {"model": "opus", "args": ["--max-turns", "40"], "env": {"X": "1"}}, check=False
    )
    assert agent.argv(prompt) == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        "opus",
        "--max-turns",
        "40",
    ]
    assert agent.stdin_file(prompt) == prompt
    env = agent.env()
    assert env["X"] == "1"
    assert (env.get("IS_SANDBOX") == "1") == (os.geteuid() == 0)


def test_command_override_keeps_flags(tmp_path):
    agent = get_agent("claude", {"command": "npx -y claude"}, check=False)
    assert agent.argv(tmp_path / "p.md")[:4] == ["npx", "-y", "claude", "-p"]


# ---- Amp ----------------------------------------------------------------------------------
def amp_transcript_from_claude(text: str) -> str:
    """Amp's stream has Claude's shape; its result line carries no usage and no cost."""
    out = []
    for line in text.splitlines():
        event = json.loads(line)
        if event["type"] == "result":
            for key in ("usage", "total_cost_usd", "modelUsage"):
                event.pop(key, None)
        out.append(json.dumps(event))
    return "\n".join(out) + "\n"


@needs_fixtures
def test_amp_sums_assistant_usage_once_per_message():
    amp = get_agent("amp", None, check=False)
    text = amp_transcript_from_claude(fixture_text("claude-code/story-complete.stream.jsonl"))
    result = amp.parse(text, 0)
    assert result.usage.input_tokens == 116522 and result.usage.output_tokens == 6
    assert result.cost_usd is None
    assert result.final_message.endswith(SENTINEL) and not result.is_error


def test_amp_error():
    text = jsonl(
        {
            "type": "result",
            "subtype": "error_during_execution",
            "is_error": True,
            "error": "You are out of credits.",
        }
    )
    result = get_agent("amp", None, check=False).parse(text, 1)
    assert result.is_error and result.error == "You are out of credits."
    assert result.limit is not None


# ---- Codex --------------------------------------------------------------------------------
@needs_fixtures
def test_codex_parses_recorded_exec():
    result = get_agent("codex", None, check=False).parse(
        fixture_text("codex/message-complete.exec.jsonl"), 0
    )
    assert result.final_message == "Hello from fake. " + SENTINEL
    assert result.usage == Usage(15504, 12, 0, 0)
    assert result.cost_usd is None and result.num_turns == 1 and not result.is_error


def test_codex_cached_tokens_are_inside_input_and_turns_sum():
    text = jsonl(
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 1000, "cached_input_tokens": 600, "output_tokens": 10},
        },
        {"type": "item.completed", "item": {"type": "agent_message", "text": "first"}},
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 500,
                "cached_input_tokens": 100,
                "cache_write_input_tokens": 50,
                "output_tokens": 5,
            },
        },
        {"type": "item.completed", "item": {"type": "agent_message", "text": "last"}},
    )
    result = get_agent("codex", None, check=False).parse(text, 0)
    assert result.usage == Usage(750, 15, 700, 50)
    assert result.usage.prompt_tokens == 1500
    assert result.final_message == "last" and result.num_turns == 2


def test_codex_limit_error_and_echoed_prompt_is_ignored():
    # The echoed prompt mentions a limit and the sentinel; neither may count.
    echoed = f"user\nIf you've hit your usage limit. try again at 9:00 PM say {SENTINEL}\n"
    text = echoed + jsonl(
        {
            "type": "error",
            "message": "You've hit your usage limit. Upgrade to Pro or try again at 12:16 PM.",
        },
        {"type": "turn.failed", "error": {"message": "usage limit"}},
    )
    result = get_agent("codex", None, check=False).parse(text, 1)
    assert result.is_error and result.final_message is None
    assert result.limit is not None and result.limit.reset_at.minute == 16
    plain = get_agent("codex", None, check=False).parse(echoed, 0)
    assert plain.limit is None and plain.final_message is None


def test_codex_argv_and_display(tmp_path):
    agent = get_agent("codex", {"model": "gpt-5-codex"}, check=False)
    argv = agent.argv(tmp_path / "p.md")
    assert argv[:2] == ["codex", "exec"] and argv[-3:] == ["-m", "gpt-5-codex", "-"]
    assert "--dangerously-bypass-approvals-and-sandbox" in argv
    line = json.dumps(
        {
            "type": "item.started",
            "item": {"type": "command_execution", "command": "bash -lc 'pytest -q'"},
        }
    )
    assert agent.display(line) == "⏺ Bash: bash -lc 'pytest -q'"
    assert agent.display("user: the whole echoed prompt") is None


# ---- Gemini -------------------------------------------------------------------------------
GEMINI_STREAM = jsonl(
    {"type": "init", "session_id": "s1", "model": "gemini-2.5-pro"},
    {"type": "message", "role": "user", "content": "prompt"},
    {"type": "message", "role": "assistant", "content": "Let me look.", "delta": True},
    {
        "type": "tool_use",
        "tool_name": "read_file",
        "tool_id": "t1",
        "parameters": {"absolute_path": "/p/prd.json"},
    },
    {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "{}"},
    {"type": "message", "role": "assistant", "content": "Done. ", "delta": True},
    {"type": "message", "role": "assistant", "content": SENTINEL, "delta": True},
    {
        "type": "result",
        "status": "success",
        "stats": {"total_tokens": 1300, "input_tokens": 1200, "output_tokens": 100, "cached": 200},
    },
)


def test_gemini_stream_json():
    result = get_agent("gemini", None, check=False).parse(GEMINI_STREAM, 0)
    assert result.final_message == "Done. " + SENTINEL
    assert result.usage == Usage(1000, 100, 200, 0)
    assert result.model == "gemini-2.5-pro" and not result.is_error


def test_gemini_json_format_multiline_and_exit_codes():
    obj = {
        "response": "ok " + SENTINEL,
        "stats": {
            "models": {
                "gemini-2.5-flash": {
                    "tokens": {"prompt": 900, "candidates": 40, "total": 940, "cached": 300}
                }
            }
        },
    }
    agent = get_agent("gemini", None, check=False)
    result = agent.parse("Loaded cached credentials.\n" + json.dumps(obj, indent=2), 0)
    assert result.final_message.endswith(SENTINEL)
    assert result.usage == Usage(600, 40, 300, 0) and result.model == "gemini-2.5-flash"
    failed = agent.parse(
        json.dumps({"error": {"type": "FatalAuthenticationError", "message": "no auth"}}), 41
    )
    assert failed.is_error and "authentication" in failed.error and "no auth" in failed.error


def test_gemini_quota_error_is_a_limit():
    text = jsonl(
        {
            "type": "result",
            "status": "error",
            "error": {
                "type": "ApiError",
                "message": "RESOURCE_EXHAUSTED: Quota exceeded, retry in 30s",
            },
        }
    )
    result = get_agent("gemini", None, check=False).parse(text, 1)
    assert result.is_error and result.limit is not None and result.limit.kind == "quota"


# ---- opencode -----------------------------------------------------------------------------
OPENCODE = jsonl(
    {"type": "step_start", "part": {"type": "step-start"}},
    {
        "type": "tool_use",
        "part": {
            "tool": "read",
            "state": {"status": "completed", "input": {"filePath": "prd.json"}},
        },
    },
    {
        "type": "step_finish",
        "part": {
            "tokens": {
                "input": 100,
                "output": 20,
                "reasoning": 5,
                "cache": {"read": 1000, "write": 50},
            },
            "cost": 0.01,
        },
    },
    {"type": "step_start", "part": {"type": "step-start"}},
    {"type": "text", "part": {"type": "text", "text": "All done. " + SENTINEL}},
    {
        "type": "step_finish",
        "part": {
            "tokens": {
                "input": 10,
                "output": 2,
                "reasoning": 0,
                "cache": {"read": 1100, "write": 0},
            },
            "cost": 0.002,
        },
    },
)


def test_opencode_sums_steps():
    agent = get_agent("opencode", None, check=False)
    result = agent.parse(OPENCODE, 0)
    assert result.usage == Usage(110, 27, 2100, 50)
    assert result.cost_usd == pytest.approx(0.012)
    assert result.final_message == "All done. " + SENTINEL and result.num_turns == 2


def test_opencode_big_prompt_goes_as_file(tmp_path):
    agent = get_agent("opencode", None, check=False)
    small, big = tmp_path / "s.md", tmp_path / "b.md"
    small.write_text("hello")
    big.write_text("x" * 200_000)
    assert agent.argv(small)[-1] == "hello" and agent.stdin_file(small) is None
    assert agent.argv(big)[-4:-1] == ["--file", str(big), "--"]


# ---- command ------------------------------------------------------------------------------
def test_command_agent_placeholders(tmp_path):
    prompt = tmp_path / "p.md"
    prompt.write_text("P")
    agent = get_agent(
        "command",
        {
            "command": ["aider", "--message-file", "{prompt_file}", "--model", "{model}"],
            "model": "sonnet",
        },
        check=False,
    )
    assert agent.prompt_via == "file" and agent.stdin_file(prompt) is None
    assert agent.argv(prompt) == ["aider", "--message-file", str(prompt), "--model", "sonnet"]
    result = agent.parse("\x1b[32mlots of output\x1b[0m\n" + "y" * 5000 + "\nEND", 0)
    assert result.final_message.endswith("END") and len(result.final_message) == 2000
    assert result.usage is None and not result.is_error
    assert agent.parse("oops", 2).is_error


def test_command_agent_requires_command():
    with pytest.raises(ConfigError, match="agents.command.command"):
        get_agent("command", None, check=False)


def test_unknown_name_with_command_becomes_command_agent(tmp_path):
    agent = get_agent("aider", {"command": "aider --yes-always"}, check=False)
    assert agent.name == "aider" and agent.argv(tmp_path / "p")[0] == "aider"
    with pytest.raises(ConfigError, match="unknown agent 'nope'"):
        get_agent("nope", None)


# ---- registry -----------------------------------------------------------------------------
def test_available_lists_builtins():
    names = available()
    for name in ("claude", "amp", "codex", "gemini", "opencode", "command"):
        assert name in names


@pytest.mark.parametrize("name", ["claude", "amp", "codex", "gemini", "opencode"])
def test_missing_binary_names_the_fix(name, bin_dir):
    with pytest.raises(AgentNotFound) as info:
        get_agent(name, None)
    assert str(info.value) == (
        f"agent '{name}' not found on PATH: install it or set agents.{name}.command in ralph.yaml"
    )


def test_settings_validation():
    with pytest.raises(ConfigError, match="agents.claude.prompt"):
        get_agent("claude", {"prompt": "pipe"}, check=False)
    with pytest.raises(ConfigError, match="must be a mapping"):
        AgentSettings.coerce(["claude"], "claude")

    class Model:  # a pydantic-like settings object
        def model_dump(self):
            return {"command": ["c2"], "model": None, "args": [], "env": {}, "prompt": None}

    assert get_agent("claude", Model(), check=False).command() == ["c2"]


# ---- through the real path: fake CLIs on PATH, real pty -----------------------------------
def run_fake(
    name,
    bin_dir,
    tmp_path,
    monkeypatch,
    transcript_text,
    *,
    settings=None,
    prompt_text="Implement US-001.\n",
    exit_code=0,
):
    install(bin_dir, name)
    transcript = tmp_path / f"{name}.replay"
    transcript.write_text(transcript_text, encoding="utf-8")
    record = tmp_path / "record"
    monkeypatch.setenv("FAKE_TRANSCRIPT", str(transcript))
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))
    prompt = tmp_path / "prompt.md"
    prompt.write_text(prompt_text, encoding="utf-8")
    shown: list[str] = []
    agent = get_agent(name, settings)
    outcome, result = runner.run_agent(
        agent,
        prompt,
        cwd=tmp_path,
        transcript_path=tmp_path / "logs" / "t.log",
        on_line=shown.append,
        wall_timeout=60,
    )
    return outcome, result, shown, record


@needs_fixtures
def test_claude_end_to_end_with_big_prompt(bin_dir, tmp_path, monkeypatch):
    big = "# Prompt\n" + ("Story text with ünïcode — line.\n" * 10_000)
    assert len(big.encode()) > 300_000
    outcome, result, shown, record = run_fake(
        "claude",
        bin_dir,
        tmp_path,
        monkeypatch,
        fixture_text("claude-code/story-complete.stream.jsonl"),
        prompt_text=big,
    )
    assert outcome.exit_code == 0 and outcome.timed_out is None
    assert (record / "stdin.txt").read_text(encoding="utf-8") == big
    assert result.final_message.endswith(SENTINEL) and result.usage.input_tokens == 116522
    assert "⏺ Read /home/user/demo/prd.json" in shown
    assert shown[-1].startswith("✓ done: 6 turns")
    env = json.loads((record / "env.json").read_text())
    if os.geteuid() == 0:
        assert env["IS_SANDBOX"] == "1"
    transcript = (tmp_path / "logs" / "t.log").read_text()
    assert transcript.count("\n") == 14 and "\r" not in transcript


@needs_fixtures
def test_claude_429_end_to_end(bin_dir, tmp_path, monkeypatch):
    outcome, result, shown, _ = run_fake(
        "claude",
        bin_dir,
        tmp_path,
        monkeypatch,
        fixture_text("claude-code/rate-limited-429.stream.jsonl"),
        exit_code=1,
    )
    assert outcome.exit_code == 1 and result.is_error and result.http_status == 429
    assert result.limit is not None
    assert shown[-1].startswith("✗ error: API Error: Request rejected (429)")


@needs_fixtures
def test_codex_end_to_end(bin_dir, tmp_path, monkeypatch):
    outcome, result, shown, record = run_fake(
        "codex", bin_dir, tmp_path, monkeypatch, fixture_text("codex/message-complete.exec.jsonl")
    )
    assert json.loads((record / "argv.json").read_text())[-1] == "-"
    assert (record / "stdin.txt").read_text() == "Implement US-001.\n"
    assert result.final_message.endswith(SENTINEL) and result.usage.input_tokens == 15504
    assert "assistant: Hello from fake. " + SENTINEL in shown


@needs_fixtures
def test_amp_end_to_end(bin_dir, tmp_path, monkeypatch):
    text = amp_transcript_from_claude(fixture_text("claude-code/story-complete.stream.jsonl"))
    _, result, _, record = run_fake("amp", bin_dir, tmp_path, monkeypatch, text)
    assert (record / "stdin.txt").read_text() == "Implement US-001.\n"
    assert result.usage.input_tokens == 116522 and result.final_message.endswith(SENTINEL)


def test_gemini_end_to_end(bin_dir, tmp_path, monkeypatch):
    _, result, shown, record = run_fake(
        "gemini",
        bin_dir,
        tmp_path,
        monkeypatch,
        GEMINI_STREAM,
        settings={"model": "gemini-2.5-pro"},
    )
    argv = json.loads((record / "argv.json").read_text())
    assert argv[-2:] == ["-p", base_instruction()] and "-m" in argv
    assert (record / "stdin.txt").read_text() == "Implement US-001.\n"
    assert result.final_message == "Done. " + SENTINEL
    assert "⏺ read_file /p/prd.json" in shown


def base_instruction() -> str:
    from orchestrator.agents.gemini import INSTRUCTION

    return INSTRUCTION


def test_opencode_end_to_end(bin_dir, tmp_path, monkeypatch):
    _, result, shown, record = run_fake("opencode", bin_dir, tmp_path, monkeypatch, OPENCODE)
    assert json.loads((record / "argv.json").read_text())[-1] == "Implement US-001.\n"
    assert result.cost_usd == pytest.approx(0.012)
    assert "⏺ Read prd.json" in shown


def test_command_agent_end_to_end(bin_dir, tmp_path, monkeypatch):
    script = bin_dir / "myagent"
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "text = open(sys.argv[1]).read()\n"
        "print('read', len(text), 'chars')\n"
        "print('Done. <promise>COMPLETE</promise>')\n"
    )
    script.chmod(0o755)
    settings = {"command": ["myagent", "{prompt_file}"]}
    prompt = tmp_path / "prompt.md"
    prompt.write_text("z" * 1234)
    agent = get_agent("myagent", settings)
    outcome, result = runner.run_agent(agent, prompt, cwd=tmp_path, wall_timeout=30)
    assert outcome.exit_code == 0
    assert result.final_message == "read 1234 chars\nDone. " + SENTINEL


def test_base_helpers():
    assert base.short("a  b\nc", 100) == "a b c"
    assert base.short("x" * 200, 10) == "x" * 9 + "…"
    assert base.json_events('junk\n{"a":1}\n[1]\n{bad\n') == [{"a": 1}]


# ---- limits only for failed runs ------------------------------------------------------------
@needs_fixtures
def test_successful_run_with_rejected_rate_limit_event_is_not_a_limit():
    lines = fixture_text("claude-code/story-complete.stream.jsonl").splitlines()
    event = json.dumps(
        {
            "type": "rate_limit_event",
            "rate_limit_info": {
                "status": "rejected",
                "resetsAt": 1796083200,
                "rateLimitType": "five_hour",
                "overageStatus": "allowed",
            },
        }
    )
    text = "\n".join([lines[0], event, *lines[1:]])
    result = get_agent("claude", None, check=False).parse(text, 0)
    assert result.limit is None and not result.is_error
    # ... but the same event in a failed run is the limit, with its reset time.
    failed = text.replace('"is_error":false', '"is_error":true')
    sig = get_agent("claude", None, check=False).parse(failed, 1).limit
    assert sig is not None and sig.reset_at.timestamp() == 1796083200


def test_limit_notice_as_the_whole_final_message_is_an_error():
    text = jsonl(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 1,
            "result": "Claude AI usage limit reached|1796083200",
            "total_cost_usd": 0,
        }
    )
    result = get_agent("claude", None, check=False).parse(text, 0)
    assert result.is_error and result.limit is not None
    assert result.limit.reset_at.timestamp() == 1796083200


@pytest.mark.parametrize(
    "final",
    [
        'US-001 not finished: the checkout test fails on "Insufficient balance" '
        '(the wallet shows "credit limit exceeded").',
        "Done. The API now returns 429 when the daily limit is reached.",
        "Implemented the quota page: it says Quota exceeded, retry in 30s.",
    ],
)
def test_a_successful_runs_final_message_about_limits_is_no_limit(final: str) -> None:
    # Words of the story (a wallet's limit, a quota page) are not the CLI's limit notice:
    # read as one, the loop waited hours and dropped the call's spend.
    text = jsonl({"type": "result", "subtype": "success", "is_error": False, "result": final})
    result = get_agent("claude", None, check=False).parse(text, 0)
    assert result.limit is None and not result.is_error


def test_check_available_uses_the_agents_own_path(tmp_path, bin_dir):
    other = tmp_path / "elsewhere"
    install(other, "claude")
    with pytest.raises(AgentNotFound):
        get_agent("claude", None)
    agent = get_agent("claude", {"env": {"PATH": f"{other}{os.pathsep}/usr/bin"}})
    assert agent.check_available() == str(other / "claude")


def test_command_agent_reads_aider_token_lines():
    out = (
        "Aider v0.86\nTokens: 4.1k sent, 3.3k cache write, 7.8k cache hit, 221 received. "
        "Cost: $0.02 message, $0.02 session.\nApplied edit to greet.py\n"
        "Tokens: 12k sent, 1.5k received. Cost: $0.05 message, $0.07 session.\n"
        "Done. " + SENTINEL + "\n"
    )
    agent = get_agent(
        "aider", {"command": ["aider", "--message-file", "{prompt_file}"]}, check=False
    )
    result = agent.parse(out, 0)
    assert result.usage == Usage(16100, 1721, 7800, 3300)
    assert result.cost_usd == pytest.approx(0.07)
    assert result.final_message.endswith(SENTINEL)


def test_gemini_warnings_and_nested_stream_stats():
    text = jsonl(
        {"type": "init", "model": "gemini-2.5-pro"},
        {"type": "error", "severity": "warning", "message": "Loop detected, continuing"},
        {"type": "message", "role": "assistant", "content": "ok " + SENTINEL, "delta": True},
        {
            "type": "result",
            "status": "success",
            "stats": {
                "models": {
                    "gemini-2.5-pro": {"tokens": {"prompt": 500, "candidates": 7, "cached": 100}}
                }
            },
        },
    )
    result = get_agent("gemini", None, check=False).parse(text, 0)
    assert not result.is_error and result.usage == Usage(400, 7, 100, 0)
    assert result.final_message == "ok " + SENTINEL


def test_opencode_error_shapes():
    agent = get_agent("opencode", None, check=False)
    flat = agent.parse(jsonl({"type": "error", "message": "API rate limit exceeded"}), 1)
    assert flat.is_error and flat.error == "API rate limit exceeded"
    nested = agent.parse(
        jsonl(
            {
                "type": "error",
                "error": {"name": "APIError", "data": {"message": "429 Too Many Requests"}},
            }
        ),
        1,
    )
    assert nested.error == "429 Too Many Requests" and nested.limit is not None


# ---- through the `ralph` command ------------------------------------------------------------
PRD_ONE = {
    "project": "Demo",
    "branchName": "ralph/demo",
    "description": "d",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add greeting",
            "description": "greet",
            "acceptanceCriteria": ["works"],
            "priority": 1,
            "passes": False,
            "notes": "",
        }
    ],
}
AGENT_SCRIPT = """\
import json, subprocess, sys
prompt = sys.stdin.read()
d = json.load(open("prd.json")); d["userStories"][0]["passes"] = True
open("prd.json", "w").write(json.dumps(d, indent=2) + "\\n")
open("greet.py", "w").write("def greet():\\n    return 'Hello'\\n")
open("progress.txt", "a").write("## 2026-11-30 - US-001\\n- Added greet.py\\n---\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-qm", "feat: US-001"], check=True)
print("read", len(prompt), "chars; key sk-ant-api03-" + "Q" * 30)
print("Done. <promise>COMPLETE</promise>")
"""


def git_project(root: Path) -> Path:
    import subprocess

    root.mkdir()
    (root / "prd.json").write_text(json.dumps(PRD_ONE, indent=2) + "\n")
    (root / "progress.txt").write_text("# Ralph Progress Log\nStarted: x\n---\n")
    for args in (
        ["init", "-q", "-b", "ralph/demo"],
        ["add", "-A"],
        ["-c", "user.email=a@b", "-c", "user.name=t", "commit", "-qm", "init"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True)
    return root


def ralph(args: list[str], cwd: Path, path: str):
    import subprocess

    env = {
        **os.environ,
        "PATH": path,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "a@b",
    }
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_missing_agent_binary_exits_2_with_the_fix(tmp_path):
    repo = git_project(tmp_path / "repo")
    proc = ralph(["run", "--tool", "codex", "1"], repo, "/usr/bin:/bin")
    assert proc.returncode == 2
    assert (
        "agent 'codex' not found on PATH: install it or set agents.codex.command in ralph.yaml"
    ) in proc.stderr
    assert json.loads((repo / "prd.json").read_text()) == PRD_ONE  # nothing changed


def test_cli_custom_command_agent_from_ralph_yaml(tmp_path):
    repo = git_project(tmp_path / "repo")
    script = tmp_path / "myagent.py"
    script.write_text(AGENT_SCRIPT)
    command = json.dumps([sys.executable, str(script)])
    (repo / "ralph.yaml").write_text(f"agents:\n  mine:\n    command: {command}\n")
    proc = ralph(["run", "--tool", "mine", "--sleep", "0", "2"], repo, os.environ["PATH"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Done. <promise>COMPLETE</promise>" in proc.stdout
    assert "sk-ant-api03-QQQ" not in proc.stdout  # live output is redacted too
    assert json.loads((repo / "prd.json").read_text())["userStories"][0]["passes"] is True
    logs = [p for p in (repo / "ralph" / "logs").rglob("iteration-1*.log")]
    assert logs, list((repo / "ralph" / "logs").rglob("*"))
    transcript = logs[0].read_text()
    assert "<promise>COMPLETE</promise>" in transcript
    assert "sk-ant-api03-QQQ" not in transcript and "[REDACTED]" in transcript


# What the real Claude Code 2.1.197 printed while the API kept answering 529 (seen offline).
API_RETRY = jsonl(
    {"type": "system", "subtype": "init", "model": "claude-opus-4-8[1m]", "session_id": "s"},
    {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 3,
        "max_retries": 10,
        "retry_delay_ms": 2322.1,
        "error_status": 529,
        "error": "overloaded",
        "session_id": "s",
    },
    {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 4,
        "max_retries": 10,
        "retry_delay_ms": 4322.1,
        "error_status": 529,
        "error": "overloaded",
        "session_id": "s",
    },
)


def test_claude_killed_while_retrying_overloaded_api_is_transient():
    from orchestrator.agents.limits import is_transient

    agent = get_agent("claude", None, check=False)
    result = agent.parse(API_RETRY, 143)
    assert result.is_error and result.http_status == 529 and result.limit is None
    assert "still retrying the API (attempt 4/10: 529 overloaded)" in result.error
    assert is_transient(result, API_RETRY)
    assert agent.display(API_RETRY.splitlines()[-1]) == (
        "⚠ API retry 4/10 (529 overloaded), next in 4s"
    )
    limited = agent.parse(API_RETRY.replace("529", "429"), 143)
    assert limited.limit is not None and limited.limit.kind == "rate"
    assert not is_transient(limited, "")


def test_gemini_untrusted_folder_exit_names_the_fix():
    out = (
        'Approval mode overridden to "default" because the current folder is not trusted.\n'
        "Gemini CLI is not running in a trusted directory. To proceed, either use "
        "`--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable\n"
    )
    agent = get_agent("gemini", None, check=False)
    result = agent.parse(out, 55)
    assert result.is_error and "GEMINI_CLI_TRUST_WORKSPACE=true" in result.error
    assert "not running in a trusted directory" in result.error
    assert agent.env()["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert (
        get_agent("gemini", {"env": {"GEMINI_CLI_TRUST_WORKSPACE": "false"}}, check=False).env()[
            "GEMINI_CLI_TRUST_WORKSPACE"
        ]
        == "false"
    )


# What the real opencode 1.18.33 printed after its provider answered 429 six times (seen).
OPENCODE_429 = jsonl(
    {
        "type": "error",
        "timestamp": 1796019932327,
        "sessionID": "ses_x",
        "error": {
            "name": "APIError",
            "data": {
                "message": "Number of request tokens has exceeded your per-minute rate limit",
                "statusCode": 429,
                "isRetryable": True,
            },
        },
    }
)


def test_opencode_provider_429_is_a_limit_and_5xx_transient():
    from orchestrator.agents.limits import is_transient

    agent = get_agent("opencode", None, check=False)
    result = agent.parse(OPENCODE_429, 1)
    assert result.http_status == 429 and result.limit is not None
    assert result.limit.kind == "rate" and not is_transient(result, OPENCODE_429)
    overloaded = agent.parse(OPENCODE_429.replace("429", "529"), 1)
    assert overloaded.limit is None and is_transient(overloaded, "")


def test_display_details():
    amp = get_agent("amp", None, check=False)
    line = json.dumps(
        {
            "type": "assistant",
            "message": {
                "id": "m",
                "content": [{"type": "tool_use", "name": "Bash", "input": {"cmd": "npm test"}}],
            },
        }
    )
    assert amp.display(line) == "⏺ Bash: npm test"
    codex = get_agent("codex", None, check=False)
    assert codex.display("ERROR: stream error: unexpected status 401") == (
        "✗ ERROR: stream error: unexpected status 401"
    )
    assert codex.display("Implement the story and print ERROR: when...") is None


def test_prompt_too_big_for_one_argument_names_the_fix(tmp_path):
    from orchestrator.errors import InputError

    big = tmp_path / "big.md"
    big.write_text("x" * 200_000)
    agent = get_agent("claude", {"prompt": "argument"}, check=False)
    with pytest.raises(InputError, match="set agents.claude.prompt to stdin"):
        agent.argv(big)
    small = tmp_path / "small.md"
    small.write_text("do it")
    assert agent.argv(small)[-1] == "do it" and agent.stdin_file(small) is None


# The agent gets the prompt from its last argv word only: stdin is /dev/null in these modes.
ARGV_AGENT_SCRIPT = AGENT_SCRIPT.replace(
    "prompt = sys.stdin.read()",
    "last = sys.argv[-1] if len(sys.argv) > 1 else ''\n"
    "prompt = open(last).read() if sys.argv[1:] == ['--file', last] else last\n"
    "open('got.txt', 'w').write(repr((sys.argv[1:2], len(sys.stdin.read()), 'US-001' in prompt)))",
).replace('open("greet.py"', 'open(".gitignore", "w").write("got.txt\\n"); open("greet.py"')


@pytest.mark.parametrize(
    ("via", "flag"), [("file", "--file"), ("argument", "--text")], ids=["file", "argument"]
)
def test_cli_custom_agent_prompt_setting_without_placeholder_appends_prompt(tmp_path, via, flag):
    repo = git_project(tmp_path / "repo")
    script = tmp_path / "myagent.py"
    script.write_text(ARGV_AGENT_SCRIPT)
    command = json.dumps([sys.executable, str(script), flag])
    yaml_text = f"agents:\n  mine:\n    command: {command}\n    prompt: {via}\n"
    (repo / "ralph.yaml").write_text(yaml_text)
    proc = ralph(["run", "--tool", "mine", "--sleep", "0", "1"], repo, os.environ["PATH"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The prompt (its path, or its text) is the last argv word; stdin stays empty.
    assert (repo / "got.txt").read_text() == repr(([flag], 0, True))
    assert json.loads((repo / "prd.json").read_text())["userStories"][0]["passes"] is True
