"""Choose what of the references a story needs, within a token budget.

Pure: no I/O. The unit of selection is an *item*: one top-level bullet (with its nested
lines) or one paragraph of a reference, shown under its section heading. Topic files collect
learnings from many stories, so a whole reference is rarely relevant as a whole.

Ranking is BM25 (Lucene's variant, the scores `bm25s` computes; see `_bm25`) with the
story's title, description, acceptance criteria and notes as the query, at two levels:
- the item's *group*: the learnings of one earlier story (items tagged `- [US-003] ...`, as
  `ralph migrate` writes them, wherever their topic put them; else the item's section),
  with their topics and, when prd.json is known, that story's own text. In a Ralph log,
  relevance is per story: the learnings of a story that touched the same code matter
  together, so they are ranked together rather than bullet by bullet;
- the whole reference (its topic, areas and files say which part of the code it is about).
An item's score blends the two. Explicit hints come first: a story's own `references` list,
then `references.always`; their items are taken in file order. Then items are taken by score
while they stay above a relevance cut-off (a share of the best score) and fit the budget and
the per-reference cap. Same inputs, same selection: ties break on file order, and scores are
rounded. bench/README.md has the measurements behind these choices.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from orchestrator import tokens as tok

# Items scoring below this share of the best item's score are not taken even when the budget
# has room: they make a prompt bigger without making it better. Tuned on the corpus as a
# single global constant (bench/README.md), not per history.
DEFAULT_CUTOFF = 0.45
# Weight of the whole reference's score in an item's score (the rest is its group's).
DEFAULT_BLEND = 0.4
# BM25 parameters: bm25s's (and Lucene's) defaults.
_K1, _B = 1.5, 0.75
# Trimming an over-long item to fewer tokens than this keeps too little of it to be useful.
_MIN_TRIM = 60

_TAG = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\[([^\]\n]{1,80})\]")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*|[0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Words that say nothing about *what* a story touches (English glue and Ralph's boilerplate).
_STOP_WORDS = """a an and are as at be been but by can could did do does for from had has
    have how if in into is it its itself may might must no not of on or our should so such
    than that the their them then there these they this those to too up us was we were what
    when where which while who will with would you your all any each every also only just
    more most other same some very via use used using new add added adds make made now
    already e g i ie eg etc story stories learning learnings future iteration iterations
    pattern patterns gotcha gotchas file files changed implemented implement acceptance
    criteria criterion typecheck passes pass verify verified need needs needed work works
    worked user users want able so that"""
_STOP = frozenset(_STOP_WORDS.split())


@dataclass(frozen=True)
class Source:
    """One reference as the selector sees it (a `memory.Reference` fits this shape)."""

    topic: str
    path: str
    text: str


@dataclass(frozen=True)
class Chunk:
    """One selectable item of one reference."""

    ref: int  # position of its reference in the input
    pos: int  # position of the item inside the reference
    heading: str  # the heading line the item sits under ("" before any heading)
    text: str  # the item's lines, verbatim


@dataclass
class Selection:
    chunks: list[Chunk]  # taken, in reference order then item order (render order)
    considered: list[dict] = field(default_factory=list)  # one row per reference, with why
    tokens: int = 0  # tokens of the taken items' text

    @property
    def refs(self) -> list[int]:
        return list(dict.fromkeys(c.ref for c in self.chunks))


# ----------------------------------------------------------------------------- text


def stem(word: str) -> str:
    """A light suffix stripper: enough to match "filters" with "filtering" or "filtered"."""
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                return word
            base = word[: -len(suffix)]
            return base + "y" if suffix in ("ies", "ied") else base
    return word


@functools.lru_cache(maxsize=262144)
def _word_terms(word: str) -> tuple[str, ...]:
    out: list[str] = []
    parts = _CAMEL.findall(word)
    if len(parts) > 1:
        whole = word.lower()
        if whole not in _STOP:
            out.append(whole)
    for part in parts:
        low = part.lower()
        if len(low) >= 2 and low not in _STOP:
            out.append(stem(low))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def tokenize(text: str) -> tuple[str, ...]:
    """Words for ranking: identifiers split (camelCase, snake_case, paths), lower-cased,
    stemmed, stop words dropped. The whole identifier is kept too, so `useAuth` matches
    both `useAuth` and `auth`. Cached per text and per word: references change little
    between iterations and their vocabulary is small."""
    out: list[str] = []
    for word in _WORD.findall(text):
        out.extend(_word_terms(word))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def split_items(text: str) -> tuple[tuple[str, str], ...]:
    """(heading line, item text) for each item of a markdown reference, in file order.

    An item is a top-level bullet with everything nested under it, or a paragraph. Heading
    lines are context, not items. Cached: the same reference text splits the same way.
    """
    items: list[tuple[str, list[str]]] = []
    heading = ""
    current: list[str] | None = None
    base = None  # indent of the top-level bullets in the current block
    for line in text.splitlines(keepends=True):
        if _HEADING.match(line):
            # A "# Title" line names the whole file: the prompt shows the topic instead.
            is_title = line.lstrip().startswith("# ")
            heading, current, base = ("" if is_title else line.rstrip("\r\n")), None, None
            continue
        if not line.strip():
            if current is not None and not _BULLET.match(current[0]):
                current = None  # a blank line ends a paragraph (a bullet list may go on)
            continue
        b = _BULLET.match(line)
        indent = len(line) - len(line.lstrip())
        if b and (base is None or indent <= base or current is None):
            base = indent if base is None or current is None else min(base, indent)
            current = [line]
            items.append((heading, current))
        elif current is not None and (indent > (base or 0) or not b):
            current.append(line)  # nested bullet or wrapped line
        else:
            current, base = [line], None
            items.append((heading, current))
    return tuple((h, "".join(lines)) for h, lines in items)


def chunks_of(sources: Sequence[Source]) -> list[Chunk]:
    return [
        Chunk(r, p, heading, body)
        for r, src in enumerate(sources)
        for p, (heading, body) in enumerate(split_items(src.text))
    ]


# ----------------------------------------------------------------------------- hints


def _norm_hint(value: str) -> str:
    value = value.strip().lower().rsplit("/", 1)[-1]
    value = value[:-3] if value.endswith(".md") else value
    return re.sub(r"[^a-z0-9]+", "-", value).strip("-")


def hinted(sources: Sequence[Source], hints: Iterable[str]) -> list[int]:
    """Positions of the sources named by `hints` (topic, slug, file name or index path)."""
    found: list[int] = []
    for w in (h for h in (_norm_hint(h) for h in hints) if h):
        for i, src in enumerate(sources):
            if i not in found and w in (_norm_hint(src.topic), _norm_hint(src.path)):
                found.append(i)
    return found


# ----------------------------------------------------------------------------- scoring


@functools.lru_cache(maxsize=65536)
def _profile(text: str) -> tuple[int, Counter[str], frozenset[str]]:
    """(number of terms, term counts, the set of terms) of a text, cached."""
    terms = tokenize(text)
    counts = Counter(terms)
    return len(terms), counts, frozenset(counts)


class _Doc:
    """A document built from several texts, kept as its length and the query terms' counts:
    all BM25 needs, and cheap to assemble from cached per-text profiles."""

    __slots__ = ("n", "tf")

    def __init__(self) -> None:
        self.n = 0
        self.tf: Counter[str] = Counter()

    def add(self, text: str, query: frozenset[str]) -> None:
        self.add_hits(*_hits(text, query))

    def add_hits(self, n: int, hits: dict[str, int]) -> None:
        self.n += n
        for t, c in hits.items():
            self.tf[t] += c


def _hits(text: str, query: frozenset[str]) -> tuple[int, dict[str, int]]:
    """(number of terms, counts of the query's terms) of a text."""
    n, counts, present = _profile(text)
    return n, {t: counts[t] for t in present & query}


def bm25(query: Sequence[str], docs: Sequence[Sequence[str]]) -> list[float]:
    """BM25 score of each token list for the query (0.0 when nothing matches)."""
    q = frozenset(query)
    built = []
    for d in docs:
        doc = _Doc()
        doc.n = len(d)
        doc.tf.update(t for t in d if t in q)
        built.append(doc)
    return _bm25(list(dict.fromkeys(query)), built)


def _bm25(terms: list[str], docs: Sequence[_Doc]) -> list[float]:
    """Lucene BM25 (k1 1.5, b 0.75), vectorised over documents with numpy.

    The scores are exactly `bm25s`'s default (tests/test_select.py checks them against
    bm25s itself). bm25s indexes every term of every document in Python, several hundred
    ms for 1,000 references; only the query's terms can score, so this works from their
    counts and each document's length alone and stays within a few ms."""
    if not terms or not docs or not any(d.tf for d in docs):
        return [0.0] * len(docs)
    col = {t: j for j, t in enumerate(terms)}
    tf = np.zeros((len(docs), len(terms)))
    for i, d in enumerate(docs):
        for t, c in d.tf.items():
            tf[i, col[t]] = c
    length = np.array([max(d.n, 1) for d in docs], dtype=float)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((len(docs) - df + 0.5) / (df + 0.5))
    norm = _K1 * ((1 - _B) + _B * length / length.mean())
    return [float(x) for x in (idf * tf / (norm[:, None] + tf)).sum(axis=1)]


def _scaled(xs: list[float]) -> list[float]:
    top = max(xs, default=0.0)
    return [x / top for x in xs] if top > 0 else [0.0] * len(xs)


def group_key(chunk: Chunk) -> str:
    """Which learnings belong together: items tagged with the same source (`- [US-003] ...`,
    as `ralph migrate` writes them) came from one story, wherever their topic put them;
    untagged items group by their section (one story's block, or one patterns heading)."""
    tag = _tag(chunk.text)
    return tag if tag else f"#{chunk.ref}:{chunk.heading}"


@functools.lru_cache(maxsize=65536)
def _tag(text: str) -> str:
    m = _TAG.match(text)
    return f"[{m.group(1).strip()}]" if m else ""


def _tag_ids(key: str) -> list[str]:
    return [p for p in re.split(r"[\s,;/]+", key.strip("[]")) if p] if key.startswith("[") else []


def score_items(query: str, sources: Sequence[Source], chunks: Sequence[Chunk],
                blend: float = DEFAULT_BLEND, stories: Mapping[str, str] | None = None,
                ) -> tuple[list[float], list[float]]:
    """(item scores, reference scores), scaled to [0, 1] and rounded so float noise can never
    reorder equal candidates between runs.

    An item scores as its group (the learnings of one story: their text, their topics and,
    when `stories` maps the story ids in the tag to their prd.json text, what that story
    was about) blended with its whole reference (`blend` is the reference's share). Relevance
    in a Ralph log is per story: the learnings of a story that touched the same code matter
    together, so they are ranked together rather than bullet by bullet.
    """
    terms = list(dict.fromkeys(tokenize(query)))
    q = frozenset(terms)
    keys = [group_key(c) for c in chunks]
    # Documents are assembled from cached per-text profiles: nothing is tokenized twice.
    ref_docs = [_Doc() for _ in sources]
    for doc, src in zip(ref_docs, sources, strict=True):
        doc.add(src.topic, q)
    groups: dict[str, _Doc] = {}
    seen: set[tuple[str, int, str]] = set()
    for c, k in zip(chunks, keys, strict=True):
        hits = _hits(c.text, q)  # once per item, for its reference and its group
        ref_docs[c.ref].add_hits(*hits)
        doc = groups.get(k)
        if doc is None:
            doc = groups[k] = _Doc()
            for sid in _tag_ids(k):
                doc.add((stories or {}).get(sid, ""), q)
        doc.add_hits(*hits)
        if (k, c.ref, c.heading) not in seen:  # context once per group and section
            seen.add((k, c.ref, c.heading))
            doc.add(f"{sources[c.ref].topic}\n{c.heading}", q)
            if c.heading and ("", c.ref, c.heading) not in seen:
                seen.add(("", c.ref, c.heading))
                ref_docs[c.ref].add(c.heading, q)
    names = list(groups)
    group_scores = dict(zip(names, _scaled(_bm25(terms, [groups[k] for k in names])),
                            strict=True))
    refs = _scaled(_bm25(terms, ref_docs))
    g = np.array([group_scores[k] for k in keys])
    r = np.array(refs)[[c.ref for c in chunks]] if chunks else np.zeros(0)
    mixed = np.where(g > 0, (1 - blend) * g + blend * r, 0.0)
    return np.round(mixed, 6).tolist(), np.round(np.array(refs), 6).tolist()


# ----------------------------------------------------------------------------- selection


def select(
    query: str,
    sources: Sequence[Source],
    *,
    budget: int | None,
    story_hints: Iterable[str] = (),
    always: Iterable[str] = (),
    cutoff: float = DEFAULT_CUTOFF,
    blend: float = DEFAULT_BLEND,
    ref_cap: int | None = None,
    stories: Mapping[str, str] | None = None,
    encoding: str = tok.DEFAULT_ENCODING,
) -> Selection:
    """Pick items for `query` within `budget` tokens (None: no budget, cut-off only).

    `ref_cap` caps the tokens taken from any one reference (config `references.max_tokens`).
    An item too long for the room left is trimmed at a line boundary when at least
    `_MIN_TRIM` tokens of it fit, else skipped.
    """
    chunks = chunks_of(sources)
    scores, ref_scores = score_items(query, sources, chunks, blend, stories)
    story_refs = hinted(sources, story_hints)
    always_refs = [i for i in hinted(sources, always) if i not in story_refs]
    tier = {r: 0 for r in story_refs} | {r: 1 for r in always_refs}
    top = max(scores, default=0.0)
    order = sorted(range(len(chunks)), key=lambda i: (
        tier.get(chunks[i].ref, 2), -scores[i] if chunks[i].ref not in tier else 0,
        chunks[i].ref, chunks[i].pos))
    left = budget if budget is not None else 10**12
    per_ref: dict[int, int] = {}
    taken: list[Chunk] = []
    stats: dict[int, dict] = {}
    for i in order:
        c = chunks[i]
        st = stats.setdefault(c.ref, {"items": 0, "taken": 0, "taken_tokens": 0, "why": set()})
        st["items"] += 1
        t = tier.get(c.ref, 2)
        if t == 2 and (scores[i] <= 0.0 or scores[i] < cutoff * top):
            st["why"].add("no match" if scores[i] <= 0.0 else "below cut-off")
            continue
        n = tok.count(c.text, encoding)
        room = left if ref_cap is None else min(left, ref_cap - per_ref.get(c.ref, 0))
        if n > room:
            c = _trim(c, room, encoding) if room >= _MIN_TRIM else None
            st["why"].add("over budget" if room == left else "over references.max_tokens")
            if c is None:
                continue
            n = tok.count(c.text, encoding)
        left -= n
        per_ref[c.ref] = per_ref.get(c.ref, 0) + n
        st["taken"] += 1
        st["taken_tokens"] += n
        st["why"].add(("hint: story" if t == 0 else "always") if t < 2 else "relevant")
        taken.append(c)
    considered = _considered(sources, ref_scores, stats, tier)
    picked = sorted(taken, key=lambda c: (c.ref, c.pos))
    return Selection(picked, considered, sum(per_ref.values()))


def _considered(sources: Sequence[Source], ref_scores: list[float], stats: dict[int, dict],
                tier: dict[int, int]) -> list[dict]:
    rows = []
    for r, src in enumerate(sources):
        st = stats.get(r, {"items": 0, "taken": 0, "taken_tokens": 0, "why": {"empty"}})
        why = sorted(st["why"], key=_REASON_ORDER.index)
        rows.append({
            "path": src.path, "topic": src.topic, "score": ref_scores[r] if ref_scores else 0.0,
            "tokens": getattr(src, "tokens", None), "items": st["items"],
            "taken_items": st["taken"], "taken_tokens": st["taken_tokens"],
            "taken": st["taken"] > 0, "reason": ", ".join(why),
        })
    rows.sort(key=lambda x: (-x["taken_tokens"], -x["score"], x["path"]))
    return rows


_REASON_ORDER = ["hint: story", "always", "relevant", "over budget",
                 "over references.max_tokens", "below cut-off", "no match", "empty"]


def _trim(chunk: Chunk, limit: int, encoding: str) -> Chunk | None:
    """The longest run of whole lines from the start of `chunk` within `limit` tokens."""
    lines = chunk.text.splitlines(keepends=True)
    lo, hi = 0, len(lines)
    while lo < hi:  # binary search on the number of lines kept
        mid = (lo + hi + 1) // 2
        if tok.count("".join(lines[:mid]), encoding) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return None
    return Chunk(chunk.ref, chunk.pos, chunk.heading, "".join(lines[:lo]))


def render(selection: Selection, sources: Sequence[Source]) -> str:
    """Taken items under their reference and section headings, in index and file order."""
    if not selection.chunks:
        return ""
    total = {r: len(split_items(s.text)) for r, s in enumerate(sources)}
    by_ref: dict[int, list[Chunk]] = {}
    for c in selection.chunks:
        by_ref.setdefault(c.ref, []).append(c)
    out = ["## References for this story"]
    for ref, chunks in by_ref.items():
        src = sources[ref]
        shown = "" if len(chunks) == total[ref] else f", {len(chunks)} of {total[ref]} items"
        lines = [f"### {src.topic} (`{src.path}`{shown})"]
        heading = ""
        for c in chunks:
            if c.heading and c.heading != heading:
                # Nested under the reference's own "###" line: shown one level deeper.
                lines.append("#### " + c.heading.lstrip().lstrip("#").strip())
                heading = c.heading
            lines.append(c.text.rstrip("\n"))
        out.append("\n".join(lines))
    return "\n\n".join(out)
