"""Topics for migrated learnings: group items by code area and shared words, and name them.

`build_topics` is pure and deterministic: the same items give the same topics and names.
`make_topics` gives each topic its reference path and, past `max_topics` files, nests the
topics of one group behind an area reference (see memory.areas).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from orchestrator import tokens
from orchestrator.memory.entries import Item, rendered_tokens
from orchestrator.memory.references import slugify
from orchestrator.upkeep.audit import SimilarIndex
from orchestrator.upkeep.naming import (
    Vocabulary,
    area_head,
    candidates,
    story_span,
    unique,
    words,
)

PATTERNS_TOPIC = "Codebase patterns"


MAX_TOPICS = 24  # groups of learnings (areas of the code, then shared keywords)


# config.references.max_topics default: more reference files than this and the groups
# become area references (one index row each) listing their topics.
DEFAULT_MAX_TOPICS = 60


FILL = 0.75  # fill references to 75% of the cap: room for the header and later appends


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


Leaf = tuple[str, list[Item], list[str], str]  # (name, items, areas, group name)


Chunk = tuple[str, list[Item], list[str]]


def _area(path: str) -> str | None:
    """The folder a path lives in; None for a bare file name (its folder is unknown)."""
    p = path.rstrip("/")
    return p.rsplit("/", 1)[0] if "/" in p else None


def resolve_bare_names(items: list[Item]) -> None:
    """`en.json` means `src/i18n/locales/en.json` when the history names only one such file."""
    full: dict[str, set[str]] = {}
    for it in items:
        for f in it.files:
            if "/" in f.rstrip("/"):
                full.setdefault(f.rstrip("/").rsplit("/", 1)[1], set()).add(f)

    def resolved(files: list[str]) -> list[str]:
        out = [next(iter(full[f])) if len(full.get(f, ())) == 1 else f for f in files]
        return list(dict.fromkeys(out))

    for it in items:
        it.files = resolved(it.files)
        it.applies = resolved(it.applies)


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


def _cluster_keywords(items: list[Item], budget: int) -> list[tuple[str, list[Item]]]:
    """Greedy: the word shared by most remaining items becomes a topic, until the budget is
    spent or no word is shared by at least three items; the rest stays together ("").
    Word counts are kept up to date as items are taken (recounting every item each round
    made large groups quadratic)."""
    left = list(items)
    out: list[tuple[str, list[Item]]] = []
    bags = {id(it): words("\n".join(it.lines)) for it in items}
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


def _topic_budget(n_items: int, total_tokens: int, fill: int) -> int:
    by_count = math.ceil(math.sqrt(max(n_items, 1)) * 1.2)
    by_size = math.ceil(total_tokens / max(fill, 1))
    return max(1, min(MAX_TOPICS, max(by_count, by_size)))


def build_topics(items: list[Item], cap: int, max_topics: int = DEFAULT_MAX_TOPICS) -> list[Leaf]:
    """(topic name, items, areas, group) for the learning items, deterministic and
    explainable. Groups (areas of the code, then shared keywords) stay below `max_topics`,
    so that when their reference files are too many, each group can become one area
    reference and the index stays within `max_topics` rows."""
    fill = int(cap * FILL)
    budget = _topic_budget(len(items), sum(i.tokens for i in items), fill)
    budget = max(1, min(budget, max_topics - 2))
    vocab = Vocabulary(items)
    drafts = _drafts(items, budget, fill, fill)
    if len(drafts) > max_topics and len({d.key for d in drafts}) > max_topics:
        # Too many files for one row each, and too many groups for one area each: fold
        # folders into their parents whatever their size (their topics split them again).
        drafts = _drafts(items, budget, fill, None)
    return _named(_fit(_merge_near_duplicates(drafts, vocab, fill), cap), vocab)


@dataclass
class _Draft:
    """A topic before it has a name: its learnings and the group it was cut from."""

    items: list[Item]
    areas: list[str]
    key: str  # the group: an area folder, or "kw:" and the word its learnings share
    head: str  # the group's name when its folder or word says it; "" when the words must


def _drafts(items: list[Item], budget: int, fill: int, merge_cap: int | None) -> list[_Draft]:
    with_area = [i for i in items if _primary_area(i) is not None]
    without = [i for i in items if _primary_area(i) is None]
    groups = _cluster_areas(with_area, max(1, budget - 2), merge_cap or 10**12)
    # Groups of one or two items are noise as topics: let the keyword pass place them.
    small = [k for k, v in groups.items() if len(v) < 3 and len(groups) > 1]
    for k in small:
        without.extend(groups.pop(k))
    without.sort(key=lambda i: i.order)
    out: list[_Draft] = []
    heads = SimilarIndex()
    heads.add(PATTERNS_TOPIC)
    for area in sorted(groups, key=lambda k: (-len(groups[k]), k)):
        head = area_head(area, heads)
        if head:
            heads.add(head)
        areas = sorted({_primary_area(i) or "" for i in groups[area]})
        out.extend(_Draft(c, areas, area, head) for c in _pieces(groups[area], fill))
    kw_budget = max(1, budget - len(out))
    for word, its in _cluster_keywords(without, kw_budget):
        # A shared word says too little alone ("Implementing", "View"): the learnings'
        # salient words name the group.
        areas = sorted({a for i in its for a in [_primary_area(i)] if a is not None})
        out.extend(_Draft(c, areas, f"kw:{word}", "") for c in _pieces(its, fill))
    return out


def _pieces(items: list[Item], fill: int) -> list[list[Item]]:
    """One topic, or, when it would outgrow the fill level, pieces by shared keyword packed
    first-fit into as few references as fit. A keyword group too big for one reference is
    cut into runs of consecutive stories: the learnings of neighbouring stories matter
    together (recall on the corpus bench fell with a finer keyword split)."""

    def size(its: list[Item]) -> int:
        return sum(i.tokens for i in its)

    if size(items) <= fill:
        return [items]
    groups = _cluster_keywords(items, 2 * math.ceil(size(items) / fill))
    if len(groups) == 1:
        return _chunk(items, fill)
    bins: list[list[Item]] = []
    out: list[list[Item]] = []
    for _word, its in sorted(groups, key=lambda g: (-size(g[1]), g[0])):
        if size(its) > fill:
            out.extend(_chunk(its, fill))
            continue
        home = next((b for b in bins if size(b) + size(its) <= fill), None)
        if home is None:
            bins.append(list(its))
        else:
            home.extend(its)
    out.extend(sorted(b, key=lambda i: i.order) for b in bins)
    return out


def _merge_near_duplicates(drafts: list[_Draft], vocab: Vocabulary, fill: int) -> list[_Draft]:
    """Two pieces of one group about the same things (three of their four most salient
    words shared) become one topic when they fit in one reference. Candidates come from an
    inverted index of those words, so this costs a few comparisons per topic."""
    signs = [set(vocab.salient(d.items, n=4, written=False)) for d in drafts]
    index: dict[tuple[str, str], list[int]] = {}
    gone: set[int] = set()
    for i, d in enumerate(drafts):
        size = sum(it.tokens for it in d.items)
        seen: Counter[int] = Counter()
        for w in signs[i]:
            seen.update(j for j in index.get((d.key, w), ()) if j not in gone)
        for j, shared in seen.most_common():
            other = drafts[j]
            if shared < 3 or size + sum(it.tokens for it in other.items) > fill:
                continue
            other.items = sorted(other.items + d.items, key=lambda it: it.order)
            gone.add(i)
            break
        else:
            for w in signs[i]:
                index.setdefault((d.key, w), []).append(i)
    return [d for i, d in enumerate(drafts) if i not in gone]


def reference_header(areas: list[str], items: list[Item]) -> list[str]:
    """The lines under a reference's title: the areas and the files its learnings concern."""
    out = []
    shown = [a for a in areas if a]
    if shown:
        out.append("Areas: " + ", ".join(f"`{a}/`" for a in shown[:8]))
    files = Counter(f for it in items for f in dict.fromkeys(it.files))
    if files:
        top = sorted(files, key=lambda f: (-files[f], f))[:8]
        out.append("Files: " + ", ".join(top))
    return [*out, ""] if out else []


