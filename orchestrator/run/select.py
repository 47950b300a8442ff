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
An item's score blends the two, then blends in its group's *recency*: the rank of its
story's last mention in progress.txt (an append-only log, so later is more recent), halving
every RECENCY_HALF_LIFE stories. The stories just before this one touched the same files
more often than any other, and when a story's text says little, recency is what is left.

Speed: each reference is indexed once per text (its items, their term counts as an
inverted index, their groups) and cached by content, never by a fixed size (with more
references than such a cache holds, every lookup missed), so a query looks up only its
own terms; group scores are numpy sums over the hits; items are counted in tokens only
when they pass the cut-off, once per text. Explicit hints come first: a story's own
`references` list, then `references.always`; their items are taken in file order. Then
items are taken by score while they stay above a relevance cut-off (a share of the best
score) and fit the budget and the per-reference cap. Same inputs, same selection: ties
break on file order, and scores are
rounded. bench/README.md has the measurements behind these choices.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from orchestrator import tokens as tok

# Items scoring below this share of the best item's score are not taken even when the budget
# has room: they make a prompt bigger without making it better. Tuned on the corpus as a
# single global constant (bench/README.md), not per history.
DEFAULT_CUTOFF = 0.45
# Weight of the whole reference's score in an item's score (the rest is its group's).
DEFAULT_BLEND = 0.4
# Weight of recency in a group's score, and its half-life in stories. In a Ralph log the
# stories just before this one touched the same files more often than any other: when the
# story's text says little (an id and a title), recency is the best guess left.
DEFAULT_RECENCY = 0.3
RECENCY_HALF_LIFE = 5.0
# How far a reference's prior from use (agents opened it though it was not inlined) lifts its
# matching items, as a share of the best item's score: a full prior lifts an item at 0.2 of
# the best over DEFAULT_CUTOFF.
PRIOR_WEIGHT = 0.3
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
    # one row per reference, with why
    considered: list[dict[str, Any]] = field(default_factory=list)
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


@functools.cache
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


@functools.cache
def tokenize(text: str) -> tuple[str, ...]:
    """Words for ranking: identifiers split (camelCase, snake_case, paths), lower-cased,
    stemmed, stop words dropped. The whole identifier is kept too, so `useAuth` matches
    both `useAuth` and `auth`. Cached per text and per word: references change little
    between iterations and their vocabulary is small."""
    out: list[str] = []
    for word in _WORD.findall(text):
        out.extend(_word_terms(word))
    return tuple(out)


@functools.cache
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


@functools.cache
def _profile(text: str) -> tuple[int, Counter[str]]:
    """(number of terms, term counts) of a text, cached. The same counts as
    `Counter(tokenize(text))`, counted word by word: a text repeats its words, so each
    distinct word is split into terms once, and no tuple of every term is kept."""
    counts: Counter[str] = Counter()
    n = 0
    for word, c in Counter(_WORD.findall(text)).items():
        terms = _word_terms(word)
        n += c * len(terms)
        for t in terms:
            counts[t] += c
    return n, counts


def _count_tokens(text: str, encoding: str) -> int:
    """tiktoken count (tokens.count caches by content: items are counted once)."""
    return tok.count(text, encoding)


@dataclass(frozen=True)
class _RefIndex:
    """What ranking needs of one reference, computed once per reference text and cached:
    its items, their groups, and the words of its texts (rows, then the topic and headings).
    Words become terms in `_term_counts`, for all references at once: one vocabulary, and
    numpy sums per text instead of a Counter per text (with thousands of references most
    terms of most references are never asked for)."""

    items: tuple[tuple[str, str], ...]  # (heading, text), as split_items gives them
    # Rows are the items, then the contexts (a group's topic and section, counted once per
    # group and section). Texts are the rows, then the topic and each distinct heading
    # (counted in the whole reference, with the items, but not rows of their own).
    row_keys: tuple[str, ...]  # the group of each row
    words: tuple[str, ...]  # the words of every text, one text after the other
    text_words: tuple[int, ...]  # the number of words of each text


