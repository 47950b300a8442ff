"""Choose what of the references a story needs; the token budget is a ceiling, not a target.

Pure: no I/O. The unit of selection is an *item*: one top-level bullet (with its nested
lines) or one paragraph of a reference, shown under its section heading. Topic files collect
learnings from many stories, so a whole reference is rarely relevant as a whole.

An item scores as its *group* (the learnings of one earlier story: items tagged
`- [US-003] ...`, as `ralph migrate` writes them, else the item's section), combining:
- text: BM25 (rank.py) of the story's prd.json text against the group (its learnings, their
  topics and that story's own prd.json text), blended with the whole reference's score;
- recency: the rank of the group's story by its last mention in progress.txt, halving every
  RECENCY_HALF_LIFE stories (the stories just before this one touched the same files more
  often than any other);
- files: the overlap of the group's files with the files predicted for this story
  (where.py: file names the story mentions, and the files of the best groups).
Relevance in a Ralph log is per story, so the learnings of one story are ranked together.

Items are taken by score while they stay above a relevance cut-off (a share of the best
score): where relevance ends, selection stops, whatever room the budget leaves. The budget
and `ref_cap` only cap. A story's own `references` come first, in file order; `always`
references take part item by item like the rest, at a lower bar (ALWAYS_SHARE of the
cut-off), so a 2k-token "Codebase patterns" never rides along whole. Same inputs, same
selection: ties break on file order, scores are rounded. The defaults are what 5-fold
cross-validation by history picks (bench/cv.py, bench/README.md).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator import tokens as tok
from orchestrator.memory.markdown import close_fences, split_story_tag, without_marker
from orchestrator.run import considered, rank, refcache, semantic, where

# Items scoring below this share of the best item's score are not taken even when the budget
# has room: they make a prompt bigger without making it better.
DEFAULT_CUTOFF = 0.8
# Weight of the whole reference's score in an item's text score (the rest is its group's).
DEFAULT_BLEND = 0.2
# Weight of recency in a group's score, and its half-life in stories.
DEFAULT_RECENCY = 0.2
RECENCY_HALF_LIFE = 5.0
# Weight of the predicted file overlap in an item's score.
DEFAULT_FILES = 0.75
# Weight of semantic similarity (wordllama embeddings, optional extra) in the text score.
DEFAULT_SEMANTIC = 0.0
# How many of the best groups (by text and recency) lend their files to the files predicted
# for the story (where.scores).
DEFAULT_FEEDBACK = where.FEEDBACK_GROUPS
# `always` references' items pass at this share of the cut-off: the user asked for them,
# but an item of theirs that says nothing about this story still stays out.
ALWAYS_SHARE = 0.5
# How far a reference's prior from use (agents opened it though it was not inlined) lifts its
# matching items, as a share of the cut-off's bar (cut-off x the best item's score): the lift
# follows the cut-off, so a fully missed reference's matching items come back at any cut-off.
PRIOR_WEIGHT = 1.0
# Trimming an over-long item to fewer tokens than this keeps too little of it to be useful.
_MIN_TRIM = 60


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
    tokens: int = 0  # tokens of the taken items' text
    # The references taken from, most tokens taken first, then by score.
    ranked: list[int] = field(default_factory=list)
    # Makes `considered` when it is asked for (run/considered.py).
    rows: considered.Rows = field(default=list, repr=False, compare=False)

    @functools.cached_property
    def considered(self) -> list[dict[str, Any]]:
        """One row per reference, with why it was taken or left, most taken first."""
        return self.rows()

    @property
    def refs(self) -> list[int]:
        return list(dict.fromkeys(c.ref for c in self.chunks))


@dataclass(frozen=True)
class Weights:
    """How an item's score is made; `select` and the bench's cross-validation share it."""

    cutoff: float = DEFAULT_CUTOFF
    blend: float = DEFAULT_BLEND
    recency: float = DEFAULT_RECENCY
    files: float = DEFAULT_FILES
    semantic: float = DEFAULT_SEMANTIC
    feedback: int = DEFAULT_FEEDBACK


# Re-exported: callers tokenize and split references the way ranking does.
tokenize = rank.tokenize
split_items = rank.split_items
story_order = rank.story_order


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


@dataclass
class Scored:
    """Every item's score for one query (in `chunks_of` order) and what produced it."""

    index: list[rank.RefIndex]
    refs: np.ndarray  # each item's reference
    scores: np.ndarray  # each item's score
    ref_scores: np.ndarray
    groups: list[str] = field(default_factory=list)  # group names
    item_groups: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))


