"""The progress.txt model: header, Codebase Patterns, Progress Index and the narrative log.

progress.txt is the user's history and real files vary wildly, so the model is lossless by
construction: the text is cut into raw segments (the header, then one segment per "## "
section) and render() is their concatenation. Every change builds a new Progress by
replacing or adding one segment, so nothing else in the file can move. Structure (entries,
learnings, index rows) is read from the segments and never written back from a re-rendering.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from orchestrator import fsutil
from orchestrator.memory import tables
from orchestrator.memory.markdown import (
    SECTION_START,
    Fences,
    data_rows,
    escape_cell,
    fenced_lines,
    is_section_start,
    malformed_rows,
    section_starts,
    split_lines,
)
from orchestrator.memory.tables import INDEX_HEADING_LINE as INDEX_HEADING_LINE
from orchestrator.memory.vocab import (
    body_story_ids,
    extract_date,
    extract_files,
    extract_learnings,
    extract_story_ids,
    fallback_entry_starts,
    looks_like_entry,
)

HEADER = "# Ralph Progress Log\nStarted: {date}\n---\n"
INDEX_HEADING = "## Progress Index"
INDEX_TABLE_HEAD = "| Topic | Reference Path |\n|---|---|\n"
# Where `ralph migrate` leaves one summary line per past story: summaries, not entries.
HISTORY_HEADING = "## Migrated History"

_PATTERNS = re.compile(r"##\s+codebase patterns\b", re.IGNORECASE)


def new_progress_text(date: str | None = None, with_index: bool = False) -> str:
    """What ralph.sh writes for a fresh log; `date` defaults to `date`-style local time."""
    if date is None:
        date = _dt.datetime.now().astimezone().strftime("%a %b %d %H:%M:%S %Z %Y")
    text = HEADER.format(date=date)
    if with_index:
        text += "\n" + INDEX_HEADING + "\n" + INDEX_TABLE_HEAD
    return text


@dataclass
class IndexRow:
    topic: str
    path: str


@dataclass
class Entry:
    heading: str
    story_ids: list[str]
    date: str | None
    text: str
    files_changed: list[str] = field(default_factory=list)
    learnings: list[str] = field(default_factory=list)


@dataclass
class _Segment:
    kind: str  # header | patterns | index | entry | other
    text: str


def _split(text: str) -> list[_Segment]:
    lines = split_lines(text)
    fenced = fenced_lines(lines)
    starts = section_starts(lines, fenced)
    segments = [_Segment("header", "".join(lines[: starts[0] if starts else len(lines)]))]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        kind = _kind(lines[start])
        if kind == "index":
            segments.extend(_cut_index(lines[start:end]))
        else:
            segments.append(_Segment(kind, "".join(lines[start:end])))
    if not any(s.kind == "entry" for s in segments):
        segments = _split_fallback(segments)
    return segments


def _cut_index(lines: list[str]) -> list[_Segment]:
    """The index section is its heading, its table (the first run of "|" lines; a blank line
    ends a markdown table) and the blank lines after it. Text that follows (a header's
    remainder, notes) becomes an untyped segment, so the index is exactly what it shows."""
    rows = [i for i, line in enumerate(lines) if i and line.lstrip().startswith("|")]
    end = rows[0] if rows else 1  # a line of prose before the table stays in the index
    while end < len(lines) and lines[end].lstrip().startswith("|"):
        end += 1
    while end < len(lines) and not lines[end].strip():
        end += 1
    out = [_Segment("index", "".join(lines[:end]))]
    if end < len(lines):
        out.append(_Segment("other", "".join(lines[end:])))
    return out


def _kind(heading: str) -> str:
    if INDEX_HEADING_LINE.match(heading.strip()):
        return "index"
    if _PATTERNS.match(heading):
        return "patterns"
    return "entry" if looks_like_entry(heading) else "other"


def _split_fallback(segments: list[_Segment]) -> list[_Segment]:
    """Logs without "## " entries ("[date] Story: ..." blocks, a bullet per story): cut the
    other segments at each entry start; the text stays in order. Inside the Codebase
    Patterns only the unmistakable "[date] Story:" form starts an entry."""
    out: list[_Segment] = []
    for seg in segments:
        lines = split_lines(seg.text)
        starts = fallback_entry_starts(lines, strict=seg.kind == "patterns")
        if lines and lines[0].strip().lower() == HISTORY_HEADING.lower():
            # Its first block ("- US-001: Title" lines) is migrate's summary of the moved
            # entries; an entry the agent appends after a blank line is an entry.
            summaries = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
            starts = [i for i in starts if i > summaries]
        if lines and SECTION_START.match(lines[0]):
            starts = [i for i in starts if i > 0]  # a section keeps its "## " line
        if not starts:
            out.append(seg)
            continue
        out.append(_Segment(seg.kind, "".join(lines[: starts[0]])))
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            out.append(_Segment("entry", "".join(lines[start:end])))
    return out


class _Table(NamedTuple):
    """The index section's lines and its data rows (line index, cells), read once."""

    lines: list[str]
    rows: list[tuple[int, list[str]]]


