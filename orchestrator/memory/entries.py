"""The entry vocabulary of a Ralph log: story ids, dates, files changed, learning lines.

progress.txt entries come in every shape real agents write ("## 2026-01-01 - US-001",
"[2026-01-01 10:00] Story 3:", "- US-004: Complete. ..."), so one set of rules reads them
for every part of memory/ and upkeep/: where an entry starts (`split_blocks`), which
stories it is about (`story_ids`), which files it names (`files_changed`, `paths_in`), and
which of its lines are learnings (`learning_lines`), each kept verbatim as an `Item`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator import tokens
from orchestrator.memory.markdown import Fences, section_starts
from orchestrator.memory.progress import HISTORY_HEADING, INDEX_HEADING
from orchestrator.memory.vocab import extract_files, looks_like_entry

_BRACKET_ENTRY = re.compile(r"(?i)^\[[^\]]{6,40}\]\s*(task|story|feature|iteration)\b\s*[:#-]")


DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


ID = re.compile(
    r"(?<![\w.-])([A-Za-z][A-Za-z0-9]{0,9}-\d+[a-z0-9]*(?:\.\d+)*|[A-Z]{1,5}\d{2,}(?:\.\d+)*)"
    r"(?![\w-])"
)


_LEAD_ID = re.compile(r"^\s*([A-Za-z][\w.]*(?:-[\w.]+)+)\s*(?:\s[-:—–]\s|:|$)")


_ENTRY_WORD = re.compile(r"(?i)\b(iteration|session|story|task|feature|sprint|step)\s*#?\s*\d")


STORY_FIELD = re.compile(r"(?i)^\W*story\W*[:\s]\s*\**\s*([\w.-]*\d[\w.-]*)")


_KW = (
    r"(?:key\s+)?(?:learnings?|lessons?(?: learned)?|gotchas?|patterns? discovered"
    r"|notes? for (?:future|(?:the )?next)[^:\n]*|decisions?)\b"
)


_LEARN_MARK = re.compile(
    rf"(?i)^\s*(?:(?:[-*]\s*)?(?:\*\*|__)?\s*{_KW}[^:\n]{{0,40}}:"
    rf"|#{{2,5}}\s*{_KW}[^:\n]{{0,40}}$|(?:[-*]\s*)?\*\*\s*{_KW}[^*\n]{{0,40}}\*\*\s*$)"
)


_LEARN_INLINE = re.compile(r"(?i)^\s*[-*]\s*(?:\*\*)?(lesson|learning|gotcha|note)(?:\*\*)?\s*:")


FILES_LINE = re.compile(
    r"(?i)^\s*(?:[-*]\s*)?(?:\*\*)?\s*(?:files?(?: changed| modified| touched| created| updated)?"
    r"|changed files|key files)\s*(?:\*\*)?\s*:(?:\*\*)?(.*)$"
)


META = re.compile(
    r"(?i)^\s*(?:[-*]\s*)?(?:\*\*)?\s*(status|commit|thread|tests?|duration|iteration|story)\s*(?:\*\*)?\s*:"
)


BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")


_EXT = (
    "ts|tsx|js|jsx|mjs|cjs|py|go|rs|rb|java|kt|kts|swift|cs|cpp|cc|c|h|hpp|css|scss|sass|less|"
    "json|jsonl|md|mdx|yml|yaml|toml|ini|sql|vue|svelte|astro|html|erb|haml|sh|bash|php|prisma|"
    "graphql|gql|proto|tf|lua|ex|exs|dart|scala|xml|gradle|lock|txt|env|csv|ipynb|razor|cshtml"
)


_PATH = re.compile(
    rf"(?<![\w@/.-])((?:[\w.-]+/)+[\w.*-]+(?:\.(?:{_EXT}))?/?|[\w.-]+\.(?:{_EXT}))(?![\w/])"
)


_ID_BULLET = re.compile(r"^[-*]\s+\**\s*([A-Za-z][\w.]*-\d+[\w.]*)\**\s*(?:[:—–]|\s-\s)")


_RUN = re.compile(r"[\w./-]+")  # "/": ids like API/006 (each part is tried too)


@dataclass
class Item:
    """One learning (a bullet with its continuation lines, or a paragraph), kept verbatim."""

    lines: list[str]
    source: str  # provenance: story id(s), a date, "patterns" or "entry N"
    files: list[str]
    order: int
    tokens: int = 0
    # Where it applies when its text names no path: the entry's "Files changed" (shown
    # as a files suffix).
    applies: list[str] = field(default_factory=list)
    suffix: int = 0  # tokens of its story's line under "## Files by story"

    @property
    def says_files(self) -> bool:
        return bool(suffix_files(self.applies))

    def render(self, files: bool = True) -> str:
        """The learning as a tagged bullet, its text verbatim; `files=False` leaves out the
        files suffix (the bullet before it, from the same entry, already says them)."""
        first = self.lines[0]
        indent = len(first) - len(first.lstrip())
        head = BULLET.sub("", first, count=1).strip()
        rest = [("  " + ln[indent:] if ln[:indent].strip() == "" else ln) for ln in self.lines[1:]]
        out = "\n".join([f"- [{self.source}] {head}", *rest]).rstrip()
        if not (files and self.says_files):
            return out
        # After the learning's last word, or on a line of its own after a code block or a
        # heading, so the learning's own text stays in one piece.
        last = out.rsplit("\n", 1)[-1].strip()
        if len(self.lines) == 1 and not last.startswith(("```", "~~~", "#")):
            return out + files_suffix(self.applies)
        return out + "\n " + files_suffix(self.applies)


# Where a learning applies, when its text names no path: the entry's "Files changed",
# either at the end of its bullet, `- [US-003] text (files: a.ts, b.ts)` (the agent's
# template asks for this), or, as `ralph migrate` writes them, once per story in a section
# after the learnings (the bullets keep only the learning's words):
#     ## Files by story
#     - US-003: a.ts, b.ts
# A learning that names paths already says where it applies.
FILES_BY_STORY = "## Files by story"
FILES_BY_STORY_LINE = re.compile(r"^[-*]\s+([^:\s][^:]*):\s+(.+)$")
FILES_SUFFIX = re.compile(r"\s\(files: ([^()]*)\)\s*$")
SUFFIX_FILES = 1  # the first of the entry's "Files changed": more cost topics splits, and recall


def suffix_files(files: list[str]) -> list[str]:
    """The paths a suffix can show: none that would end it early or split it."""
    return [f for f in files if f and not set(f) & set("(),")][:SUFFIX_FILES]


def files_suffix(files: list[str]) -> str:
    return f" (files: {', '.join(suffix_files(files))})"


def learning_files(line: str) -> list[str]:
    """The files a learning's bullet line applies to: its `(files: ...)` suffix, else the
    paths its text names."""
    m = FILES_SUFFIX.search(line)
    if m:
        return [f.strip() for f in m.group(1).split(",") if f.strip()]
    return paths_in(line)


def files_by_story(reference: str) -> dict[str, list[str]]:
    """{story tag: files} from a reference's "## Files by story" section."""
    out: dict[str, list[str]] = {}
    inside = False
    for ln in text_lines(reference):
        if ln.startswith("## "):
            inside = ln.strip() == FILES_BY_STORY
            continue
        m = FILES_BY_STORY_LINE.match(ln.strip()) if inside else None
        if m:
            out[m.group(1).strip()] = [f.strip() for f in m.group(2).split(",") if f.strip()]
    return out


