"""ralph.yaml → a typed `Config`, with clear messages for every way the file can be wrong.

Precedence: a command-line flag (an `overrides` entry that is not None) beats ralph.yaml,
which beats the defaults below. Unknown keys do not stop a run: they become warnings that
name the nearest valid key, because a typo should be fixed but should not cost a night's
loop. Wrong types and values are fatal (`ConfigError`) and name the file, the key path, what
is expected and what was found. The annotated reference is `ralph.yaml` at the repo root
(shipped as `templates/ralph.yaml`); tests keep both in step with these models.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from orchestrator import fsutil
from orchestrator.errors import ConfigError
from orchestrator.log import get_logger

log = get_logger()

CONFIG_FILE = "ralph.yaml"
HOUR, DAY, WEEK = 3600, 86400, 7 * 86400  # upper bounds of durations (seconds)


# YAML 1.1 (PyYAML) reads `1e308` and `5e3` as strings: only `1.0e+308` is a float there.
# YAML 1.2 and every other reader take them as numbers, so numeric keys accept them too.
_EXPONENT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _numeric_kinds(annotation: Any) -> set[type]:
    """The number types a field accepts (int, float), through `X | None`."""
    args = get_args(annotation) or (annotation,)
    return {a for a in args if a in (int, float)}


def _argv(v: Any, example: str) -> Any:
    """A command given as a string is split like a shell would split words, but it is never
    run by a shell: the result is an argv list."""
    if isinstance(v, str):
        parts = shlex.split(v)
        if not parts:
            raise ValueError(f"must name an executable ({example})")
        return parts
    return v


class _Section(BaseModel):
    # strict: YAML already yields typed values, so "10" for an integer is a mistake to
    # report, not to coerce (and `true` must never become 1). No inf/nan: every number is
    # a count, a duration or an amount, and each has a finite range (le=) so nothing
    # downstream (time.sleep, datetime arithmetic) can overflow.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _exponent_numbers(cls, v: Any, info: ValidationInfo) -> Any:
        if not isinstance(v, str) or not _EXPONENT.fullmatch(v.strip()):
            return v
        field = cls.model_fields.get(info.field_name or "")
        kinds = _numeric_kinds(field.annotation) if field else set()
        if not kinds:
            return v
        number = float(v)
        if int in kinds and float not in kinds and number.is_integer():
            return int(number)
        return number


class ReferencesConfig(_Section):
    dir: str = "ralph/references"
    always: list[str] = Field(default_factory=list)
    max_tokens: int = Field(800, ge=1, le=1_000_000)
    max_topics: int = Field(60, ge=2, le=100_000)
    stale_after: int | None = Field(15, ge=1, le=1_000_000)

    @field_validator("dir")
    @classmethod
    def _relative_inside(cls, v: str) -> str:
        if fsutil.relative_inside(v) is None:
            raise ValueError("must be a relative folder inside the project (e.g. ralph/references)")
        return v


class LogConfig(_Section):
    dir: str = "ralph/logs"
    keep_entries: int = Field(20, ge=0, le=1_000_000)


class BudgetConfig(_Section):
    prompt_tokens: int = Field(16000, ge=1, le=10_000_000)
    run_tokens: int | None = Field(None, ge=1, le=10**15)
    run_cost_usd: float | None = Field(None, gt=0, le=1_000_000)
    warn_at: float = Field(0.8, gt=0, le=1)


class TimeoutsConfig(_Section):
    iteration: int | None = Field(3600, ge=1, le=WEEK)
    idle: int | None = Field(900, ge=1, le=WEEK)


class LimitsConfig(_Section):
    max_wait: int = Field(21600, ge=0, le=WEEK)
    fallback_wait: int = Field(900, ge=0, le=DAY)
    # First wait after a reset that has already passed (the message persists); doubles on
    # each recheck, up to fallback_wait.
    recheck: int = Field(60, ge=1, le=DAY)


class RetriesConfig(_Section):
    transient: int = Field(3, ge=0, le=100)
    backoff: float = Field(30, ge=0, le=HOUR)


class AgentConfig(_Section):
    command: list[str] | None = None
    model: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    prompt: Literal["stdin", "file", "argument"] | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: Any) -> Any:
        return _argv(v, "e.g. [claude] or 'npx amp'")


NotifyEvent = Literal[
    "run_finished", "stuck", "budget_warning", "budget_exhausted", "limit_wait", "check_failed"
]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = (
    "run_finished",
    "stuck",
    "budget_warning",
    "budget_exhausted",
    "limit_wait",
    "check_failed",
)


class NotifyConfig(_Section):
    urls: list[str] = Field(default_factory=list)
    command: list[str] | None = None
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    timeout: float = Field(10, gt=0, le=DAY)

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: Any) -> Any:
        return _argv(v, "e.g. [notify-send, '{title}']")


class Config(_Section):
    tool: str = "amp"
    max_iterations: int = Field(10, ge=1, le=1_000_000)
    ralph_dir: str | None = None
    mode: Literal["auto", "indexed", "full"] = "auto"
    encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base"
    template: str | None = None
    references: ReferencesConfig = Field(default_factory=ReferencesConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    checks: Literal["warn", "retry", "fail"] = "warn"
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    retries: RetriesConfig = Field(default_factory=RetriesConfig)
    stuck_after: int = Field(3, ge=1, le=1_000_000)
    sleep_between: float = Field(2, ge=0, le=DAY)
    compat: bool = False  # ralph.sh's exit codes and console lines
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)

    _warnings: list[str] = PrivateAttr(default_factory=list)
    _path: Path | None = PrivateAttr(default=None)

    @field_validator("tool")
    @classmethod
    def _tool_named(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must name an agent (e.g. claude, amp, codex)")
        return v

    @field_validator("agents", mode="before")
    @classmethod
    def _empty_agent_ok(cls, v: Any) -> Any:
        # `agents: {claude: }` (a bare name) means "defaults for claude".
        if isinstance(v, dict):
            return {k: ({} if a is None else a) for k, a in v.items()}
        return v

    @property
    def warnings(self) -> list[str]:
        """Unknown-key warnings found while loading (empty for defaults)."""
        return list(self._warnings)

    @property
    def path(self) -> Path | None:
        """The ralph.yaml this came from, or None when only defaults and flags were used."""
        return self._path

    def agent(self, name: str) -> AgentConfig:
        """The settings for one agent (defaults when ralph.yaml has none)."""
        return self.agents.get(name) or AgentConfig()


# --------------------------------------------------------------------------- key checking


def _sections() -> dict[str, type[BaseModel]]:
    return {
        name: f.annotation
        for name, f in Config.model_fields.items()
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)
    }


def known_keys() -> list[str]:
    """Every valid dotted key (agents as `agents.<name>.<key>`), in declaration order."""
    keys: list[str] = []
    sections = _sections()
    for name in Config.model_fields:
        if name in sections:
            keys += [f"{name}.{k}" for k in sections[name].model_fields]
        elif name == "agents":
            keys += [f"agents.<name>.{k}" for k in AgentConfig.model_fields]
        else:
            keys.append(name)
    return keys


def _unknown(key: str, valid: list[str], prefix: str) -> str:
    full = f"{prefix}{key}"
    guess = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    hint = f" (did you mean '{prefix}{guess[0]}'?)" if guess else ""
    return f"unknown key '{full}'{hint}"


def _prune_unknown(raw: dict[Any, Any]) -> tuple[dict[str, Any], list[str]]:
    """Drop unknown keys (returning a warning for each) so validation sees only known ones."""
    found: list[str] = []
    clean: dict[str, Any] = {}
    sections = _sections()
    top = list(Config.model_fields)
    for key, value in raw.items():
        if key not in top:
            # A misspelt section name is often a real key at the wrong level.
            found.append(_unknown(str(key), top + known_keys(), ""))
            continue
        if value is None and (key in sections or key == "agents"):
            # `budget:` with every sub-key commented out: the section's defaults.
            continue
        if key in sections and isinstance(value, dict):
            value, sub = _prune_section(value, list(sections[key].model_fields), f"{key}.")
            found += sub
        elif key == "agents" and isinstance(value, dict):
            agents: dict[str, Any] = {}
            for name, spec in value.items():
                if isinstance(spec, dict):
                    spec, sub = _prune_section(
                        spec, list(AgentConfig.model_fields), f"agents.{name}."
                    )
                    found += sub
                agents[str(name)] = spec
            value = agents
        clean[key] = value
    return clean, found


def _prune_section(
    raw: dict[Any, Any], valid: list[str], prefix: str
) -> tuple[dict[str, Any], list[str]]:
    clean = {k: v for k, v in raw.items() if k in valid}
    found = [_unknown(str(k), valid, prefix) for k in raw if k not in valid]
    return clean, found


# --------------------------------------------------------------------------- YAML reading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(
    loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Hashable, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (remove one of them)", mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def display_path(path: Path) -> str:
    """The path as the user would type it: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    except ValueError:  # another drive on Windows
        return str(path)


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse ralph.yaml into a dict; an empty file is an empty config."""
    shown = display_path(path)
    try:
        text = fsutil.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown}: not UTF-8 text (byte {exc.start}); save the file as UTF-8"
        ) from exc
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{where}: invalid YAML: {problem}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: invalid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{shown}: the top level must be a mapping of settings (e.g. 'tool: claude'), "
            f"got {_describe(data)}"
        )
    return data


# --------------------------------------------------------------------------- errors

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number (not .inf or .nan)",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping of settings",
    "model_attributes_type": "a mapping of settings",
}


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _message(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": "at least",
            "greater_than": "more than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        bound = next(iter(ctx.values()), "")
        shown = _num(bound) if isinstance(bound, (int, float)) and math.isfinite(bound) else bound
        return f"must be {words} {shown}"
    if kind == "value_error":
        return str(ctx.get("error", err.get("msg", "")))
    return str(err.get("msg", "is invalid")).lower()


def _default_of(loc: tuple[Any, ...]) -> str | None:
    model: type[BaseModel] = Config
    for i, part in enumerate(loc):
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        if i < len(loc) - 1:
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
                continue
            return None
        if field.default_factory is not None or ann is None:
            return None
        return yaml.safe_dump(field.default, default_flow_style=True).strip().removesuffix("...")
    return None


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo at a key path, or None (agents.<name>.* and list items)."""
    model: type[BaseModel] = Config
    for i, part in enumerate(loc):
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        if i == len(loc) - 1:
            return field
        ann = field.annotation
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return None


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _allowed(loc: tuple[Any, ...]) -> str | None:
    """'allowed: 1 to 604800 (or null)' for a numeric key, from its Field bounds."""
    field = _field_at(loc)
    if field is None or not _numeric_kinds(field.annotation):
        return None
    lo = hi = None
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            lo = _num(m.ge)
        elif getattr(m, "gt", None) is not None:
            lo = f"more than {_num(m.gt)}"
        if getattr(m, "le", None) is not None:
            hi = _num(m.le)
        elif getattr(m, "lt", None) is not None:
            hi = f"less than {_num(m.lt)}"
    kind = "an integer" if float not in _numeric_kinds(field.annotation) else "a number"
    span = f"{lo or 'any'} to {hi}" if hi else f"{lo} or more"
    nullable = " (or null)" if type(None) in get_args(field.annotation) else ""
    return f"allowed: {kind}, {span}{nullable}"