@functools.cache
def _ref_index(topic: str, path: str, text: str) -> _RefIndex:
    items = split_items(text)
    keys = tuple(_key(path, _tag(body), heading) for heading, body in items)
    first: dict[str, int] = {}
    headings: list[str] = []
    for i, (heading, _) in enumerate(items):
        first.setdefault(keys[i] + "\n" + heading, i)
        if heading and heading not in headings:
            headings.append(heading)
    rows = [body for _, body in items] + [f"{topic}\n{items[i][0]}" for i in first.values()]
    texts = [*rows, topic, *headings]
    found = [_WORD.findall(t) for t in texts]
    return _RefIndex(
        items,
        keys + tuple(keys[i] for i in first.values()),
        tuple(itertools.chain.from_iterable(found)),
        tuple(map(len, found)),
    )


def _positions(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[0] - 1, 0, 1, ... counts[1] - 1, ...: each element's position in
    its reference when the references' elements follow one another."""
    starts = np.cumsum(counts) - counts
    at: np.ndarray = np.arange(int(counts.sum())) - np.repeat(starts, counts)
    return at


def _term_counts(
    index: Sequence[_RefIndex], text_words: np.ndarray, col: Mapping[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """(terms of each text, counts of the query terms `col` in each text), over the texts
    of all references one after the other. The same figures as `_profile` of each text:
    a text's terms are its words' terms (`_word_terms`), so each distinct word is split
    once, and a word's terms are counted per text with numpy."""
    n_texts = len(text_words)
    words = list(itertools.chain.from_iterable(ix.words for ix in index))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    ids = np.fromiter(map(vocab.__getitem__, words), dtype=np.intp, count=len(words))
    owner = np.repeat(np.arange(n_texts), text_words)
    n_terms = np.zeros(len(vocab))
    weights = np.zeros((len(vocab), len(col)))
    for w, i in vocab.items():
        terms = _word_terms(w)
        n_terms[i] = len(terms)
        for t in terms:
            j = col.get(t)
            if j is not None:
                weights[i, j] += 1
    lengths = np.bincount(owner, weights=n_terms[ids], minlength=n_texts)
    tf = np.zeros((n_texts, len(col)))
    holds = np.asarray(weights.any(axis=1), dtype=bool)  # words holding a query term
    hit = np.flatnonzero(holds[ids]) if len(col) else np.zeros(0, dtype=int)
    np.add.at(tf, owner[hit], weights[ids[hit]])
    return lengths, tf


def bm25(query: Sequence[str], docs: Sequence[Sequence[str]]) -> list[float]:
    """BM25 score of each token list for the query (0.0 when nothing matches)."""
    terms = list(dict.fromkeys(query))
    col = {t: j for j, t in enumerate(terms)}
    tf = np.zeros((len(docs), len(terms)))
    for i, d in enumerate(docs):
        for t in d:
            if t in col:
                tf[i, col[t]] += 1
    scores: list[float] = _bm25(tf, np.array([len(d) for d in docs], dtype=float)).tolist()
    return scores


def _bm25(tf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Lucene BM25 (k1 1.5, b 0.75) of documents given as query-term counts (rows) and
    lengths, vectorised with numpy.

    The scores are exactly `bm25s`'s default (tests/test_select.py checks them against
    bm25s itself). bm25s indexes every term of every document in Python, several hundred
    ms for 1,000 references; only the query's terms can score, so this works from their
    counts and each document's length alone and stays within a few ms."""
    if tf.size == 0 or not tf.any():
        return np.zeros(tf.shape[0])
    length = np.maximum(lengths, 1.0)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((tf.shape[0] - df + 0.5) / (df + 0.5))
    norm = _K1 * ((1 - _B) + _B * length / length.mean())
    scores: np.ndarray = (idf * tf / (norm[:, None] + tf)).sum(axis=1)
    return scores


def _scaled(xs: np.ndarray) -> np.ndarray:
    top = xs.max(initial=0.0)
    return xs / top if top > 0 else np.zeros_like(xs)


def _key(path: str, tag: str, heading: str) -> str:
    return tag if tag else f"#{path}:{heading}"


@functools.cache
def _tag(text: str) -> str:
    m = _TAG.match(text)
    return f"[{m.group(1).strip()}]" if m else ""


@functools.cache
def _tag_ids(key: str) -> tuple[str, ...]:
    if not key.startswith("["):
        return ()
    return tuple(p for p in re.split(r"[\s,;/]+", key.strip("[]")) if p)


# Story ids ("US-003", "1.2") and dates (migrate tags a story without an id by its date).
_LOG_ID = re.compile(
    r"(?<![\w.-])([A-Za-z][\w.]*-[\w.-]*\d[\w.]*|\d{4}-\d{2}-\d{2}|\d+(?:\.\d+)+)(?![\w-])"
)


# Logs longer than this are read from the end, a growing tail at a time, until it names
# _TAIL_IDS ids: recency halves every RECENCY_HALF_LIFE stories, so a story hundreds of
# stories back weighs 0.5 ** 100 and rounds to nothing, and a 50 MB log is not scanned whole.
_TAIL_FROM = 1 << 20
_TAIL_IDS = 500


def story_order(history: str) -> dict[str, int]:
    """Story id -> position of its last mention in the log (an append-only file: later is
    more recent). Ids the log never mentions have no position."""
    if len(history) <= _TAIL_FROM:
        return _mentions(history, 0)
    size = _TAIL_FROM
    while True:
        start = max(0, len(history) - size)
        if start:  # start on a line, so no id is cut in two
            start = history.find("\n", start) + 1 or len(history)
        out = _mentions(history[start:], start)
        if start == 0 or len(out) >= _TAIL_IDS:
            return out
        size *= 4


def _mentions(text: str, offset: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in _LOG_ID.finditer(text):
        out[m.group(1).rstrip(".")] = offset + m.start()
    return out


def _recency(keys: Sequence[str], order: Mapping[str, int], half_life: float) -> np.ndarray:
    """Per group: 0.5 ** (its rank among the groups by recency / half-life); 0 for groups
    whose story the log never names (untagged sections, stories from another log)."""
    pos = [max((order[i] for i in _tag_ids(k) if i in order), default=-1) for k in keys]
    ranked = sorted((g for g, p in enumerate(pos) if p >= 0), key=lambda g: (-pos[g], keys[g]))
    out = np.zeros(len(keys))
    for rank, g in enumerate(ranked):
        out[g] = 0.5 ** (rank / half_life)
    return out


@dataclass
class _Scored:
    index: list[_RefIndex]
    refs: np.ndarray  # each item's reference
    scores: np.ndarray  # each item's score, in (reference, item) order
    ref_scores: np.ndarray


def _score(
    query: str,
    sources: Sequence[Source],
    blend: float,
    stories: Mapping[str, str] | None,
    history: str,
    recency: float,
) -> _Scored:
    terms = list(dict.fromkeys(tokenize(query)))
    index = [_ref_index(s.topic, s.path, s.text) for s in sources]
    sizes = np.array([len(ix.items) for ix in index], dtype=int)
    # Rows: each reference's items then its contexts, one reference after the other.
    row_keys = [k for ix in index for k in ix.row_keys]
    names = list(dict.fromkeys(row_keys))
    gid = {k: g for g, k in enumerate(names)}
    row_g = np.array([gid[k] for k in row_keys], dtype=int)
    n_rows = np.fromiter((len(ix.row_keys) for ix in index), dtype=int, count=len(index))
    n_texts = np.fromiter((len(ix.text_words) for ix in index), dtype=int, count=len(index))
    is_item = _positions(n_rows) < np.repeat(sizes, n_rows)
    item_g = row_g[is_item]
    col = {t: j for j, t in enumerate(terms)}
    text_words = np.fromiter(
        itertools.chain.from_iterable(ix.text_words for ix in index),
        dtype=int,
        count=int(n_texts.sum()),
    )
    lengths, tf = _term_counts(index, text_words, col)
    # Texts of one reference: its rows first, then its topic and headings; the items, the
    # topic and the headings count in the whole reference.
    text_ref = np.repeat(np.arange(len(sources)), n_texts)
    at = _positions(n_texts)
    is_row = at < np.repeat(n_rows, n_texts)
    counted = (at < np.repeat(sizes, n_texts)) | ~is_row
    ref_tf = np.zeros((len(sources), len(terms)))
    np.add.at(ref_tf, text_ref[counted], tf[counted])
    ref_n = np.bincount(text_ref[counted], weights=lengths[counted], minlength=len(sources))
    g_tf = np.zeros((len(names), len(terms)))
    np.add.at(g_tf, row_g, tf[is_row])
    g_n = np.bincount(row_g, weights=lengths[is_row], minlength=len(names))
    _add_stories(names, stories or {}, col, g_tf, g_n)
    g_score = _scaled(_bm25(g_tf, g_n))
    refs = _scaled(_bm25(ref_tf, ref_n))
    item_ref = np.repeat(np.arange(len(sources)), sizes)
    g, in_ref = g_score[item_g], refs[item_ref]
    mixed = np.where(g > 0, (1 - blend) * g + blend * in_ref, 0.0)
    if recency > 0 and history:
        rec = _recency(names, story_order(history), RECENCY_HALF_LIFE)
        mixed = (1 - recency) * mixed + recency * rec[item_g]
    return _Scored(index, item_ref, np.round(mixed, 6), np.round(refs, 6))


def _add_stories(
    names: list[str],
    stories: Mapping[str, str],
    col: dict[str, int],
    g_tf: np.ndarray,
    g_n: np.ndarray,
) -> None:
    """The prd.json text of the story each group came from, as part of the group."""
    if not stories:
        return
    for g, k in enumerate(names):
        for sid in _tag_ids(k):
            if sid in stories:
                n, counts = _profile(stories[sid])
                g_n[g] += n
                for t in counts.keys() & col.keys():
                    g_tf[g, col[t]] += counts[t]


def score_items(
    query: str,
    sources: Sequence[Source],
    chunks: Sequence[Chunk] = (),
    blend: float = DEFAULT_BLEND,
    stories: Mapping[str, str] | None = None,
    history: str = "",
    recency: float = DEFAULT_RECENCY,
) -> tuple[list[float], list[float]]:
    """(item scores in `chunks_of(sources)` order, reference scores), scaled to [0, 1] and
    rounded so float noise can never reorder equal candidates between runs.

    An item scores as its group (the learnings of one story: their text, their topics and,
    when `stories` maps the story ids in the tag to their prd.json text, what that story
    was about) blended with its whole reference (`blend` is the reference's share), and
    then with the group's recency in `history` (the log; `recency` is its share).
    Relevance in a Ralph log is per story: the learnings of a story that touched the same
    code matter together, so they are ranked together rather than bullet by bullet.
    """
    sc = _score(query, sources, blend, stories, history, recency)
    return sc.scores.tolist(), sc.ref_scores.tolist()


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
    history: str = "",
    recency: float = DEFAULT_RECENCY,
    encoding: str = tok.DEFAULT_ENCODING,
    prior: Mapping[str, float] | None = None,
) -> Selection:
    """Pick items for `query` within `budget` tokens (None: no budget, cut-off only).

    `prior` maps reference paths to a boost in [0, 1] (memory.usage.prior_from_ledger:
    references agents opened although they were not inlined); see `with_prior`.

    `history` is the progress log (story ids in it say which learnings are recent).
    `ref_cap` caps the tokens taken from any one reference (config `references.max_tokens`).
    An item too long for the room left is trimmed at a line boundary when at least
    `_MIN_TRIM` tokens of it fit, else skipped.
    """
    sc = _score(query, sources, blend, stories, history, recency)
    if prior:
        sc.scores = with_prior(sc.scores, sc.refs, [s.path for s in sources], prior)
    story_refs = hinted(sources, story_hints)
    always_refs = [i for i in hinted(sources, always) if i not in story_refs]
    tier = {r: 0 for r in story_refs} | {r: 1 for r in always_refs}
    tiers = np.array([tier.get(r, 2) for r in range(len(sources))], dtype=int)[sc.refs]
    top = sc.scores.max(initial=0.0)
    free = tiers == 2
    passing = free & (sc.scores > 0.0) & (sc.scores >= cutoff * top)
    # Hinted items first, in file order; then the rest by score (ties: file order).
    hinted_items = np.flatnonzero(~free)
    hinted_items = hinted_items[np.argsort(tiers[hinted_items], kind="stable")]
    ranked = np.flatnonzero(passing)
    ranked = ranked[np.argsort(-sc.scores[ranked], kind="stable")]
    stats = _dropped(sc, free, passing, len(sources))
    offsets = np.concatenate(([0], np.cumsum([len(ix.items) for ix in sc.index])))
    left = budget if budget is not None else 10**12
    per_ref: dict[int, int] = {}
    taken: list[Chunk] = []
    for i in (*hinted_items.tolist(), *ranked.tolist()):
        r = int(sc.refs[i])
        pos = i - int(offsets[r])
        heading, body = sc.index[r].items[pos]
        c = Chunk(r, pos, heading, body)
        st = stats[r]
        n = _count_tokens(body, encoding)
        room = left if ref_cap is None else min(left, ref_cap - per_ref.get(r, 0))
        if n > room:
            cut = _trim(c, room, encoding) if room >= _MIN_TRIM else None
            st["why"].add("over budget" if room == left else "over references.max_tokens")
            if cut is None:
                continue
            c, n = cut, _count_tokens(cut.text, encoding)
        left -= n
        per_ref[r] = per_ref.get(r, 0) + n
        st["taken"] += 1
        st["taken_tokens"] += n
        t = tier.get(r, 2)
        st["why"].add(("hint: story" if t == 0 else "always") if t < 2 else "relevant")
        taken.append(c)
    considered = _considered(sources, sc.ref_scores.tolist(), stats, tier)
    boosts = prior or {}  # shown by `ralph prompt --json`: why a weak match was taken
    for row in (r for r in considered if r["path"] in boosts):
        row["prior"] = boosts[row["path"]]
    picked = sorted(taken, key=lambda c: (c.ref, c.pos))
    return Selection(picked, considered, sum(per_ref.values()))


def with_prior(
    scores: np.ndarray, refs: np.ndarray, paths: Sequence[str], prior: Mapping[str, float]
) -> np.ndarray:
    """Item scores raised by their reference's prior: + PRIOR_WEIGHT * prior * best score,
    never above the best score (the cut-off for the other items stays where it was). Only
    items that match the story at all (score > 0) are raised: a reference missed once is
    given again when relevant, not to every story."""
    boost = np.array([float(prior.get(p, 0.0)) for p in paths])[refs] if len(refs) else refs
    top = scores.max(initial=0.0)
    raised = np.minimum(top, scores + PRIOR_WEIGHT * boost * top)
    return np.round(np.where(scores > 0.0, raised, scores), 6)


class _RefStats(TypedDict):
    """One reference's tally while the budget is spent."""

    items: int
    taken: int
    taken_tokens: int
    why: set[str]


def _dropped(
    sc: _Scored, free: np.ndarray, passing: np.ndarray, n_refs: int
) -> dict[int, _RefStats]:
    """Per reference: its item count and why its items were left out before the budget."""
    items = np.bincount(sc.refs, minlength=n_refs)
    zero = np.bincount(sc.refs, weights=free & (sc.scores <= 0.0), minlength=n_refs)
    low = np.bincount(sc.refs, weights=free & (sc.scores > 0.0) & ~passing, minlength=n_refs)
    stats: dict[int, _RefStats] = {}
    for r in range(n_refs):
        why = {w for w, k in (("no match", zero[r]), ("below cut-off", low[r])) if k}
        if items[r] == 0:
            why = {"empty"}
        stats[r] = {"items": int(items[r]), "taken": 0, "taken_tokens": 0, "why": why}
    return stats


def _considered(
    sources: Sequence[Source],
    ref_scores: list[float],
    stats: dict[int, _RefStats],
    tier: dict[int, int],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r, src in enumerate(sources):
        st = stats[r]
        why = sorted(st["why"], key=_REASON_ORDER.index)
        rows.append(
            {
                "path": src.path,
                "topic": src.topic,
                "score": ref_scores[r] if ref_scores else 0.0,
                "tokens": getattr(src, "tokens", None),
                "items": st["items"],
                "taken_items": st["taken"],
                "taken_tokens": st["taken_tokens"],
                "taken": st["taken"] > 0,
                "reason": ", ".join(why),
            }
        )
    rows.sort(key=lambda x: (-x["taken_tokens"], -x["score"], x["path"]))
    return rows


_REASON_ORDER = [
    "hint: story",
    "always",
    "relevant",
    "over budget",
    "over references.max_tokens",
    "below cut-off",
    "no match",
    "empty",
]


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