@dataclass
class Block:
    heading: str
    body: list[str]
    kind: str  # "patterns" | "story" | "note" | "aside" | "index"
    story_ids: list[str] = field(default_factory=list)
    date: str | None = None
    files: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # its "Files changed" list


def text_lines(text: str) -> list[str]:
    return text.split("\n")


def split_blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Header lines, then (heading, body lines) blocks. `## ` headings when there are any;
    otherwise paragraphs starting at column 0 (bracketed logs, list-style logs)."""
    lines = text_lines(text)
    starts = section_starts(lines)
    if not starts:
        starts = _paragraph_starts(lines)
    if not starts:
        return lines, []
    blocks = []
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        blocks.append((lines[s], lines[s + 1 : end]))
    return lines[: starts[0]], blocks


def _paragraph_starts(lines: list[str]) -> list[int]:
    starts: list[int] = []
    for i, ln in enumerate(lines):
        if not ln.strip() or ln[0].isspace():
            continue
        after_blank = i == 0 or not lines[i - 1].strip()
        if after_blank or _BRACKET_ENTRY.match(ln):
            starts.append(i)
    # Leading short title paragraphs (no id, no list) are the header, not entries.
    while starts and _looks_like_header(lines, starts):
        starts.pop(0)
    return starts


def _looks_like_header(lines: list[str], starts: list[int]) -> bool:
    s = starts[0]
    end = starts[1] if len(starts) > 1 else len(lines)
    para = [ln for ln in lines[s:end] if ln.strip()]
    return (
        len(para) <= 3
        and not any(BULLET.match(ln) for ln in para)
        and not ID.search(" ".join(para))
        and not _BRACKET_ENTRY.match(para[0])
    )


def known_in(text: str, known: dict[str, int]) -> list[str]:
    """The known story ids `text` mentions as whole tokens, in `known`'s order. An id starts
    a run of id characters and ends it, or ends before a "." that no digit follows ("US-1."
    at a sentence's end, not "US-1.2"): each run's candidates are looked up, not each id
    searched for (a 3,000-story prd made that quadratic)."""
    hits: set[str] = set()
    for m in _RUN.finditer(text):
        for run in dict.fromkeys([m.group(0), *m.group(0).split("/")]):
            if run in known:
                hits.add(run)
            for k, ch in enumerate(run):
                sentence_end = ch == "." and not (k + 1 < len(run) and run[k + 1].isdigit())
                if sentence_end and run[:k] in known:
                    hits.add(run[:k])
    return sorted(hits, key=known.__getitem__)


def story_ids(heading: str, body: list[str], known: dict[str, int]) -> list[str]:
    head = re.sub(r"^#+\s*", "", heading)
    probe = [head, *[ln for ln in body[:4] if STORY_FIELD.match(ln)]]
    found: list[str] = []
    for text in probe:
        found.extend(sid for sid in known_in(text, known) if sid not in found)
    if found:
        return found
    # A leading id token ("CD-62r.1 - ...", "scorched-earth-33s - ...") wins over the
    # pieces of it the generic pattern would find.
    head_wo_date = re.sub(r"^\[[^\]]*\]\s*", "", head)
    head_wo_date = re.sub(r"(?i)^(story|task|feature)\s*[:#]\s*", "", head_wo_date)
    m = _LEAD_ID.match(head_wo_date)
    lead = [m.group(1)] if m and len(m.group(1)) <= 32 else []
    ids = [i for i in ID.findall(head) if not any(i in x for x in lead)]
    if lead or ids:
        return list(dict.fromkeys(lead + ids))
    for ln in probe[1:]:
        m2 = STORY_FIELD.match(ln)
        if m2:
            return [m2.group(1)]
    return []


# Terminal colour codes in pasted test output (`\x1b[32m`): not text a learning or a path has.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def paths_in(text: str) -> list[str]:
    """File paths a text mentions (normalised, in order, no duplicates)."""
    out: list[str] = []
    for raw in _PATH.findall(ANSI.sub("", text)):
        p = raw.strip("`'\"()[],;").removeprefix("./").lstrip("/")
        p = re.sub(r":\d+(?::\d+)?$", "", p)
        if not p or p.startswith(("http", "www.", "@", "..")) or "//" in p or "/../" in p:
            continue
        last = p.rstrip("/").rsplit("/", 1)[-1]
        if not p.endswith("/") and not re.search(rf"\.(?:{_EXT})$", last):
            continue
        if re.fullmatch(r"[\d.]+", last) or re.fullmatch(r"v?\d+(\.\d+)+", p):
            continue
        if p not in out:
            out.append(p)
    return out


def files_changed(body: list[str]) -> list[str]:
    """The paths an entry's "Files changed" (or "Files:", "### Files Changed", a label with a
    list under it) names: the one reading progress.txt's model uses."""
    return extract_files("\n".join(body))


