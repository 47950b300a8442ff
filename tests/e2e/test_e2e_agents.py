"""Every agent adapter against the REAL agent CLI, offline: Claude Code and Codex (pinned in
.ci/npm), Gemini CLI and opencode (when installed), each talking to a scripted API on
loopback, spawned by `runner.run_agent` on a real pty. What is checked is the adapter's side:
argv and env the CLI accepts, the prompt arriving on stdin, tools running for real in the
agent's folder, usage/final message/limits read from what the CLI printed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator.agents import Usage, get_agent, runner
from orchestrator.agents.gemini import INSTRUCTION

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))  # fake_gemini

SENTINEL = "<promise>COMPLETE</promise>"


# ---- the real Claude Code and Codex CLIs, offline (scripted APIs from tests/e2e) ----------
LEAKY = ("ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "AMP_", "GEMINI_", "RALPH_")


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    """A private HOME and no variable that could reach a real account."""
    for key in list(os.environ):
        if key.startswith(LEAKY):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "CODEX_HOME": str(home / ".codex"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def real_cli(name: str) -> str:
    from e2e_support import find_cli

    return find_cli(name)


def claude_settings(api, env: dict) -> dict:
    return {
        "command": [real_cli("claude")],
        "env": {
            **env,
            "ANTHROPIC_BASE_URL": api.base_url,
            "ANTHROPIC_API_KEY": "x",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        },
    }


def test_real_claude_through_adapter_and_runner(tmp_path, offline_env):
    from fake_anthropic import FakeAnthropic, Text, ToolUse

    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("hello notes\n")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n" + "context line\n" * 20_000)  # ~260 KB
    script = [
        ToolUse(
            "Bash", {"command": "echo made > made.txt", "description": "make"}, text="Working."
        ),
        ToolUse("Read", {"file_path": str(work / "notes.txt")}),
        Text("Done. " + SENTINEL),
    ]
    shown: list[str] = []
    with FakeAnthropic({"US-001": script}) as api:
        agent = get_agent("claude", claude_settings(api, offline_env))
        outcome, result = runner.run_agent(
            agent,
            prompt,
            cwd=work,
            on_line=shown.append,
            transcript_path=tmp_path / "t.log",
            wall_timeout=180,
        )
    assert outcome.exit_code == 0, outcome.output[-2000:]
    assert (work / "made.txt").read_text() == "made\n"  # the CLI ran the tool for real
    assert result.final_message == "Done. " + SENTINEL and not result.is_error
    assert result.num_turns == 3 and result.cost_usd > 0
    assert result.usage.prompt_tokens > 3 * 60_000  # three requests, each carrying the prompt
    assert shown[0].startswith("⏺ session started") and "⏺ Bash: echo made > made.txt" in shown
    assert f"⏺ Read {work / 'notes.txt'}" in shown and shown[-1].startswith("✓ done: 3 turns")
    assert not any("\x1b" in s for s in shown) and "\x1b" not in outcome.output


def test_real_claude_429_is_a_limit(tmp_path, offline_env):
    from fake_anthropic import Fail, FakeAnthropic

    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    with FakeAnthropic({"US-001": [Fail()]}) as api:
        agent = get_agent("claude", claude_settings(api, offline_env))
        outcome, result = runner.run_agent(agent, prompt, cwd=tmp_path, wall_timeout=180)
    assert outcome.exit_code == 1 and result.is_error and result.http_status == 429
    assert result.limit is not None and result.limit.kind == "rate"


def codex_settings(api, env: dict) -> dict:
    return {
        "command": [real_cli("codex")],
        "args": api.provider_args(),
        "env": {**env, "OPENAI_API_KEY": "x"},
    }


def test_real_codex_through_adapter_and_runner(tmp_path, offline_env):
    from fake_openai import FakeOpenAI, Shell, Text

    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    shown: list[str] = []
    with FakeOpenAI(
        {"US-001": [Shell("echo made > made.txt"), Text("Done. " + SENTINEL)]}, cached_ratio=0.5
    ) as api:
        agent = get_agent("codex", codex_settings(api, offline_env))
        outcome, result = runner.run_agent(
            agent, prompt, cwd=tmp_path, on_line=shown.append, wall_timeout=180
        )
    assert outcome.exit_code == 0, outcome.output[-2000:]
    assert (tmp_path / "made.txt").read_text() == "made\n"
    assert result.final_message == "Done. " + SENTINEL and not result.is_error
    assert result.usage.cache_read_tokens > 0
    assert result.usage.prompt_tokens == sum(r.usage["input_tokens"] for r in api.main_requests())
    assert "assistant: Done. " + SENTINEL in shown


def test_real_codex_usage_limit_gives_reset_time(tmp_path, offline_env):
    from datetime import datetime, timedelta

    from fake_openai import Fail, FakeOpenAI

    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    with FakeOpenAI({"US-001": [Fail(resets_in=3 * 3600)]}) as api:
        agent = get_agent("codex", codex_settings(api, offline_env))
        before = datetime.now().astimezone()
        outcome, result = runner.run_agent(agent, prompt, cwd=tmp_path, wall_timeout=180)
    assert outcome.exit_code == 1 and result.is_error
    assert "usage limit" in result.error and result.limit is not None
    # Codex prints the reset as a wall-clock minute ("Try again at 9:02 AM."), so expect
    # three hours from now within that minute's rounding.
    delta = result.limit.reset_at - before
    assert timedelta(hours=2, minutes=58) < delta < timedelta(hours=3, minutes=2), delta


# ---- the real Gemini CLI and opencode, offline -----------------------------------------------
def npm_cli(name: str) -> str:
    """An installed CLI: $NPM_CLI_BIN, <repo>/.ci/npm, or PATH; else skip."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    for folder in (os.environ.get("NPM_CLI_BIN"), repo / ".ci/npm/node_modules/.bin"):
        if folder and (Path(folder) / name).exists():
            return str(Path(folder) / name)
    found = shutil.which(name)
    if not found:
        pytest.skip(
            f"{name} CLI not installed (npm: @google/gemini-cli, opencode-ai); "
            "set NPM_CLI_BIN to its bin folder"
        )
    return found


