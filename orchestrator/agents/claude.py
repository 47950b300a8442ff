"""Claude Code (`claude -p --output-format stream-json --verbose`).

Token truth is the final `result` line (session totals): several `assistant` lines can repeat
one message's usage, so summing them over-counts. Prompt tokens = input + cache_creation +
cache_read. Errors also arrive as `"subtype":"success"` with `"is_error":true`.
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
    is_root,
    json_events,
    parse_json_line,
    short,
)
from orchestrator.agents.reads import FileRead, tool_reads
from orchestrator.redact import redact

# Which input field best names what a tool call touches, per Claude Code tool.
_TOOL_SUBJECT = {
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Task": "description",
    "TodoWrite": None,
}
# Other CLIs (Gemini, opencode) name the same things differently.
_GENERIC_SUBJECTS = (
    "file_path",
    "filePath",
    "absolute_path",
    "path",
    "pattern",
    "url",
    "query",
    "command",
    "description",
)


class ClaudeAgent(Agent):
    name = "claude"
    binary = "claude"
    default_prompt_via = "stdin"

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command() + [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
        ]
        if self.model:
            argv += ["--model", self.model]
        if self.prompt_via == "argument":
            argv.append(self.prompt_argument(prompt_file))
        elif self.prompt_via == "file":
            argv.append(f"Read {prompt_file} and follow the instructions in it.")
        return argv + self.settings.args

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        if is_root():
            # As root, --dangerously-skip-permissions refuses to run unless IS_SANDBOX=1.
            env["IS_SANDBOX"] = "1"
        env.update(self.settings.env)
        return env

    def display(self, line: str) -> str | None:
        return stream_display(line)

    def file_reads(self, output: str) -> list[FileRead] | None:
        return stream_reads(json_events(output))

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        events = json_events(output)
        result = _last(events, "result")
        model = self.model or _init_model(events)
        if result is None:
            return _without_result(events, output, exit_code, model, self.name)
        usage = _result_usage(result.get("usage"))
        is_error = bool(result.get("is_error")) or str(result.get("subtype", "")).startswith(
            "error"
        )
        text = result.get("result")
        error = None
        if is_error:
            errors = result.get("errors")
            error = text or (
                "; ".join(map(str, errors)) if errors else result.get("subtype", "error")
            )
        status = result.get("api_error_status")
        return AgentResult(
            final_message=text if isinstance(text, str) else None,
            usage=usage,
            cost_usd=_float(result.get("total_cost_usd")),
            is_error=is_error,
            error=error,
            num_turns=result.get("num_turns"),
            model=model or _model_usage_name(result),
            http_status=status if isinstance(status, int) else None,
        )


def create(settings: SettingsInput = None) -> ClaudeAgent:
    return ClaudeAgent(settings)


# ---- shared with Amp (same stream-json shape) -----------------------------------------------
def _last(events: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    # A slice, not reversed(): mypy resolves reversed() of a list of dict[str, Any] to Any.
    for event in events[::-1]:
        if event.get("type") == kind:
            return event
    return None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _result_usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=_int(raw.get("cache_creation_input_tokens")),
    )


def _init_model(events: list[dict[str, Any]]) -> str | None:
    for event in events:
        if event.get("type") == "system" and event.get("subtype") == "init":
            return event.get("model")
    return None


def _model_usage_name(result: dict[str, Any]) -> str | None:
    models = result.get("modelUsage")
    return next(iter(models)) if isinstance(models, dict) and models else None


def assistant_usage(events: list[dict[str, Any]]) -> Usage | None:
    """Usage summed over assistant messages, counting each message id once (its last line)."""
    per_id: dict[str, Usage] = {}
    for n, event in enumerate(events):
        message = event.get("message") if event.get("type") == "assistant" else None
        if not isinstance(message, dict) or not isinstance(message.get("usage"), dict):
            continue
        per_id[str(message.get("id") or f"#{n}")] = _result_usage(message["usage"]) or Usage()
    if not per_id:
        return None
    total = Usage()
    for usage in per_id.values():
        total = total + usage
    return total


def stream_reads(events: list[dict[str, Any]]) -> list[FileRead]:
    """Files opened by the `tool_use` blocks of the assistant messages (Read, Grep, Bash).
    Each block arrives once (one line per content block), so none is skipped as a repeat."""
    reads: list[FileRead] = []
    for event in events:
        message = event.get("message") if event.get("type") == "assistant" else None
        if not isinstance(message, dict):
            continue
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                reads += tool_reads(str(block.get("name") or ""), block.get("input"))
    return reads


def last_assistant_text(events: list[dict[str, Any]]) -> str | None:
    for event in reversed(events):
        message = event.get("message") if event.get("type") == "assistant" else None
        if not isinstance(message, dict):
            continue
        texts = [
            c.get("text", "")
            for c in message.get("content") or []
            if isinstance(c, dict) and c.get("type") == "text"
        ]
        if texts:
            return "\n".join(texts)
    return None


def _without_result(
    events: list[dict[str, Any]], output: str, exit_code: int | None, model: str | None, name: str
) -> AgentResult:
    """No `result` line: the CLI died or was killed. Keep what the stream did show.

    If the CLI was still retrying the API when it ended (its last event is an `api_retry`),
    that HTTP status is the cause: 5xx/529 make the failure transient, 429 a rate limit."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.lstrip().startswith("{")]
    detail = lines[-1].strip() if lines else f"exit code {exit_code}"
    status = None
    last = events[-1] if events else {}
    if last.get("type") == "system" and last.get("subtype") == "api_retry":
        status = last.get("error_status") if isinstance(last.get("error_status"), int) else None
        detail = (
            f"still retrying the API (attempt {last.get('attempt')}/"
            f"{last.get('max_retries')}: {status} {last.get('error', '')})"
        )
    return AgentResult(
        final_message=last_assistant_text(events),
        usage=assistant_usage(events),
        is_error=True,
        # Redacted before it is shortened: half a token is no shape redaction knows.
        error=f"{name} produced no result line: {short(redact(detail), 300)}",
        model=model,
        http_status=status,
    )


def tool_line(name: str, tool_input: Any) -> str:
    """ "⏺ Read src/app.py", "⏺ Bash: git commit -m ...": one readable line per tool call."""
    data = tool_input if isinstance(tool_input, dict) else {}
    if name == "Bash":  # Amp's Bash tool names its input `cmd`
        return f"⏺ Bash: {short(str(data.get('command') or data.get('cmd') or ''), 120)}"
    key = _TOOL_SUBJECT.get(name, "")
    if key is None or not data:
        return f"⏺ {name}"
    for k in (key, *_GENERIC_SUBJECTS):
        if k and isinstance(data.get(k), (str, int)) and str(data[k]):
            return f"⏺ {name} {short(str(data[k]), 120)}"
    return f"⏺ {name} {short(json.dumps(data, ensure_ascii=False), 100)}"


def stream_display(line: str) -> str | None:
    """Readable live output for Claude-style stream-json lines; other lines pass through."""
    event = parse_json_line(line)
    if event is None:
        text = line.strip()
        return text or None
    kind = event.get("type")
    if kind == "assistant":
        return _assistant_display(event.get("message") or {})
    if kind == "user":
        return _tool_errors(event.get("message") or {})
    if kind == "system" and event.get("subtype") == "init":
        return f"⏺ session started ({event.get('model', 'default model')})"
    if kind == "system" and event.get("subtype") == "api_retry":
        delay = _float(event.get("retry_delay_ms")) or 0.0
        return (
            f"⚠ API retry {event.get('attempt')}/{event.get('max_retries')} "
            f"({event.get('error_status')} {event.get('error', '')}), "
            f"next in {delay / 1000:.0f}s"
        )
    if kind == "result":
        return _result_display(event)
    if kind == "rate_limit_event":
        info = event.get("rate_limit_info") or {}
        if info.get("status") == "rejected":
            return f"⚠ rate limit reached ({info.get('rateLimitType', 'limit')})"
    return None


def _assistant_display(message: dict[str, Any]) -> str | None:
    out = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and block.get("text", "").strip():
            out.append(f"assistant: {short(block['text'])}")
        elif block.get("type") == "tool_use":
            out.append(tool_line(str(block.get("name", "tool")), block.get("input")))
    return "\n".join(out) or None


def _tool_errors(message: dict[str, Any]) -> str | None:
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("is_error"):
            body = block.get("content")
            text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            return f"  ⎿ error: {short(text)}"
    return None


def _result_display(event: dict[str, Any]) -> str:
    usage = _result_usage(event.get("usage"))
    bits = [f"{event.get('num_turns', '?')} turns"]
    if usage:
        bits.append(f"{usage.prompt_tokens} in / {usage.output_tokens} out tokens")
    cost = _float(event.get("total_cost_usd"))
    if cost is not None:
        bits.append(f"${cost:.4f}")
    if event.get("is_error"):
        return f"✗ error: {short(str(event.get('result') or event.get('error') or ''))}"
    return "✓ done: " + ", ".join(bits)
