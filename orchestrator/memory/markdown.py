"""The one markdown reading of Ralph's files: lines, code fences, `## ` sections, table rows.

Every module that needs structure from progress.txt or a reference asks here, so that
`ralph run`, `ralph check`, `ralph compact`, `ralph migrate` and the history repair agree on
what is a section, what is inside a code fence and what is an index row.
"""

from __future__ import annotations

import re

# "## " starts a section; "### " and deeper stay inside the section above.
SECTION_START = re.compile(r"## (?!#)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_SEPARATOR_CELL = re.compile(r":?-{1,}:?")
_UNESCAPED_BAR = re.compile(r"(?<!\\)\|")


def split_lines(text: str) -> list[str]:
    """Split after each "\\n" only (str.splitlines also splits on \\x0c, \\u2028 ...), so
    joining the lines gives the text back byte for byte."""
    parts = text.split("\n")  # faster than a regex over a 50 MB log
    last = parts.pop()
    lines = [p + "\n" for p in parts]
    if last:
        lines.append(last)
    return lines


class Fences:
    """Code fences, line by line (CommonMark rules): a backtick opener has no backtick after
    it; the closer uses the same character, at least as many, and nothing else."""

    def __init__(self) -> None:
        self.marker = ""  # the open fence's marker; "" outside a fence

    def feed(self, line: str) -> str:
        """ "open" or "close" when `line` opens or closes a fence, else ""."""
        # A fence line holds three backticks or tildes in a row: the regex is only tried on
        # those (a 50 MB log has a million lines and a few fences).
        if "```" not in line and "~~~" not in line:
            return ""
        m = _FENCE.match(line)
        if not m:
            return ""
        if not self.marker:
            if m.group(1)[0] == "`" and "`" in m.group(2):
                return ""
            self.marker = m.group(1)
            return "open"
        if (
            m.group(1)[0] == self.marker[0]
            and len(m.group(1)) >= len(self.marker)
            and not m.group(2).strip()
        ):
            self.marker = ""
            return "close"
        return ""


def fenced_lines(lines: list[str]) -> set[int]:
    """Line numbers inside closed ``` / ~~~ code blocks, fences included (pasted markdown is
    not structure). An unclosed fence is ignored rather than swallowing the rest of the log
    (a stray ``` must not hide entries)."""
    fenced: set[int] = set()
    open_at = 0
    fences = Fences()
    # Only lines holding a fence marker can change the state (a million lines, a few fences).
    for i in [i for i, line in enumerate(lines) if "```" in line or "~~~" in line]:
        what = fences.feed(lines[i])
        if what == "open":
            open_at = i
        elif what == "close":
            fenced.update(range(open_at, i + 1))
    return fenced


def unclosed_fence(text: str) -> int | None:
    """1-based line of a ``` / ~~~ fence that is opened and never closed, or None. Ralph
    reads past it (fenced_lines), but an agent or a markdown viewer reads the rest as code."""
    if "```" not in text and "~~~" not in text:
        return None
    lines = split_lines(text)
    fences = Fences()
    open_at = 0
    for i in [i for i, line in enumerate(lines) if "```" in line or "~~~" in line]:
        if fences.feed(lines[i]) == "open":
            open_at = i
    return open_at + 1 if fences.marker else None


def close_fences(text: str) -> str:
    """`text` with a fence it leaves open closed at its end: a reference item inlined into
    a prompt must not turn the template's instructions after it into code."""
    if "```" not in text and "~~~" not in text:
        return text
    fences = Fences()
    for line in split_lines(text):
        fences.feed(line)
    return f"{text}\n{fences.marker}" if fences.marker else text


def is_section_start(line: str) -> bool:
    """`SECTION_START.match(line)`, without a regex call per line."""
    return line.startswith("## ") and line[3:4] != "#"


def section_starts(lines: list[str], fenced: set[int] | None = None) -> list[int]:
    """Indexes of the `## ` heading lines outside code fences (`fenced`: fenced_lines)."""
    fenced = fenced_lines(lines) if fenced is None else fenced
    # is_section_start, inlined: a call per line costs more than the test itself.
    return [
        i
        for i, line in enumerate(lines)
        if line[:3] == "## " and line[3:4] != "#" and i not in fenced
    ]


def sections(lines: list[str]) -> list[tuple[str, int, int]]:
    """(heading, start, end) of every `## ` section; `end` is exclusive."""
    starts = section_starts(lines)
    ends = [*starts[1:], len(lines)]
    return [(lines[s].rstrip(), s, e) for s, e in zip(starts, ends, strict=False)]


def escape_cell(value: str) -> str:
    """One table cell: whitespace collapsed (a cell is one line), "|" escaped as GFM does."""
    return " ".join(value.split()).replace("|", "\\|")


def split_row(line: str) -> list[str] | None:
    """The cells of a table row `| a | b |` (`\\|` is a literal bar), or None when the line
    is not one (it must start and end with "|")."""
    body = line.strip()
    if not (body.startswith("|") and body.endswith("|")) or len(body) < 2:
        return None
    if "\\" not in body:  # no escaped bar: a plain split (an index of 10,000 rows)
        return [c.strip() for c in body[1:-1].split("|")]
    return [c.strip().replace("\\|", "|") for c in _UNESCAPED_BAR.split(body[1:-1])]


def is_separator(cells: list[str]) -> bool:
    # The first character settles most lines (every data row) without the regex.
    return cells[0][:1] in ("-", ":") and all(_SEPARATOR_CELL.fullmatch(c) for c in cells)


def is_header(cells: list[str]) -> bool:
    """`| Topic | Reference Path |`: the index's header row, even when no |---| follows."""
    return cells[0].lower() == "topic" and cells[1].lower().startswith("ref")


def comment_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines inside `<!-- ... -->` blocks that start a line (a row written
    inside one is commented out, not read)."""
    out: set[int] = set()
    inside = False
    for n, line in enumerate(lines):
        body = line.strip()
        if inside or body.startswith("<!--"):
            out.add(n)
            inside = "-->" not in body
    return out


def data_rows(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(line index, cells) of a section's data rows, the section's heading at index 0: not
    separators, not a header row (the row followed by a |---| line, or `| Topic | Ref... |`),
    not inside an HTML comment, at least two cells, a non-empty first cell and a non-empty
    path. This is THE rule for an index row."""
    cells_by_line = [split_row(line) for line in lines]
    # Each line's separator test once (a row is also tested as the line after another).
    seps = [cells is not None and is_separator(cells) for cells in cells_by_line]
    seps.append(False)
    comments = comment_lines(lines) if any("<!--" in line for line in lines) else set()
    out = []
    for n in range(1, len(lines)):
        cells = cells_by_line[n]
        if not cells or len(cells) < 2 or seps[n] or not cells[0] or seps[n + 1]:
            continue
        if not cells[1].strip("`").strip() or is_header(cells) or n in comments:
            continue
        out.append((n, cells))
    return out


def malformed_rows(lines: list[str], rows: set[int] | None = None) -> list[tuple[int, str]]:
    """(line index, text) of lines that start with "|" but that `data_rows` cannot read as
    a row, a separator or a header: the table lines the post-story check reports. `rows`:
    the line indexes of `data_rows(lines)`, when the caller has them."""
    if rows is None:
        rows = {n for n, _ in data_rows(lines)}
    comments = comment_lines(lines) if any("<!--" in line for line in lines) else set()
    out = []
    for n in range(1, len(lines)):
        body = lines[n].strip()
        if not body.startswith("|") or n in rows or n in comments:
            continue
        cells = split_row(lines[n])
        if cells is not None and (is_separator(cells) or _is_header_line(cells, n, lines)):
            continue
        out.append((n, body))
    return out


NOT_A_ROW = "a line inside the table is not a table row"
NO_SEPARATOR = "the table has no header separator line (|---|---|)"
AFTER_TABLE = (
    "a table row after the end of the table (a blank line or text ends a markdown table), "
    "so `ralph run` does not read it"
)


def table_problems(lines: list[str], table_end: int | None = None) -> list[tuple[int, str]]:
    """(line index, why) for each line of a table section (heading at index 0) that is not
    part of a well-formed `| topic | path |` table, by the `data_rows` rule: what `ralph
    check` reports. Lines from `table_end` on follow the table (its blank line, notes): a
    row there is not read. Blank lines, `---` rules and HTML comments are never problems."""
    rows = dict(data_rows(lines))
    comments = comment_lines(lines)
    end = len(lines) if table_end is None else table_end
    seen_sep = False
    out: list[tuple[int, str]] = []
    for n in range(1, len(lines)):
        body = lines[n].strip()
        if n in comments or not body or body == "---":
            continue
        cells = split_row(body)
        if n >= end:
            out.append((n, AFTER_TABLE if body.startswith("|") else NOT_A_ROW))
        elif cells is None:
            out.append((n, NOT_A_ROW))
        elif is_separator(cells):
            seen_sep = True
        elif n in rows:
            if len(cells) != 2:
                out.append((n, f"a row needs exactly 2 cells (topic, path), found {cells}"))
            if not seen_sep:
                out.append((n, NO_SEPARATOR))
                seen_sep = True
        elif not _is_header_line(cells, n, lines):
            out.append((n, f"a row needs exactly 2 cells (topic, path), found {cells}"))
    return out


def _is_header_line(cells: list[str], n: int, lines: list[str]) -> bool:
    if len(cells) >= 2 and is_header(cells):
        return True
    nxt = split_row(lines[n + 1]) if n + 1 < len(lines) else None
    return bool(nxt and is_separator(nxt))


# A story's tag (`[US-003]`, `[2026-01-05]`, `[entry 7]`): at most 80 characters, a letter or
# digit, and a digit or hyphen among them, so a task box (`[x]`, `[-]`) or a word (`[gotcha]`)
# is no tag. The one definition: ranking groups items by it, the prompt lifts it out of them.
STORY_TAG = r"\[(?=[^\]\n]*[A-Za-z0-9])(?=[^\]\n]*[\d-])[^\]\n]{1,80}\]"
_MARKER = r"[ \t]*(?:[-*+]|\d+[.)])[ \t]+"
# A list item opening with a story's tag (`- [US-003] ...`, `1. [2026-01-05] ...`), and one
# whose tag is followed by text on its line (the prompt lifts only that one out).
_ITEM_TAG = re.compile(rf"^({_MARKER})({STORY_TAG})")
_LEAD_TAG = re.compile(rf"^({_MARKER})({STORY_TAG})[ \t]+(?=\S)")
# A tag alone on its line: how the prompt shows a run of one story's items (select.render).
_TAG_LINE = re.compile(rf"^[ \t]*({STORY_TAG})[ \t]*$")


def is_story_tag(text: str) -> bool:
    return re.fullmatch(STORY_TAG, text) is not None


def item_tag(text: str) -> str:
    """The story tag a list item opens with, or ""."""
    m = _ITEM_TAG.match(text)
    return m.group(2) if m else ""


def tag_line(line: str) -> str:
    """The story tag a line holds and nothing else, or "". An agent that copies the
    prompt's compact form into a reference writes its items under such a line."""
    m = _TAG_LINE.match(line.rstrip("\r\n"))
    return m.group(1) if m else ""


def without_marker(item: str) -> str:
    """A list item's text after its marker (`- `, `1. `), or the text as it is."""
    m = re.match(_MARKER, item)
    return item[m.end() :] if m else item


def with_tag(item: str, tag: str) -> str:
    """A list item with `tag` put after its marker, unless it opens with a tag already."""
    m = re.match(_MARKER, item)
    if not tag or not m or item_tag(item):
        return item
    return item[: m.end()] + tag + " " + item[m.end() :]


def split_story_tag(text: str) -> tuple[str, str]:
    """(the story tag a list item opens with, the item without it), or ("", the item)."""
    m = _LEAD_TAG.match(text)
    return (m.group(2), m.group(1) + text[m.end() :]) if m else ("", text)