@dataclass
class _Text:
    index: list[rank.RefIndex]
    facts: list[refcache.RefFacts]  # per reference: its index, item notes and footer
    names: list[str]  # the groups
    item_g: np.ndarray  # each item's group
    item_ref: np.ndarray  # each item's reference
    g_score: np.ndarray  # per group, scaled to [0, 1]
    item_score: np.ndarray  # per item on its own, scaled to [0, 1]
    ref_score: np.ndarray  # per reference, scaled to [0, 1]


def _text_scores(
    terms: list[str],
    sources: Sequence[Source],
    stories: Mapping[str, str],
    memo: refcache.Plain = refcache.PLAIN,
) -> _Text:
    """BM25 of the query terms per group and per whole reference."""
    facts = memo.facts(sources)
    index = [f.ix for f in facts]
    sizes = np.array([len(ix.items) for ix in index], dtype=int)
    # Rows: each reference's items then its contexts, one reference after the other.
    row_keys = [k for ix in index for k in ix.row_keys]
    names = list(dict.fromkeys(row_keys))
    gid = {k: g for g, k in enumerate(names)}
    row_g = np.array([gid[k] for k in row_keys], dtype=int)
    n_rows = np.fromiter((len(ix.row_keys) for ix in index), dtype=int, count=len(index))
    n_texts = np.fromiter((len(ix.text_words) for ix in index), dtype=int, count=len(index))
    is_item = rank.positions(n_rows) < np.repeat(sizes, n_rows)
    col = {t: j for j, t in enumerate(terms)}
    text_words = np.fromiter(
        (n for ix in index for n in ix.text_words), dtype=int, count=int(n_texts.sum())
    )
    lengths, tf = rank.term_counts(index, text_words, col, memo.corpus(index, text_words))
    # Texts of one reference: its rows first, then its topic and headings; the items, the
    # topic and the headings count in the whole reference.
    text_ref = np.repeat(np.arange(len(sources)), n_texts)
    at = rank.positions(n_texts)
    is_row = at < np.repeat(n_rows, n_texts)
    counted = (at < np.repeat(sizes, n_texts)) | ~is_row
    ref_tf = np.zeros((len(sources), len(terms)))
    np.add.at(ref_tf, text_ref[counted], tf[counted])
    ref_n = np.bincount(text_ref[counted], weights=lengths[counted], minlength=len(sources))
    g_tf = np.zeros((len(names), len(terms)))
    np.add.at(g_tf, row_g, tf[is_row])
    g_n = np.bincount(row_g, weights=lengths[is_row], minlength=len(names))
    _add_stories(names, stories, col, g_tf, g_n, memo)
    item_text = at < np.repeat(sizes, n_texts)
    return _Text(
        index,
        facts,
        names,
        row_g[is_item],
        np.repeat(np.arange(len(sources)), sizes),
        rank.scaled(rank.bm25_matrix(g_tf, g_n)),
        rank.scaled(rank.bm25_matrix(tf[item_text], lengths[item_text])),
        rank.scaled(rank.bm25_matrix(ref_tf, ref_n)),
    )


def _add_stories(
    names: list[str],
    stories: Mapping[str, str],
    col: dict[str, int],
    g_tf: np.ndarray,
    g_n: np.ndarray,
    memo: refcache.Plain = refcache.PLAIN,
) -> None:
    """The prd.json text of the story each group came from, as part of the group."""
    if not stories:
        return
    for g, k in enumerate(names):
        for sid in rank.tag_ids(k):
            if sid in stories:
                n, counts = memo.profile(stories[sid])
                g_n[g] += n
                for t in counts.keys() & col.keys():
                    g_tf[g, col[t]] += counts[t]


def _add_semantic(t: _Text, query: str, stories: Mapping[str, str], share: float) -> None:
    """Blend each group's embedding similarity to the query into its text score."""
    texts = [[stories.get(i, "") for i in rank.tag_ids(n)] for n in t.names]
    for ix, first in zip(t.index, _offsets(t.index)[:-1].tolist(), strict=False):
        for pos, (_, body) in enumerate(ix.items):
            texts[int(t.item_g[first + pos])].append(body)
    sims = semantic.similarity(query, ["\n".join(x for x in xs if x) for xs in texts])
    if sims is not None:
        t.g_score = (1 - share) * t.g_score + share * rank.scaled(sims)


