"""What ranking derives from the references and prd.json, kept on disk by content.

Every prompt splits each reference into items, finds its words and the files its items
name, builds one vocabulary over all of them (rank.term_counts), and profiles the prd.json
text of every earlier story (rank.py, where.py). All of it depends on those texts alone, so
it is kept in `ref-index.json` in the project's cache folder (tokens.project_cache_dir: the
log folder once a run made it, else the user's cache): an unchanged reference or prd.json
costs a lookup, not a re-split and re-tokenize (10,000 references took two seconds per
prompt that way, and the vocabulary another half second).

The file holds the references of the last prompt, in columns (JSON lists, the word ids as
one base64 array), each under a digest of its topic, path and text. A reference whose
digest is there is read from the columns; any other is computed, and the file is
rewritten for the new list, so it never holds more than one project's references (plus
the story profiles, the newest _KEEP_UNUSED beyond those in use). The file as a whole is
keyed by FORMAT and by a digest of the source of the modules whose output it holds, so a
change to the ranking code discards it. JSON, never pickle: whoever can write the cache
folder must not be able to run code. Written atomically; a damaged, stale or unreadable
file is ignored and rebuilt, never an error.

`Plain` is the same facts without a disk (the bench, tests): both give identical results,
since a cached fact is exactly what the computation returned.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import json
import operator
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, cast, overload

import msgspec
import numpy as np

from orchestrator import fsutil, tokens
from orchestrator.log import get_logger
from orchestrator.memory import entries, markdown, vocab
from orchestrator.run import rank, where

log = get_logger()

# Bump when the layout of the file changes. A change to the code whose output is cached
# needs no bump: the file is keyed by that code's source too (_code_key).
FORMAT = 1
FILE = "ref-index.json"
# Story profiles kept beyond the ones used by this process (newest first).
_KEEP_UNUSED = 2_000
# The modules whose output is cached (and what they call): a change to any of them, or to
# this one, invalidates the file.
_CODE = (rank, where, entries, vocab, markdown)
_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


class Source(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def text(self) -> str: ...


class RefFacts(NamedTuple):
    """What ranking needs of one reference, whatever the query."""

    ix: rank.RefIndex
    notes: tuple[tuple[str, ...], ...]  # per item: the files its `files:` note names
    footer: Mapping[str, Sequence[str]]  # its "## Files by story" footer: story id -> files


def _facts(topic: str, path: str, text: str) -> RefFacts:
    index = rank.ref_index(topic, path, text)
    notes = tuple(where.note_files(body) for _, body in index.items)
    return RefFacts(index, notes, where.footer_files(text))


class Plain:
    """The facts computed in this process (rank's and where's in-memory caches)."""

    def facts(self, sources: Sequence[Source]) -> list[RefFacts]:
        return [_facts(s.topic, s.path, s.text) for s in sources]

    def corpus(self, index: Sequence[rank.RefIndex], text_words: np.ndarray) -> rank.Corpus:
        return rank._corpus(index, text_words)

    def profile(self, text: str) -> tuple[int, Mapping[str, int]]:
        return rank.profile(text)

    def entry_files(self, history: str) -> Mapping[str, Sequence[str]]:
        return where.entry_files(history) if history else {}

    def story_order(self, history: str) -> Mapping[str, int]:
        return rank.story_order(history)


PLAIN = Plain()


@functools.cache
def _code_key() -> str:
    """A digest of FORMAT and of the source of the modules whose output the file holds."""
    h = hashlib.blake2b(f"{FORMAT}".encode(), digest_size=16)
    for name, file in [(m.__name__, m.__file__) for m in _CODE] + [(__name__, __file__)]:
        try:
            h.update(Path(str(file)).read_bytes())
        except (OSError, TypeError):
            h.update(name.encode())
    return h.hexdigest()


def _ref_key(src: Source) -> str:
    data = f"{src.topic}\0{src.path}\0{src.text}".encode("utf-8", "surrogateescape")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _strs_ok(x: list[Any]) -> bool:
    return set(map(type, x)) <= {str}


def _strs(x: Any) -> list[str]:
    if type(x) is not list or not _strs_ok(x):
        raise TypeError("not a list of strings")
    return x


def _counts(x: Any) -> bool:
    """Whether `x` is a story profile's {term: count} as the file holds it."""
    return type(x) is dict and set(map(type, x.values())) <= {int}


