"""The words of a Ralph log entry, one vocabulary for every reader: story ids, dates, the
headings that start an entry, labelled lists ("Files changed:", "Learnings:") and the paths
and learnings in them. memory/progress.py cuts the log into entries with it; migrate's
memory/entries.py reads an entry's parts with it."""

from __future__ import annotations

import re

from orchestrator.memory.markdown import split_lines

# ---------------------------------------------------------------------------------------
# Reading entries. Headings seen in real logs: "2026-01-13 23:48 - US-001",
# "US-001: title", "2026-01-30 - T006, T007", "CD-sux - title" (beads), "Iteration 3 - ...",
# "Session 1: 2026-02-03", "[Sat Jan 10 13:30] - US-001", "TASK-001: title (2026-03-24)".

_ID = re.compile(
    r"(?<![\w.-])(?:[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*-\d+[A-Za-z0-9]*(?:\.\d+)*"
    r"|[A-Z]{1,5}\d{2,}(?:\.\d+)*)(?![\w-])"
)
_LEADING_ID = re.compile(r"\s*([A-Za-z][\w.]*(?:-[\w.]+)+)\s*(?:[-–—:]|$)")
_MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?(?: ?[A-Z]{2,5}\b)?)?"
    rf"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]* +(?:{_MONTHS})[a-z]* +\d{{1,2}}"
    r"(?: +\d{1,2}:\d{2}(?::\d{2})?)?(?: +[A-Z]{2,5})?(?: +\d{4})?"
)
_ENTRY_WORD = re.compile(r"\s*\[?\s*(?:iteration|session|story|task)\s*#?\s*\d", re.IGNORECASE)
# Entry starts in logs without "## " entries: "[2026-01-08 12:42] Story: US-001 - ...",
# "- [2026-01-16] Feature 1: ...", "- US-001: Complete. ..." (a bullet per story).
_DATED_START = re.compile(
    r"(?:[-*] +)?\[\d{4}-\d{2}-\d{2}[^\]]*\]\s*(?:story|task|feature|us-|[A-Z]+-\d)",
    re.IGNORECASE,
)
_ID_BULLET_START = re.compile(r"(?:[-*] +)?[A-Z][A-Z0-9]*-\d+[\w.]*\s*(?::|\s[-–—]\s)")
# "**Story**: 1.1.0 - title" in the body, when the heading ("Iteration 3 - date") has no id.
_BODY_STORY = re.compile(r"\W*(?:story|task|issue)\W*:\W*([\w][\w.-]*\d[\w.-]*)\b", re.IGNORECASE)


def extract_story_ids(heading: str) -> list[str]:
    text = re.sub(r"^#+\s*", "", heading)
    ids = [m.group(0) for m in _ID.finditer(text)]
    lead = _LEADING_ID.match(text)
    if lead and not _DATE.match(text) and lead.group(1) not in ids:
        ids.insert(0, lead.group(1))
    return list(dict.fromkeys(ids))


def extract_date(heading: str) -> str | None:
    m = _DATE.search(heading)
    return m.group(0) if m else None


def looks_like_entry(heading: str) -> bool:
    text = re.sub(r"^#+\s*", "", heading)
    # The date first: most entry headings have one, and it is the cheapest test.
    return bool(_DATE.search(text) or extract_story_ids(text) or _ENTRY_WORD.match(text))


def body_story_ids(text: str) -> list[str]:
    for line in split_lines(text)[1:6]:
        m = _BODY_STORY.match(line)
        if m:
            return [m.group(1).rstrip(".")]
    return []


def fallback_entry_starts(lines: list[str], strict: bool = False) -> list[int]:
    """Line numbers where a "[date] Story: ..." style entry starts, in logs without "## "."""
    return [
        i
        for i, line in enumerate(lines)
        if _DATED_START.match(line) or (not strict and _ID_BULLET_START.match(line))
    ]