def _files_of(
    t: _Text, history: str, memo: refcache.Plain = refcache.PLAIN
) -> list[tuple[str, ...]]:
    """Each group's files: `files:` notes in its items or its stories' lines in a reference's
    "## Files by story" footer, else its stories' log entries."""
    notes: dict[str, list[str]] = {}
    footers: dict[str, list[str]] = {}
    for f in t.facts:
        for sid, files in f.footer.items():
            footers.setdefault(sid, []).extend(files)
    for f, first in zip(t.facts, _offsets(t.index)[:-1].tolist(), strict=False):
        for pos, found in enumerate(f.notes):
            if found:
                notes.setdefault(t.names[int(t.item_g[first + pos])], []).extend(found)
    ids = {n: rank.tag_ids(n) for n in t.names}
    by_story = memo.entry_files(history)
    return where.group_files(t.names, notes, history, ids, footers, by_story=by_story)


def _offsets(index: Sequence[rank.RefIndex]) -> np.ndarray:
    return np.concatenate(([0], np.cumsum([len(ix.items) for ix in index]))).astype(int)


def score(
    query: str,
    sources: Sequence[Source],
    weights: Weights = Weights(),
    *,
    stories: Mapping[str, str] | None = None,
    history: str = "",
    tree: Sequence[str] = (),
    memo: refcache.Plain = refcache.PLAIN,
) -> Scored:
    """Every item's score in [0, 1] (rounded, so float noise never reorders ties).

    `stories` maps story ids to their prd.json text (it describes their groups), `history`
    is progress.txt (recency, and the files of each story's entries), `tree` the
    repository's files when known (`git ls-files`: more names a story may mention), `memo`
    where the facts of each reference come from (refcache: kept on disk by content)."""
    terms = list(dict.fromkeys(tokenize(query)))
    t = _text_scores(terms, sources, stories or {}, memo)
    if weights.semantic > 0:
        _add_semantic(t, query, stories or {}, weights.semantic)
    g, in_ref = t.g_score[t.item_g], t.ref_score[t.item_ref]
    # An untagged item's group is its whole section (say "Codebase patterns"): it counts
    # half, the item itself the other half, so one such item can be taken without the rest.
    untagged = np.array([not n.startswith("[") for n in t.names], dtype=bool)[t.item_g]
    g = np.where(untagged, 0.5 * g + 0.5 * t.item_score, g)
    mixed = np.where(g > 0, (1 - weights.blend) * g + weights.blend * in_ref, 0.0)
    rec = np.zeros(len(t.names))
    if weights.recency > 0 and history:
        order = memo.story_order(history)
        rec = rank.recency_scores(t.names, order, RECENCY_HALF_LIFE)
        mixed = (1 - weights.recency) * mixed + weights.recency * rec[t.item_g]
    if weights.files > 0 and len(t.names):
        prior = (1 - weights.recency) * t.g_score + weights.recency * rec
        files = _files_of(t, history, memo)
        fs = where.scores(frozenset(terms), files, prior, tree, feedback=weights.feedback)
        # A group whose files are unknown is neither helped nor hurt by file overlap.
        known = np.array([bool(f) for f in files], dtype=bool)[t.item_g]
        mixed = np.where(known, (1 - weights.files) * mixed + weights.files * fs[t.item_g], mixed)
    return Scored(
        t.index,
        t.item_ref,
        np.round(mixed, 6),
        np.round(t.ref_score, 6),
        t.names,
        t.item_g,
    )