def _ints(x: Any) -> list[int]:
    if type(x) is not list or not set(map(type, x)) <= {int}:
        raise TypeError("not a list of integers")
    return x


def _offsets(counts: list[int]) -> list[int]:
    return [0, *itertools.accumulate(counts)]


class _Snap:
    """The file's columns: the facts of the references of the last prompt, in its order.
    Raises one of _ERRORS when the data is not what `_columns` writes."""

    def __init__(self, data: Any) -> None:
        self.keys = _strs(data["keys"])
        n = len(self.keys)
        counts = [_ints(data[k]) for k in ("n_items", "n_rows", "n_texts")]
        if any(len(c) != n or min(c, default=0) < 0 for c in counts):
            raise ValueError("columns of different lengths")
        self.item_at, self.row_at, self.text_at = (_offsets(c) for c in counts)
        self.items = _strs(data["items"])
        self.row_keys = _strs(data["row_keys"])
        self.text_words = _ints(data["text_words"])
        self.vocab = _strs(data["vocab"])
        self.terms = _strs(data["terms"])  # each vocabulary word's terms, space-separated
        ids = np.frombuffer(base64.b64decode(data["ids"], validate=True), dtype="<i4")
        self.ids = ids.astype(np.intp)
        self.word_at = _offsets(self.text_words)
        sizes = (len(self.items), len(self.row_keys), len(self.text_words), len(self.ids))
        if sizes != (2 * self.item_at[-1], self.row_at[-1], self.text_at[-1], self.word_at[-1]):
            raise ValueError("columns do not add up")
        if min(self.text_words, default=0) < 0 or len(self.terms) != len(self.vocab):
            raise ValueError("bad vocabulary")
        if len(self.ids) and (int(self.ids.min()) < 0 or int(self.ids.max()) >= len(self.vocab)):
            raise ValueError("word id out of range")
        self.notes: dict[int, list[Any]] = {}
        for r, pos, files in data["notes"]:
            self.notes.setdefault(int(r), []).append((int(pos), tuple(_strs(files))))
        self.footers = {
            int(r): {str(k): _strs(v) for k, v in f.items()} for r, f in data["footers"]
        }
        self.pos = {k: i for i, k in enumerate(self.keys)}

    def facts(self, r: int) -> RefFacts:
        """The facts of the reference at position `r` of the columns."""
        ia, ib = self.item_at[r], self.item_at[r + 1]
        flat = iter(self.items[2 * ia : 2 * ib])
        items = tuple(zip(flat, flat, strict=True))
        ta, tb = self.text_at[r], self.text_at[r + 1]
        index = rank.RefIndex(
            items,
            tuple(self.row_keys[self.row_at[r] : self.row_at[r + 1]]),
            cast("tuple[str, ...]", _Words(self, r)),
            tuple(self.text_words[ta:tb]),
        )
        if len(index.row_keys) < len(items):
            raise ValueError("fewer rows than items")
        notes: list[tuple[str, ...]] = [()] * len(items)
        for pos, files in self.notes.get(r, ()):
            notes[pos] = files
        return RefFacts(index, tuple(notes), self.footers.get(r, {}))

    def word_ids(self, r: int) -> np.ndarray:
        """The vocabulary ids of every word of the reference at position `r`."""
        a, b = self.word_at[self.text_at[r]], self.word_at[self.text_at[r + 1]]
        return self.ids[a:b]