def classify(heading: str, body: list[str], known: dict[str, int], seen_story: bool) -> Block:
    title = heading.lower()
    if title.startswith("## codebase patterns"):
        return Block(heading, body, "patterns")
    if title.strip() in (INDEX_HEADING.lower(), HISTORY_HEADING.lower()):
        return Block(heading, body, "index")
    ids = story_ids(heading, body, known)
    m = DATE.search(heading) or DATE.search("\n".join(body[:3]))
    text = "\n".join([heading, *body])
    entry_like = bool(
        ids
        or DATE.search(heading)
        or _ENTRY_WORD.search(heading)
        or any(_LEARN_MARK.match(ln) for ln in body)
    )
    # A story is an entry as every reader counts one (an id, or a heading that
    # vocab.looks_like_entry accepts). A section that only reads like one (a "Learnings:"
    # list) or comes after the first story (`## Notes`) is an *aside*: its learnings move
    # into topics like a story's, but it is not an entry. Before any of those: a note.
    if ids or looks_like_entry(heading):
        kind = "story"
    else:
        kind = "aside" if seen_story or entry_like else "note"
    changed = files_changed(body)
    files = list(dict.fromkeys(changed + paths_in(text)))
    return Block(heading, body, kind, ids, m.group(1) if m else None, files, changed)


