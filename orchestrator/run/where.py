"""Where a story and a learning apply: the files and folders (areas) they touch.

A learning is about the code its story changed. Its files come from a `files:` note in the
item (when migrate or the agent writes one), else from the "Files changed" of the log
entries its `[US-xxx]` tag names. The files a new story will touch are predicted from
 - the files whose names its text mentions (files known from earlier entries, or the
   repository's tree when the caller has `git ls-files`), and
 - the files of the earlier stories that rank best on text and recency (pseudo-relevance
   feedback: in a Ralph log the stories about the same code share files), each lender
   independent evidence for its files (noisy-OR: a file many lenders share is likely, but
   no likelier than certain).
A group (the learnings of one earlier story) then scores by the predicted weight of its
best file: the same file counts fully, another file in the same folder (or a folder the
story names) at AREA_SHARE.
Pure and cached by content, like rank.py.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from orchestrator.memory import entries
from orchestrator.memory.entries import FILES_BY_STORY
from orchestrator.memory.vocab import extract_files, extract_story_ids
from orchestrator.run import rank

# A file in the same folder as a predicted one is evidence of the same area, not the file.
AREA_SHARE = 0.5
# Groups whose files feed the prediction (the best ones by text and recency).
FEEDBACK_GROUPS = 3
# "files: a.ts, b.ts", never a "file://" URI (a learning about URIs names no file).
_NOTE = re.compile(r"\bfiles?\s*:(?!//)\s*([^\n)]+)", re.IGNORECASE)
_NAMED = re.compile(r"\w")


def _norm(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.strip().strip("`'\"").lstrip("./").split("/") if p)


def file_key(path: str) -> str:
    """A file as logs name it in different ways (`src/a/b.ts`, `a/b.ts`): its last two
    parts, lower-cased."""
    return "/".join(_norm(path)[-2:]).lower()


def area_key(path: str) -> str:
    """The folder a file sits in, by its name ("" for a top-level file): `file_key`
    keeps only that much of the path."""
    parts = _norm(path)[:-1]
    return parts[-1].lower() if parts else ""


# Entries read for their files: the most recent ones (a 3,000-story log is not scanned
# whole on every prompt; a story that far back rarely shares this one's files).
_MAX_ENTRIES = 400
_ENTRY_HEAD = re.compile(r"^#{2,3}\s", re.MULTILINE)


@functools.lru_cache(maxsize=8)
def entry_files(history: str) -> dict[str, tuple[str, ...]]:
    """Story id -> the files its log entries changed (every entry naming that id), from
    the last _MAX_ENTRIES entries of the log."""
    starts = [m.start() for m in _ENTRY_HEAD.finditer(history)][-_MAX_ENTRIES:]
    out: dict[str, list[str]] = {}
    ids: list[str] = []
    for a, b in zip(starts, [*starts[1:], len(history)], strict=False):
        block = history[a:b]
        # A "### Files changed" sub-heading belongs to the entry heading above it.
        ids = extract_story_ids(block.split("\n", 1)[0]) or ids
        if ids and "file" in block.lower():
            for sid in ids:
                out.setdefault(sid, []).extend(extract_files(block))
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


@functools.cache
def note_files(text: str) -> tuple[str, ...]:
    """Files named by a `files:` note inside an item (`- [US-003] ... (files: a.ts, b.ts)`)."""
    found: list[str] = []
    for m in _NOTE.finditer(text):
        found += [p.strip(" `'\"") for p in m.group(1).split(",") if "/" in p or "." in p]
    return tuple(dict.fromkeys(f for f in found if _NAMED.search(f) and "://" not in f))


def group_files(
    names: Sequence[str],
    notes: Mapping[str, Iterable[str]],
    history: str,
    tag_ids: Mapping[str, tuple[str, ...]],
    footers: Mapping[str, Sequence[str]] | None = None,
    by_story: Mapping[str, Sequence[str]] | None = None,
) -> list[tuple[str, ...]]:
    """Files of each group: its items' `files:` notes, else its stories' log entries and
    their lines in the references' "## Files by story" footers (both: a footer keeps one
    path per story, the log may hold them all). `by_story` is `entry_files(history)` when
    the caller has it (refcache keeps it on disk)."""
    if by_story is None:
        by_story = entry_files(history) if history else {}
    out: list[tuple[str, ...]] = []
    for name in names:
        files = list(notes.get(name, ()))
        if not files:
            for sid in tag_ids.get(name, ()):
                files.extend(by_story.get(sid, ()))
                files.extend((footers or {}).get(sid, ()))
        out.append(tuple(dict.fromkeys(files)))
    return out


@functools.lru_cache(maxsize=65536)  # a repository's tree is matched on every prompt
def _file_terms(key: str) -> tuple[str, ...]:
    stem = key.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return rank.tokenize(stem)


def mentioned(query_terms: frozenset[str], files: Iterable[str]) -> dict[str, float]:
    """Files whose name the story's text mentions: the share (by idf over the names) of a
    file name's terms that the query holds, for files with at least one."""
    keys = list(dict.fromkeys(file_key(f) for f in files))
    return _named(query_terms, {k: _file_terms(k) for k in keys})


