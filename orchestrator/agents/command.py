"""Any CLI named in ralph.yaml: `agents.<name>.command: [prog, arg, ...]`.

The prompt goes on stdin, unless an argv word contains `{prompt_file}` (replaced by the
prompt file's path) or `{prompt}` (replaced by the prompt text; Linux caps one argv string at
128 KiB). `agents.<name>.prompt: file` (or `argument`) with no such placeholder in the command
or args appends the prompt file's path (or the prompt text) as the last argv word: the
setting asks for that delivery, and without it the agent would get no prompt at all (its
stdin is /dev/null). `{model}` is replaced by `agents.<name>.model`. Output is plain text:
no usage or cost is reported (except aider's `Tokens: ... Cost: ...` lines, which are read),
and the final message is the last ~2000 characters of the output, which is where the loop
looks for the sentinel. Beware: a CLI that echoes its prompt would echo the
sentinel's instructions too; ask such CLIs to print only their answer.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.agents.base import Agent, AgentResult, SettingsInput, Usage, tail
from orchestrator.errors import ConfigError

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
FINAL_CHARS = 2000


class CommandAgent(Agent):
    name = "command"
    binary = ""
    default_prompt_via = "stdin"

    def __init__(self, settings: SettingsInput = None) -> None:
        super().__init__(settings)
        if not self.settings.command:
            raise ConfigError(
                "ralph.yaml: agents.command.command is missing: give the agent's argv, "
                'e.g. command: ["aider", "--yes-always", "--message-file", "{prompt_file}"]'
            )
        words = " ".join(self.settings.command + self.settings.args)
        if self.settings.prompt is None:
            if "{prompt_file}" in words:
                self.prompt_via = "file"
            elif "{prompt}" in words:
                self.prompt_via = "argument"

    def build_argv(self, prompt_file: Path) -> list[str]:
        values = {"{prompt_file}": str(prompt_file), "{model}": self.model or ""}
        if any("{prompt}" in w for w in self.command() + self.settings.args):
            values["{prompt}"] = self.prompt_argument(prompt_file)
        words = self.command() + self.settings.args
        argv = []
        for word in words:
            for key, value in values.items():
                word = word.replace(key, value)
            argv.append(word)
        return argv + self._appended_prompt(words, prompt_file)

    def _appended_prompt(self, words: list[str], prompt_file: Path) -> list[str]:
        """The prompt as a last argv word when `prompt:` asks for argv delivery and no word
        has the placeholder that would carry it."""
        if self.prompt_via == "file" and not any("{prompt_file}" in w for w in words):
            return [str(prompt_file)]
        if self.prompt_via == "argument" and not any("{prompt}" in w for w in words):
            return [self.prompt_argument(prompt_file)]
        return []

    def display(self, line: str) -> str | None:
        text = _ANSI.sub("", line).rstrip()
        return text or None

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        text = _ANSI.sub("", output)
        usage, cost = aider_usage(text)
        return AgentResult(
            final_message=tail(text, FINAL_CHARS) or None,
            usage=usage,
            cost_usd=cost,
            model=self.model,
        )


# aider prints one line per model reply, figures rounded ("12k"):
# "Tokens: 4.1k sent, 3.3k cache write, 7.8k cache hit, 221 received. Cost: $0.02 message,
# $0.05 session."
_AIDER_TOKENS = re.compile(r"^Tokens: (?P<body>[^\n]*?received)\.(?P<rest>[^\n]*)$", re.M)
_AIDER_PART = re.compile(
    r"(?P<n>[\d.]+)(?P<unit>[kKmM]?) (?P<what>sent|cache write|cache hit"
    r"|received)"
)
_AIDER_SESSION = re.compile(r"\$(?P<usd>[\d.]+) session")
_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}


def aider_usage(text: str) -> tuple[Usage | None, float | None]:
    """Usage summed over aider's per-reply `Tokens:` lines (approximate: aider rounds)."""
    total: Usage | None = None
    cost: float | None = None
    for line in _AIDER_TOKENS.finditer(text):
        figures = {
            m.group("what"): round(float(m.group("n")) * _UNITS[m.group("unit").lower()])
            for m in _AIDER_PART.finditer(line.group("body"))
        }
        total = (total or Usage()) + Usage(
            input_tokens=figures.get("sent", 0),
            output_tokens=figures.get("received", 0),
            cache_read_tokens=figures.get("cache hit", 0),
            cache_write_tokens=figures.get("cache write", 0),
        )
        session = _AIDER_SESSION.search(line.group("rest"))
        if session:
            cost = float(session.group("usd"))  # the session figure is already a running sum
    return total, cost


def create(settings: SettingsInput = None) -> CommandAgent:
    return CommandAgent(settings)
