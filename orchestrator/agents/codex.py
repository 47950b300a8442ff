"""OpenAI Codex (`codex exec --json ... -`), prompt on stdin.

Usage comes from `turn.completed` events (summed over turns). OpenAI counts cached tokens
inside `input_tokens`, so fresh input = input - cached - cache_write, keeping `Usage`
Anthropic-style (prompt_tokens is then the reported input_tokens). No cost is reported.
The final message is the last `agent_message` item: Codex echoes the prompt in its plain
output, so the sentinel must never be searched there.
"""

from __future__ import annotations

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
from orchestrator.agents.reads import FileRead, shell_reads


class CodexAgent(Agent):
    name = "codex"
    binary = "codex"
    default_prompt_via = "stdin"

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command() + [
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        if self.model:
            argv += ["-m", self.model]
        argv += self.settings.args  # options must precede the prompt argument
        if self.prompt_via == "argument":
            return argv + [self.prompt_argument(prompt_file)]
        if self.prompt_via == "file":
            return argv + [f"Read {prompt_file} and follow the instructions in it."]
        return argv + ["-"]

    def display(self, line: str) -> str | None:
        event = parse_json_line(line)
        if event is None:
            # Plain output may echo the whole prompt: show only fatal errors.
            return f"✗ {short(line.strip(), 200)}" if _is_error_line(line) else None
        kind = event.get("type", "")
        if kind in ("item.started", "item.completed"):
            return _item_display(event.get("item") or {}, started=kind == "item.started")
        if kind == "turn.completed":
            usage = _usage(event.get("usage"))
            return f"✓ turn done: {usage.prompt_tokens} in / {usage.output_tokens} out tokens"
        if kind == "turn.failed":
            return f"✗ turn failed: {short(_message(event.get('error')))}"
        if kind == "error":
            return f"✗ error: {short(_message(event))}"
        return None

    def file_reads(self, output: str) -> list[FileRead] | None:
        return exec_reads(json_events(output))

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        events = json_events(output)
        usage: Usage | None = None
        final: str | None = None
        errors: list[str] = []
        turns = 0
        for event in events:
            kind = event.get("type")
            if kind == "turn.completed":
                turns += 1
                usage = (usage or Usage()) + _usage(event.get("usage"))
            elif kind == "item.completed":
                item = event.get("item") or {}
                if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                    final = item["text"]
            elif kind == "turn.failed":
                turns += 1
                errors.append(_message(event.get("error")))
            elif kind == "error":
                errors.append(_message(event))
        if not events and output.strip():
            # Not the output's tail: plain output may be the echoed prompt.
            fatal = [ln.strip() for ln in output.splitlines() if _is_error_line(ln)]
            errors.append(
                "codex printed no JSON events" + (": " + short(fatal[-1], 300) if fatal else "")
            )
        return AgentResult(
            final_message=final,
            usage=usage,
            cost_usd=None,
            is_error=bool(errors),
            # codex repeats one failure as `error` and `turn.failed`: keep each text once.
            error="; ".join(dict.fromkeys(e for e in errors if e)) or None,
            num_turns=turns or None,
            model=self.model,
        )

    def limit_text(self, output: str, result: AgentResult) -> str:
        # Error events, the final message, and plain "ERROR:" lines (fatal errors go to
        # stderr); other plain lines may be the echoed prompt.
        parts = [result.error or ""]
        if result.is_error and result.final_message:
            parts.append(result.final_message)
        parts += [ln for ln in output.splitlines() if _is_error_line(ln)]
        return "\n".join(p for p in parts if p)


def exec_reads(events: list[dict[str, Any]]) -> list[FileRead]:
    """Files read by the shell commands Codex ran (`command_execution` items; one command
    counted once, however many started/updated/completed events name it). The item does not
    say in which directory the command ran (codex 0.171 drops exec_command's `workdir`), so
    paths are as if from the project root; memory.usage reads a relative path that is not
    there in the references folder."""
    reads: list[FileRead] = []
    seen: set[str] = set()
    for event in events:
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type") != "command_execution":
            continue
        key = str(item.get("id") or "") or str(item.get("command"))
        if key in seen:
            continue
        seen.add(key)
        reads += shell_reads(str(item.get("command") or ""))
    return reads


def _is_error_line(line: str) -> bool:
    return line.lstrip().upper().startswith("ERROR:")


def _usage(raw: Any) -> Usage:
    raw = raw if isinstance(raw, dict) else {}

    def num(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) else 0

    cached, written = num("cached_input_tokens"), num("cache_write_input_tokens")
    return Usage(
        input_tokens=max(0, num("input_tokens") - cached - written),
        output_tokens=num("output_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def _message(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("message") or obj.get("error") or "")
    return str(obj or "")


def _item_display(item: dict[str, Any], *, started: bool) -> str | None:
    kind = item.get("type")
    if kind == "command_execution":
        if started:
            return f"⏺ Bash: {short(str(item.get('command', '')), 120)}"
        code = item.get("exit_code")
        return f"  ⎿ exit {code}" if code not in (0, None) else None
    if started:
        return None
    if kind == "agent_message":
        return f"assistant: {short(str(item.get('text', '')))}"
    if kind == "file_change":
        paths = [str(c.get("path")) for c in item.get("changes") or [] if isinstance(c, dict)]
        return f"⏺ Edit {short(', '.join(paths), 120)}"
    if kind == "mcp_tool_call":
        return f"⏺ {item.get('server', 'mcp')}.{item.get('tool', 'tool')}"
    if kind == "web_search":
        return f"⏺ WebSearch {short(str(item.get('query', '')))}"
    if kind == "error":
        return f"✗ error: {short(str(item.get('message', '')))}"
    return None


def create(settings: SettingsInput = None) -> CodexAgent:
    return CodexAgent(settings)
