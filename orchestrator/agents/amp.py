"""Amp (`amp -x --stream-json --dangerously-allow-all`), prompt on stdin.

Output follows Claude's stream-json shape, but usage sits on the assistant messages
(Anthropic-style; summed once per message id) and nothing reports cost. Errors come as
`"is_error": true` with the text in `error`.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.agents.base import Agent, AgentResult, SettingsInput, json_events
from orchestrator.agents.claude import (
    _last,
    _result_usage,
    assistant_usage,
    last_assistant_text,
    stream_display,
    stream_reads,
)
from orchestrator.agents.reads import FileRead


class AmpAgent(Agent):
    name = "amp"
    binary = "amp"
    default_prompt_via = "stdin"

    def build_argv(self, prompt_file: Path) -> list[str]:
        argv = self.command() + ["-x", "--stream-json", "--dangerously-allow-all"]
        if self.model:
            # Amp picks models by mode rather than by model name.
            argv += ["--mode", self.model]
        if self.prompt_via == "argument":
            argv.append(self.prompt_argument(prompt_file))
        elif self.prompt_via == "file":
            argv.append(f"Read {prompt_file} and follow the instructions in it.")
        return argv + self.settings.args

    def display(self, line: str) -> str | None:
        return stream_display(line)

    def file_reads(self, output: str) -> list[FileRead] | None:
        return stream_reads(json_events(output))

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        events = json_events(output)
        result = _last(events, "result") or {}
        usage = assistant_usage(events) or _result_usage(result.get("usage"))
        text = result.get("result")
        final = text if isinstance(text, str) and text else last_assistant_text(events)
        is_error = bool(result.get("is_error")) or not result
        error = None
        if is_error:
            error = result.get("error") or (text if result else None)
            error = str(error) if error else "amp produced no result line"
        return AgentResult(
            final_message=final,
            usage=usage,
            cost_usd=None,
            is_error=is_error,
            error=error,
            num_turns=result.get("num_turns"),
            model=self.model,
        )


def create(settings: SettingsInput = None) -> AmpAgent:
    return AmpAgent(settings)