_FILES_LABEL = re.compile(
    r"(?:files?(?:[ _](?:changed|modified|created|touched|updated|added))?|file modificati)\b",
    re.IGNORECASE,
)
_LEARN_LABEL = re.compile(
    r"(?:key )?learnings?\b(?: for future iterations)?|lessons? learned|gotchas"
    r"|notes? for (?:the )?next (?:developer|person|iteration)s?|note per il prossimo",
    re.IGNORECASE,
)
_BULLET = re.compile(r"(\s*)(?:[-*+]|\d+[.)])\s+(.*)")
# A file path: a name with an extension, optionally in folders, or a folder ending in "/".
# A "*" is a glob ("db/sql/*.sql"), which names files too; a leading "." a dot-file.
_EXT_PATH = re.compile(
    r"(?:[\w@~.+\[\]()*-]+/)*\.?[\w@~+\[\]()*-][\w@~.+\[\]()*-]*\.[A-Za-z]\w{0,7}"
)
_DIR_PATH = re.compile(r"(?:[\w@~.+\[\]()-]+/)+")
# A dot-file with no extension (".prettierrc"): a path only where a list item starts with
# it or backticks hold it; in prose ".map" is a method.
_DOT_FILE = re.compile(r"(?:[\w@~.+\[\]()-]+/)*\.[A-Za-z][\w-]*")
# One leading path: "`a.ts`", "a.ts (new)", "a.ts: what changed", "a.ts - what changed".
# The note in parentheses may hold calls of its own ("(added `publish()`)").
_LEAD = re.compile(
    r"\s*(?:\*\*)?(?:`(?P<ticked>[^`,;:]+ [^`,;:]*)`|`?(?P<bare>[^\s`,;:]+?)`?)(?:\*\*)?\s*"
    r"(?:\((?:[^()]|\([^()]*\))*\))?\s*"
    r"(?P<tail>(?::|[-–—]\s).*)?$",
    re.DOTALL,
)
_SLASHED = re.compile(r"[\w@~.+-]*(?:/[\w@~.+\[\]()*-]+)+/?")


_LABEL_LEAD = re.compile(r"(\s*)([-*+] +)?(#{1,6} +)?(\*\*|__)?")
_LABEL_TAIL = re.compile(r"\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?|\s*(?:\*\*|__)\s*$|\s*$")


def _label(line: str, label: re.Pattern[str]) -> tuple[int, bool, str] | None:
    """(indent, is_bullet, inline rest) if the line is `label:` as bullet, bold or heading."""
    m = _LABEL_LEAD.match(line)
    assert m  # every part is optional
    rest = line[m.end() :]
    lm = label.match(rest)
    if not lm:
        return None
    tail = rest[lm.end() :]
    tm = _LABEL_TAIL.match(tail)
    if not tm or (not m.group(3) and ":" not in tail[: tm.end()] and tail.strip()):
        return None
    if not m.group(3) and ":" not in tail[: tm.end()] and not (m.group(2) or m.group(4)):
        # "Files" alone counts as a heading ("### Files Changed"), a bullet or bold text
        # ("- Files changed" over its list), never as the start of a sentence.
        return None
    return len(m.group(1)), bool(m.group(2)), tail[tm.end() :].strip()


def _labelled_items(text: str, label: re.Pattern[str]) -> list[str]:
    """Items under each `label:` line: its inline text and the bullets nested below it."""
    return [item for found in _label_lists(text, label) for _, item in found]


def _label_lists(text: str, label: re.Pattern[str]) -> list[list[tuple[int, str]]]:
    """Per `label:` line, its items as (indent, text): the inline text (indent -1), then
    each bullet below it, a deeper one included."""
    lists: list[list[tuple[int, str]]] = []
    lines = [line.rstrip("\r\n") for line in split_lines(text)]
    i = 0
    while i < len(lines):
        found = _label(lines[i], label)
        i += 1
        if not found:
            continue
        indent, is_bullet, inline = found
        items: list[tuple[int, str]] = [(-1, inline)] if inline else []
        lists.append(items)
        got = False
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                # A blank line ends the list unless the list goes on after it; right after
                # a bare label ("### Files Changed" + blank) the list has yet to start.
                nxt = next((x for x in lines[i + 1 :] if x.strip()), "")
                if (got and not _continues(nxt, indent, is_bullet)) or (inline and not got):
                    break
                i += 1
                continue
            b = _BULLET.match(line)
            deeper = len(line) - len(line.lstrip())
            if b and _continues(line, indent, is_bullet):
                if _label(line, _FILES_LABEL) or _label(line, _LEARN_LABEL):
                    break
                items.append((deeper, b.group(2).rstrip()))
                got = True
            elif got and not b and deeper > indent:
                at, last = items[-1]
                items[-1] = (at, last + "\n" + line.strip())  # a wrapped bullet continues
            else:
                break
            i += 1
    return lists


