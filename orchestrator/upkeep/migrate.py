"""`ralph migrate`: turn a flat progress.txt into an index plus topic references, losslessly.

The pure core is `build_memory(progress_text, prd)`: it splits the log into blocks (story
entries, notes, the Codebase Patterns section), pulls out the learning items verbatim, groups
them into topics (code areas from the files each item concerns, then keyword clusters) and
renders the new progress.txt (header + index + one summary line per past story) and one
reference per topic. `plan()` / `apply()` add the file system around it: the original is
copied whole into the archive folder and every write goes through one journalled transaction.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import fsutil, tokens
from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.memory import areas as area_refs
from orchestrator.memory.markdown import section_starts
from orchestrator.memory.references import slugify
from orchestrator.project import Project
from orchestrator.upkeep.audit import SimilarIndex

if TYPE_CHECKING:
    from orchestrator.memory.prd import Prd

log = get_logger()

PATTERNS_TOPIC = "Codebase patterns"
INDEX_HEADING = "## Progress Index"
HISTORY_HEADING = "## Migrated History"
DEFAULT_MAX_TOKENS = 800  # config.references.max_tokens default
MAX_TOPICS = 24  # groups of learnings (areas of the code, then shared keywords)
# config.references.max_topics default: more reference files than this and the groups
# become area references (one index row each) listing their topics.
DEFAULT_MAX_TOPICS = 60
_FILL = 0.75  # fill references to 75% of the cap: room for the header and later appends

_BRACKET_ENTRY = re.compile(r"(?i)^\[[^\]]{6,40}\]\s*(task|story|feature|iteration)\b\s*[:#-]")
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_ID = re.compile(
    r"(?<![\w.-])([A-Za-z][A-Za-z0-9]{0,9}-\d+[a-z0-9]*(?:\.\d+)*|[A-Z]{1,5}\d{2,}(?:\.\d+)*)"
    r"(?![\w-])"
)
_LEAD_ID = re.compile(r"^\s*([A-Za-z][\w.]*(?:-[\w.]+)+)\s*(?:\s[-:—–]\s|:|$)")
_ENTRY_WORD = re.compile(r"(?i)\b(iteration|session|story|task|feature|sprint|step)\s*#?\s*\d")
_STORY_FIELD = re.compile(r"(?i)^\W*story\W*[:\s]\s*\**\s*([\w.-]*\d[\w.-]*)")
_KW = (
    r"(?:key\s+)?(?:learnings?|lessons?(?: learned)?|gotchas?|patterns? discovered"
    r"|notes? for (?:future|(?:the )?next)[^:\n]*|decisions?)\b"
)
_LEARN_MARK = re.compile(
    rf"(?i)^\s*(?:(?:[-*]\s*)?(?:\*\*|__)?\s*{_KW}[^:\n]{{0,40}}:"
    rf"|#{{2,5}}\s*{_KW}[^:\n]{{0,40}}$|(?:[-*]\s*)?\*\*\s*{_KW}[^*\n]{{0,40}}\*\*\s*$)"
)
_LEARN_INLINE = re.compile(r"(?i)^\s*[-*]\s*(?:\*\*)?(lesson|learning|gotcha|note)(?:\*\*)?\s*:")
_FILES_LINE = re.compile(
    r"(?i)^\s*(?:[-*]\s*)?(?:\*\*)?\s*(?:files?(?: changed| modified| touched| created| updated)?"
    r"|changed files|key files)\s*(?:\*\*)?\s*:(?:\*\*)?(.*)$"
)
_META = re.compile(
    r"(?i)^\s*(?:[-*]\s*)?(?:\*\*)?\s*(status|commit|thread|tests?|duration|iteration|story)\s*(?:\*\*)?\s*:"
)
_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")
_EXT = (
    "ts|tsx|js|jsx|mjs|cjs|py|go|rs|rb|java|kt|kts|swift|cs|cpp|cc|c|h|hpp|css|scss|sass|less|"
    "json|jsonl|md|mdx|yml|yaml|toml|ini|sql|vue|svelte|astro|html|erb|haml|sh|bash|php|prisma|"
    "graphql|gql|proto|tf|lua|ex|exs|dart|scala|xml|gradle|lock|txt|env|csv|ipynb|razor|cshtml"
)
_PATH = re.compile(
    rf"(?<![\w@/.-])((?:[\w.-]+/)+[\w.*-]+(?:\.(?:{_EXT}))?/?|[\w.-]+\.(?:{_EXT}))(?![\w/])"
)
# One string split at import: a stop-word list reads better as text than as 150 literals.
_STOP_WORDS = (
    "about above after again against all also always and any are because been before being "
    "below between both but can cannot could did does doing done down during each every few "
    "for from further had has have having here how into its itself just like made make "
    "makes more most must need needs never new not now off once only other our out over own "
    "same should since some such than that the their them then there these they this those "
    "through too under until use used uses using very via was were what when where which "
    "while who why will with within without would you your added adds created updated "
    "implemented instead file files story stories work works working already still first "
    "second next true false null none value values don't doesn't isn't it's data type types "
    "test tests check checks build run runs call calls return returns one two way ways time "
)
_STOP = frozenset(_STOP_WORDS.split())
_GENERIC_DIRS = frozenset({"src", "lib", "app", "source", "internal", "pkg", "main", "java"})


@dataclass
class Item:
    """One learning (a bullet with its continuation lines, or a paragraph), kept verbatim."""

    lines: list[str]
    source: str  # provenance: story id(s), a date, "patterns" or "entry N"
    files: list[str]
    order: int
    tokens: int = 0

    def render(self) -> str:
        first = self.lines[0]
        indent = len(first) - len(first.lstrip())
        head = _BULLET.sub("", first, count=1).strip()
        rest = [("  " + ln[indent:] if ln[:indent].strip() == "" else ln) for ln in self.lines[1:]]
        return "\n".join([f"- [{self.source}] {head}", *rest]).rstrip()


@dataclass
class Block:
    heading: str
    body: list[str]
    kind: str  # "patterns" | "story" | "note" | "index"
    story_ids: list[str] = field(default_factory=list)
    date: str | None = None
    files: list[str] = field(default_factory=list)


@dataclass
class Topic:
    name: str
    path: str
    items: list[Item]
    areas: list[str]
    always: bool = False
    group: str = ""  # the group of learnings it was cut from (an area or a keyword)
    area: str = ""  # the area reference listing it; "" for a row of the Progress Index
    children: list[Topic] = field(default_factory=list)  # an area reference's topics


@dataclass
class Plan:
    """What `build_memory` decided: enough to print a dry run and to test."""

    progress_text: str
    references: dict[str, str]
    topics: list[Topic]
    summaries: list[str]
    tokens_before: int
    tokens_after: int
    already_indexed: bool = False


# ---------------------------------------------------------------- splitting the log


def _lines(text: str) -> list[str]:
    return text.split("\n")


def is_indexed(text: str) -> bool:
    return any(ln.strip().lower() == INDEX_HEADING.lower() for ln in _lines(text))


def _split_blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Header lines, then (heading, body lines) blocks. `## ` headings when there are any;
    otherwise paragraphs starting at column 0 (bracketed logs, list-style logs)."""
    lines = _lines(text)
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
        and not any(_BULLET.match(ln) for ln in para)
        and not _ID.search(" ".join(para))
        and not _BRACKET_ENTRY.match(para[0])
    )


