"""Reading ralph.yaml: strict about duplicate keys, errors with file:line:column, and
PyYAML's parse kept in the user's cache by the file's exact bytes, so a command reading an
unchanged file skips PyYAML altogether. `orchestrator.config` turns the mapping it gives
into a typed Config."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import fsutil
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    import yaml


@functools.cache
def _strict_loader() -> type[yaml.SafeLoader]:
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one).

    PyYAML is imported here, not at the top: a project without ralph.yaml (and every
    command that reads no config) never pays for it."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(
        loader: StrictLoader, node: yaml.MappingNode, deep: bool = False
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

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


def display_path(path: Path) -> str:
    """The path as the user would type it: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    except ValueError:  # another drive on Windows
        return str(path)


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse ralph.yaml into a dict; an empty file is an empty config."""
    shown = display_path(path)
    data = fsutil.read_bytes(path)
    cache = _ParseCache(path)
    parsed = cache.get(data)
    if parsed is not None:
        return parsed
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{shown}: not UTF-8 text (byte {exc.start}); save the file as UTF-8"
        ) from exc
    parsed = _parse_yaml(text, shown)
    cache.put(data, parsed)
    return parsed


def _parse_yaml(text: str, shown: str) -> dict[str, Any]:
    import yaml  # see _strict_loader

    try:
        data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - SafeLoader subclass
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
            f"got {describe(data)}"
        )
    return data


class _ParseCache:
    """What PyYAML made of a ralph.yaml, kept in the user's cache with the file's exact
    bytes: every command reads the config, and a later one reading the same bytes skips
    PyYAML's import and parse (~15% of `ralph status`). Any edit changes the bytes, so a
    stale entry is never used; only a successful parse is kept. marshal holds exactly the
    types a parse yields (dict, list, str, int, float, bool, None, bytes, set); a file with
    one it cannot hold (a date) is simply parsed each time."""

    FORMAT = (1, marshal.version, sys.version_info[:2])

    def __init__(self, path: Path) -> None:
        key = str(Path(path).resolve()).encode("utf-8", "surrogateescape")
        name = hashlib.blake2b(key, digest_size=8).hexdigest()
        self.file = fsutil.user_cache_dir() / "config" / f"{name}.marshal"

    def get(self, data: bytes) -> dict[str, Any] | None:
        try:
            fmt, source, parsed = marshal.loads(self.file.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            return None  # none yet, or damaged: it is only a cache
        if fmt != self.FORMAT or source != data or not isinstance(parsed, dict):
            return None
        return parsed

    def put(self, data: bytes, parsed: dict[str, Any]) -> None:
        # Imported on a miss only: redaction's patterns are not needed to read a config.
        from orchestrator.redact import redact

        text = data.decode("utf-8", "surrogateescape")
        if redact(text) != text:
            return  # a token (a notify URL's, say) is not copied out of the user's file
        try:
            blob = marshal.dumps((self.FORMAT, data, parsed))
        except ValueError:
            return
        with contextlib.suppress(OSError):  # a read-only cache costs speed, nothing else
            fsutil.atomic_write_bytes(self.file, blob)


def describe(value: Any) -> str:
    """A value in a message: "a mapping", "a list", "true", or the value itself, cut."""
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