def _continues(line: str, indent: int, label_is_bullet: bool) -> bool:
    """Is `line` an item of the list under a label at `indent`?"""
    if not _BULLET.match(line):
        return False
    deeper = len(line) - len(line.lstrip())
    return deeper > indent or (not label_is_bullet and deeper >= indent)


def extract_learnings(text: str) -> list[str]:
    return _labelled_items(text, _LEARN_LABEL)


def _paths_in(item: str) -> list[str]:
    """Paths named by one "files changed" item: the leading run of comma-separated paths
    ("src/a.ts, b.ts: did x", "`a.ts` (new)"), else every backticked path, else every bare
    token that is unmistakably a file (has an extension) or a folder (ends with "/")."""
    leading: list[str] = []
    for piece in _pieces(item.rstrip().removesuffix(".")):  # "a.ts, b.ts." is a sentence
        m = _LEAD.match(piece)
        path = _lead_path(m) if m else None
        if m is None or path is None:
            break
        leading.append(path)
        if m.group("tail"):
            break  # "a.ts: did x, y" - the rest is prose
    if leading:
        return leading
    ticked = [t.strip() for t in re.findall(r"`([^`]+)`", item)]
    # In prose a backticked ".then" is a method: a dot-file counts only leading an item.
    found = [t for t in ticked if _EXT_PATH.fullmatch(t) or _SLASHED.fullmatch(t)]
    if found:
        return found
    bare = [t.strip("*:'\"()").rstrip(".") for t in re.split(r"[\s,;]+", item)]
    return [t for t in bare if _EXT_PATH.fullmatch(t) or _DIR_PATH.fullmatch(t)]


def _lead_path(m: re.Match[str]) -> str | None:
    """The path an item starts with, if it is one. A name with spaces counts only in
    backticks and with an extension ("`Ops runbook.md`"): a command ("`go test ./...`")
    has none."""
    spaced = m.group("ticked")
    if spaced:
        first, rest = spaced.split(" ", 1)
        if "/" in rest or first.lower() in _COMMANDS:  # `node scripts/seed.js`
            return None
        return spaced if _EXT_PATH.fullmatch(spaced.replace(" ", "_")) else None
    return m.group("bare") if _is_path(m.group("bare")) else None


# First words of a backticked command, not of a file name with spaces.
_COMMANDS = frozenset(
    "npm npx node yarn pnpm bun deno python python3 pytest pip uv bash sh zsh go cargo make "  # noqa: SIM905
    "git ruby rails bundle php composer java mvn gradle dotnet swift".split()
)


def _pieces(item: str) -> list[str]:
    """The comma-separated parts of an item, a comma inside a note in parentheses or in
    backticks not counting ("a.ts (added x, y), b.ts" is two parts)."""
    parts: list[str] = []
    depth, ticked, start = 0, False, 0
    for i, ch in enumerate(item):
        if ch == "`":
            ticked = not ticked
        elif not ticked and ch in "([":
            depth += 1
        elif not ticked and ch in ")]":
            depth = max(0, depth - 1)
        elif ch == "," and not ticked and depth == 0:
            parts.append(item[start:i])
            start = i + 1
    return [*parts, item[start:]]


def _is_path(token: str) -> bool:
    return bool(
        _EXT_PATH.fullmatch(token) or _SLASHED.fullmatch(token) or _DOT_FILE.fullmatch(token)
    )


def extract_files(text: str) -> list[str]:
    """The paths of every files list. A bullet nested under an item that named a path says
    what changed in that file ("- a.ts - new endpoint:" over "  - handles (e.g. x.pdf)"):
    its words are no paths. Under an item naming none ("- Backend:") it is one."""
    found: list[str] = []
    for items in _label_lists(text, _FILES_LABEL):
        parents: list[tuple[int, bool]] = []  # (indent, named a path) of the open items
        for indent, item in items:
            if indent < 0:  # the label's inline text: the bullets below are the label's
                found.extend(_paths_in(item))
                continue
            while parents and parents[-1][0] >= indent:
                parents.pop()
            paths = [] if parents and parents[-1][1] else _paths_in(item)
            found.extend(paths)
            # A folder ("- src/components/ (new)") does not describe its nested files.
            named = any(not p.endswith("/") for p in paths)
            parents.append((indent, named or bool(parents and parents[-1][1])))
    return list(dict.fromkeys(found))