def _config_error(exc: ValidationError, source: str, override_keys: set[str]) -> ConfigError:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = _loc(loc)
        where = "command line" if key in override_keys else source
        msg = f"{where}: {key} {_message(err)}, got {_describe(err.get('input'))}"
        default = _default_of(loc)
        if default is not None and default.strip():
            msg += f" (default: {default.strip()})"
        allowed = _allowed(loc)
        if allowed:
            msg += f"; {allowed}"
        lines.append(msg)
    return ConfigError("\n".join(lines))


# --------------------------------------------------------------------------- loading


def _apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any]) -> set[str]:
    given: set[str] = set()
    for dotted, value in overrides.items():
        if value is None:
            continue
        parts = dotted.split(".")
        node = raw
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
        given.add(dotted)
    return given


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read ralph.yaml (None or a missing file = defaults), then apply command-line overrides.

    `overrides` uses dotted keys (`{"budget.prompt_tokens": 8000}`); a None value means the
    flag was not given. Unknown keys in the file are warned about and ignored; unknown
    override keys are a programming error and raise ConfigError.
    """
    overrides = dict(overrides or {})
    valid = set(known_keys())
    for key in overrides:
        generic = key
        if key.startswith("agents."):
            parts = key.split(".")
            generic = ".".join(["agents", "<name>", *parts[2:]]) if len(parts) == 3 else key
        if generic not in valid:
            raise ConfigError(f"command line: unknown setting '{key}'")
    raw: dict[str, Any] = {}
    source = "defaults"
    if path is not None and fsutil.present(path):
        raw = read_yaml(Path(path))
        source = display_path(Path(path))
    raw, unknown = _prune_unknown(raw)
    warnings = [f"{source}: {w}" for w in unknown]
    given = _apply_overrides(raw, overrides)
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, source, given) from None
    for w in warnings:
        log.warning(w)
    config._warnings = warnings
    config._path = Path(path) if source != "defaults" and path is not None else None
    return config
