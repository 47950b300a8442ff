"""The agent interface every adapter implements, and the registry that builds adapters by name.

An adapter knows three things about one coding-agent CLI: how to spawn it (`argv`, `env`,
`prompt_via`), how to show its output live (`display`), and how to read its output once it
has exited (`parse`). It never spawns anything itself: `orchestrator.agents.runner` does that, so
only the runner knows about ptys and process groups.

Settings come from ralph.yaml's `agents.<name>` entry (see `orchestrator.config`): `command`
(the executable, a string or argv list), `model`, `args` (extra arguments), `env` (extra
environment) and `prompt` (delivery: stdin | file | argument). Any of them may be missing:
`settings` may be None, a dict or the config model (`config.AgentConfig`).
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from orchestrator.agents.limits import LimitSignal, detect, notice
from orchestrator.agents.reads import FileRead
from orchestrator.errors import AgentNotFound, ConfigError, InputError

if TYPE_CHECKING:
    from orchestrator.config import AgentConfig

PromptVia = Literal["stdin", "file", "argument"]
PROMPT_VIAS: tuple[PromptVia, ...] = ("stdin", "file", "argument")
# What an agent is built from: ralph.yaml's `agents.<name>` entry as loaded, a plain mapping,
# ready settings, or nothing (`AgentSettings.coerce` normalises and validates each).
SettingsInput = Union["AgentSettings", "AgentConfig", dict[str, Any], None]
MAX_ARG_BYTES = 120 * 1024  # below Linux's 128 KiB per argv string
SHORT_FINAL = 300  # a final message this short may be nothing but a limit notice

# Built-in adapters: module `orchestrator.agents.<name>` exposes `create(settings) -> Agent`.
BUILTIN = ("claude", "amp", "codex", "gemini", "opencode", "command", "sim")


@dataclass
class Usage:
    """Tokens of one agent invocation. `input_tokens` excludes cached tokens (Anthropic style)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Every token the model read: fresh input + cache writes + cache reads."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class AgentResult:
    """What one agent run produced, read from its output after it exited.

    `final_message` is the agent's last message (the only place the loop looks for the
    `<promise>COMPLETE</promise>` sentinel: prompts are often echoed in plain output).
    `limit` is set when the output carries a usage/rate-limit signal (see `limits.detect`).
    """

    final_message: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    is_error: bool = False
    error: str | None = None
    limit: LimitSignal | None = None
    num_turns: int | None = None
    model: str | None = None
    exit_code: int | None = None
    http_status: int | None = None  # e.g. Claude's api_error_status (429, 529 ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "final_message": self.final_message,
            "usage": self.usage.to_dict() if self.usage else None,
            "cost_usd": self.cost_usd,
            "is_error": self.is_error,
            "error": self.error,
            "limit": self.limit.to_dict() if self.limit else None,
            "num_turns": self.num_turns,
            "model": self.model,
            "exit_code": self.exit_code,
            "http_status": self.http_status,
        }


@dataclass
class AgentSettings:
    """ralph.yaml's `agents.<name>` entry, normalised (all fields optional)."""

    command: list[str] | None = None
    model: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    prompt: PromptVia | None = None  # None = the adapter's default

    @classmethod
    def coerce(cls, settings: SettingsInput, name: str = "agent") -> AgentSettings:
        """Accept None, a dict, a config model (anything with model_dump) or an AgentSettings."""
        if settings is None:
            return cls()
        if isinstance(settings, AgentSettings):
            return settings
        if hasattr(settings, "model_dump"):
            settings = settings.model_dump()
        if not isinstance(settings, dict):
            raise ConfigError(
                f"ralph.yaml: agents.{name} must be a mapping "
                f"(command, model, args, env, prompt), got {type(settings).__name__}"
            )
        command = settings.get("command")
        if isinstance(command, str):
            # A string command is split like a shell would split words, but never run by one.
            command = shlex.split(command)
        args = settings.get("args") or []
        if isinstance(args, str):
            args = shlex.split(args)
        prompt = settings.get("prompt")
        if prompt is not None and prompt not in PROMPT_VIAS:
            raise ConfigError(
                f"ralph.yaml: agents.{name}.prompt is {prompt!r}: "
                f"use one of {', '.join(PROMPT_VIAS)}"
            )
        env = {str(k): str(v) for k, v in (settings.get("env") or {}).items()}
        return cls(
            command=[str(c) for c in command] if command else None,
            model=settings.get("model") or None,
            args=[str(a) for a in args],
            env=env,
            prompt=prompt,
        )