# ---------------------------------------------------------------- reading one block


_RUN = re.compile(r"[\w.-]+")


def _known_in(text: str, known: dict[str, int]) -> list[str]:
    """The known story ids `text` mentions as whole tokens, in `known`'s order. An id starts
    a run of id characters and ends it, or ends before a "." that no digit follows ("US-1."
    at a sentence's end, not "US-1.2"): each run's candidates are looked up, not each id
    searched for (a 3,000-story prd made that quadratic)."""
    hits: set[str] = set()
    for m in _RUN.finditer(text):
        run = m.group(0)
        if run in known:
            hits.add(run)
        for k, ch in enumerate(run):
            if ch == "." and not (k + 1 < len(run) and run[k + 1].isdigit()) and run[:k] in known:
                hits.add(run[:k])
    return sorted(hits, key=known.__getitem__)


def _story_ids(heading: str, body: list[str], known: dict[str, int]) -> list[str]:
    head = re.sub(r"^#+\s*", "", heading)
    probe = [head, *[ln for ln in body[:4] if _STORY_FIELD.match(ln)]]
    found: list[str] = []
    for text in probe:
        found.extend(sid for sid in _known_in(text, known) if sid not in found)
    if found:
        return found
    # A leading id token ("CD-62r.1 - ...", "scorched-earth-33s - ...") wins over the
    # pieces of it the generic pattern would find.
    head_wo_date = re.sub(r"^\[[^\]]*\]\s*", "", head)
    head_wo_date = re.sub(r"(?i)^(story|task|feature)\s*[:#]\s*", "", head_wo_date)
    m = _LEAD_ID.match(head_wo_date)
    lead = [m.group(1)] if m and len(m.group(1)) <= 32 else []
    ids = [i for i in _ID.findall(head) if not any(i in x for x in lead)]
    if lead or ids:
        return list(dict.fromkeys(lead + ids))
    for ln in probe[1:]:
        m2 = _STORY_FIELD.match(ln)
        if m2:
            return [m2.group(1)]
    return []


def paths_in(text: str) -> list[str]:
    """File paths a text mentions (normalised, in order, no duplicates)."""
    out: list[str] = []
    for raw in _PATH.findall(text):
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


def _files_changed(body: list[str]) -> list[str]:
    files: list[str] = []
    for i, ln in enumerate(body):
        m = _FILES_LINE.match(ln)
        if not m:
            continue
        chunk = [m.group(1)]
        indent = len(ln) - len(ln.lstrip())
        for nxt in body[i + 1 :]:
            if not nxt.strip() or len(nxt) - len(nxt.lstrip()) <= indent:
                break
            chunk.append(nxt)
        for token in re.split(r"[,\s]+", " ".join(chunk)):
            for p in paths_in(token) or ([token.strip("`*")] if "/" in token else []):
                if p and p not in files:
                    files.append(p)
    return files