def mentioned_areas(query_terms: frozenset[str], files: Iterable[str]) -> dict[str, float]:
    """Folders whose name the story's text mentions ("convert all step titles" and
    `onboarding/steps/`), scored as `mentioned` scores file names."""
    keys = [a for a in dict.fromkeys(area_key(f) for f in files) if a]
    return _named(query_terms, {a: rank.tokenize(a) for a in keys})


def _named(query_terms: frozenset[str], terms: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
    df: dict[str, int] = {}
    for ts in terms.values():
        for t in set(ts):
            df[t] = df.get(t, 0) + 1
    out: dict[str, float] = {}
    for k, ts in terms.items():
        if not ts or not query_terms.intersection(ts):
            continue
        idf = {t: math.log1p(len(terms) / df[t]) for t in set(ts)}
        out[k] = sum(v for t, v in idf.items() if t in query_terms) / sum(idf.values())
    return out


def scores(
    query_terms: frozenset[str],
    files: Sequence[tuple[str, ...]],
    prior: np.ndarray,
    tree: Sequence[str] = (),
    feedback: int = FEEDBACK_GROUPS,
) -> np.ndarray:
    """Per group, in [0, 1]: how much its files overlap the files predicted for the story.

    `prior` is each group's score without files (text and recency); the best
    `feedback` of them whose files are known lend their files to the prediction,
    weighted by that score (a best group without files would lend nothing and leave the
    prediction empty when the story's text names no file)."""
    if not files or not any(files):
        return np.zeros(len(files))
    known = [f for fs in files for f in fs]
    weight = _lent(mentioned(query_terms, [*known, *tree]), files, prior, feedback)
    area = {a: AREA_SHARE * w for a, w in mentioned_areas(query_terms, known).items()}
    if not weight and not area:
        return np.zeros(len(files))
    for k, w in weight.items():
        a = area_key(k)
        if a:
            area[a] = max(area.get(a, 0.0), AREA_SHARE * w)
    out = np.zeros(len(files))
    for g, fs in enumerate(files):
        if fs:
            # Its best-predicted file: a learning applies when its story touched one file this
            # story will touch; a story that touched many files is no likelier to matter.
            out[g] = max(weight.get(file_key(f)) or area.get(area_key(f), 0.0) for f in fs)
    high = out.max(initial=0.0)
    return out / high if high > 0 else out


def _lent(
    weight: dict[str, float],
    files: Sequence[tuple[str, ...]],
    prior: np.ndarray,
    feedback: int,
) -> dict[str, float]:
    """Each file's chance that the story touches it: its name's mention in the story
    (`weight`, in [0, 1]) and every lending group (prior / the best prior) taken as
    independent evidence, combined as 1 - prod(1 - p) (noisy-OR). A sum, scaled by its
    largest value, made a file that several lenders share (a router, a types file) dwarf
    the file of the best group alone: that group's own learnings then scored a quarter of
    the file signal, and the learnings about the hub file rode along with every story."""
    has = np.array([bool(fs) for fs in files], dtype=bool)
    top = prior[has].max(initial=0.0)
    if top <= 0:
        return weight
    miss = {k: 1.0 - min(1.0, w) for k, w in weight.items()}
    ranked = [g for g in np.argsort(-prior, kind="stable").tolist() if has[g]]
    for g in ranked[:feedback]:
        p = min(1.0, float(prior[g]) / top)
        for k in {file_key(f) for f in files[g]}:
            miss[k] = miss.get(k, 1.0) * (1.0 - p)
    return {k: 1.0 - m for k, m in miss.items()}


@functools.lru_cache(maxsize=65536)
def footer_files(reference: str) -> dict[str, list[str]]:
    """{story id: files} from a reference's "## Files by story" footer (`ralph migrate`
    writes one line per story whose learnings name no path); {} without one. Cached by text."""
    return entries.files_by_story(reference) if FILES_BY_STORY in reference else {}
