"""The prd.json model: load, validate, pick the next story, mark one passed, save.

The user's prd.json is precious and often hand-edited, so saving never reformats it: marking a
story passed rewrites only the `false` token of that story's `"passes"` (located with a small
span scanner and verified by re-parsing). Only when that is impossible (the story has no
`passes` field yet) do we re-serialise, and then in the file's own style (indent, key order,
ASCII escaping, trailing newline, line endings). Unknown fields are always kept.

Accepted shapes (see the README): an object with a `userStories` list, or a top-level list of
stories. Each story needs a unique `id` (string or number) and a `title`; `passes` defaults to
false; `priority` is a number or a numeric string ("1"; 31.1 runs between 31 and 32: real
logs insert stories so), missing/null sorts last;
`acceptanceCriteria` (or `acceptance_criteria`) is a list of strings or one string.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import fsutil
from orchestrator.errors import InputError
from orchestrator.log import get_logger

log = get_logger()

_Key = str | int
_JsonPath = tuple[_Key, ...]

# Story-list keys other tools use; we name them in the error instead of guessing their meaning.
_FOREIGN_LIST_KEYS = ("stories", "tasks", "features", "items")
_CRITERIA_KEYS = ("acceptanceCriteria", "acceptance_criteria")


@dataclass
class Story:
    id: str
    title: str
    description: str = ""
    acceptance_criteria: list[str] = field(default_factory=list)
    priority: float | None = None
    passes: bool = False
    notes: str = ""
    references: list[str] = field(default_factory=list)
    position: int = 0

    def text(self) -> str:
        """Title, description, criteria and notes: what ranking and the prompt look at."""
        parts = [self.title, self.description, *self.acceptance_criteria, self.notes]
        return "\n".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------
# Span scanner: where each JSON value sits in the text, so edits can be minimal and errors
# can name a line. json.loads has already validated the text when this runs.


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def json_spans(text: str, start: int = 0) -> dict[_JsonPath, tuple[int, int]]:
    """Map every JSON path (keys and list indexes) to its value's (start, end) offsets."""
    spans: dict[_JsonPath, tuple[int, int]] = {}
    decoder = json.JSONDecoder()

    def value(i: int, path: _JsonPath) -> int:
        i = _skip_ws(text, i)
        begin = i
        if text[i] == "{":
            i = _skip_ws(text, i + 1)
            while text[i] != "}":
                key, i = decoder.raw_decode(text, i)
                i = _skip_ws(text, i)  # then ':'
                i = value(i + 1, (*path, key))
                i = _skip_ws(text, i)
                if text[i] == ",":
                    i = _skip_ws(text, i + 1)
            end = i + 1
        elif text[i] == "[":
            i = _skip_ws(text, i + 1)
            n = 0
            while text[i] != "]":
                i = _skip_ws(text, value(i, (*path, n)))
                n += 1
                if text[i] == ",":
                    i = _skip_ws(text, i + 1)
            end = i + 1
        else:
            _, end = decoder.raw_decode(text, i)
        spans[path] = (begin, end)
        return end

    value(start, ())
    return spans


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def _fmt_path(path: _JsonPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------------------------------
# Style detection for the (rare) full re-serialisation.


@dataclass
class _Style:
    indent: str | int | None
    separators: tuple[str, str]
    ensure_ascii: bool
    newline: str
    trailing_newline: bool
    bom: bool


def _detect_style(text: str) -> _Style:
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    newline = "\r\n" if "\r\n" in body else "\n"
    indent: str | int | None = None
    m = re.search(r"[\[{][ \t]*\r?\n([ \t]+)\S", body)
    if m:
        ws = m.group(1)
        indent = "\t" * len(ws) if ws.startswith("\t") else len(ws)
    elif "\n" in body.strip():
        indent = 0
    if indent is None:
        item = ", " if re.search(r",\s", body) else ","
        key = ": " if re.search(r'":\s', body) else ":"
        separators = (item, key)
    else:
        separators = (",", ": " if re.search(r'":\s', body) else ":")
    non_ascii = any(ord(c) > 127 for c in body)
    escapes = re.search(r"\\u[0-9a-fA-F]{4}", body) is not None
    return _Style(
        indent=indent,
        separators=separators,
        ensure_ascii=escapes and not non_ascii,
        newline=newline,
        trailing_newline=body.endswith("\n"),
        bom=bom,
    )


def _dump(data: Any, style: _Style) -> str:
    out = json.dumps(
        data, indent=style.indent, separators=style.separators, ensure_ascii=style.ensure_ascii
    )
    if style.trailing_newline:
        out += "\n"
    if style.newline != "\n":
        out = out.replace("\n", style.newline)
    return ("\ufeff" if style.bom else "") + out


# ---------------------------------------------------------------------------------------


class _Validator:
    """Turns the parsed JSON into Stories, or one InputError naming file, place and fix."""

    def __init__(self, text: str, path: Path, offset: int) -> None:
        self.text, self.path, self.offset = text, path, offset
        self._spans: dict[_JsonPath, tuple[int, int]] | None = None

    def fail(self, jpath: _JsonPath, problem: str, fix: str) -> InputError:
        """The error for `jpath`, located at its value (or its parent's, when it is missing)."""
        where = str(self.path)
        try:
            if self._spans is None:
                self._spans = json_spans(self.text, self.offset)
            span = self._spans.get(jpath) or self._spans.get(jpath[:-1])
            if span:
                line, col = _line_col(self.text, span[0])
                where = f"{self.path}:{line}:{col}"
        except (ValueError, IndexError):  # defensive: never hide the real message
            pass
        shown = _fmt_path(jpath) or "the top level"
        return InputError(f"{where}: {shown} {problem}. Fix: {fix}")

    def stories(self, data: Any) -> tuple[list[Story], _JsonPath]:
        if isinstance(data, list):
            base: _JsonPath = ()
            items = data
        elif isinstance(data, dict):
            base = ("userStories",)
            if "userStories" not in data:
                other = [k for k in _FOREIGN_LIST_KEYS if isinstance(data.get(k), list)]
                hint = ""
                if other:
                    hint = f' (found "{other[0]}": if those are Ralph stories, rename it)'
                raise self.fail(
                    (),
                    f'has no "userStories" list{hint}',
                    'add "userStories": [ {"id": "US-001", "title": ...} ]',
                )
            items = data["userStories"]
            if not isinstance(items, list):
                raise self.fail(
                    base,
                    f"must be a list of stories, got {_kind(items)}",
                    "make it a JSON array: [ {...}, {...} ]",
                )
        else:
            raise self.fail(
                (),
                f"must be an object with userStories, got {_kind(data)}",
                'write {"userStories": [...]} or a list of stories',
            )
        if not items:
            raise self.fail(base, "is empty", "add at least one story (id, title, passes)")
        stories = [self.story(item, (*base, i), i) for i, item in enumerate(items)]
        seen: dict[str, int] = {}
        for s in stories:
            if s.id in seen:
                raise self.fail(
                    (*base, s.position, "id"),
                    f"duplicates the id {s.id!r} of {_fmt_path((*base, seen[s.id])) or 'story'}",
                    "give every story a unique id, or the loop cannot tell them apart",
                )
            seen[s.id] = s.position
        return stories, base

    def story(self, item: Any, p: _JsonPath, position: int) -> Story:
        if not isinstance(item, dict):
            raise self.fail(
                p,
                f"must be an object (a story), got {_kind(item)}",
                'write {"id": "US-001", "title": "...", "passes": false}',
            )
        sid = item.get("id")
        if isinstance(sid, bool) or not isinstance(sid, (str, int)) or str(sid).strip() == "":
            raise self.fail(
                (*p, "id"),
                _missing_or_bad(item, "id", "a non-empty string"),
                'give the story a unique "id", e.g. "US-001"',
            )
        title = item.get("title")
        # An empty title is odd but harmless (real files have them); a missing one is not.
        if not isinstance(title, str):
            raise self.fail(
                (*p, "title"),
                _missing_or_bad(item, "title", "a string"),
                'add a short "title" describing the story',
            )
        passes = item.get("passes", False)
        if not isinstance(passes, bool):
            raise self.fail(
                (*p, "passes"),
                f"must be true or false, got {_show(passes)}",
                'write "passes": false (or true once the story is done)',
            )
        return Story(
            id=str(sid),
            title=title,
            position=position,
            passes=passes,
            description=self.text_field(item, p, "description"),
            notes=self.text_field(item, p, "notes"),
            priority=self.priority(item, p),
            acceptance_criteria=self.str_list(item, p, _CRITERIA_KEYS),
            references=self.str_list(item, p, ("references",)),
        )

    def text_field(self, item: dict[str, Any], p: _JsonPath, key: str) -> str:
        value = item.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.fail(
                (*p, key),
                f"must be a string, got {_show(value)}",
                f'write "{key}" as a JSON string (or remove it)',
            )
        return value

    def priority(self, item: dict[str, Any], p: _JsonPath) -> float | None:
        value = item.get("priority")
        if value is None:
            return None
        number: float | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float):
            number = int(value) if value.is_integer() else value
        # Numeric strings ("1") are common in hand-written files and unambiguous; words like
        # "high" are not (is high 1 or 3?), so those are rejected with the fix.
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            number = int(value)  # exact, however long
        elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\.\d+\s*", value):
            number = float(value)
        if isinstance(number, int) or (number is not None and math.isfinite(number)):
            return number
        raise self.fail(
            (*p, "priority"),
            f"must be a number such as 1 or 31.1 (1 runs first), got {_show(value)}",
            'write e.g. "priority": 1, or remove it to run the story last',
        )

    def str_list(self, item: dict[str, Any], p: _JsonPath, keys: tuple[str, ...]) -> list[str]:
        key = next((k for k in keys if k in item), None)
        if key is None or item[key] is None:
            return []
        value = item[key]
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list):
            raise self.fail(
                (*p, key),
                f"must be a list of strings, got {_kind(value)}",
                f'write "{key}": ["...", "..."]',
            )
        for i, v in enumerate(value):
            if not isinstance(v, str):
                raise self.fail(
                    (*p, key, i),
                    f"must be a string, got {_show(v)}",
                    "write each entry as a JSON string",
                )
        return list(value)