def explode(block: Block) -> list[Block]:
    """A section without a story id whose top-level bullets start with ids ("- US-001:
    Complete. ...") is a log kept as a list: one story block per such bullet."""
    if block.story_ids or block.kind not in ("note", "story", "aside"):
        return [block]
    groups = group_items(block.body)
    hits = [(g, hit) for g in groups if indent(g[0]) == 0 and (hit := _ID_BULLET.match(g[0]))]
    if len(hits) < 2:
        return [block]
    hit_ids = {id(g) for g, _ in hits}
    rest = [ln for g in groups if id(g) not in hit_ids for ln in g]
    out = [Block(block.heading, rest, block.kind)] if rest else []
    for g, bullet in hits:
        text = "\n".join(g)
        m = DATE.search(text)
        out.append(
            Block(
                "",
                g,
                "story",
                [bullet.group(1)],
                m.group(1) if m else None,
                paths_in(text),
            )
        )
    return out


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def group_items(lines: list[str]) -> list[list[str]]:
    """Bullets with their deeper-indented continuation lines; paragraphs of plain lines."""
    groups: list[list[str]] = []
    base: int | None = None  # indent of the open group's first line; None after a blank
    fences = Fences()
    for ln in lines:
        # A code block belongs to the item above it, blank lines and column 0 included.
        was_open = bool(fences.marker)
        fences.feed(ln)
        if groups and (was_open or (fences.marker and base is not None)):
            groups[-1].append(ln)
            continue
        if not ln.strip() or ln.strip() in ("---", "***"):
            base = None
            continue
        bullet = BULLET.match(ln)
        if groups and base is not None and (indent(ln) > base or not bullet):
            groups[-1].append(ln)
            continue
        groups.append([ln])
        base = indent(ln)
    return groups


def _marked_block(body: list[str], i: int) -> tuple[list[str], int]:
    """The lines a learnings marker at body[i] governs, and the index after them."""
    marker = body[i]
    m_ind = indent(marker)
    picked = [marker] if _LEARN_MARK.sub("", marker).strip(" *_") else []
    nonblank = [ln for ln in body[i + 1 :] if ln.strip()]
    item_ind = indent(nonblank[0]) if nonblank else m_ind + 2
    j = i + 1
    fences = Fences()
    while j < len(body):
        nxt = body[j]
        inside = bool(fences.marker)
        if fences.feed(nxt) == "open" or inside:
            picked.append(nxt)  # a code block stays with the learning it illustrates
            j += 1
            continue
        if nxt.strip():
            ind = indent(nxt)
            if ind <= m_ind and (item_ind > m_ind or not BULLET.match(nxt)):
                break
            if nxt.strip() in ("---", "***") or (ind <= m_ind and nxt.startswith("#")):
                break
            if ind <= m_ind and (FILES_LINE.match(nxt) or META.match(nxt)):
                break
        picked.append(nxt)
        j += 1
    return picked, j