class Agent:
    """Base adapter. Subclasses set the class attributes and override `build_argv`/`parse`.

    Capability flags:
      prompt_via     how the prompt reaches the CLI: "stdin" (the runner redirects the prompt
                     file to fd 0, then EOF), "file" (its path is in argv) or "argument"
                     (its text is in argv; limited to ~128 KiB by Linux).
    """

    # Per class; get_agent renames a generic `command` agent per instance (its ralph.yaml name).
    name: str = "agent"
    binary: ClassVar[str] = "agent"  # default argv[0]; `agents.<name>.command` overrides
    default_prompt_via: ClassVar[PromptVia] = "stdin"

    def __init__(self, settings: SettingsInput = None) -> None:
        self.settings = AgentSettings.coerce(settings, self.name)
        self.model: str | None = self.settings.model
        self.prompt_via: PromptVia = self.settings.prompt or self.default_prompt_via

    # ---- spawning -------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The executable (and any fixed leading words), before the adapter's flags."""
        return list(self.settings.command or [self.binary])

    def build_argv(self, prompt_file: Path) -> list[str]:
        """Subclasses: the full argv for one run (command() + flags + settings.args)."""
        return self.command() + self.settings.args

    def argv(self, prompt_file: Path) -> list[str]:
        return self.build_argv(Path(prompt_file))

    def prompt_argument(self, prompt_file: Path) -> str:
        """The prompt text for argv. Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN):
        a bigger prompt would fail at exec with a cryptic E2BIG, so say what to do instead."""
        text = Path(prompt_file).read_text(encoding="utf-8")
        size = len(text.encode("utf-8"))
        if size > MAX_ARG_BYTES:
            raise InputError(
                f"ralph.yaml: agents.{self.name}.prompt is 'argument' but the prompt is "
                f"{size // 1024} KiB, over the {MAX_ARG_BYTES // 1024} KiB one argument may "
                f"hold: set agents.{self.name}.prompt to stdin (or file)"
            )
        return text

    def stdin_file(self, prompt_file: Path) -> Path | None:
        """The file the runner redirects to the agent's stdin (None: /dev/null)."""
        return Path(prompt_file) if self.prompt_via == "stdin" else None

    def env(self) -> dict[str, str]:
        """Variables to ADD to the inherited environment (the runner overlays them)."""
        return dict(self.settings.env)

    def check_available(self, prompt_file: Path | None = None) -> str:
        """Return the resolved executable path, or raise AgentNotFound naming the fix."""
        exe = self.command()[0]
        # The agent runs with its own env overlay, which may set PATH.
        search = self.env().get("PATH") or os.environ.get("PATH") or ""
        found = shutil.which(exe, path=search)
        if not found:
            raise AgentNotFound(self._not_runnable(exe, search))
        return found

    def _not_runnable(self, exe: str, search: str) -> str:
        """Why `exe` cannot be run: a file without the execute bit and a folder are named
        as such (with the fix); only a name found nowhere is "not found on PATH"."""
        fix = f"set agents.{self.name}.command in ralph.yaml"
        if os.sep in exe or (os.altsep and os.altsep in exe):
            candidates = [Path(exe)]
            where = f"'{exe}'"
        else:
            candidates = [Path(d or ".") / exe for d in search.split(os.pathsep)]
            where = "PATH"
        for path in candidates:
            if path.is_dir():
                return (
                    f"agent '{self.name}': {path} is a folder, not a program: {fix} to the "
                    "executable inside it"
                )
            if path.is_file() and not os.access(path, os.X_OK):
                return (
                    f"agent '{self.name}': found at {path} but not executable "
                    f"(chmod +x {shlex.quote(str(path))}), or {fix}"
                )
        return f"agent '{self.name}' not found on {where}: install it or {fix}"

    # ---- reading output -------------------------------------------------------------------
    def display(self, line: str) -> str | None:
        """A readable line for live output, or None to show nothing for this line."""
        text = line.strip()
        return text or None

    def parse(self, output: str, exit_code: int | None) -> AgentResult:
        """Read the whole output; fill usage/cost/final message/errors and any limit signal."""
        result = self.parse_output(output, exit_code)
        result.exit_code = exit_code
        if exit_code not in (0, None) and not result.is_error:
            result.is_error = True
            result.error = result.error or f"{self.name} exited with code {exit_code}"
        if result.limit is None:
            result.limit = self._limit(output, result)
        return result

    def _limit(self, output: str, result: AgentResult) -> LimitSignal | None:
        """Limits matter only when the run failed: a run that finished its work despite,
        say, a rejected-then-allowed rate_limit_event must not make the loop wait. One
        exception: some CLI versions end a limited run "successfully" with the limit text
        as the whole final message (`Claude AI usage limit reached|<epoch>`)."""
        if result.is_error:
            return detect(self.limit_text(output, result), result=result)
        final = result.final_message or ""
        if 0 < len(final) <= SHORT_FINAL:
            signal = notice(final)
            if signal is not None:
                result.is_error = True
                result.error = result.error or final
                return signal
        return None

    def file_reads(self, output: str) -> list[FileRead] | None:
        """The files the agent opened, in order, as its stream names them; None when this
        agent's output does not show its tool calls (then nothing is known, not "none")."""
        return None

    def parse_output(self, output: str, exit_code: int | None) -> AgentResult:
        """Subclasses: the adapter-specific reading of the output."""
        return AgentResult(final_message=tail(output))

    def limit_text(self, output: str, result: AgentResult) -> str:
        """The text searched for limit signals: errors, an errored final message, and the
        plain (non-JSON) lines of the last part of the output, where CLIs print fatal errors.
        The prompt itself is never searched (a story may well mention rate limits)."""
        parts = [result.error or ""]
        if result.is_error and result.final_message:
            parts.append(result.final_message)
        lines = output.splitlines()
        parts.extend(ln for ln in lines[-30:] if not ln.lstrip().startswith("{"))
        parts.extend(ln for ln in lines if '"rate_limit_event"' in ln)
        return "\n".join(p for p in parts if p)