def score_items(
    query: str,
    sources: Sequence[Source],
    chunks: Sequence[Chunk] = (),
    blend: float = DEFAULT_BLEND,
    stories: Mapping[str, str] | None = None,
    history: str = "",
    recency: float = DEFAULT_RECENCY,
    files: float = DEFAULT_FILES,
) -> tuple[list[float], list[float]]:
    """(item scores in `chunks_of(sources)` order, reference scores), as `score` makes them."""
    w = Weights(blend=blend, recency=recency, files=files)
    sc = score(query, sources, w, stories=stories, history=history)
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
    files: float = DEFAULT_FILES,
    semantic: float = DEFAULT_SEMANTIC,
    tree: Sequence[str] = (),
    encoding: str = tok.DEFAULT_ENCODING,
    prior: Mapping[str, float] | None = None,
    feedback: int = DEFAULT_FEEDBACK,
    memo: refcache.Plain = refcache.PLAIN,
) -> Selection:
    """Pick items for `query` within `budget` tokens (None: no budget, cut-off only).

    `prior` maps reference paths to a boost in [0, 1] (memory.usage.prior_from_ledger:
    references agents opened although they were not inlined); see `with_prior`.

    `history` is the progress log (story ids in it say which learnings are recent).
    `ref_cap` caps the tokens taken from any one reference (config `references.max_tokens`).
    An item too long for the room left is trimmed at a line boundary when at least
    `_MIN_TRIM` tokens of it fit, else skipped.
    """
    w = Weights(cutoff, blend, recency, files, semantic, feedback)
    sc = score(query, sources, w, stories=stories, history=history, tree=tree, memo=memo)
    if prior:
        sc.scores = with_prior(sc.scores, sc.refs, [s.path for s in sources], prior, cutoff)
    selection = take(
        sc,
        sources,
        cutoff=cutoff,
        budget=budget,
        story_hints=story_hints,
        always=always,
        ref_cap=ref_cap,
        encoding=encoding,
    )
    if prior:
        selection.rows = considered.with_prior(selection.rows, prior)
    return selection


def _order(
    sc: Scored, tiers: np.ndarray, cutoff: float, floor: float = 0.0
) -> tuple[np.ndarray, list[int]]:
    """(items passing their bar, items in the order they are tried):
    the story's own references in file order, then by score the items above the cut-off
    (`always` ones above ALWAYS_SHARE of it; ties: file order)."""
    top = sc.scores.max(initial=0.0)
    bar = np.maximum(np.where(tiers == 1, ALWAYS_SHARE * cutoff, cutoff) * top, floor)
    passing = (tiers > 0) & (sc.scores > 0.0) & (sc.scores >= bar)
    hinted_items = np.flatnonzero(tiers == 0)
    ranked = np.flatnonzero(passing)
    ranked = ranked[np.argsort(-sc.scores[ranked], kind="stable")]
    return passing, [*hinted_items.tolist(), *ranked.tolist()]


def take(
    sc: Scored,
    sources: Sequence[Source],
    *,
    cutoff: float = DEFAULT_CUTOFF,
    budget: int | None,
    story_hints: Iterable[str] = (),
    always: Iterable[str] = (),
    ref_cap: int | None = None,
    encoding: str = tok.DEFAULT_ENCODING,
    floor: float = 0.0,
) -> Selection:
    """The items `sc` ranks above the cut-off, best first, while `budget` and `ref_cap`
    leave room (the bench sweeps the cut-off over one `score`). `floor` is an absolute
    score below which nothing is taken: bench/cv.py searches it, cross-validation keeps 0."""
    story_refs = hinted(sources, story_hints)
    always_refs = [i for i in hinted(sources, always) if i not in story_refs]
    tier = {r: 0 for r in story_refs} | {r: 1 for r in always_refs}
    tiers = np.array([tier.get(r, 2) for r in range(len(sources))], dtype=int)[sc.refs]
    passing, order = _order(sc, tiers, cutoff, floor)
    offsets = _offsets(sc.index)
    left = budget if budget is not None else 10**12
    per_ref: dict[int, int] = {}
    taken: list[Chunk] = []
    events: list[considered.Event] = []  # (reference, tokens taken | why left)
    shown: set[str] = set()
    for i in order:
        r = int(sc.refs[i])
        pos = i - int(offsets[r])
        c = Chunk(r, pos, *sc.index[r].items[pos])
        if (key := _said(c.text)) in shown:
            events.append((r, "repeats an item shown"))
            continue
        n = tok.count(c.text, encoding)
        room = left if ref_cap is None else min(left, ref_cap - per_ref.get(r, 0))
        if n > room:
            cut = _trim(c, room, encoding) if room >= _MIN_TRIM else None
            events.append((r, "over budget" if room == left else "over references.max_tokens"))
            if cut is None:
                continue
            c, n = cut, tok.count(cut.text, encoding)
        left -= n
        per_ref[r] = per_ref.get(r, 0) + n
        events.append((r, n))
        taken.append(c)
        shown.add(key)  # once taken: a copy left out for want of room leaves room to another
    scores = sc.ref_scores.tolist()

    def rows() -> list[dict[str, Any]]:
        free = tiers > 0
        return considered.rows(sources, scores, sc.refs, sc.scores, free, passing, events, tier)

    ranked = sorted(per_ref, key=lambda r: (-per_ref[r], -scores[r], sources[r].path))
    picked = sorted(taken, key=lambda c: (c.ref, c.pos))
    return Selection(picked, sum(per_ref.values()), ranked, rows)


