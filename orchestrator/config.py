"""ralph.yaml → a typed `Config`, with clear messages for every way the file can be wrong.

Precedence: a command-line flag (an `overrides` entry that is not None) beats ralph.yaml,
which beats the defaults below. Unknown keys do not stop a run: they become warnings that
name the nearest valid key, because a typo should be fixed but should not cost a night's
loop. Wrong types and values are fatal (`ConfigError`) and name the file, the key path, what
is expected and what was found; every wrong key is reported, not only the first. The
annotated reference is `ralph.yaml` at the repo root (shipped as `templates/ralph.yaml`);
tests keep both in step with these models.

The models are msgspec Structs: every command reads the config, and msgspec imports and
builds them in a few milliseconds where pydantic took a quarter of a second of start-up.
msgspec decides what is valid (`msgspec.convert`, strict: YAML already yields typed values,
so "10" for an integer is a mistake to report, not to coerce, and `true` is never 1); this
module walks the data key by key so that each wrong value gets its own message in words.
"""

from __future__ import annotations

import math
import re
import shlex
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta, field

from orchestrator import fsutil
from orchestrator.errors import ConfigError
from orchestrator.log import get_logger
from orchestrator.yamlfile import describe, display_path, read_yaml

if TYPE_CHECKING:
    pass

log = get_logger()

CONFIG_FILE = "ralph.yaml"
HOUR, DAY, WEEK = 3600, 86400, 7 * 86400  # upper bounds of durations (seconds)


# YAML 1.1 (PyYAML) reads `1e308` and `5e3` as strings: only `1.0e+308` is a float there.
# YAML 1.2 and every other reader take them as numbers, so numeric keys accept them too.
_EXPONENT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _unwrap(annotation: Any) -> tuple[Any, Meta | None, bool]:
    """(type, its msgspec Meta or None, nullable) of `Annotated[T, Meta(...)] | None`."""
    nullable = False
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        nullable = True
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007
    meta = None
    if get_origin(annotation) is Annotated:
        annotation, *extras = get_args(annotation)
        meta = next((m for m in extras if isinstance(m, Meta)), None)
    return annotation, meta, nullable


def _numeric_kinds(annotation: Any) -> set[type]:
    """The number types a field accepts (int, float), through `X | None` and `Annotated`."""
    base = _unwrap(annotation)[0]
    return {a for a in (get_args(base) or (base,)) if a in (int, float)}


def _argv(v: Any, example: str) -> Any:
    """A command given as a string is split like a shell would split words, but it is never
    run by a shell: the result is an argv list."""
    if isinstance(v, str):
        parts = shlex.split(v)
        if not parts:
            raise ValueError(f"must name an executable ({example})")
        return parts
    return v


