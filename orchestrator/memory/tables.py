"""progress.txt's tables with line numbers, and the line-level edits of them.

`Progress` cuts the file into segments; these functions work on its lines (split_lines, so
joining them gives the text back) for what needs positions: `ralph check`'s findings point at
a line, and `ralph compact` drops, replaces and archives rows. Every row is read by the one
rule of `markdown.data_rows`, so the rows here are exactly the rows `ralph run` reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import InputError
from orchestrator.memory.markdown import (
    SECTION_START,
    data_rows,
    escape_cell,
    sections,
    table_problems,
)

ARCHIVED_HEADING = "## Archived"
INDEX_HEADING_LINE = re.compile(r"##\s+progress index\s*$", re.IGNORECASE)
# Sections that are structure, not log entries (an entry names a story).
_RESERVED = ("## progress index", "## archived", "## codebase patterns", "## migrated history")
SECOND_INDEX = (
    "a second `## Progress Index` section: `ralph run` reads only the first, so its rows "
    "are not read"
)


@dataclass(frozen=True)
class TableRow:
    """A row of the index or `## Archived` table, where it stands in progress.txt (or a
    topic an area reference lists, for `ralph check`)."""

    topic: str
    path: str
    line: int  # 1-based line in progress.txt
    archived: bool = False
    area: str = ""  # for a topic an area reference lists: that area reference's path
    extra_cells: bool = False  # `| topic | path | note |`: read, but never rewritten


@dataclass
class Tables:
    """The index and archived tables as `ralph check` and `ralph compact` see them: the rows
    (the index's are exactly `Progress.index_rows`) and (1-based line, why) per bad line."""

    rows: list[TableRow]
    problems: list[tuple[int, str]]


def is_reserved_heading(heading: str) -> bool:
    """A `## ` heading of structure (index, archive, patterns), never a log entry."""
    return heading.strip().lower().startswith(_RESERVED)


def row_path(cells: list[str]) -> str:
    return cells[1].strip("`").strip()


Section = tuple[str, int, int]  # heading, first line, end line (exclusive): markdown.sections


def sections_of(segments: list[tuple[str, str]], lines: list[str]) -> list[Section]:
    """markdown.sections of a Progress's text from its (kind, text) segments: each `## `
    section starts a segment, and the other segments (fallback entries, the text after the
    index table) start with no `## ` line, unless that line is inside a code fence, which
    only the text after the index table can start with: then the lines are read again."""
    starts: list[int] = []
    line = 0
    prev = ""
    for kind, text in segments:
        if kind != "header" and SECTION_START.match(text):
            if prev == "index" and kind == "other":
                return sections(lines)
            starts.append(line)
        line += text.count("\n")
        prev = kind
    ends = [*starts[1:], len(lines)]
    return [(lines[s].rstrip(), s, e) for s, e in zip(starts, ends[: len(starts)], strict=True)]


def read(lines: list[str], secs: list[Section], index_at: int, index_len: int) -> Tables:
    """The index section starting at line `index_at` (its table is its first `index_len`
    lines: a row after them is a problem, not a row), every `## Archived` table, and a
    problem per other `## Progress Index` heading (`ralph run` reads only the first)."""
    rows: list[TableRow] = []
    problems: list[tuple[int, str]] = []
    for heading, start, end in secs:
        table_end: int | None = None
        if start == index_at:
            table_end = index_len
        elif INDEX_HEADING_LINE.match(heading.strip()):
            problems.append((start + 1, SECOND_INDEX))
            continue
        elif not heading.lower().startswith(ARCHIVED_HEADING.lower()):
            continue
        sec = lines[start:end]
        archived = table_end is None
        rows += [
            TableRow(c[0], row_path(c), start + n + 1, archived, extra_cells=len(c) > 2)
            for n, c in data_rows(sec)
            if table_end is None or n < table_end
        ]
        problems += [(start + n + 1, why) for n, why in table_problems(sec, table_end)]
    return Tables(rows, sorted(problems, key=lambda p: p[0]))


def section_at(lines: list[str], secs: list[Section], at: int) -> tuple[str, int]:
    """(text, 1-based heading line) of the `## ` section starting at line `at`, without its
    last newline unless it ends the file."""
    for _h, start, end in secs:
        if start == at:
            text = "".join(lines[start:end])
            return (text[:-1] if end < len(lines) else text), start + 1
    return "", 0


def without(lines: list[str], rows: list[tuple[str, str]], nl: str) -> list[str]:
    """The section's lines without the row of each (topic, path), matched exactly (one line
    per pair, in order); every one must be there. A table left without any line keeps a
    header, so that a table further down the section does not become the index."""
    found = [(n, c[0], row_path(c)) for n, c in data_rows(lines)]
    drop: set[int] = set()
    for topic, path in rows:
        n = next((n for n, t, p in found if (t, p) == (topic, path) and n not in drop), None)
        if n is None:
            raise InputError(f"progress.txt: index row for {topic!r} vanished while editing; retry")
        drop.add(n)
    kept = [x for i, x in enumerate(lines) if i not in drop]
    if drop and not any(x.lstrip().startswith("|") for x in kept[1:]):
        at = min(drop)
        kept[at:at] = [f"| Topic | Reference Path |{nl}", f"|---|---|{nl}"]
    return kept


def replaced(lines: list[str], by_path: dict[str, tuple[str, str]], nl: str) -> list[str]:
    """The section's lines where a row whose path is a key gives way to the (topic, path) it
    maps to, written where the first such row was; the later ones are dropped."""
    out = list(lines)
    written: set[tuple[str, str]] = set()
    drop: set[int] = set()
    for n, cells in data_rows(lines):
        new = by_path.get(row_path(cells))
        if new is None:
            continue
        if new in written:
            drop.add(n)
        else:
            end = nl if lines[n].endswith("\n") else ""
            out[n] = f"| {escape_cell(new[0])} | {escape_cell(new[1])} |{end}"
            written.add(new)
    return [x for i, x in enumerate(out) if i not in drop]


def with_archived(lines: list[str], index_at: int, rows: list[tuple[str, str]], nl: str) -> str:
    """The text with rows added at the end of the `## Archived` table; without one, the
    table is created after the index section (before the blank lines that end it)."""
    body = [f"| {escape_cell(t)} | {escape_cell(p)} |{nl}" for t, p in rows]
    secs = sections(lines)
    section = next((s for s in secs if s[0].lower().startswith(ARCHIVED_HEADING.lower())), None)
    if section is None:
        section = next((s for s in secs if s[1] == index_at), None)
        head = [ARCHIVED_HEADING, "| Topic | Reference Path |", "|---|---|"]
        body = [nl, *(x + nl for x in head), *body]
    end = section[2] if section else len(lines)
    while section and end > section[1] + 1 and not lines[end - 1].strip():
        end -= 1
    lines = list(lines)
    if end and not lines[end - 1].endswith("\n"):
        lines[end - 1] += nl
    return "".join(lines[:end] + body + lines[end:])
