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
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from orchestrator import fsutil
from orchestrator.errors import ConfigError

log = structlog.get_logger()

CONFIG_FILE = "ralph.yaml"


class _Section(BaseModel):
    # strict: YAML already yields typed values, so "10" for an integer is a mistake to
    # report, not to coerce (and `true` must never become 1).
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ReferencesConfig(_Section):
    dir: str = "ralph/references"
    always: list[str] = Field(default_factory=list)
    max_tokens: int = Field(800, ge=1)
    max_topics: int = Field(60, ge=2)
    stale_after: int | None = Field(15, ge=1)

    @field_validator("dir")
    @classmethod
    def _relative_inside(cls, v: str) -> str:
        if fsutil.relative_inside(v) is None:
            raise ValueError("must be a relative folder inside the project (e.g. ralph/references)")
        return v


class LogConfig(_Section):
    dir: str = "ralph/logs"
    keep_entries: int = Field(20, ge=0)


class BudgetConfig(_Section):
    prompt_tokens: int = Field(16000, ge=1)
    run_tokens: int | None = Field(None, ge=1)
    run_cost_usd: float | None = Field(None, gt=0)
    warn_at: float = Field(0.8, gt=0, le=1)


class TimeoutsConfig(_Section):
    iteration: int | None = Field(3600, ge=1)
    idle: int | None = Field(900, ge=1)


class LimitsConfig(_Section):
    max_wait: int = Field(21600, ge=0)
    fallback_wait: int = Field(900, ge=0)


class RetriesConfig(_Section):
    transient: int = Field(3, ge=0)
    backoff: float = Field(30, ge=0)


class AgentConfig(_Section):
    command: list[str] | None = None
    model: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    prompt: Literal["stdin", "file", "argument"] | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: Any) -> Any:
        # A string is split like a shell would split words, but it is never run by a shell:
        # the result is an argv list.
        if isinstance(v, str):
            parts = shlex.split(v)
            if not parts:
                raise ValueError("must name an executable (e.g. [claude] or 'npx amp')")
            return parts
        return v


class Config(_Section):
    tool: str = "amp"
    max_iterations: int = Field(10, ge=1)
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
    stuck_after: int = Field(3, ge=1)
    sleep_between: float = Field(2, ge=0)
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


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
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
        text = path.read_bytes().decode("utf-8")
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
        return f"must be {words} {bound}"
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
    if path is not None and Path(path).is_file():
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