def _classify(heading: str, body: list[str], known: dict[str, int], seen_story: bool) -> Block:
    title = heading.lower()
    if title.startswith("## codebase patterns"):
        return Block(heading, body, "patterns")
    if title.strip() in (INDEX_HEADING.lower(), HISTORY_HEADING.lower()):
        return Block(heading, body, "index")
    ids = _story_ids(heading, body, known)
    m = _DATE.search(heading) or _DATE.search("\n".join(body[:3]))
    text = "\n".join([heading, *body])
    is_entry = bool(
        ids
        or _DATE.search(heading)
        or _ENTRY_WORD.search(heading)
        or any(_LEARN_MARK.match(ln) for ln in body)
    )
    kind = "story" if is_entry else ("note" if not seen_story else "story")
    files = list(dict.fromkeys(_files_changed(body) + paths_in(text)))
    return Block(heading, body, kind, ids, m.group(1) if m else None, files)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _group_items(lines: list[str]) -> list[list[str]]:
    """Bullets with their deeper-indented continuation lines; paragraphs of plain lines."""
    groups: list[list[str]] = []
    base: int | None = None  # indent of the open group's first line; None after a blank
    for ln in lines:
        if not ln.strip() or ln.strip() in ("---", "***"):
            base = None
            continue
        bullet = _BULLET.match(ln)
        if groups and base is not None and (_indent(ln) > base or not bullet):
            groups[-1].append(ln)
            continue
        groups.append([ln])
        base = _indent(ln)
    return groups


def _marked_block(body: list[str], i: int) -> tuple[list[str], int]:
    """The lines a learnings marker at body[i] governs, and the index after them."""
    marker = body[i]
    m_ind = _indent(marker)
    picked = [marker] if _LEARN_MARK.sub("", marker).strip(" *_") else []
    nonblank = [ln for ln in body[i + 1 :] if ln.strip()]
    item_ind = _indent(nonblank[0]) if nonblank else m_ind + 2
    j = i + 1
    while j < len(body):
        nxt = body[j]
        if nxt.strip():
            ind = _indent(nxt)
            if ind <= m_ind and (item_ind > m_ind or not _BULLET.match(nxt)):
                break
            if nxt.strip() in ("---", "***") or (ind <= m_ind and nxt.startswith("#")):
                break
            if ind <= m_ind and (_FILES_LINE.match(nxt) or _META.match(nxt)):
                break
        picked.append(nxt)
        j += 1
    return picked, j


def _learning_lines(body: list[str]) -> tuple[list[str], bool]:
    """The lines under learnings markers (explicit=True), else the whole body minus metadata."""
    picked: list[str] = []
    i = 0
    while i < len(body):
        if _LEARN_MARK.match(body[i]):
            lines, i = _marked_block(body, i)
            picked.extend(lines)
            continue
        if _LEARN_INLINE.match(body[i]):
            ind = _indent(body[i])
            picked.append(body[i])
            while i + 1 < len(body) and body[i + 1].strip() and _indent(body[i + 1]) > ind:
                i += 1
                picked.append(body[i])
        i += 1
    if any(p.strip() for p in picked):
        return picked, True
    # Session banners ("# Ralph Session ...") and metadata are structure, not knowledge.
    return [
        ln for ln in body if not (_META.match(ln) or _FILES_LINE.match(ln) or ln.startswith("# "))
    ], False


def _split_big(group: list[str], limit: int) -> list[list[str]]:
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


def _items_of(block: Block, lines: list[str], source: str, order: int, cap: int) -> list[Item]:
    items: list[Item] = []
    fallback = block.files
    for group in _group_items(lines):
        for part in _split_big(group, cap // 3):
            own = paths_in("\n".join(part))
            it = Item(part, source, own or fallback, order + len(items))
            it.tokens = tokens.count(it.render()) + 1
            items.append(it)
    return items


def _source(block: Block, n: int) -> str:
    if block.story_ids:
        return ",".join(block.story_ids[:3])
    return block.date or f"entry {n}"


# ---------------------------------------------------------------- topics


def _area(path: str) -> str | None:
    """The folder a path lives in; None for a bare file name (its folder is unknown)."""
    p = path.rstrip("/")
    return p.rsplit("/", 1)[0] if "/" in p else None


def _resolve_bare_names(items: list[Item]) -> None:
    """`en.json` means `src/i18n/locales/en.json` when the history names only one such file."""
    full: dict[str, set[str]] = {}
    for it in items:
        for f in it.files:
            if "/" in f.rstrip("/"):
                full.setdefault(f.rstrip("/").rsplit("/", 1)[1], set()).add(f)
    for it in items:
        resolved = [next(iter(full[f])) if len(full.get(f, ())) == 1 else f for f in it.files]
        it.files = list(dict.fromkeys(resolved))


def _primary_area(item: Item) -> str | None:
    areas = [a for a in (_area(f) for f in item.files) if a is not None]
    if not areas:
        return None
    return Counter(areas).most_common(1)[0][0]


def _parent(area: str) -> str | None:
    if not area:
        return None
    return area.rsplit("/", 1)[0] if "/" in area else ""


def _cluster_areas(items: list[Item], budget: int, fill: int) -> dict[str, list[Item]]:
    """Start from each item's own directory; fold the smallest group into its parent
    directory until there are at most `budget` groups (never past the size cap)."""
    groups: dict[str, list[Item]] = {}
    for it in items:
        groups.setdefault(_primary_area(it) or "", []).append(it)
    frozen: set[str] = set()
    while len(groups) > budget:
        candidates = sorted(
            (k for k in groups if k not in frozen and _parent(k) is not None),
            key=lambda k: (len(groups[k]), -k.count("/"), k),
        )
        if not candidates:
            break
        key = candidates[0]
        parent = _parent(key) or ""
        merged = groups.get(parent, []) + groups[key]
        if sum(i.tokens for i in merged) > fill:
            frozen.add(key)
            continue
        groups[parent] = sorted(merged, key=lambda i: i.order)
        del groups[key]
    return groups


def _stem(word: str) -> str:
    return word.rstrip("s") if len(word) > 4 else word


def _words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD_RE.findall(text.lower()) if w not in _STOP}