def test_real_gemini_through_adapter_and_runner(tmp_path, offline_env):
    from fake_gemini import Call, FakeGemini, Say, gemini_home

    exe = npm_cli("gemini")
    work = tmp_path / "work"
    work.mkdir()
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    shown: list[str] = []
    with FakeGemini(
        [Call("run_shell_command", {"command": "echo made > made.txt"}), Say("Done. " + SENTINEL)]
    ) as api:
        env = {
            **offline_env,
            **gemini_home(tmp_path / "home"),
            "GOOGLE_GEMINI_BASE_URL": api.base_url,
        }
        agent = get_agent("gemini", {"command": [exe], "env": env, "model": "gemini-2.5-pro"})
        outcome, result = runner.run_agent(
            agent, prompt, cwd=work, on_line=shown.append, wall_timeout=180
        )
        texts = [
            part.get("text", "")
            for c in api.main_requests()[0].body["contents"]
            for part in c.get("parts", [])
        ]
        first = next(x for x in texts if "US-001" in x)
    assert outcome.exit_code == 0, outcome.output[-2000:]
    # stdin and the -p instruction arrive as one user message, the prompt first.
    assert first.startswith("Implement story US-001.") and first.endswith(INSTRUCTION)
    # The folder was never marked trusted: without the adapter's trust variable the CLI
    # downgrades yolo and a headless run exits 55 before doing anything.
    assert (work / "made.txt").read_text() == "made\n"
    assert result.final_message == "Done. " + SENTINEL and not result.is_error
    assert result.usage == Usage(2000, 18, 400, 0)  # two requests of 1200 (200 cached) + 9
    assert "⏺ run_shell_command echo made > made.txt" in shown
    assert "assistant: Done. " + SENTINEL in shown


def test_real_gemini_daily_quota_is_a_limit(tmp_path, offline_env):
    from fake_gemini import FakeGemini, Quota, gemini_home

    exe = npm_cli("gemini")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    with FakeGemini([Quota()]) as api:
        env = {
            **offline_env,
            **gemini_home(tmp_path / "home"),
            "GOOGLE_GEMINI_BASE_URL": api.base_url,
        }
        agent = get_agent("gemini", {"command": [exe], "env": env, "model": "gemini-2.5-pro"})
        outcome, result = runner.run_agent(agent, prompt, cwd=tmp_path, wall_timeout=180)
    assert outcome.timed_out is None and result.is_error
    assert "exhausted your daily quota" in result.error
    assert result.limit is not None and result.limit.kind == "quota"


def test_real_opencode_through_adapter_and_runner(tmp_path, offline_env):
    from fake_anthropic import FakeAnthropic, Text, ToolUse

    exe = npm_cli("opencode")
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    shown: list[str] = []
    script = [
        ToolUse(
            "bash", {"command": "echo made > made.txt", "description": "make"}, text="Working."
        ),
        Text("Done. " + SENTINEL),
    ]
    with FakeAnthropic({"US-001": script}) as api:
        # opencode speaks to any Anthropic-compatible endpoint through a custom provider.
        config = {
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/anthropic",
                    "name": "Fake",
                    "options": {"baseURL": api.base_url + "/v1", "apiKey": "x"},
                    "models": {"claude-opus-4-8": {"name": "fake opus"}},
                }
            },
            "model": "fake/claude-opus-4-8",
            "small_model": "fake/claude-opus-4-8",
            "share": "disabled",
            "autoupdate": False,
        }
        (home / ".config" / "opencode").mkdir(parents=True, exist_ok=True)
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
        env = {
            **offline_env,
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_STATE_HOME": str(home / "state"),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
        agent = get_agent("opencode", {"command": [exe], "env": env})
        outcome, result = runner.run_agent(
            agent, prompt, cwd=work, on_line=shown.append, wall_timeout=240
        )
    assert outcome.exit_code == 0, outcome.output[-2000:]
    assert (work / "made.txt").read_text() == "made\n"  # in the agent's folder (PWD!)
    assert result.final_message == "Done. " + SENTINEL and not result.is_error
    assert result.num_turns == 2 and result.usage.input_tokens > 0
    assert shown == [
        "assistant: Working.",
        "⏺ Bash: echo made > made.txt",
        "assistant: Done. " + SENTINEL,
    ]


def test_real_amp_accepts_the_adapters_flags(tmp_path, offline_env):
    """Amp talks only to its own service, so offline we can check the call, not a story:
    the CLI rejects unknown options, so reaching the connection step proves the argv."""
    exe = npm_cli("amp")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    env = {**offline_env, "AMP_API_KEY": "sgamp_x", "AMP_URL": "http://127.0.0.1:9"}
    agent = get_agent("amp", {"command": [exe], "env": env, "model": "high"})
    outcome, result = runner.run_agent(agent, prompt, cwd=tmp_path, wall_timeout=120)
    assert "unknown option" not in outcome.output
    assert "Couldn't connect to the Amp server at http://127.0.0.1:9" in outcome.output
    assert outcome.exit_code == 1 and result.is_error

    from orchestrator.agents.limits import is_transient

    assert is_transient(result, outcome.output)  # a network failure is worth a retry
