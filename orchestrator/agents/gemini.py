"""Gemini CLI (`gemini --output-format stream-json --approval-mode=yolo -p ...`).

The prompt goes on stdin, which Gemini CLI combines with the short `-p` instruction. Both
output formats are read: stream-json (events ending in a `result` with `stats`) and json
(one object, pretty-printed over many lines, with `response` and `stats.models`). Gemini
counts cached tokens inside the prompt count, so fresh input = prompt - cached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.agents.base import (
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

# Gemini CLI's documented fatal exit codes.
EXIT_CODES = {
    41: "authentication failed (exit 41): log in with `gemini` or set GEMINI_API_KEY",
    42: "invalid input (exit 42)",
    44: "sandbox error (exit 44)",
    52: "invalid configuration (exit 52)",
    53: "turn limit reached (exit 53)",
    55: "folder not trusted (exit 55): set GEMINI_CLI_TRUST_WORKSPACE=true in agents.gemini.env",
}
NO_JSON = "gemini printed no JSON output"
INSTRUCTION = "Follow the instructions given above (on standard input) exactly."


class GeminiAgent(Agent):
    name = "gemini"
    binary = "gemini"
    default_prompt_via = "stdin"

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command() + ["--output-format", "stream-json", "--approval-mode=yolo"]
        if self.model:
            argv += ["-m", self.model]
        argv += self.settings.args
        if self.prompt_via == "argument":
            return argv + ["-p", self.prompt_argument(prompt_file)]
        if self.prompt_via == "file":
            return argv + ["-p", f"Read {prompt_file} and follow the instructions in it."]
        return argv + ["-p", INSTRUCTION]

    def env(self) -> dict[str, str]:
        # In a folder the user never marked trusted, Gemini CLI downgrades yolo to "default"
        # and a headless run exits 55 before doing anything. The loop runs in the user's
        # own project, so trust it (override in agents.gemini.env).
        return {"GEMINI_CLI_TRUST_WORKSPACE": "true", **self.settings.env}

    def display(self, line: str) -> str | None:
        event = parse_json_line(line)
        if event is None:
            return None
        kind = event.get("type")
        if kind == "tool_use":
            return tool_line(str(event.get("tool_name", "tool")), event.get("parameters"))
        if kind == "tool_result" and event.get("status") == "error":
            return f"  ⎿ error: {short(_message(event.get('error') or event.get('output')))}"
        if kind == "error":
            return f"✗ error: {short(_message(event))}"
        if kind == "result":
            stats = _stream_usage(event.get("stats"))
            if event.get("status") not in (None, "success"):
                return f"✗ {event.get('status')}: {short(_message(event.get('error')))}"
            return f"✓ done: {stats.prompt_tokens} in / {stats.output_tokens} out tokens"
        if kind == "message" and event.get("role") == "assistant":
            text = str(event.get("content", "")).strip()  # streamed pieces: one line each
            return f"assistant: {short(text)}" if text else None
        return None

    def file_reads(self, output: str) -> list[FileRead] | None:
        """stream-json `tool_use` events (read_file, search_file_content, run_shell_command);
        None for the one-object `json` format, which names no tool calls."""
        events = json_events(output)
        if not any("type" in e for e in events):
            return None
        reads: list[FileRead] = []
        for e in events:
            if e.get("type") == "tool_use":
                reads += tool_reads(str(e.get("tool_name") or ""), e.get("parameters"))
        return reads

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        events = json_events(output)
        if any("type" in e for e in events):
            result = _parse_stream(events)
        else:
            result = _parse_json(_whole_json(output))
            if result.error == NO_JSON:
                plain = [ln.strip() for ln in output.splitlines() if ln.strip()]
                result.error = NO_JSON + (f": {short(plain[-1], 300)}" if plain else "")
        result.model = result.model or self.model
        if exit_code in EXIT_CODES:
            result.is_error = True
            result.error = (
                f"{EXIT_CODES[exit_code]}: {result.error}"
                if result.error
                else (EXIT_CODES[exit_code])
            )
        return result


def _message(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("message") or obj.get("error") or json.dumps(obj))
    return str(obj or "")


def _num(raw: dict[str, Any], *keys: str) -> int:
    for key in keys:
        value = raw.get(key)
        if isinstance(value, (int, float)):
            return int(value)
    return 0


def _stream_usage(stats: Any) -> Usage:
    stats = stats if isinstance(stats, dict) else {}
    if "input_tokens" not in stats and isinstance(stats.get("models"), dict):
        usage, _ = _models_usage(stats["models"])  # some versions nest stats per model
        return usage or Usage()
    prompt, cached = _num(stats, "input_tokens", "input"), _num(stats, "cached")
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=_num(stats, "output_tokens", "output"),
        cache_read_tokens=cached,
    )


def _parse_stream(events: list[dict[str, Any]]) -> AgentResult:
    model, final_parts, errors = None, [], []
    result: dict[str, Any] | None = None
    for event in events:
        kind = event.get("type")
        if kind == "init":
            model = event.get("model")
        elif kind == "message" and event.get("role") == "assistant":
            final_parts.append(str(event.get("content", "")))
        elif kind in ("tool_use", "tool_result"):
            final_parts = []  # the final message is the text after the last tool call
        elif kind == "error" and event.get("severity") != "warning":  # warnings go on
            errors.append(_message(event))
        elif kind == "result":
            result = event
    if result is None:
        errors.append("gemini produced no result event")
    elif result.get("status") not in (None, "success"):
        errors.append(_message(result.get("error")) or str(result.get("status")))
    return AgentResult(
        final_message="".join(final_parts) or None,
        usage=_stream_usage(result.get("stats")) if result else None,
        is_error=bool(errors),
        error="; ".join(e for e in errors if e) or None,
        model=model,
    )


def _whole_json(output: str) -> dict[str, Any] | None:
    """The json format prints one (multi-line) object, possibly after banner lines."""
    start = output.find("{")
    while start != -1:
        try:
            obj, _ = json.JSONDecoder().raw_decode(output[start:])
        except ValueError:
            start = output.find("{", start + 1)
            continue
        if isinstance(obj, dict):
            return obj
        start = output.find("{", start + 1)
    return None


def _models_usage(models: Any) -> tuple[Usage | None, str | None]:
    """Sum `stats.models.<name>.tokens` (prompt includes cached; candidates = output)."""
    usage, model = None, None
    for name, data in models.items() if isinstance(models, dict) else []:
        tokens = (data or {}).get("tokens") or {}
        prompt, cached = _num(tokens, "prompt"), _num(tokens, "cached")
        part = Usage(max(0, prompt - cached), _num(tokens, "candidates"), cached, 0)
        usage = part if usage is None else usage + part
        model = model or name
    return usage, model


def _parse_json(obj: dict[str, Any] | None) -> AgentResult:
    if obj is None:
        return AgentResult(is_error=True, error=NO_JSON)
    usage, model = _models_usage((obj.get("stats") or {}).get("models"))
    error = obj.get("error")
    response = obj.get("response")
    return AgentResult(
        final_message=response if isinstance(response, str) else None,
        usage=usage,
        is_error=bool(error),
        error=_message(error) if error else None,
        model=model,
    )


def create(settings: SettingsInput = None) -> GeminiAgent:
    return GeminiAgent(settings)