def learning_lines(body: list[str]) -> tuple[list[str], bool]:
    """The lines under learnings markers (explicit=True), else the whole body minus metadata.
    Terminal colour codes are dropped (the archive keeps the log as it was)."""
    body = [ANSI.sub("", ln) for ln in body]
    picked: list[str] = []
    i = 0
    while i < len(body):
        if _LEARN_MARK.match(body[i]):
            lines, i = _marked_block(body, i)
            picked.extend(lines)
            continue
        if _LEARN_INLINE.match(body[i]):
            ind = indent(body[i])
            picked.append(body[i])
            while i + 1 < len(body) and body[i + 1].strip() and indent(body[i + 1]) > ind:
                i += 1
                picked.append(body[i])
        i += 1
    if any(p.strip() for p in picked):
        return picked, True
    # Session banners ("# Ralph Session ...") and metadata are structure, not knowledge.
    return [
        ln
        for ln in _without_file_lists(body)
        if not (META.match(ln) or FILES_LINE.match(ln) or ln.startswith("# "))
    ], False


_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+`?([^\s`]+)")


def _without_file_lists(body: list[str]) -> list[str]:
    """The body without the list under a bare "Files changed:"/"**Files:**" label: its
    lines name paths (`- src/a.ts (new)`), they are not learnings."""
    out: list[str] = []
    in_list = False
    for ln in body:
        label = FILES_LINE.match(ln)
        if label:
            in_list = not label.group(1).strip(" *`")
        elif in_list and ln.strip():
            item = _LIST_ITEM.match(ln)
            if item and paths_in(item.group(1)):
                continue
            in_list = False
        elif in_list:
            continue  # a blank line between the label and its list
        out.append(ln)
    return out


def split_big(group: list[str], limit: int) -> list[list[str]]:
    """Cut an oversized item at line boundaries so no reference has to exceed the cap."""
    joined = "\n".join(group)
    # A token is at least one byte: short groups cannot be over the limit (no counting).
    if len(joined.encode("utf-8", "surrogateescape")) <= limit or tokens.count(joined) <= limit:
        return [group]
    out: list[list[str]] = [[]]
    used = 0
    for ln in group:
        t = tokens.count(ln) + 1
        if out[-1] and used + t > limit:
            out.append([])
            used = 0
        out[-1].append(ln)
        used += t
    return out


def items_of(block: Block, lines: list[str], source: str, order: int, cap: int) -> list[Item]:
    items: list[Item] = []
    fallback = block.files
    for group in group_items(lines):
        for part in split_big(group, cap // 3):
            own = paths_in("\n".join(part))
            where = [] if own else block.changed
            items.append(Item(part, source, own or fallback, order + len(items), applies=where))
    count_tokens(items)
    return items


def count_tokens(items: list[Item]) -> None:
    """Each item's size in a reference: its bullet (`tokens`), and apart from it the line
    its story gets under "## Files by story" (`suffix`), which `rendered_tokens` adds once
    per story of a topic."""
    for it in items:
        it.tokens = tokens.count(it.render(files=False)) + 1
        files = ", ".join(suffix_files(it.applies))
        it.suffix = tokens.count(f"- {it.source}: {files}") + 1 if it.says_files else 0


def rendered_tokens(items: list[Item]) -> int:
    """What `items` cost side by side in one reference, with their "## Files by story"."""
    stories = {it.source: it.suffix for it in items if it.suffix}
    footer = sum(stories.values()) + (_FOOTER_HEAD if stories else 0)
    return sum(it.tokens for it in items) + footer


_FOOTER_HEAD = 8  # the section's heading and blank line


def source(block: Block, n: int) -> str:
    if block.story_ids:
        return ",".join(block.story_ids[:3])
    return block.date or f"entry {n}"


def bullet_key(line: str) -> str:
    return BULLET.sub("", line.strip() + " ", count=1).strip() if line.strip() else ""


def line_keys(text: str) -> set[str]:
    """Every form under which an original line can be found in rendered text: the line
    stripped, without its bullet marker, and without the provenance tag and the files
    suffix we add."""
    keys: set[str] = set()
    for ln in text_lines(text):
        k = bullet_key(ln)
        for key in (k, FILES_SUFFIX.sub("", k)):
            keys.add(key)
            keys.add(re.sub(r"^\[[^\]]*\]\s*", "", key, count=1))
    return keys