_TITLE = 24  # tokens kept for a reference's title line


def _fit(drafts: list[_Draft], cap: int) -> list[_Draft]:
    """A piece that would outgrow the cap with its header and its "## Files by story"
    lines (grouping counts bullets only, so the stories' files ride in the room the fill
    level leaves) is cut where it overflows."""
    out: list[_Draft] = []
    for d in drafts:
        if _size(d.areas, d.items) <= cap:
            out.append(d)
            continue
        part: list[Item] = []
        for it in d.items:
            if part and _size(d.areas, [*part, it]) > cap:
                out.append(_Draft(part, d.areas, d.key, d.head))
                part = []
            part.append(it)
        out.append(_Draft(part, d.areas, d.key, d.head))
    return out


def _size(areas: list[str], items: list[Item]) -> int:
    head = "\n".join(reference_header(areas, items))
    return _TITLE + tokens.count(head) + rendered_tokens(items)


def _named(drafts: list[_Draft], vocab: Vocabulary) -> list[Leaf]:
    """Final names: each group's, then each piece's within its group (see naming)."""
    taken = SimilarIndex()
    taken.add(PATTERNS_TOPIC)
    by_key: dict[str, list[_Draft]] = {}
    for d in drafts:
        by_key.setdefault(d.key, []).append(d)
    vocab.learn_groups([[it for d in members for it in d.items] for members in by_key.values()])
    group_names: dict[str, str] = {}
    for key, members in by_key.items():
        its = [it for d in members for it in d.items]
        head = members[0].head
        terms = [] if head and len(members) > 1 else vocab.salient(its)
        named = candidates(head, terms, vocab.kinds(terms), vocab.phrases(its, terms))
        options = ([head] if head else []) + named
        group_names[key] = unique(options, taken, story_span(its))
        taken.add(group_names[key])
    out: list[Leaf] = []
    for key, members in by_key.items():
        group = group_names[key]
        if len(members) == 1:
            out.append((group, members[0].items, members[0].areas, group))
            continue
        counts = vocab.counts([it for d in members for it in d.items])
        n_all = sum(len(d.items) for d in members)
        head = members[0].head
        skip = re.findall(r"[A-Za-z0-9]+", head.lower()) if head else []
        for d in members:
            terms = vocab.salient(d.items, rest=(counts, n_all), skip=skip)
            options = candidates(head, terms, vocab.kinds(terms), vocab.phrases(d.items, terms))
            name = unique(options, taken, story_span(d.items))
            taken.add(name)
            out.append((name, d.items, d.areas, group))
    return out


def make_topics(
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