# Every number is a count, a duration or an amount: each has a finite range (le=), so no
# .inf or .nan gets through and nothing downstream (time.sleep, datetime arithmetic) can
# overflow. Unknown keys never reach msgspec (they are warnings, see _prune_unknown).
class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    def model_dump(self) -> dict[str, Any]:
        """The settings as plain data (sections as dicts), e.g. for the ledger."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class ReferencesConfig(_Section, frozen=True):
    dir: str = "ralph/references"
    always: list[str] = field(default_factory=list)
    max_tokens: Annotated[int, Meta(ge=1, le=1_000_000)] = 800
    max_topics: Annotated[int, Meta(ge=2, le=100_000)] = 60
    stale_after: Annotated[int, Meta(ge=1, le=1_000_000)] | None = 15


class LogConfig(_Section, frozen=True):
    dir: str = "ralph/logs"
    keep_entries: Annotated[int, Meta(ge=0, le=1_000_000)] = 20


class BudgetConfig(_Section, frozen=True):
    prompt_tokens: Annotated[int, Meta(ge=1, le=10_000_000)] = 16000
    run_tokens: Annotated[int, Meta(ge=1, le=10**15)] | None = None
    run_cost_usd: Annotated[float, Meta(gt=0, le=1_000_000)] | None = None
    warn_at: Annotated[float, Meta(gt=0, le=1)] = 0.8


class TimeoutsConfig(_Section, frozen=True):
    iteration: Annotated[int, Meta(ge=1, le=WEEK)] | None = 3600
    idle: Annotated[int, Meta(ge=1, le=WEEK)] | None = 900


class LimitsConfig(_Section, frozen=True):
    max_wait: Annotated[int, Meta(ge=0, le=WEEK)] = 21600
    fallback_wait: Annotated[int, Meta(ge=0, le=DAY)] = 900
    # First wait after a reset that has already passed (the message persists); doubles on
    # each recheck, up to fallback_wait.
    recheck: Annotated[int, Meta(ge=1, le=DAY)] = 60


class RetriesConfig(_Section, frozen=True):
    transient: Annotated[int, Meta(ge=0, le=100)] = 3
    backoff: Annotated[float, Meta(ge=0, le=HOUR)] = 30


class AgentConfig(_Section, frozen=True):
    command: list[str] | None = None
    model: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    prompt: Literal["stdin", "file", "argument"] | None = None


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


class NotifyConfig(_Section, frozen=True):
    urls: list[str] = field(default_factory=list)
    command: list[str] | None = None
    events: list[NotifyEvent] = field(default_factory=lambda: list(NOTIFY_EVENTS))
    timeout: Annotated[float, Meta(gt=0, le=DAY)] = 10


# dict=True: room for the loading facts below (warnings, source file), which are not settings.
class Config(_Section, frozen=True, dict=True):
    tool: str = "amp"
    max_iterations: Annotated[int, Meta(ge=1, le=1_000_000)] = 10
    ralph_dir: str | None = None
    mode: Literal["auto", "indexed", "full"] = "auto"
    encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base"
    template: str | None = None
    references: ReferencesConfig = field(default_factory=ReferencesConfig)
    log: LogConfig = field(default_factory=LogConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    checks: Literal["warn", "retry", "fail"] = "warn"
    timeouts: TimeoutsConfig = field(default_factory=TimeoutsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    retries: RetriesConfig = field(default_factory=RetriesConfig)
    stuck_after: Annotated[int, Meta(ge=1, le=1_000_000)] = 3
    sleep_between: Annotated[float, Meta(ge=0, le=DAY)] = 2
    compat: bool = False  # ralph.sh's exit codes and console lines
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    agents: dict[str, AgentConfig] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """Unknown-key warnings found while loading (empty for defaults)."""
        return list(getattr(self, "_warnings", ()))

    @property
    def path(self) -> Path | None:
        """The ralph.yaml this came from, or None when only defaults and flags were used."""
        found: Path | None = getattr(self, "_path", None)
        return found

    def agent(self, name: str) -> AgentConfig:
        """The settings for one agent (defaults when ralph.yaml has none)."""
        return self.agents.get(name) or AgentConfig()


# --------------------------------------------------------------------------- key checking


def _sections() -> dict[str, type[_Section]]:
    return {
        f.name: f.type
        for f in msgspec.structs.fields(Config)
        if isinstance(f.type, type) and issubclass(f.type, _Section)
    }


def _names(model: type[_Section]) -> list[str]:
    return [f.name for f in msgspec.structs.fields(model)]


def known_keys() -> list[str]:
    """Every valid dotted key (agents as `agents.<name>.<key>`), in declaration order."""
    keys: list[str] = []
    sections = _sections()
    for name in _names(Config):
        if name in sections:
            keys += [f"{name}.{k}" for k in _names(sections[name])]
        elif name == "agents":
            keys += [f"agents.<name>.{k}" for k in _names(AgentConfig)]
        else:
            keys.append(name)
    return keys


def _unknown(key: str, valid: list[str], prefix: str) -> str:
    import difflib  # only for a ralph.yaml with an unknown key

    full = f"{prefix}{key}"
    guess = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    hint = f" (did you mean '{prefix}{guess[0]}'?)" if guess else ""
    return f"unknown key '{full}'{hint}"


def _prune_unknown(raw: dict[Any, Any]) -> tuple[dict[str, Any], list[str]]:
    """Drop unknown keys (returning a warning for each) so validation sees only known ones."""
    found: list[str] = []
    clean: dict[str, Any] = {}
    sections = _sections()
    top = _names(Config)
    for key, value in raw.items():
        if key not in top:
            # A misspelt section name is often a real key at the wrong level.
            found.append(_unknown(str(key), top + known_keys(), ""))
            continue
        if value is None and (key in sections or key == "agents"):
            # `budget:` with every sub-key commented out: the section's defaults.
            continue
        if key in sections and isinstance(value, dict):
            value, sub = _prune_section(value, _names(sections[key]), f"{key}.")
            found += sub
        elif key == "agents" and isinstance(value, dict):
            agents: dict[str, Any] = {}
            for name, spec in value.items():
                if isinstance(spec, dict):
                    spec, sub = _prune_section(spec, _names(AgentConfig), f"agents.{name}.")
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


# --------------------------------------------------------------------------- validation

_Loc = tuple[Any, ...]


class _Problem(msgspec.Struct, frozen=True):
    """One wrong value: where it is, what it must be ("must be an integer"), what it was."""

    loc: _Loc
    message: str
    value: Any


def _tool_named(v: str) -> str:
    if not v.strip():
        raise ValueError("must name an agent (e.g. claude, amp, codex)")
    return v


def _relative_inside(v: str) -> str:
    clean = fsutil.relative_inside(v)
    if clean is None:
        raise ValueError("must be a relative folder inside the project (e.g. ralph/references)")
    if all(part == "." for part in clean.parts):
        # Every file of the project would read as an unindexed reference.
        raise ValueError(
            "must be a folder of its own, not the project root (e.g. ralph/references)"
        )
    return v


def _empty_agents_ok(v: Any) -> Any:
    # `agents: {claude: }` (a bare name) means "defaults for claude".
    if isinstance(v, dict):
        return {k: ({} if a is None else a) for k, a in v.items()}
    return v


# Per key: a step before the type check (may reshape the value) and one after it (checks
# what a type cannot say). Either raises ValueError with the fix.
_Hook = Callable[[Any], Any]
_BEFORE: dict[tuple[type[_Section], str], _Hook] = {
    (AgentConfig, "command"): lambda v: _argv(v, "e.g. [claude] or 'npx amp'"),
    (NotifyConfig, "command"): lambda v: _argv(v, "e.g. [notify-send, '{title}']"),
    (Config, "agents"): _empty_agents_ok,
}
_AFTER: dict[tuple[type[_Section], str], _Hook] = {
    (Config, "tool"): _tool_named,
    (ReferencesConfig, "dir"): _relative_inside,
}


def _exponent_number(annotation: Any, v: Any) -> Any:
    """`5e3` (a string to YAML 1.1) as the number it means, for a numeric key."""
    if not isinstance(v, str) or not _EXPONENT.fullmatch(v.strip()):
        return v
    kinds = _numeric_kinds(annotation)
    if not kinds:
        return v
    number = float(v)
    if int in kinds and float not in kinds and number.is_integer():
        return int(number)
    return number


def _check_struct(
    model: type[_Section], raw: dict[str, Any], loc: _Loc, out: list[_Problem]
) -> dict[str, Any]:
    """The keys of `raw` (known ones only: see _prune_unknown) checked against `model`."""
    clean: dict[str, Any] = {}
    for f in msgspec.structs.fields(model):
        if f.name not in raw:
            continue
        where = (*loc, f.name)
        value = _exponent_number(f.type, raw[f.name])
        try:
            value = _BEFORE.get((model, f.name), _same)(value)
        except ValueError as exc:
            out.append(_Problem(where, str(exc), value))
            continue
        before = len(out)
        value = _check_value(f.type, value, where, out)
        after = _AFTER.get((model, f.name))
        if after is not None and len(out) == before:
            try:
                value = after(value)
            except ValueError as exc:
                out.append(_Problem(where, str(exc), value))
        clean[f.name] = value
    return clean


def _same(v: Any) -> Any:
    return v


def _check_value(annotation: Any, value: Any, loc: _Loc, out: list[_Problem]) -> Any:
    base, meta, nullable = _unwrap(annotation)
    if value is None and nullable:
        return None
    if isinstance(base, type) and issubclass(base, _Section):
        if not isinstance(value, dict):
            out.append(_Problem(loc, "must be a mapping of settings", value))
            return value
        return _check_struct(base, value, loc, out)
    origin = get_origin(base)
    if origin is list:
        if not isinstance(value, list):
            out.append(_Problem(loc, "must be a list", value))
            return value
        (item,) = get_args(base)
        return [_check_value(item, v, (*loc, i), out) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            out.append(_Problem(loc, "must be a mapping", value))
            return value
        key_type, item = get_args(base)
        checked = {}
        for k, v in value.items():
            _check_value(key_type, k, (*loc, k, "[key]"), out)
            checked[k] = _check_value(item, v, (*loc, k), out)
        return checked
    try:
        msgspec.convert(value, base if meta is None else Annotated[base, meta])
    except msgspec.ValidationError:
        out.append(_Problem(loc, _expected(base, meta, value), value))
    return value


def _expected(base: Any, meta: Meta | None, value: Any) -> str:
    """What a scalar must be, in words, given that msgspec refused `value`."""
    if get_origin(base) is Literal:
        return f"must be one of {_one_of(get_args(base))}"
    if base is bool:
        return "must be true or false"
    if base is str:
        return "must be a string"
    if base is int and type(value) is not int:
        return "must be an integer"
    if base is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number (not .inf or .nan)"
    for bound, words, fails in _BOUNDS:
        limit = getattr(meta, bound, None)
        if limit is not None and fails(value, limit):
            return f"must be {words} {_num(limit)}"
    return "is invalid"


_BOUNDS: tuple[tuple[str, str, Callable[[Any, Any], bool]], ...] = (
    ("ge", "at least", lambda v, b: v < b),
    ("gt", "more than", lambda v, b: v <= b),
    ("le", "at most", lambda v, b: v > b),
    ("lt", "less than", lambda v, b: v >= b),
)


def _one_of(choices: tuple[Any, ...]) -> str:
    shown = [repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + f" or {shown[-1]}"


def _folder(path: str) -> tuple[str, ...] | None:
    """A project-relative folder as its parts, None if it is none (absolute, `..`)."""
    clean = fsutil.relative_inside(path)
    return None if clean is None else tuple(p for p in clean.parts if p != ".")


def _log_dir_clash(config: Config) -> _Problem | None:
    """log.dir git-ignores itself whole: not the root, the Ralph folder (default: project.
    find_ralph_dir's first pick) or the references, nor a folder holding or inside those."""
    logs, refs = _folder(config.log.dir), _folder(config.references.dir)
    if logs is None:
        return None
    why = "the project root" if not logs else None
    theirs = [("the Ralph folder", config.ralph_dir or "scripts/ralph")]
    for name, path in [*theirs, ("the references folder", config.references.dir)]:
        other = _folder(path)
        if why is None and other is not None and other[: len(logs)] == logs:
            why = name if other == logs else f"a folder holding {name} ({path})"
    if why is None and refs and logs[: len(refs)] == refs:
        why = f"inside the references folder ({config.references.dir})"
    if why is None:
        return None
    fix = "use a new folder such as ralph/logs (nothing would git-ignore them among yours)"
    return _Problem(
        ("log", "dir"), f"must be a folder of its own, not {why}: {fix}", config.log.dir
    )


# --------------------------------------------------------------------------- errors


def _loc(loc: _Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _field_at(loc: _Loc) -> msgspec.structs.FieldInfo | None:
    """The field at a key path, or None (agents.<name>.* and list items)."""
    model: type[_Section] = Config
    for i, part in enumerate(loc):
        found = next((f for f in msgspec.structs.fields(model) if f.name == part), None)
        if found is None:
            return None
        if i == len(loc) - 1:
            return found
        if not (isinstance(found.type, type) and issubclass(found.type, _Section)):
            return None
        model = found.type
    return None


def _default_of(loc: _Loc) -> str | None:
    found = _field_at(loc)
    if found is None or found.default is msgspec.NODEFAULT:
        return None
    import yaml  # only on the way to an error message

    dumped = yaml.safe_dump(found.default, default_flow_style=True)
    return dumped.strip().removesuffix("...")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _allowed(loc: _Loc) -> str | None:
    """'allowed: 1 to 604800 (or null)' for a numeric key, from its Meta bounds."""
    found = _field_at(loc)
    if found is None or not _numeric_kinds(found.type):
        return None
    _, meta, nullable = _unwrap(found.type)
    lo = hi = None
    if meta is not None:
        if meta.ge is not None:
            lo = _num(meta.ge)
        elif meta.gt is not None:
            lo = f"more than {_num(meta.gt)}"
        if meta.le is not None:
            hi = _num(meta.le)
        elif meta.lt is not None:
            hi = f"less than {_num(meta.lt)}"
    kind = "an integer" if float not in _numeric_kinds(found.type) else "a number"
    span = f"{lo or 'any'} to {hi}" if hi else f"{lo} or more"
    return f"allowed: {kind}, {span}{' (or null)' if nullable else ''}"


def _config_error(problems: list[_Problem], source: str, override_keys: set[str]) -> ConfigError:
    lines = []
    for p in problems:
        key = _loc(p.loc)
        where = "command line" if key in override_keys else source
        msg = f"{where}: {key} {p.message}, got {describe(p.value)}"
        default = _default_of(p.loc)
        if default is not None and default.strip():
            msg += f" (default: {default.strip()})"
        allowed = _allowed(p.loc)
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
    problems: list[_Problem] = []
    clean = _check_struct(Config, raw, (), problems)
    if problems:
        raise _config_error(problems, source, given)
    config = msgspec.convert(clean, Config)
    clash = _log_dir_clash(config)
    if clash is not None:
        raise _config_error([clash], source, given)
    for w in warnings:
        log.warning(w)
    # Not settings (so never in model_dump or equality): facts about this load.
    msgspec.structs.force_setattr(config, "_warnings", warnings)
    if source != "defaults" and path is not None:
        msgspec.structs.force_setattr(config, "_path", Path(path))
    return config