def tail(text: str, limit: int = 2000) -> str:
    """The last `limit` characters of text (whole text when shorter), stripped."""
    text = text.strip()
    return text[-limit:] if len(text) > limit else text


def json_events(output: str) -> list[dict[str, Any]]:
    """Every JSON object line in output; other lines (stderr, banners) are skipped."""
    events: list[dict[str, Any]] = []
    for raw in output.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            events.append(obj)
    return events


def parse_json_line(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


# The width of the terminal showing live lines (display.Display sets it when stdout is one),
# so a wide terminal shows whole commands and paths; without one the limits below apply.
live_width: int | None = None


def short(text: str, limit: int = 100) -> str:
    """One line, at most `limit` characters, or the terminal's width when wider (for live
    display)."""
    if live_width:
        limit = max(limit, live_width - 4)
    one = " ".join(str(text).split())
    if len(one) <= limit:
        return one
    cut = one[: limit - 1]
    # End on a whole word when one ends nearby: the cut is then where a reader expects it.
    if one[limit - 1] != " " and (space := cut.rfind(" ", max(0, limit - 24))) > 0:
        cut = cut[:space]  # within a few characters: a long word is cut, not the text
    return cut + "…"


# ---- registry -----------------------------------------------------------------------------
def available() -> list[str]:
    """Names of the adapters that can be built (built-ins whose module is importable)."""
    names = []
    for name in BUILTIN:
        try:
            importlib.import_module(f"orchestrator.agents.{name}")
        except ImportError:
            continue
        names.append(name)
    return names


def get_agent(name: str, settings: SettingsInput = None, *, check: bool = True) -> Agent:
    """Build the adapter `name` from its ralph.yaml settings.

    A name that is not built in but has `agents.<name>.command` in ralph.yaml becomes a
    generic `command` agent under that name. With `check`, a missing executable raises
    AgentNotFound (so `ralph run` fails before the first iteration, not in it).
    """
    module_name = name if name in BUILTIN else None
    if module_name is None:
        if AgentSettings.coerce(settings, name).command:
            module_name = "command"
        else:
            raise ConfigError(
                f"unknown agent {name!r} (tool in ralph.yaml or --tool): use one of "
                f"{', '.join(BUILTIN)}, or set agents.{name}.command in ralph.yaml"
            )
    try:
        module = importlib.import_module(f"orchestrator.agents.{module_name}")
    except ImportError as exc:
        raise ConfigError(f"agent {name!r} is not available in this install: {exc}") from exc
    agent: Agent = module.create(settings)
    if module_name == "command" and name != "command":
        agent.name = name  # instance name for messages and the ledger
    if check:
        agent.check_available()
    return agent


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
