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

from orchestrator.memory.entries import Item
from orchestrator.memory.references import slugify
from orchestrator.upkeep.audit import SimilarIndex

PATTERNS_TOPIC = "Codebase patterns"


MAX_TOPICS = 24  # groups of learnings (areas of the code, then shared keywords)


# config.references.max_topics default: more reference files than this and the groups
# become area references (one index row each) listing their topics.
DEFAULT_MAX_TOPICS = 60


FILL = 0.75  # fill references to 75% of the cap: room for the header and later appends


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


_WORD_RE = re.compile(r"[a-z][a-z0-9]{3,}")


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


def build_topics(items: list[Item], cap: int, max_topics: int = DEFAULT_MAX_TOPICS) -> list[Leaf]:
    """(topic name, items, areas, group) for the learning items, deterministic and
    explainable. Groups (areas of the code, then shared keywords) stay below `max_topics`,
    so that when their reference files are too many, each group can become one area
    reference and the index stays within `max_topics` rows."""
    fill = int(cap * FILL)
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