def _read_table(index_text: str) -> _Table:
    lines = split_lines(index_text)
    return _Table(lines, data_rows(lines))


def _key(topic: str) -> str:
    """Topics match case- and whitespace-insensitively ("Auth  Flow" is "auth flow")."""
    return " ".join(topic.split()).lower()


_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


class _Prefix(NamedTuple):
    """What the top of a log tells of its index, when that settles it (`decided`): the index
    segment, and the whole index section (table and notes up to the next `## `, without
    its last newline) with its 1-based heading line, as `Progress.index_section` gives it."""

    decided: bool
    segment: _Segment | None = None
    section: str = ""
    line: int = 0


def _index_prefix(text: str) -> _Prefix:
    """The index segment and section from the top of `text` only, for a log whose index
    precedes its entries (what `ralph migrate` writes): reading stops at the first entry
    heading after the index. Undecided (then the whole log is split) when no entry follows
    the index, when there is no index there, or when a heading line sits inside a code fence
    not yet closed (an unclosed fence is no fence: only the rest of the file can tell)."""
    lines: list[str] = []
    fences = Fences()
    index_at: int | None = None
    index_end: int | None = None
    for m in _LINE.finditer(text):
        line = m.group(0)
        i = len(lines)
        lines.append(line)
        if fences.feed(line):
            continue
        if not is_section_start(line):
            continue
        if fences.marker:
            return _Prefix(False)
        kind = _kind(line)
        if index_at is None:
            if kind == "entry":
                return _Prefix(False)  # entries before the index: a hand-made log
            if kind == "index":
                index_at = i
            continue
        index_end = i if index_end is None else index_end
        if kind == "entry":  # there are entries: no fallback split can move the index
            section = lines[index_at:index_end]
            cut = _cut_index(section)[0]
            return _Prefix(True, cut, "".join(section)[:-1], index_at + 1)
    return _Prefix(False)