def _syntax_hint(doc: str, pos: int) -> str:
    before = doc[:pos].rstrip()
    if before.endswith(",") and doc[pos : pos + 1] in ("]", "}"):
        return "remove the trailing comma before it (JSON does not allow one)"
    return "correct the syntax there (a missing comma, quote or bracket is the usual cause)"


def _missing_or_bad(item: dict[str, Any], key: str, want: str) -> str:
    return "is missing" if key not in item else f"must be {want}, got {_show(item[key])}"


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }.get(type(value), "a number")


def _show(value: Any) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:37] + "..."


class Prd:
    def __init__(self, path: Path, text: str, data: Any, stories: list[Story], base: _JsonPath):
        self.path = Path(path)
        self._text = text  # the current rendering; starts as the exact file text
        self._loaded = text  # what the file held when read (to notice edits made since)
        self._reserialised = False  # True once an edit could not be a one-token change
        self._data = data
        self._base = base  # JSON path of the story list: ("userStories",) or ()
        self.stories = stories
        meta = data if isinstance(data, dict) else {}
        self.project: str | None = _opt_str(meta.get("project", meta.get("projectName")))
        self.branch_name: str | None = _opt_str(meta.get("branchName"))
        self.description: str | None = _opt_str(meta.get("description"))

    @classmethod
    def load(cls, path: Path) -> Prd:
        path = Path(path)
        try:
            text = fsutil.read_text(path)
        except FileNotFoundError:
            raise InputError(
                f"{path}: not found. Fix: create it (`ralph init` writes an "
                "example) or point --dir (or ralph.yaml's ralph_dir) at the folder that holds it"
            ) from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory, not a prd.json file") from None
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text: str, path: Path) -> Prd:
        offset = 1 if text.startswith("\ufeff") else 0  # a BOM is kept, but json rejects it
        bad = re.search("[\udc80-\udcff]", text)  # undecodable bytes (fsutil.read_text)
        if bad:
            line, col = _line_col(text, bad.start())
            raise InputError(
                f"{path}:{line}:{col}: is not valid UTF-8. Fix: save the file as "
                "UTF-8 (JSON files must be); nothing was changed"
            )
        if not text[offset:].strip():
            raise InputError(
                f"{path}: is empty. Fix: write the PRD as JSON "
                '({"userStories": [...]}) or run `ralph init` for an example'
            )
        try:
            data = json.loads(text[offset:])
        except json.JSONDecodeError as e:
            raise InputError(
                f"{path}:{e.lineno}:{e.colno + (offset if e.lineno == 1 else 0)}: invalid JSON: "
                f"{e.msg}. Fix: {_syntax_hint(e.doc, e.pos)}; nothing was changed"
            ) from None
        except RecursionError:
            raise InputError(f"{path}: JSON is nested too deeply to read") from None
        stories, base = _Validator(text, Path(path), offset).stories(data)
        return cls(Path(path), text, data, stories, base)

    # -- queries ---------------------------------------------------------------------------

    def next_story(self) -> Story | None:
        """The pending story with the lowest priority number; ties and unnumbered ones in
        file order, unnumbered after all numbered ones."""
        pending = [s for s in self.stories if not s.passes]
        if not pending:
            return None
        return min(pending, key=lambda s: (s.priority is None, s.priority or 0, s.position))

    def get(self, story_id: str) -> Story:
        for s in self.stories:
            if s.id == str(story_id):
                return s
        known = ", ".join(s.id for s in self.stories[:20])
        raise InputError(f"{self.path}: no story with id {story_id!r}. Known ids: {known}")

    def all_passed(self) -> bool:
        return all(s.passes for s in self.stories)

    def passed_count(self) -> int:
        return sum(1 for s in self.stories if s.passes)

    # -- changes ---------------------------------------------------------------------------

    def mark_passed(self, story_id: str) -> None:
        self.get(story_id).passes = True
        self._sync()

    def render(self) -> str:
        """The file's text with the current `passes` values; identical bytes if unchanged."""
        self._sync()
        return self._text

    def save(self) -> None:
        """Write atomically, only if something changed. If the file was edited since it was
        read (an agent often edits prd.json), our `passes` changes are applied to the file as
        it is now instead of overwriting the other edits."""
        text = self.render()
        try:
            on_disk: str | None = fsutil.read_text(self.path)
        except FileNotFoundError:
            on_disk = None
        if on_disk is not None and on_disk not in (self._loaded, text):
            self._rebase(on_disk)
            text = self._text
        if on_disk != text:
            # A full re-serialisation may touch more than one token: keep the old file.
            fsutil.atomic_write_text(self.path, text, backup=self._reserialised)
        self._loaded = text

    def _rebase(self, on_disk: str) -> None:
        """Adopt the file's current content and re-apply the passes values we changed."""
        old = {s.id: s.passes for s in Prd.parse(self._loaded, self.path).stories}
        changed = {s.id: s.passes for s in self.stories if old.get(s.id) != s.passes}
        fresh = Prd.parse(on_disk, self.path)  # InputError if the edit broke the file
        for s in fresh.stories:
            if s.id in changed:
                s.passes = changed[s.id]
        fresh._sync()
        log.info(
            "prd.json changed on disk since it was read; re-applied passes changes",
            path=str(self.path),
            stories=sorted(changed),
        )
        reserialised = self._reserialised or fresh._reserialised
        self.__dict__.update(fresh.__dict__)
        self._reserialised = reserialised

    def _sync(self) -> None:
        items = self._data["userStories"] if self._base else self._data
        for s in self.stories:
            raw = items[s.position]
            if raw.get("passes", False) != s.passes:
                self._set_passes(s, raw)

    def _set_passes(self, story: Story, raw: dict[str, Any]) -> None:
        expected = copy.deepcopy(self._data)
        target = expected if not self._base else expected["userStories"]
        target[story.position]["passes"] = story.passes
        new_text = self._edit_token(story) if "passes" in raw else None
        if new_text is None or _loads(new_text) != expected:
            new_text = _dump(expected, _detect_style(self._text))
            self._reserialised = True
        self._text, self._data = new_text, expected

    def _edit_token(self, story: Story) -> str | None:
        offset = 1 if self._text.startswith("\ufeff") else 0
        path = (*self._base, story.position, "passes")
        start, end = json_spans(self._text, offset)[path]
        old, new = ("false", "true") if story.passes else ("true", "false")
        if self._text[start:end] != old:
            return None
        return self._text[:start] + new + self._text[end:]


def _loads(text: str) -> Any:
    return json.loads(text[1:] if text.startswith("\ufeff") else text)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
