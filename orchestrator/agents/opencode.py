"""opencode (`opencode run --format json <message>`): NDJSON events.

Usage and cost sit on each `step_finish` part (`tokens.{input,output,reasoning,cache.{read,
write}}`, `cost`) and are summed. The final message is the text parts of the last step.
The prompt goes as the message argument; a prompt too big for one argv string (Linux caps
one at 128 KiB) is attached with `--file` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.agents.base import (
    MAX_ARG_BYTES,
    Agent,
    AgentResult,
    SettingsInput,
    Usage,
    json_events,
    parse_json_line,
    short,
)
from orchestrator.agents.claude import tool_line
from orchestrator.agents.reads import FileRead, tool_reads

ATTACHED = "Follow the instructions in the attached file exactly."


class OpencodeAgent(Agent):
    name = "opencode"
    binary = "opencode"
    default_prompt_via = "argument"

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command() + ["run", "--format", "json"]
        if self.model:
            argv += ["-m", self.model]  # provider/model, e.g. anthropic/claude-sonnet-4
        argv += self.settings.args
        if self.prompt_via == "stdin":
            return argv
        if self.prompt_via == "argument" and prompt_file.stat().st_size <= MAX_ARG_BYTES:
            return argv + [prompt_file.read_text(encoding="utf-8")]
        return argv + ["--file", str(prompt_file), "--", ATTACHED]

    def display(self, line: str) -> str | None:
        event = parse_json_line(line)
        if event is None:
            return None
        part = event.get("part") or {}
        kind = event.get("type")
        if kind == "tool_use":
            state = part.get("state") or {}
            return tool_line(str(part.get("tool", "tool")).capitalize(), state.get("input"))
        if kind == "text" and part.get("text", "").strip():
            return f"assistant: {short(part['text'])}"
        if kind == "error":
            return f"✗ error: {short(_error_text(event.get('error') or event))}"
        return None

    def file_reads(self, output: str) -> list[FileRead] | None:
        """`tool_use` events (read, grep, bash), each with its part's `state.input`."""
        reads: list[FileRead] = []
        for event in json_events(output):
            part = event.get("part") or {}
            if event.get("type") == "tool_use" and isinstance(part, dict):
                state = part.get("state") or {}
                tool_input = state.get("input") if isinstance(state, dict) else None
                reads += tool_reads(str(part.get("tool") or ""), tool_input)
        return reads

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        usage: Usage | None = None
        cost: float | None = None
        texts: list[str] = []
        errors: list[str] = []
        status: int | None = None
        steps = 0
        for event in json_events(output):
            kind, part = event.get("type"), event.get("part") or {}
            if kind == "step_start":
                texts = []
            elif kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "step_finish":
                steps += 1
                usage = (usage or Usage()) + _tokens(part.get("tokens"))
                if isinstance(part.get("cost"), (int, float)):
                    cost = (cost or 0.0) + float(part["cost"])
            elif kind == "error":
                errors.append(_error_text(event.get("error") or event))
                status = _status(event.get("error")) or status
        return AgentResult(
            final_message="\n".join(texts) or None,
            usage=usage,
            cost_usd=cost,
            is_error=bool(errors),
            error="; ".join(errors) or None,
            num_turns=steps or None,
            model=self.model,
            http_status=status,
        )


def _tokens(raw: Any) -> Usage:
    raw = raw if isinstance(raw, dict) else {}
    cache = raw.get("cache") if isinstance(raw.get("cache"), dict) else {}

    def num(src: dict[str, Any], key: str) -> int:
        value = src.get(key)
        return int(value) if isinstance(value, (int, float)) else 0

    return Usage(
        input_tokens=num(raw, "input"),
        output_tokens=num(raw, "output") + num(raw, "reasoning"),
        cache_read_tokens=num(cache, "read"),
        cache_write_tokens=num(cache, "write"),
    )


def _status(err: Any) -> int | None:
    """The provider's HTTP status (`error.data.statusCode`): 429 = limit, 5xx = transient."""
    data = err.get("data") if isinstance(err, dict) else None
    code = data.get("statusCode") if isinstance(data, dict) else None
    return code if isinstance(code, int) else None


def _error_text(err: Any) -> str:
    if isinstance(err, dict):
        raw = err.get("data")
        data = raw if isinstance(raw, dict) else {}
        return str(data.get("message") or err.get("message") or err.get("name") or err)
    return str(err or "error")


def create(settings: SettingsInput = None) -> OpencodeAgent:
    return OpencodeAgent(settings)