class Progress:
    def __init__(self, segments: list[_Segment] | None, text: str | None = None) -> None:
        if segments is not None:
            self.__dict__["_segments"] = segments
        # The segments join to the parsed text exactly: keep that one, not another copy of
        # a log that may be tens of MB.
        self.text = text if text is not None else "".join(s.text for s in segments or ())

    @classmethod
    def parse(cls, text: str) -> Progress:
        """The log is cut into segments when a view first needs them; the index alone
        (all `ralph prompt` reads of a long log) is read from the top of the file."""
        return cls(None, text)

    @functools.cached_property
    def _segments(self) -> list[_Segment]:
        return _split(self.text)

    @classmethod
    def load(cls, path: Path) -> Progress:
        """A missing file is an empty log (Ralph creates it on first run)."""
        path = Path(path)
        return cls.parse(fsutil.read_text(path) if path.exists() else "")

    def render(self) -> str:
        return self.text

    # -- views -----------------------------------------------------------------------------

    @property
    def newline(self) -> str:
        return "\r\n" if "\r\n" in self.text else "\n"

    @property
    def header(self) -> str:
        return self._segments[0].text

    @property
    def codebase_patterns(self) -> str | None:
        seg = self._first("patterns")
        if seg is None:
            return None
        return "".join(split_lines(seg.text)[1:])

    @property
    def has_index(self) -> bool:
        return self._index is not None

    @property
    def index_text(self) -> str:
        seg = self._index
        return seg.text if seg else ""

    @functools.cached_property
    def _index(self) -> _Segment | None:
        if "_segments" not in self.__dict__ and (top := self._prefix).decided:
            return top.segment
        return self._first("index")

    @functools.cached_property
    def _prefix(self) -> _Prefix:
        return _index_prefix(self.text)

    @property
    def index_rows(self) -> list[IndexRow]:
        return [IndexRow(r.topic, r.path) for r in self._rows]  # copies: callers may edit

    @functools.cached_property
    def _table(self) -> _Table:
        return _read_table(self.index_text)  # 10,000 rows: read once per Progress

    @functools.cached_property
    def _rows(self) -> list[IndexRow]:
        return [IndexRow(c[0], c[1].strip("`").strip()) for _, c in self._table.rows]

    def malformed_index_lines(self) -> list[tuple[int, str]]:
        """(0-based line in the index section, text) of each line that starts with "|" but
        is no row, separator or header (markdown.malformed_rows)."""
        table = self._table
        return malformed_rows(table.lines, {n for n, _ in table.rows})

    def with_rows_of(self, other: Progress) -> Progress:
        """self, taking `other`'s index table as already read when both are the same text (a
        log the agent appended to: its 10,000 rows are not read twice)."""
        read = "_table" in other.__dict__ and "_table" not in self.__dict__
        if read and self.index_text == other.index_text:
            # Never edited: index_rows hands out copies, malformed_rows only reads.
            self.__dict__["_table"] = other._table
            if "_rows" in other.__dict__:
                self.__dict__["_rows"] = other._rows
        return self

    @property
    def entries(self) -> list[Entry]:
        """The log's entries in file order (a copy; reading them is cached)."""
        return list(self._entries)

    @property
    def entry_texts(self) -> list[str]:
        """Each entry's text (`Entry.text`), without reading the entries: comparing two
        versions of a long log needs no more (`entry_from` reads one)."""
        return [s.text for s in self._segments if s.kind == "entry"]

    @property
    def entry_count(self) -> int:
        """How many entries the log has, without reading them (status needs no more)."""
        return sum(1 for s in self._segments if s.kind == "entry")

    @functools.cached_property
    def _entries(self) -> list[Entry]:
        # A Progress never changes after construction (changes build a new one), so caching
        # is safe; extraction is the costly part of reading a long log.
        return [_entry(s.text) for s in self._segments if s.kind == "entry"]

    def _first(self, kind: str) -> _Segment | None:
        return next((s for s in self._segments if s.kind == kind), None)

    # -- changes (each returns a new Progress; self is unchanged) --------------------------

    def with_index_row(self, topic: str, path: str) -> Progress:
        """Add the row, or update the path of the row with this topic (case-insensitive)."""
        if not topic.strip() or not path.strip():
            raise ValueError("an index row needs a topic and a path")
        nl = self.newline
        row = f"| {escape_cell(topic)} | {escape_cell(path)} |{nl}"
        seg = self._first("index")
        if seg is None:
            section = INDEX_HEADING + nl + INDEX_TABLE_HEAD.replace("\n", nl) + row
            wanted = IndexRow(" ".join(topic.split()), " ".join(path.split()))
            return self._insert_index(section, wanted)
        lines = split_lines(seg.text)
        for i, cells in data_rows(lines):
            if _key(cells[0]) == _key(topic):
                if cells[1].strip("`").strip() == path.strip():
                    return self
                # Keep the row's own topic spelling and any extra columns; change the path.
                kept = [cells[0], path, *cells[2:]]
                row = "| " + " | ".join(escape_cell(c) for c in kept) + " |" + nl
                lines[i] = row if lines[i].endswith("\n") else row.rstrip("\r\n")
                return self._replace(seg, "".join(lines))
        return self._replace(seg, _insert_row(lines, row, nl))

    def without_index_row(self, topic: str) -> Progress:
        seg = self._first("index")
        if seg is None:
            return self
        lines = split_lines(seg.text)
        drop = {i for i, cells in data_rows(lines) if _key(cells[0]) == _key(topic)}
        if not drop:
            return self
        return self._replace(seg, "".join(x for i, x in enumerate(lines) if i not in drop))

    def append_entry(self, block: str) -> Progress:
        """Append a log block at the very end; earlier bytes are never touched."""
        nl = self.newline
        if nl != "\n":
            block = block.replace("\r\n", "\n").replace("\n", nl)
        if not block.endswith(nl):
            block += nl
        text = self.text
        prefix = "" if not text or text.endswith("\n") else nl
        return Progress.parse(text + prefix + block)

    def _replace(self, seg: _Segment, new_text: str) -> Progress:
        # Re-parse the result so a changed Progress is always exactly parse(render()).
        return Progress.parse("".join(new_text if s is seg else s.text for s in self._segments))

    def _insert_index(self, section: str, row: IndexRow) -> Progress:
        """A new index goes right after the header block, before everything else (at the very
        top if that spot would fall inside a code block)."""
        for cut in (_header_end(self._segments[0].text), 0):
            new = Progress.parse(self._with_section_at(cut, section))
            if row in new.index_rows:
                return new
        raise AssertionError("unreachable: a heading on the first line is always a section")

    def _with_section_at(self, cut: int, section: str) -> str:
        nl, text = self.newline, self.text
        pre, post = text[:cut], text[cut:]
        # Keep a blank line between the header and the table, and between it and what follows.
        if not pre or pre.endswith("\n\n") or pre.endswith("\n\r\n"):
            lead = ""
        else:
            lead = nl if pre.endswith("\n") else nl + nl
        tail = nl if post and not post.startswith(("\n", "\r\n")) else ""
        return pre + lead + section + tail + post

    # -- positions and edits for check and compact (each edit returns a new Progress) ------

    @functools.cached_property
    def _lines(self) -> list[str]:
        return split_lines(self.text)

    @functools.cached_property
    def _sections(self) -> list[tables.Section]:
        # Read once per Progress (it never changes) for check's tables, size and headings.
        return tables.sections_of([(s.kind, s.text) for s in self._segments], self._lines)

    def _index_at(self) -> tuple[_Segment | None, int]:
        """The index segment and its 0-based first line (-1 without an index)."""
        n = 0
        for s in self._segments:
            if s.kind == "index":
                return s, n
            n += s.text.count("\n")
        return None, -1

    def tables(self) -> tables.Tables:
        """The index and `## Archived` tables with 1-based lines, and their problems."""
        seg, at = self._index_at()
        n = len(split_lines(seg.text)) if seg else 0
        return tables.read(self._lines, self._sections, at, n)

    def section_headings(self) -> list[tuple[str, int]]:
        """(heading, 1-based line) of every `## ` section outside code fences."""
        return [(h, start + 1) for h, start, _end in self._sections]

    def index_section(self) -> tuple[str, int]:
        """(text, 1-based heading line) of the whole index section (table and any notes up
        to the next `## `); ("", 0) without an index. A log whose index precedes its entries
        is not split for it (a run's first iteration asks, on a log of 3,000 entries)."""
        if "_segments" not in self.__dict__ and (top := self._prefix).decided:
            return top.section, top.line
        _seg, at = self._index_at()
        return tables.section_at(self._lines, self._sections, at) if at >= 0 else ("", 0)

    def without_rows(self, rows: list[tuple[str, str]]) -> Progress:
        """Drop the index row of each (topic, path), matched exactly; each must exist."""
        seg = self._first("index")
        kept = tables.without(split_lines(seg.text) if seg else [], rows, self.newline)
        return self._replace(seg, "".join(kept)) if seg and rows else self

    def with_rows_replaced(self, by_path: dict[str, tuple[str, str]]) -> Progress:
        """Index rows whose path is a key become the (topic, path) it maps to (once, where
        the first was; the others are dropped)."""
        seg = self._first("index")
        if seg is None or not by_path:
            return self
        new = tables.replaced(split_lines(seg.text), by_path, self.newline)
        return self._replace(seg, "".join(new))

    def with_archived_rows(self, rows: list[tuple[str, str]]) -> Progress:
        """Add rows to the `## Archived` table (created after the index when missing)."""
        if not rows:
            return self
        _seg, at = self._index_at()
        return Progress.parse(tables.with_archived(self._lines, at, rows, self.newline))

    def rotated(self, keep: int) -> tuple[Progress, list[str]]:
        """The log without its entries before the last `keep`, and those entries (each
        ending in a blank line, in file order)."""
        entries = [s for s in self._segments if s.kind == "entry"]
        old = entries[: max(0, len(entries) - keep)]
        if not old:
            return self, []
        moved = [seg.text.rstrip("\n") + "\n" for seg in old]
        moved = [b if b.endswith("\n\n") else b + "\n" for b in moved]
        gone = {id(s) for s in old}
        kept = "".join(s.text for s in self._segments if id(s) not in gone)
        return Progress.parse(kept), moved