class _Words(Sequence[str]):
    """A reference's words, spelled out from the file's word ids on first use: with the
    vocabulary cached too (`RefCache.corpus`), ranking never asks for them."""

    def __init__(self, snap: _Snap, r: int) -> None:
        self.snap, self.r = snap, r
        self.words: tuple[str, ...] | None = None

    def _all(self) -> tuple[str, ...]:
        if self.words is None:
            vocab = self.snap.vocab
            self.words = tuple(vocab[i] for i in self.snap.word_ids(self.r).tolist())
        return self.words

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        return self._all()[i]

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __hash__(self) -> int:
        return hash(self._all())


class _Built(NamedTuple):
    ixs: tuple[rank.RefIndex, ...]
    corpus: rank.Corpus
    vocab: list[str]
    terms: list[str]


class RefCache(Plain):
    """The facts, kept in `<cache folder>/ref-index.json` across processes."""

    def __init__(self, path: Path, create: bool) -> None:
        self.path = path
        self.create = create  # a user-cache folder may be made; a log folder may not
        self.snap: _Snap | None = None
        self.stories: dict[str, Any] = {}  # story text digest -> [terms, {term: count}]
        self.logs: dict[str, Any] = {}  # log digest -> {story id: files}
        self.live: dict[str, RefFacts] = {}  # facts met in this process, by reference key
        self.used: set[str] = set()
        # References whose text holds a secret (redact would change it): computed each time,
        # never written, so no secret reaches a file we write (the user's reference keeps it).
        self.volatile: set[str] = set()
        self.last: tuple[list[str], list[RefFacts], list[int | None]] | None = None
        self.built: _Built | None = None
        self._history: str | None = None  # the log `_history_key` is the digest of
        self._history_key = ""
        self.dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = _decode(self.path.read_bytes())
            if not isinstance(data, dict) or data.get("code") != _code_key():
                return  # another layout or other ranking code: start afresh
            stories, logs = data["stories"], data["logs"]
            if isinstance(stories, dict) and isinstance(logs, dict):
                self.snap = _Snap(data)
                self.stories, self.logs = stories, logs
        except (OSError, *_ERRORS):
            self.snap = None  # missing or damaged: it is only a cache

    def facts(self, sources: Sequence[Source]) -> list[RefFacts]:
        keys = [_ref_key(s) for s in sources]
        snap = self.snap
        out: list[RefFacts] = []
        where_: list[int | None] = []
        for key, src in zip(keys, sources, strict=True):
            at = snap.pos.get(key) if snap is not None else None
            hit = self.live.get(key)
            if hit is None and at is not None and snap is not None:
                with contextlib.suppress(*_ERRORS):
                    hit = self.live[key] = snap.facts(at)
            if hit is None:
                hit = self.live[key] = _facts(src.topic, src.path, src.text)
                at = None
                if _holds_secret(src.text):
                    self.volatile.add(key)
                else:
                    self.dirty = True
            out.append(hit)
            where_.append(at)
        if snap is None or [k for k in keys if k not in self.volatile] != snap.keys:
            self.dirty = True
        self.last = (keys, out, where_)
        return out

    def corpus(self, index: Sequence[rank.RefIndex], text_words: np.ndarray) -> rank.Corpus:
        built = self._build(index, text_words)
        return built.corpus if built is not None else rank._corpus(index, text_words)

    def _build(self, index: Sequence[rank.RefIndex], text_words: np.ndarray) -> _Built | None:
        """The vocabulary and word ids of `index` (the facts `facts` gave last): the file's
        for the references it holds, the rest added word by word."""
        b = self.built
        if b is not None and len(b.ixs) == len(index) and all(map(operator.is_, b.ixs, index)):
            return b
        if self.last is None or len(self.last[1]) != len(index):
            return None
        _, facts, where_ = self.last
        if not all(map(operator.is_, (f.ix for f in facts), index)):
            return None
        snap = self.snap
        words = list(snap.vocab) if snap is not None else []
        terms = list(snap.terms) if snap is not None else []
        if snap is not None and where_ == list(range(len(snap.keys))):
            ids = snap.ids  # the same references as last time
        else:
            known = {w: i for i, w in enumerate(words)}
            parts = []
            for f, at in zip(facts, where_, strict=True):
                if at is not None and snap is not None:
                    parts.append(snap.word_ids(at))
                    continue
                for w in f.ix.words:
                    if w not in known:
                        known[w] = len(words)
                        words.append(w)
                        terms.append(" ".join(rank.word_terms(w)))
                parts.append(np.fromiter(map(known.__getitem__, f.ix.words), dtype=np.intp))
            ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)
        self.built = _Built(tuple(index), _corpus_of(ids, terms, text_words, index), words, terms)
        return self.built

    def profile(self, text: str) -> tuple[int, Mapping[str, int]]:
        key = tokens.digest(text)
        self.used.add(key)
        raw = self.stories.get(key)
        if type(raw) is list and len(raw) == 2 and type(raw[0]) is int and _counts(raw[1]):
            return raw[0], raw[1]
        n, made = rank.profile(text)
        if not _holds_secret(text):  # a story text holding a secret is never written
            self.stories[key] = [n, dict(made)]
            self.dirty = True
        return n, made

    def _log(self, history: str) -> dict[str, Any]:
        """The facts kept for this log (the last log only: it grows every iteration)."""
        if history is not self._history:
            self._history, self._history_key = history, tokens.digest(history)
        raw = self.logs.get(self._history_key)
        if type(raw) is not dict:
            raw = {}
            self.logs = {self._history_key: raw}
        return raw

    def entry_files(self, history: str) -> Mapping[str, Sequence[str]]:
        if not history:
            return {}
        kept = self._log(history)
        raw = kept.get("files")
        if type(raw) is dict and all(type(v) is list and _strs_ok(v) for v in raw.values()):
            return raw
        made = where.entry_files(history)
        said = "\n".join(itertools.chain(made, itertools.chain.from_iterable(made.values())))
        if not _holds_secret(said):  # a log's ids or paths holding a secret: never written
            kept["files"] = {k: list(v) for k, v in made.items()}
            self.dirty = True
        return made

    def story_order(self, history: str) -> Mapping[str, int]:
        kept = self._log(history)
        raw = kept.get("order")
        if type(raw) is dict and set(map(type, raw.values())) <= {int}:
            return raw
        made = rank.story_order(history)
        if not _holds_secret("\n".join(made)):
            kept["order"] = made
            self.dirty = True
        return made

    def save(self) -> None:
        """Write the file when it changed (atomically; a failure costs speed, not results)."""
        if not self.dirty or self.last is None:
            return
        if not tokens.cache_folder_ready(self.path.parent, self.create):
            return
        keys, facts, where_ = self.last
        if self.volatile.intersection(keys):
            # Built again without them: their words must not reach the vocabulary either.
            kept = [i for i, k in enumerate(keys) if k not in self.volatile]
            keys, facts = [keys[i] for i in kept], [facts[i] for i in kept]
            self.last, self.built = (keys, facts, [where_[i] for i in kept]), None
        index = [f.ix for f in facts]
        text_words = np.fromiter(
            (n for ix in index for n in ix.text_words), dtype=np.intp, count=-1
        )
        built = self._build(index, text_words)
        if built is None:
            return
        body = {"format": FORMAT, "code": _code_key(), **_columns(keys, facts, built)}
        body["stories"] = _bounded(self.stories, self.used)
        body["logs"] = self.logs
        # ASCII: texts read with surrogateescape keep their odd bytes as \\udcXX escapes.
        data = json.dumps(body, separators=(",", ":")).encode("ascii")
        try:
            fsutil.atomic_write_bytes(self.path, data)
        except OSError as exc:  # fsutil's FileError is an OSError too
            log.debug("refcache.not_saved", path=str(self.path), error=str(exc))
            return
        self.dirty = False


