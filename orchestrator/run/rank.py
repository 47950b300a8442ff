"""Text ranking for the selector: terms, reference indexes, BM25 and recency.

Pure and cached by content. `select.py` combines these signals (with `where.py`'s file
overlap) into item scores; bench/README.md has the measurements behind each choice.

Speed: each reference is indexed once per text (its items, their term counts as an
inverted index, their groups) and cached by content, never by a fixed size (with more
references than such a cache holds, every lookup missed), so a query looks up only its
own terms; group scores are numpy sums over the hits.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.memory.entries import FILES_BY_STORY
from orchestrator.memory.markdown import is_story_tag, item_tag, tag_line, with_tag

# BM25 parameters: bm25s's (and Lucene's) defaults.
_K1, _B = 1.5, 0.75

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


# The lines `ralph migrate` writes under a reference's title (upkeep/topics.reference_header).
_META_LINES = ("Areas: ", "Files: ")


@functools.cache
def split_items(text: str) -> tuple[tuple[str, str], ...]:
    """(heading line, item text) for each item of a markdown reference, in file order.

    An item is a top-level bullet with everything nested under it, or a paragraph. Heading
    lines are context, not items, and so is a "## Files by story" footer (where the learnings
    apply, as migrate writes it: where.py reads it). A story tag alone on its line (the
    prompt's compact form, copied into a file) tags the bullets after it, as if each carried
    it. Cached: the same text splits the same way.
    """
    items: list[tuple[str, list[str]]] = []
    heading = run_tag = ""
    current: list[str] | None = None
    base = None  # indent of the top-level bullets in the current block
    lines = text.splitlines(keepends=True)
    for at, line in enumerate(lines):
        if _HEADING.match(line):
            # A "# Title" line names the whole file: the prompt shows the topic instead.
            is_title = line.lstrip().startswith("# ")
            heading, current, base = ("" if is_title else line.rstrip("\r\n")), None, None
            run_tag = ""
            continue
        if heading.strip() == FILES_BY_STORY:
            continue  # where the learnings apply (migrate's footer): read by where.py
        if not heading and current is None and line.startswith(_META_LINES):
            continue  # migrate's "Areas: ..." / "Files: ..." lines under the title: no learning
        if not line.strip():
            if current is not None and not _BULLET.match(current[0]):
                current = None  # a blank line ends a paragraph (a bullet list may go on)
            continue
        if line[:1] == "[" and (found := tag_line(line)) and _bullet_follows(lines, at + 1):
            run_tag, current, base = found, None, None
            continue
        b = _BULLET.match(line)
        indent = len(line) - len(line.lstrip())
        if b and (base is None or indent <= base or current is None):
            base = indent if base is None or current is None else min(base, indent)
            current = [with_tag(line, run_tag)]
            items.append((heading, current))
        elif current is not None and (indent > (base or 0) or not b):
            current.append(line)  # nested bullet or wrapped line
        else:
            current, base, run_tag = [line], None, ""
            items.append((heading, current))
    return tuple((h, "".join(lines)) for h, lines in items)


def _bullet_follows(lines: list[str], at: int) -> bool:
    """Whether the next non-blank line from `at` is a list item: a tag line heads bullets
    only; before a paragraph (`[2026-01-05]` over prose) it is that paragraph's text."""
    for line in itertools.islice(lines, at, None):
        if line.strip():
            return _BULLET.match(line) is not None
    return False


@functools.cache
def profile(text: str) -> tuple[int, Counter[str]]:
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


@dataclass(frozen=True)
class RefIndex:
    """What ranking needs of one reference, computed once per reference text and cached:
    its items, their groups, and the words of its texts (rows, then the topic and headings).
    Words become terms in `term_counts`, for all references at once: one vocabulary, and
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
def ref_index(topic: str, path: str, text: str) -> RefIndex:
    items = split_items(text)
    keys = tuple(group_key(path, tag(body), heading) for heading, body in items)
    first: dict[str, int] = {}
    headings: list[str] = []
    for i, (heading, _) in enumerate(items):
        first.setdefault(keys[i] + "\n" + heading, i)
        if heading and heading not in headings:
            headings.append(heading)
    rows = [body for _, body in items] + [f"{topic}\n{items[i][0]}" for i in first.values()]
    texts = [*rows, topic, *headings]
    found = [_WORD.findall(t) for t in texts]
    return RefIndex(
        items,
        keys + tuple(keys[i] for i in first.values()),
        tuple(itertools.chain.from_iterable(found)),
        tuple(map(len, found)),
    )


def positions(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[0] - 1, 0, 1, ... counts[1] - 1, ...: each element's position in
    its reference when the references' elements follow one another."""
    starts = np.cumsum(counts) - counts
    at: np.ndarray = np.arange(int(counts.sum())) - np.repeat(starts, counts)
    return at


@dataclass
class _Corpus:
    """The query-independent part of `term_counts` for one list of references."""

    index: tuple[RefIndex, ...]  # held, so the identity check below stays valid
    ids: np.ndarray  # each word's vocabulary position
    owner: np.ndarray  # each word's text
    lengths: np.ndarray  # terms per text
    holders: dict[str, list[tuple[int, int]]]  # term -> (vocabulary word, count in it)


_LAST: list[_Corpus] = []
Corpus = _Corpus  # what run/refcache.py builds from its file
word_terms = _word_terms  # a word's terms, as every text counts them


def _corpus(index: Sequence[RefIndex], text_words: np.ndarray) -> _Corpus:
    """Built once per list of references (the RefIndex objects are cached by content, so
    the same references give the same objects): a prompt asks only for its own terms."""
    last = _LAST[0] if _LAST else None
    if last and len(last.index) == len(index) and all(map(operator.is_, last.index, index)):
        return last
    words = list(itertools.chain.from_iterable(ix.words for ix in index))
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    ids = np.fromiter(map(vocab.__getitem__, words), dtype=np.intp, count=len(words))
    owner = np.repeat(np.arange(len(text_words)), text_words)
    n_terms = np.zeros(len(vocab))
    holders: dict[str, list[tuple[int, int]]] = {}
    for w, i in vocab.items():
        terms = _word_terms(w)
        n_terms[i] = len(terms)
        for t, c in Counter(terms).items():
            holders.setdefault(t, []).append((i, c))
    lengths = np.bincount(owner, weights=n_terms[ids], minlength=len(text_words))
    _LAST[:] = [_Corpus(tuple(index), ids, owner, lengths, holders)]
    return _LAST[0]


def term_counts(
    index: Sequence[RefIndex],
    text_words: np.ndarray,
    col: Mapping[str, int],
    corpus: Corpus | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(terms of each text, counts of the query terms `col` in each text), over the texts
    of all references one after the other. The same figures as `profile` of each text:
    a text's terms are its words' terms (`_word_terms`), so each distinct word is split
    once, and a word's terms are counted per text with numpy. `corpus` is `_corpus(index,
    text_words)` when the caller has it (run/refcache.py keeps it on disk)."""
    c = corpus if corpus is not None else _corpus(index, text_words)
    n_vocab = int(c.ids.max(initial=-1)) + 1
    weights = np.zeros((n_vocab, len(col)))
    for t, j in col.items():
        for i, k in c.holders.get(t, ()):
            # A kept vocabulary (refcache) may hold words no text here uses: they count 0.
            if i < n_vocab:
                weights[i, j] += k
    tf = np.zeros((len(text_words), len(col)))
    holds = np.asarray(weights.any(axis=1), dtype=bool)  # words holding a query term
    hit = np.flatnonzero(holds[c.ids]) if len(col) else np.zeros(0, dtype=int)
    np.add.at(tf, c.owner[hit], weights[c.ids[hit]])
    return c.lengths, tf


def bm25(query: Sequence[str], docs: Sequence[Sequence[str]]) -> list[float]:
    """BM25 score of each token list for the query (0.0 when nothing matches)."""
    terms = list(dict.fromkeys(query))
    col = {t: j for j, t in enumerate(terms)}
    tf = np.zeros((len(docs), len(terms)))
    for i, d in enumerate(docs):
        for t in d:
            if t in col:
                tf[i, col[t]] += 1
    scores: list[float] = bm25_matrix(tf, np.array([len(d) for d in docs], dtype=float)).tolist()
    return scores


def bm25_matrix(tf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
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


def scaled(xs: np.ndarray) -> np.ndarray:
    top = xs.max(initial=0.0)
    return xs / top if top > 0 else np.zeros_like(xs)


def group_key(path: str, tag: str, heading: str) -> str:
    """The group an item is ranked with: the story its tag names (`[US-003]`, `[entry 7]`, a
    date: markdown.STORY_TAG), else its section. A word alone (`[patterns]`, `[gotcha]`)
    names no story: as a group it would pool unrelated items of every reference, whose
    pooled text matches any story."""
    return tag if is_story_tag(tag) else f"#{path}:{heading}"


@functools.cache
def tag(text: str) -> str:
    """The story tag an item opens with, its inner spaces trimmed (`[ US-1 ]` is `[US-1]`)."""
    found = item_tag(text)
    return f"[{found[1:-1].strip()}]" if found else ""


@functools.cache
def tag_ids(key: str) -> tuple[str, ...]:
    if not key.startswith("["):
        return ()
    return tuple(p for p in re.split(r"[\s,;/]+", key.strip("[]")) if p)


# Story ids ("US-003", "T128", "1.2") and dates (migrate tags a story without an id by its
# date). Ids without a hyphen are the ones memory/vocab.py reads in entry headings (capitals
# then two digits or more): without them a speckit log's "T006" groups had no recency at all.
_LOG_ID = re.compile(
    r"(?<![\w.-])([A-Za-z][\w.]*-[\w.-]*\d[\w.]*|\d{4}-\d{2}-\d{2}|\d+(?:\.\d+)+"
    r"|[A-Z]{1,5}\d{2,}(?:\.\d+)*)(?![\w-])"
)


# Logs longer than this are read from the end, a growing tail at a time, until it names
# _TAIL_IDS ids: recency halves every RECENCY_HALF_LIFE stories, so a story hundreds of
# stories back weighs 0.5 ** 100 and rounds to nothing, and a 50 MB log is not scanned whole.
_TAIL_FROM = 1 << 20
_TAIL_IDS = 500


@functools.lru_cache(maxsize=8)
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


def recency_scores(keys: Sequence[str], order: Mapping[str, int], half_life: float) -> np.ndarray:
    """Per group: 0.5 ** (its rank among the groups by recency / half-life); 0 for groups
    whose story the log never names (untagged sections, stories from another log)."""
    pos = [max((order[i] for i in tag_ids(k) if i in order), default=-1) for k in keys]
    ranked = sorted((g for g, p in enumerate(pos) if p >= 0), key=lambda g: (-pos[g], keys[g]))
    out = np.zeros(len(keys))
    for rank, g in enumerate(ranked):
        out[g] = 0.5 ** (rank / half_life)
    return out