def with_prior(
    scores: np.ndarray,
    refs: np.ndarray,
    paths: Sequence[str],
    prior: Mapping[str, float],
    cutoff: float = DEFAULT_CUTOFF,
) -> np.ndarray:
    """Item scores raised by their reference's prior: + PRIOR_WEIGHT * prior * cut-off *
    best score, never above the best score (the bar for the other items stays where it was). Only
    items that match the story at all (score > 0) are raised: a reference missed once is
    given again when relevant, not to every story."""
    boost = np.array([float(prior.get(p, 0.0)) for p in paths])[refs] if len(refs) else refs
    top = scores.max(initial=0.0)
    raised = np.minimum(top, scores + PRIOR_WEIGHT * boost * cutoff * top)
    return np.round(np.where(scores > 0.0, raised, scores), 6)


def _said(item: str) -> str:
    """What an item says, for telling repeats apart: its text without list marker, story
    tag, case or spacing. Agents write one learning for several stories, and migrate files
    a learning under each topic it names; the prompt shows it once."""
    text = split_story_tag(item)[1]
    return " ".join(without_marker(text).split()).casefold()


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


# A cell's text in an index row, without the backticks a path may be written in.
_INDEX_WORD = re.compile(r"[^\s|`]+")


def listed_in(index: str, sources: Sequence[Any]) -> set[str]:
    """The references whose path the index shown in the prompt names: their headings in the
    references block need no path (an area's topics, or rows a long index leaves out, do).
    One pass over the index's words (a path per source searched in a 1,000-row index cost
    20 ms a prompt)."""
    words = {w.removeprefix("./") for w in _INDEX_WORD.findall(index)}
    return {s.path for s in sources if s.path.removeprefix("./") in words}


def render(
    selection: Selection, sources: Sequence[Source], listed: Container[str] | None = None
) -> str:
    """Taken items under their reference and section headings, in index and file order.

    What the prompt already says is not repeated. A reference whose path the shown index
    names (`listed`; None: all of them) is headed by its topic alone; another (a topic inside
    an area, a row left out of a long index) keeps its path, the agent's way to the rest. In
    a section whose items all carry a story tag (`- [US-015] ...`), a run of one story's
    items shows the tag once, on a line of its own: an eighth of the block on real histories.
    A section mixing tagged and untagged items keeps every tag on its item, so no item reads
    as another story's."""
    if not selection.chunks:
        return ""
    by_ref: dict[int, list[Chunk]] = {}
    for c in selection.chunks:
        by_ref.setdefault(c.ref, []).append(c)
    out = ["## References for this story"]
    for ref, chunks in by_ref.items():
        src = sources[ref]
        total = len(split_items(src.text))  # only the references shown are split here
        notes = [] if listed is None or src.path in listed else [f"`{src.path}`"]
        if len(chunks) != total:
            notes.append(f"{len(chunks)} of {total} items")
        lines = [f"### {src.topic}" + (f" ({', '.join(notes)})" if notes else "")]
        for heading, run in itertools.groupby(chunks, key=lambda c: c.heading):
            if heading:
                # Nested under the reference's own "###" line: shown one level deeper.
                lines.append("#### " + heading.lstrip().lstrip("#").strip())
            lines += _items(list(run))
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _items(chunks: list[Chunk]) -> list[str]:
    """One section's items; their story tags lifted out when every item has one."""
    split = [split_story_tag(c.text) for c in chunks]
    if not all(tag for tag, _ in split):
        return [close_fences(c.text.rstrip("\n")) for c in chunks]
    lines: list[str] = []
    story = ""
    for tag, text in split:
        if tag != story:
            lines.append(tag)
            story = tag
        lines.append(close_fences(text.rstrip("\n")))
    return lines