def _decode(raw: bytes) -> Any:
    """The file's JSON: msgspec reads 10 MB in half the json module's time; a text kept
    with odd bytes (a lone surrogate escape, which msgspec refuses) goes through json."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


def _holds_secret(text: str) -> bool:
    """Whether redaction would change `text` (so it must not reach our file). Imported on
    a miss only: compiling redaction's patterns costs every warm prompt ~40 ms otherwise."""
    from orchestrator.redact import redact

    return redact(text) != text


def _corpus_of(
    ids: np.ndarray, terms: list[str], text_words: np.ndarray, index: Sequence[rank.RefIndex]
) -> rank.Corpus:
    """rank's corpus from word ids and each word's terms: the same figures `rank._corpus`
    computes from the words themselves (only the vocabulary's order may differ)."""
    n_terms = np.zeros(len(terms))
    holders: dict[str, list[tuple[int, int]]] = {}
    for i, t in enumerate(terms):
        if not t:
            continue
        split = t.split(" ")
        n_terms[i] = len(split)
        for term, c in Counter(split).items():
            holders.setdefault(term, []).append((i, c))
    owner = np.repeat(np.arange(len(text_words)), text_words)
    lengths = np.bincount(owner, weights=n_terms[ids], minlength=len(text_words))
    return rank.Corpus(tuple(index), ids, owner, lengths, holders)