_WORD_RE = re.compile(r"[a-z][a-z0-9]{3,}")


def _cluster_keywords(items: list[Item], budget: int) -> list[tuple[str, list[Item]]]:
    """Greedy: the word shared by most remaining items becomes a topic, until the budget is
    spent or no word is shared by at least three items; the rest is 'General notes'.
    Word counts are kept up to date as items are taken (recounting every item each round
    made large groups quadratic)."""
    left = list(items)
    out: list[tuple[str, list[Item]]] = []
    bags = {id(it): _words("\n".join(it.lines)) for it in items}
    counts = Counter(w for it in left for w in bags[id(it)])
    limit = max(3, len(items) // 2)
    while left and len(out) < budget:
        best = min(((-c, w) for w, c in counts.items() if 0 < c <= limit), default=None)
        if best is None or -best[0] < 3:
            break
        word = best[1]
        chosen = [it for it in left if word in bags[id(it)]]
        out.append((word, chosen))
        left = [it for it in left if word not in bags[id(it)]]
        for it in chosen:
            counts.subtract(bags[id(it)])
    if left:
        out.append(("", left))
    return out


def _label(word: str, items: list[Item]) -> str:
    """The word as the learnings write it ("ingress", not the stem "ingre")."""
    if not word:
        return "other"
    forms = Counter(
        w for it in items for w in _WORD_RE.findall("\n".join(it.lines).lower()) if _stem(w) == word
    )
    return min(forms, key=lambda w: (-forms[w], w)) if forms else word


def _chunk(items: list[Item], fill: int) -> list[list[Item]]:
    chunks: list[list[Item]] = [[]]
    used = 0
    for it in items:
        if chunks[-1] and used + it.tokens > fill:
            chunks.append([])
            used = 0
        chunks[-1].append(it)
        used += it.tokens
    return chunks


def _taken(name: str, taken: SimilarIndex) -> bool:
    return name in taken


def _area_name(area: str, taken: SimilarIndex) -> str:
    """Short name from the folder's last meaningful parts; longer when that is taken."""
    if not area:
        return "Top-level files"
    parts = area.split("/")
    meaningful = [p for p in parts if p.lower() not in _GENERIC_DIRS] or parts
    for n in range(min(2, len(meaningful)), len(meaningful) + 1):
        name = " / ".join(meaningful[-n:])
        name = name[0].upper() + name[1:]
        if not _taken(name, taken):
            return name
    return f"{area} folder" if not _taken(f"{area} folder", taken) else f"{area}/ ({len(taken)})"


def _topic_budget(n_items: int, total_tokens: int, fill: int) -> int:
    by_count = math.ceil(math.sqrt(max(n_items, 1)) * 1.2)
    by_size = math.ceil(total_tokens / max(fill, 1))
    return max(1, min(MAX_TOPICS, max(by_count, by_size)))


Leaf = tuple[str, list[Item], list[str], str]  # (name, items, areas, group name)


def build_topics(items: list[Item], cap: int, max_topics: int = DEFAULT_MAX_TOPICS) -> list[Leaf]:
    """(topic name, items, areas, group) for the learning items, deterministic and
    explainable. Groups (areas of the code, then shared keywords) stay below `max_topics`,
    so that when their reference files are too many, each group can become one area
    reference and the index stays within `max_topics` rows."""
    fill = int(cap * _FILL)
    budget = _topic_budget(len(items), sum(i.tokens for i in items), fill)
    budget = max(1, min(budget, max_topics - 2))
    leaves = _leaves(items, budget, fill, fill)
    if len(leaves) > max_topics and len({leaf[3] for leaf in leaves}) > max_topics:
        # Too many files for one row each, and too many groups for one area each: fold
        # folders into their parents whatever their size (their topics split them again).
        leaves = _leaves(items, budget, fill, None)
    return leaves


def _leaves(items: list[Item], budget: int, fill: int, merge_cap: int | None) -> list[Leaf]:
    with_area = [i for i in items if _primary_area(i) is not None]
    without = [i for i in items if _primary_area(i) is None]
    groups = _cluster_areas(with_area, max(1, budget - 2), merge_cap or 10**12)
    # Groups of one or two items are noise as topics: let the keyword pass place them.
    small = [k for k, v in groups.items() if len(v) < 3 and len(groups) > 1]
    for k in small:
        without.extend(groups.pop(k))
    without.sort(key=lambda i: i.order)
    out: list[Leaf] = []
    taken = SimilarIndex()
    taken.add(PATTERNS_TOPIC)
    for area in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        name = _area_name(area, taken)
        taken.add(name)
        areas = sorted({_primary_area(i) or "" for i in groups[area]})
        out.extend((*c, name) for c in _named_chunks(name, groups[area], areas, fill))
    kw_budget = max(1, budget - len(out))
    for word, its in _cluster_keywords(without, kw_budget):
        word = _label(word, its) if word else ""
        name = f"{word.capitalize()} notes" if word else "General notes"
        n = 2
        while _taken(name, taken):
            name, n = f"{word.capitalize() if word else 'General'} notes {n}", n + 1
        taken.add(name)
        areas = sorted({a for i in its for a in [_primary_area(i)] if a is not None})
        out.extend((*c, name) for c in _named_chunks(name, its, areas, fill))
    return _distinct(out)


Chunk = tuple[str, list[Item], list[str]]


def _leaf_names(group: str, chunks: list[Chunk]) -> list[Chunk]:
    """Name each piece of a group that had to be split by the two words that set its
    learnings apart from the rest of the group ("Search: tokenizer, ranking"): the words
    most over-represented in it, used by at least two of its learnings."""
    if len(chunks) <= 1:
        return chunks
    skip = _words(group.replace("/", " "))
    bags = [[_words("\n".join(it.lines)) - skip for it in its] for _n, its, _a in chunks]
    per = [Counter(w for bag in b for w in bag) for b in bags]
    total: Counter[str] = Counter()
    for c in per:
        total.update(c)
    n_all = sum(len(its) for _n, its, _a in chunks)
    out: list[Chunk] = []
    for (name, its, areas), counts in zip(chunks, per, strict=True):
        n = len(its)
        ranked = sorted(
            (-(counts[w] / n) / (total[w] / n_all), -counts[w], w)
            for w in counts
            if counts[w] >= min(2, n) and not w.isdigit()
        )
        labels = [_label(w, its) for _r, _c, w in ranked[:2]]
        out.append((f"{group}: {', '.join(labels)}" if labels else name, its, areas))
    return out


def _distinct(topics: list[Leaf]) -> list[Leaf]:
    """No two names `ralph check` would call duplicates: number the later ones."""
    seen = SimilarIndex()
    seen.add(PATTERNS_TOPIC)
    out = []
    for name, its, areas, group in topics:
        final, n = name, 2
        while _taken(final, seen):
            final, n = f"{name} ({n})", n + 1
        seen.add(final)
        out.append((final, its, areas, group))
    return out


def _named_chunks(
    name: str, items: list[Item], areas: list[str], fill: int
) -> list[tuple[str, list[Item], list[str]]]:
    """One topic, or, when it would outgrow the fill level, sub-topics by shared keyword
    packed first-fit into as few references as fit ("Features / auth: session, token").
    A keyword group too big for one reference is cut into runs of consecutive stories,
    named by the stories they span ("Features / auth: session, US-012 to US-031"), never
    numbered parts that say nothing."""

    def size(its: list[Item]) -> int:
        return sum(i.tokens for i in its)

    if size(items) <= fill:
        return [(name, items, areas)]
    groups = _cluster_keywords(items, 2 * math.ceil(size(items) / fill))
    if len(groups) == 1:
        return _by_stories(name, items, areas, fill)
    bins: list[tuple[list[str], list[Item]]] = []
    out: list[tuple[str, list[Item], list[str]]] = []
    sep = ": "
    for word, its in sorted(groups, key=lambda g: (-size(g[1]), g[0])):
        label = _label(word, its)
        if size(its) > fill:
            # Consecutive runs, not a finer keyword split: the learnings of neighbouring
            # stories matter together (recall on the corpus bench fell with the finer
            # split); `_leaf_names` then names each run by what sets it apart.
            out.extend(_by_stories(f"{name}{sep}{label}", its, areas, fill))
            continue
        home = next((b for b in bins if size(b[1]) + size(its) <= fill), None)
        if home is None:
            bins.append(([label], list(its)))
        else:
            home[0].append(label)
            home[1].extend(its)
    for labels, its in bins:
        shown = ", ".join(labels[:2]) + (", ..." if len(labels) > 2 else "")
        out.append((f"{name}{sep}{shown}", sorted(its, key=lambda i: i.order), areas))
    return out


def _by_stories(
    name: str, items: list[Item], areas: list[str], fill: int
) -> list[tuple[str, list[Item], list[str]]]:
    """Consecutive runs of learnings, each named by the stories it spans."""
    chunks = _chunk(items, fill)
    if len(chunks) == 1:
        return [(name, items, areas)]
    out: list[tuple[str, list[Item], list[str]]] = []
    for c in chunks:
        first, last = c[0].source.split(",")[0], c[-1].source.split(",")[0]
        span = first if first == last else f"{first} to {last}"
        out.append((f"{name}, {span}", c, areas))
    return out


# ---------------------------------------------------------------- rendering


def _bullet_key(line: str) -> str:
    return _BULLET.sub("", line.strip() + " ", count=1).strip() if line.strip() else ""


def line_keys(text: str) -> set[str]:
    """Every form under which an original line can be found in rendered text: the line
    stripped, without its bullet marker, and without the provenance tag we add."""
    keys: set[str] = set()
    for ln in _lines(text):
        k = _bullet_key(ln)
        keys.add(k)
        keys.add(re.sub(r"^\[[^\]]*\]\s*", "", k, count=1))
    return keys


def _render_reference(topic: Topic) -> str:
    out = [f"# {topic.name}", ""]
    areas = [a for a in topic.areas if a]
    if areas:
        out.append("Areas: " + ", ".join(f"`{a}/`" for a in areas[:8]))
    files = Counter(f for it in topic.items for f in dict.fromkeys(it.files))
    if files:
        top = sorted(files, key=lambda f: (-files[f], f))[:8]
        out.append("Files: " + ", ".join(top))
    if len(out) > 2:
        out.append("")
    out.extend(it.render() for it in topic.items)
    return "\n".join(out).rstrip() + "\n"


def _render_always(units: list[list[str]]) -> str:
    body = "\n".join("\n".join(u) for u in units).strip("\n")
    return f"# {PATTERNS_TOPIC}\n\n{body}\n"


_ID_BULLET = re.compile(r"^[-*]\s+\**\s*([A-Za-z][\w.]*-\d+[\w.]*)\**\s*(?:[:—–]|\s-\s)")


def _explode(block: Block) -> list[Block]:
    """A section without a story id whose top-level bullets start with ids ("- US-001:
    Complete. ...") is a log kept as a list: one story block per such bullet."""
    if block.story_ids or block.kind not in ("note", "story"):
        return [block]
    groups = _group_items(block.body)
    hits = [(g, hit) for g in groups if _indent(g[0]) == 0 and (hit := _ID_BULLET.match(g[0]))]
    if len(hits) < 2:
        return [block]
    hit_ids = {id(g) for g, _ in hits}
    rest = [ln for g in groups if id(g) not in hit_ids for ln in g]
    out = [Block(block.heading, rest, block.kind)] if rest else []
    for g, bullet in hits:
        text = "\n".join(g)
        m = _DATE.search(text)
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


def _summary_title(block: Block, titles: dict[str, str]) -> str:
    for ln in block.body[:4]:  # the log's own "**Story**: 1.2 - Title" beats the prd's
        m = _STORY_FIELD.match(ln)
        if m:
            rest = ln[m.end() :].strip(" -:—–*")
            if len(rest) >= 4:
                return _clip(rest)
    for sid in block.story_ids:
        if titles.get(sid):
            return titles[sid]
    head = re.sub(r"^#+\s*|^\[[^\]]*\]\s*", "", block.heading).strip()
    head = re.sub(r"\b\d{1,2}:\d{2}(?::\d{2})?\b", "", head)
    for sid in block.story_ids:
        head = head.replace(sid, "")
    head = _DATE.sub("", head)
    head = re.sub(r"(?i)^\W*(story|task|feature|iteration)\b\W*", "", head)
    head = re.sub(r"^[\s\W]+", "", head).strip(" -:—–*")
    if len(head) < 4:
        for ln in block.body:
            label_only = re.match(r"^\W*[\w ]{1,24}\W*:\W*\S*\W*$", ln.strip())
            if ln.strip() and not (
                _META.match(ln)
                or _FILES_LINE.match(ln)
                or label_only
                or ln.lstrip().startswith("#")
            ):
                head = _bullet_key(ln).strip("*_ ")
                head = re.sub(r"^\**[\w ]{1,24}\**\s*:\s*\**\s*", "", head)
                for sid in block.story_ids:
                    head = head.replace(sid, "", 1)
                head = head.strip(" -:—–*")
                break
    return _clip(head)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 100 else text[:99].rstrip() + "…"


def _summaries(blocks: list[Block], titles: dict[str, str]) -> list[str]:
    lines: list[str] = []
    seen: dict[str, int] = {}
    for n, b in enumerate(blocks, 1):
        if b.kind != "story":
            continue
        key = ",".join(b.story_ids)
        if key and key in seen:
            continue  # a retried story: one line per story
        seen[key] = len(lines)
        src = ",".join(b.story_ids) if b.story_ids else _source(b, n)
        when = f" ({b.date})" if b.date and b.date != src else ""
        lines.append(f"- {src}{when}: {_summary_title(b, titles)}".rstrip(": "))
    return lines


def _render_progress(
    header: list[str],
    topics: list[Topic],
    summaries: list[str],
    n_entries: int,
    archive_path: str | None,
) -> str:
    head = "\n".join(header).rstrip()
    if not head.strip():
        head = "# Ralph Progress Log\n---"
    out = [head, "", INDEX_HEADING, "| Topic | Reference Path |", "|---|---|"]
    out.extend(f"| {t.name} | {t.path} |" for t in topics if not t.area)
    out += ["", HISTORY_HEADING]
    where = f" the original file is kept whole at {archive_path}" if archive_path else ""
    out.append(
        f"<!-- ralph migrate: {n_entries} log entries moved; their learnings are in the "
        f"references above;{where or ' the original file is kept whole in the archive'}. -->"
    )
    out.extend(summaries)
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- the pure core


def _story_titles(prd: Prd | None) -> dict[str, str]:
    titles: dict[str, str] = {}
    for st in getattr(prd, "stories", None) or []:
        sid = str(getattr(st, "id", "") or "")
        if sid:
            titles[sid] = " ".join(str(getattr(st, "title", "") or "").split())
    return titles


def _always_units(blocks: list[Block], cap: int) -> list[list[str]]:
    """Codebase Patterns items, then notes sections that precede the first story (preambles
    such as "Hard rules for every story"): the candidates for the always-selected reference."""
    units: list[list[str]] = []
    for b in blocks:
        if b.kind == "patterns":
            for g in _group_items(b.body):
                units.extend(_split_big(g, cap // 3))
        elif b.kind == "note":
            units.extend(_split_big([b.heading, *b.body], cap // 3))
    return units


def _split_always(units: list[list[str]], cap: int) -> tuple[list[list[str]], list[list[str]]]:
    """Keep patterns in the always-selected reference up to the fill level, in file order;
    the rest becomes ordinary items so no reference outgrows the cap."""
    fill = int(cap * _FILL)
    kept: list[list[str]] = []
    used = tokens.count(f"# {PATTERNS_TOPIC}\n\n")
    for n, u in enumerate(units):
        t = tokens.count("\n".join(u)) + 1
        if used + t > fill:
            return kept, units[n:]
        kept.append(u)
        used += t
    return kept, []


def build_plan(
    progress_text: str,
    prd: Prd | None = None,
    *,
    rel_dir: str = "ralph/references",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    archive_path: str | None = None,
    max_topics: int = DEFAULT_MAX_TOPICS,
) -> Plan:
    """Everything `build_memory` returns plus the topics and figures for a dry run."""
    before = tokens.count(progress_text)
    if is_indexed(progress_text):
        return Plan(progress_text, {}, [], [], before, before, already_indexed=True)
    if "\r\n" in progress_text:  # Windows line ends: plan on \n, write back what came in
        plan = build_plan(
            progress_text.replace("\r\n", "\n"),
            prd,
            rel_dir=rel_dir,
            max_tokens=max_tokens,
            archive_path=archive_path,
            max_topics=max_topics,
        )
        plan.progress_text = plan.progress_text.replace("\n", "\r\n")
        plan.references = {k: v.replace("\n", "\r\n") for k, v in plan.references.items()}
        plan.tokens_before, plan.tokens_after = before, tokens.count(plan.progress_text)
        return plan
    titles = _story_titles(prd)
    known = {sid: n for n, sid in enumerate(sorted(titles, key=len, reverse=True))}
    header, raw = _split_blocks(progress_text)
    blocks: list[Block] = []
    seen_story = False
    for heading, body in raw:
        new = _explode(_classify(heading, body, known, seen_story))
        blocks.extend(new)
        seen_story = seen_story or any(b.kind == "story" for b in new)
    kept, overflow = _split_always(_always_units(blocks, max_tokens), max_tokens)
    items: list[Item] = []
    for u in overflow:
        items.extend(_items_of(Block("", u, "note"), u, "patterns", len(items), max_tokens))
    for n, b in enumerate(blocks, 1):
        if b.kind == "story":
            lines, _explicit = _learning_lines(b.body)
            items.extend(_items_of(b, lines, _source(b, n), len(items), max_tokens))
    _resolve_bare_names(items)
    topics = _make_topics(items, kept, rel_dir, max_tokens, max_topics)
    refs = {t.path: _render_topic(t, kept) for t in topics}
    summaries = _summaries(blocks, titles)
    n_entries = sum(1 for b in blocks if b.kind == "story")
    text = _render_progress(header, topics, summaries, n_entries, archive_path)
    _verify_lossless(items, kept, refs)
    return Plan(text, refs, topics, summaries, before, tokens.count(text))


def _make_topics(
    items: list[Item], kept: list[list[str]], rel_dir: str, cap: int, max_topics: int
) -> list[Topic]:
    """Index rows (and, past `max_topics` files, area references with their topics)."""
    topics: list[Topic] = []
    used: set[str] = set()

    def path_for(name: str, folder: str = "") -> str:
        slug, n = slugify(name), 2
        base = slug
        while f"{folder}/{slug}" in used:
            slug, n = f"{base}-{n}", n + 1
        used.add(f"{folder}/{slug}")
        return "/".join(p for p in (rel_dir.rstrip("/"), folder, f"{slug}.md") if p)

    if kept:
        topics.append(Topic(PATTERNS_TOPIC, path_for(PATTERNS_TOPIC), [], [], always=True))
    leaves = build_topics(items, cap, max_topics - len(topics)) if items else []
    if len(topics) + len(leaves) <= max_topics:
        for name, its, areas, group in leaves:
            topics.append(Topic(name, path_for(name), its, areas, group=group))
        return topics
    groups: dict[str, list[Leaf]] = {}
    for leaf in leaves:
        groups.setdefault(leaf[3], []).append(leaf)
    # Behind an area, a topic's name is all the agent sees of it: name each by the words
    # that set it apart ("Search: tokenizer, ranking"). Flat indexes keep the keyword and
    # story-span names, which rank the corpus's learnings exactly as before.
    renamed = [
        (*c, group)
        for group, members in groups.items()
        for c in _leaf_names(group, [m[:3] for m in members])
    ]
    groups = {}
    for leaf in _distinct(renamed):
        groups.setdefault(leaf[3], []).append(leaf)
    for group, members in groups.items():
        if len(members) == 1:
            name, its, areas, _g = members[0]
            topics.append(Topic(name, path_for(name), its, areas, group=group))
            continue
        area_areas = sorted({a for m in members for a in m[2]})
        head = Topic(group, path_for(group), [], area_areas, group=group)
        folder = head.path.rsplit("/", 1)[1][: -len(".md")]
        head.children = [
            Topic(name, path_for(name, folder), its, areas, group=group, area=group)
            for name, its, areas, _g in members
        ]
        topics.append(head)
        topics.extend(head.children)
    return topics


def _render_topic(topic: Topic, kept: list[list[str]]) -> str:
    if topic.always:
        return _render_always(kept)
    if topic.children:
        where = ", ".join(f"`{a}/`" for a in topic.areas[:4] if a)
        about = where or f"{topic.name.lower()}"
        return area_refs.render(topic.name, about, [(t.name, t.path) for t in topic.children])
    return _render_reference(topic)


def _verify_lossless(items: list[Item], kept: list[list[str]], refs: dict[str, str]) -> None:
    """Refuse to produce a plan that would drop a learning (a bug guard, not user input)."""
    keys: set[str] = set()
    for text in refs.values():
        keys |= line_keys(text)
    for ln in [ln for it in items for ln in it.lines] + [ln for u in kept for ln in u]:
        if _bullet_key(ln) and _bullet_key(ln) not in keys:
            raise AssertionError(f"migrate would lose a line: {ln!r}")


def build_memory(
    progress_text: str,
    prd: Prd | None = None,
    *,
    rel_dir: str = "ralph/references",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    archive_path: str | None = None,
) -> tuple[str, dict[str, str]]:
    """(new progress.txt text, {index path: reference text}); pure and deterministic.

    An already indexed text comes back unchanged with no references (migrating twice is a
    no-op). Every learning line and the whole Codebase Patterns section land verbatim in the
    references; the original file itself is archived by `apply`, not here.
    """
    plan = build_plan(
        progress_text, prd, rel_dir=rel_dir, max_tokens=max_tokens, archive_path=archive_path
    )
    return plan.progress_text, plan.references


# ---------------------------------------------------------------- the project around it


@dataclass
class Migration:
    """A planned migration of one project: the pure plan plus every file it will write."""

    plan: Plan
    archive: Path
    writes: dict[Path, str]
    notes: list[str]


def _load_prd(project: Project) -> Any:
    if not Path(project.prd_path).is_file():
        return None
    from orchestrator.memory.prd import Prd

    try:
        return Prd.load(project.prd_path)
    except InputError as exc:  # titles only make summaries nicer; the log is what matters
        log.warning("migrate.prd_unreadable", error=str(exc))
        return None


def _archive_target(project: Project, text: str) -> tuple[Path, bool]:
    """Where the original goes, and whether it is already there (an earlier, interrupted
    run): never overwrite a different archived file."""
    base = Path(project.archive_dir) / f"progress-before-migrate-{date.today().isoformat()}"
    n = 1
    while True:
        path = Path(f"{base}{'' if n == 1 else f'-{n}'}.txt")
        if not path.exists():
            return path, False
        if path.read_bytes() == text.encode("utf-8", errors="surrogateescape"):
            return path, True
        n += 1


def prepare(project: Project) -> Migration:
    """Plan the migration of `project` (reads only). Raises InputError, changing nothing,
    when progress.txt is missing or a reference file with other content is in the way."""
    path = Path(project.progress_path)
    # present(): a folder or FIFO named progress.txt is that error, not "no progress.txt".
    if not fsutil.present(path):
        raise InputError(
            f"{path}: no progress.txt to migrate. Fix: run in the project or pass "
            "--dir with the Ralph folder that holds progress.txt"
        )
    text = fsutil.read_text(path)
    archive, archived = _archive_target(project, text)
    plan = build_plan(
        text,
        _load_prd(project),
        rel_dir=project.references.rel_dir,
        max_tokens=project.config.references.max_tokens,
        archive_path=project.rel(archive),
        max_topics=project.config.references.max_topics,
    )
    if plan.already_indexed:
        return Migration(
            plan,
            archive,
            {},
            ["progress.txt already has a Progress Index: nothing to migrate (use `ralph compact`)"],
        )
    writes: dict[Path, str] = {} if archived else {archive: text}
    for index_path, ref in plan.references.items():
        target = project.references.resolve(index_path)
        if target.exists() and fsutil.read_text(target) != ref:
            raise InputError(
                f"{target}: a different reference already exists there. Fix: move "
                "it aside (or add it to the index by hand), then run migrate again"
            )
        writes[target] = ref
    notes = _config_writes(project, plan, writes)
    writes[path] = plan.progress_text
    return Migration(plan, archive, writes, notes)


def _config_writes(project: Project, plan: Plan, writes: dict[Path, str]) -> list[str]:
    """Make the patterns reference always selected: add it to ralph.yaml references.always."""
    import yaml

    if not any(t.always for t in plan.topics):
        return []
    always = [a.lower() for a in project.config.references.always]
    if PATTERNS_TOPIC.lower() in always:
        return []
    cfg = Path(project.config_path or Path(project.root) / "ralph.yaml")
    old = fsutil.read_text(cfg) if cfg.is_file() else ""
    new = _with_always(old)
    ok = False
    if new is not None:
        try:
            loaded = yaml.safe_load(new) or {}
            ok = PATTERNS_TOPIC in loaded.get("references", {}).get("always", [])
        except (yaml.YAMLError, AttributeError):  # not YAML, or not the mapping shape
            ok = False
    if new is None or not ok:
        return [
            f"add '{PATTERNS_TOPIC}' to references.always in {cfg.name} so the patterns "
            "reference is always selected"
        ]
    if old:
        writes[cfg.with_name(cfg.name + ".bak")] = old
    writes[cfg] = new
    return [f"{project.rel(cfg)}: references.always += '{PATTERNS_TOPIC}'"]


def _with_always(old: str) -> str | None:
    """ralph.yaml text with the patterns topic in references.always (a minimal text edit
    so the user's comments survive), or None when the file's shape is not the simple one."""
    item = f'"{PATTERNS_TOPIC}"'
    if not re.search(r"(?m)^references:", old):
        sep = "" if not old or old.endswith("\n") else "\n"
        return f"{old}{sep}references:\n  always: [{item}]\n"
    if re.search(r"(?m)^[ \t]+always:", old):
        m = re.search(r"(?m)^([ \t]+always:[ \t]*)\[(.*)\][ \t]*$", old)
        if not m:
            return None
        inner = m.group(2).strip()
        items = f"{inner}, {item}" if inner else item
        return old[: m.start()] + f"{m.group(1)}[{items}]" + old[m.end() :]
    m = re.search(r"(?m)^references:[ \t]*\n", old)
    if not m:
        return None
    return old[: m.end()] + f"  always: [{item}]\n" + old[m.end() :]


def apply(project: Project, migration: Migration) -> None:
    """Write everything in one journalled transaction (see memory.journal.Transaction)."""
    from orchestrator.memory.journal import Transaction

    if not migration.writes:
        return
    txn = Transaction(project.ralph_dir)
    for path, text in migration.writes.items():
        txn.write(path, text)
    txn.commit()
