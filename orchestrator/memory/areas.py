"""Area references: how the index stays small when a project has many topics.

An area reference is a reference file that lists topics instead of holding learnings: a
`| Topic | Reference Path |` table, like the Progress Index itself, under a short title.
The Progress Index names the area; the area names its topics. `ralph migrate` and `ralph
compact` write them when the topics would outgrow `references.max_topics`, so the index
(which every prompt shows, and the agent reads first) stays at a few dozen rows however
long the history. One level only: a topic an area lists is never read as an area itself.

    # Billing

    Area reference: the learnings about billing are in the topics below, one file each.
    Open the ones the story needs; put a new learning in the topic it fits (add a row here
    for a new topic).

    | Topic | Reference Path |
    |---|---|
    | Invoice totals | ralph/references/billing/invoice-totals.md |
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TABLE_HEADER = "| Topic | Reference Path |"
_HEADER = re.compile(r"^\s*\|\s*topic\s*\|\s*reference path\s*\|\s*$", re.IGNORECASE)
_SEPARATOR = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|){2}\s*$")


def _cells(line: str) -> list[str] | None:
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")) or len(s) < 2:
        return None
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", s[1:-1])]


def is_area(text: str) -> bool:
    """Whether a reference's text is an area reference (it holds a topic table)."""
    if "eference" not in text:  # cheap test first: most references are learnings
        return False
    return any(_HEADER.match(ln) for ln in text.splitlines() if "eference" in ln)


def nested_rows(text: str) -> list[tuple[str, str]]:
    """(topic, path) of every row of the topic table(s) in an area reference's text."""
    if not is_area(text):
        return []
    out: list[tuple[str, str]] = []
    in_table = False
    for line in text.splitlines():
        if _HEADER.match(line):
            in_table = True
            continue
        if not in_table:
            continue
        if _SEPARATOR.match(line):
            continue
        cells = _cells(line)
        if cells is None:
            in_table = False
            continue
        if len(cells) == 2 and cells[0] and cells[1]:
            out.append((cells[0], cells[1].strip("`").strip()))
    return out


def _cell(value: str) -> str:
    return " ".join(value.split()).replace("|", "\\|")


def render(name: str, about: str, rows: Iterable[tuple[str, str]]) -> str:
    """An area reference's text: its title, what it covers, and its topics' table."""
    lines = [
        f"# {name}",
        "",
        f"Area reference: the learnings about {about} are in the topics below, one file "
        "each. Open the ones the story needs; put a new learning in the topic it fits "
        "(add a row here for a new topic).",
        "",
        TABLE_HEADER,
        "|---|---|",
        *(f"| {_cell(t)} | {p} |" for t, p in rows),
    ]
    return "\n".join(lines) + "\n"
