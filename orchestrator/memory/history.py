"""Repairing progress.txt after an agent deleted or rewrote part of its history.

The log is compared section by section (a section starts at a "## " heading; the text
before the first one is the header), because matching single lines across the whole file
pairs up look-alike lines of different entries ("- **Learnings for future iterations:**",
"---") and would splice a new entry into an old one. Then:

- a section found unchanged in the new text is kept as the agent left it;
- the Progress Index section may change freely (it is the one part agents edit in place),
  unless the new text has no index at all: then the old one is history like any other;
- a section whose heading is still there but whose body changed is merged line by line:
  old lines the agent removed are put back just before what replaced them, lines it added
  stay (a new Codebase Patterns bullet is an addition, not a loss);
- a section that is gone is put back where it was; new sections follow in their order.

Whitespace at line ends, blank lines and separator lines ("---") alone are not history.
"""

from __future__ import annotations

import difflib

from orchestrator.memory.markdown import SECTION_START, section_starts, split_lines
from orchestrator.memory.progress import INDEX_HEADING_LINE

_HEADER_KEY = "\0header"


def trivial(line: str) -> bool:
    return line.strip() in ("", "---", "***", "___")


def sections(text: str) -> list[list[str]]:
    """The header, then one list of lines per "## " section (outside code fences)."""
    out: list[list[str]] = [[]]
    all_lines = split_lines(text)
    starts = set(section_starts(all_lines))
    for i, line in enumerate(all_lines):
        if i in starts:
            out.append([])
        out[-1].append(line)
    return out


def _key(section: list[str], n: int) -> str:
    return (
        _HEADER_KEY
        if n == 0 and not SECTION_START.match(section[0] if section else "")
        else (section[0].rstrip() if section else "")
    )


def _is_index(section: list[str]) -> bool:
    return bool(section) and bool(INDEX_HEADING_LINE.match(section[0].strip()))


def merge_lines(old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """Merge one section: (new lines with removed old lines put back, the lost lines)."""
    matcher = difflib.SequenceMatcher(
        None, [x.rstrip() for x in old], [x.rstrip() for x in new], autojunk=False
    )
    out: list[str] = []
    lost: list[str] = []
    i = j = 0
    for block in matcher.get_matching_blocks():
        removed = old[i : block.a]
        lost += [x for x in removed if not trivial(x)]
        out += removed + new[j : block.b] + new[block.b : block.b + block.size]
        i, j = block.a + block.size, block.b + block.size
    return out, lost


class _Merge:
    def __init__(self, old: str, new: str) -> None:
        self.a = sections(old)
        self.b = sections(new)
        self.new_has_index = any(_is_index(s) for s in self.b)
        self.out: list[list[str]] = []
        self.lost: list[str] = []

    def run(self) -> None:
        keys_a = ["".join(x.rstrip() + "\n" for x in s) for s in self.a]
        keys_b = ["".join(x.rstrip() + "\n" for x in s) for s in self.b]
        matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag in ("equal", "insert"):
                self.out += self.b[j1:j2]
            else:
                self._changed(range(i1, i2), list(range(j1, j2)))

    def _changed(self, olds: range, news: list[int]) -> None:
        unpaired = list(news)
        for i in olds:
            section = self.a[i]
            if _is_index(section) and self.new_has_index:
                # The agent's index goes where the old one was.
                idx = next((j for j in unpaired if _is_index(self.b[j])), None)
                if idx is not None:
                    unpaired.remove(idx)
                    self.out.append(self.b[idx])
                continue
            key = _key(section, i)
            pair = next((j for j in unpaired if _key(self.b[j], j) == key), None)
            if pair is None:
                self.lost += [x for x in section if not trivial(x)]
                self.out.append(section)
                continue
            unpaired.remove(pair)
            merged, lost = merge_lines(section, self.b[pair])
            self.lost += lost
            self.out.append(merged if lost else self.b[pair])
        self.out += [self.b[j] for j in unpaired]


def merge_history(old: str, new: str) -> tuple[str, list[str]]:
    """(old history with the agent's new material kept, the old lines the new text lost).

    When nothing was lost the first item is `new` unchanged.
    """
    if new.startswith(old):
        return new, []
    merge = _Merge(old, new)
    merge.run()
    if not merge.lost:
        return new, []
    flat = [line for section in merge.out for line in section]
    nl = "\r\n" if "\r\n" in new else "\n"
    # A section restored from the old end of file may lack its final newline.
    fixed = [x if x.endswith("\n") or n == len(flat) - 1 else x + nl for n, x in enumerate(flat)]
    return "".join(fixed), merge.lost