def _columns(keys: list[str], facts: list[RefFacts], built: _Built) -> dict[str, Any]:
    """The file's columns for `facts`, the vocabulary cut to the words they use."""
    ids = built.corpus.ids
    used = np.unique(ids)
    remap = np.zeros(len(built.vocab), dtype=np.intp)
    remap[used] = np.arange(len(used))
    index = [f.ix for f in facts]
    flat = itertools.chain.from_iterable
    return {
        "keys": keys,
        "n_items": [len(ix.items) for ix in index],
        "n_rows": [len(ix.row_keys) for ix in index],
        "n_texts": [len(ix.text_words) for ix in index],
        "items": list(flat(flat(ix.items for ix in index))),
        "row_keys": list(flat(ix.row_keys for ix in index)),
        "text_words": list(flat(ix.text_words for ix in index)),
        "vocab": [built.vocab[i] for i in used.tolist()],
        "terms": [built.terms[i] for i in used.tolist()],
        "ids": base64.b64encode(remap[ids].astype("<i4").tobytes()).decode("ascii"),
        "notes": [
            [r, pos, list(files)]
            for r, f in enumerate(facts)
            for pos, files in enumerate(f.notes)
            if files
        ],
        "footers": [
            [r, {k: list(v) for k, v in f.footer.items()}] for r, f in enumerate(facts) if f.footer
        ],
    }


def _bounded(found: dict[str, Any], used: set[str]) -> dict[str, Any]:
    """The entries used in this process, then the newest others up to _KEEP_UNUSED."""
    keep = {k: v for k, v in found.items() if k in used}
    extra = [k for k in reversed(found) if k not in used][:_KEEP_UNUSED]
    for k in reversed(extra):
        keep[k] = found[k]
    return keep


_OPEN: dict[Path, RefCache] = {}


def open_cache(logs_dir: Path | str | None) -> Plain:
    """The project's cache (one per process and folder: a `ralph run` loop keeps it), or
    PLAIN when there is no project."""
    if logs_dir is None:
        return PLAIN
    folder, create = tokens.project_cache_dir(logs_dir)
    path = folder / FILE
    cache = _OPEN.get(path)
    if cache is None:
        cache = _OPEN[path] = RefCache(path, create)
    return cache


def save(cache: Plain) -> None:
    if isinstance(cache, RefCache):
        cache.save()