def _header_end(header: str) -> int:
    """Offset just after the Ralph header block: its "---" line, else its title paragraph."""
    lines = split_lines(header)
    offset = 0
    for line in lines[:10]:
        offset += len(line)
        if line.strip() == "---":
            return offset
    if not lines or not lines[0].startswith("#"):
        return 0
    offset = 0
    for line in lines:
        if not line.strip():
            break
        offset += len(line)
    return offset


def _insert_row(lines: list[str], row: str, nl: str) -> str:
    """Insert after the last table line of the section (before trailing blank/other lines)."""
    last = 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|"):
            last = i
    if last == 0:  # heading with no table yet
        table = INDEX_TABLE_HEAD.replace("\n", nl)
        first = lines[0] if lines[0].endswith("\n") else lines[0] + nl
        return first + table + row + "".join(lines[1:])
    if not lines[last].endswith("\n"):
        lines[last] += nl
    return "".join(lines[: last + 1]) + row + "".join(lines[last + 1 :])


def entry_from(text: str) -> Entry:
    """The Entry of one entry's text (one of `Progress.entry_texts`)."""
    return _entry(text)


def _entry(text: str) -> Entry:
    heading = split_lines(text)[0].rstrip("\r\n") if text else ""
    return Entry(
        heading=heading,
        story_ids=extract_story_ids(heading) or body_story_ids(text),
        date=extract_date(heading),
        text=text,
        files_changed=extract_files(text),
        learnings=extract_learnings(text),
    )
