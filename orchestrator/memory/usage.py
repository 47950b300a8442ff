"""Learning from use: which references an iteration was given, opened and updated.

An agent's stream shows the files it opened (the adapters read it: `Agent.file_reads`).
Set beside what the prompt inlined and what the agent updated, that says:
- a *miss*: a reference it opened although the prompt did not inline it (the selector left
  out something the agent went looking for). A sweep of the folder (`grep -r x
  ralph/references`, `cat ralph/references/*.md` matching several) opens each reference it
  reaches but misses none: the agent searched, it did not look for a left-out topic;
- *untouched*: an inlined reference it neither opened nor updated (its content was in the
  prompt, so not opening it is no fault: this only says the inlining was not followed up).
Each iteration record carries these as optional keys (`opened_references`,
`missed_references`, `untouched_references`, `progress_reads`); records without them (older
ledgers, agents whose output shows no tool calls) mean "not known", never "none".

Misses feed back: `prior_from_ledger` turns recent misses into a per-reference prior that
the selector adds to a reference's relevant items, and `ralph compact` keeps a reference
opened recently from ageing out.

Pure apart from `Path.resolve` of the project root, the look at the references folder
(which reads exist, what a glob or a folder holds) and `prior_of`'s read of the ledger.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator import fsutil, ledger
from orchestrator.errors import FatalError
from orchestrator.log import get_logger

log = get_logger()

# Aged references, inside the references folder (`ralph compact` moves them there).
ARCHIVE_DIR = "archive"
# Ledger keys (all optional on an iteration record).
OPENED = "opened_references"
MISSED = "missed_references"
UNTOUCHED = "untouched_references"
PROGRESS_READS = "progress_reads"
# How many references a search or a glob over the folder read besides those listed.
SWEPT = "swept_references"
# A miss counts half as much every PRIOR_HALF_LIFE stories; older than PRIOR_HORIZON stories
# it no longer counts (its weight would be under 1/16).
PRIOR_HALF_LIFE = 3.0
PRIOR_HORIZON = 12


def agent_path(raw: str, root: Path) -> str | None:
    """A path as the agent named it, relative to the project root (posix, `.` and `..`
    folded), or None when it leaves the project. Relative paths are read from the root:
    the agent runs there."""
    text = raw.strip().strip("'\"`").replace("\\", "/")
    if not text:
        return None
    if text.startswith("/"):
        for base in dict.fromkeys([os.path.normpath(root), os.path.normpath(root.resolve())]):
            rel = os.path.relpath(os.path.normpath(text), base)
            if not rel.startswith(".."):
                return PurePosixPath(rel).as_posix()
        return None
    rel = os.path.normpath(text)
    if rel == ".." or rel.startswith("../") or rel.startswith("/"):
        return None
    return PurePosixPath(rel).as_posix()


def index_path(raw: str, refs_dir: str) -> str:
    """An index row's path in the same form (a bare file name lives in the references
    folder, as `ReferenceStore.resolve` reads it)."""
    text = os.path.normpath(raw.strip().strip("`").replace("\\", "/"))
    path = PurePosixPath(text)
    return (PurePosixPath(refs_dir) / path).as_posix() if len(path.parts) == 1 else path.as_posix()


def is_reference(rel: str | None, refs_dir: str) -> bool:
    """True for a markdown file inside the references folder (never anything outside it)."""
    if not rel or not rel.endswith(".md"):
        return False
    folder = PurePosixPath(refs_dir).parts
    parts = PurePosixPath(rel).parts
    return len(parts) > len(folder) and parts[: len(folder)] == folder


@dataclass(frozen=True)
class ReferenceUse:
    """One iteration's references, each list in first-seen order without repeats."""

    inlined: list[str]
    opened: list[str]
    missed: list[str]
    untouched: list[str]


def reconcile(
    inlined: Sequence[str],
    opened: Sequence[str],
    updated: Sequence[str],
    searched: Iterable[str] = (),
) -> ReferenceUse:
    """Opened vs inlined vs updated, all already in one form (`agent_path`/`index_path`):
    missed = opened and not inlined, unless only `searched` (read by a search or a glob
    over many references, not because the agent wanted that topic); untouched = inlined,
    neither opened nor updated."""
    given = list(dict.fromkeys(inlined))
    seen = list(dict.fromkeys(opened))
    touched = set(seen) | set(updated)
    swept = set(searched)
    return ReferenceUse(
        inlined=given,
        opened=seen,
        missed=[p for p in seen if p not in set(given) and p not in swept],
        untouched=[p for p in given if p not in touched],
    )


def ledger_fields(
    reads: Iterable[tuple[str, bool]] | None,
    *,
    inlined: Sequence[str],
    updated: Sequence[str],
    root: Path,
    refs_dir: str,
    progress_path: str,
) -> dict[str, Any]:
    """The optional keys of an iteration record ({} when the agent's reads are unknown).
    `reads` are (path as the agent named it, read whole?) pairs; `progress_path` is
    progress.txt relative to the root. `progress_reads` counts whole reads of it (the
    indexed template asks for the index table only).

    Only existing references are recorded (`ReferenceFolder.expand`). A search of the
    references folder (`grep -r x ralph/references`, a Grep tool on the folder) or a
    wildcard matching several references (`cat ralph/references/*.md`) opens each of them
    but misses none: the agent swept the folder rather than looked for a topic the prompt
    left out, and counting every reference as a miss would give all of them the same
    prior, which ranks nothing. References the agent updated are left out of its sweeps:
    the folder is read as it is after the iteration, and a sweep may have come before the
    agent wrote that reference."""
    if reads is None:
        return {}
    folder = ReferenceFolder(root, refs_dir)
    changed = [index_path(p, refs_dir) for p in updated]
    given = [index_path(p, refs_dir) for p in inlined]
    opened: dict[str, None] = {}
    targeted: set[str] = set()
    expanded: set[str] = set()
    progress = 0
    for raw, whole in reads:
        if raw not in expanded:  # each path expanded once: agents repeat their sweeps
            expanded.add(raw)
            for rel, swept in folder.expand(raw):
                if swept and rel in changed:
                    continue  # the folder as it is now: a sweep may predate this file
                opened[rel] = None
                if not swept:
                    targeted.add(rel)
        if whole and folder.names(raw, progress_path):
            progress += 1
    sweeps = set(opened) - targeted
    use = reconcile(given, list(opened), changed, searched=sweeps)
    # Listed: what was opened by name, and what a sweep read of the prompt's references;
    # the rest of a sweep is a count. Listing it made records of 300 kB at 10,000
    # references, and kept every reference from ageing in `ralph compact`.
    return {
        OPENED: [r for r in use.opened if r in targeted or r in given],
        MISSED: use.missed,
        UNTOUCHED: use.untouched,
        SWEPT: len(sweeps.difference(given)),
        PROGRESS_READS: progress,
    }


class ReferenceFolder:
    """The references folder of one project, for matching what an agent read against the
    references that exist: braces and globs are expanded against its files (listed once,
    when a glob or a folder first needs them), never against the rest of the project."""

    def __init__(self, root: Path, refs_dir: str) -> None:
        self.root = root
        self.refs_dir = PurePosixPath(os.path.normpath(refs_dir)).as_posix()
        self.archive = f"{self.refs_dir}/{ARCHIVE_DIR}"
        self._files: list[str] | None = None

    def files(self) -> list[str]:
        """Every reference (a markdown file in the folder or below; hidden ones left out,
        as a shell glob leaves them out), relative to the root."""
        if self._files is None:
            self._files = _markdown_under(self.root, self.refs_dir)
        return self._files

    def expand(self, raw: str) -> list[tuple[str, bool]]:
        """The existing references a read of `raw` touched, each with whether it was swept
        (a folder searched, or one of several matches of a wildcard) rather than named."""
        out: list[tuple[str, bool]] = []
        for alt in expand_braces(raw):
            rel = agent_path(alt, self.root)
            if rel is None:
                continue
            if _has_wildcard(rel):
                found = [f for f in self._swept(rel) if glob_match(rel, f)]
                out += [(f, len(found) > 1) for f in found]
            else:
                out += self._literal(rel, relative=not alt.strip().startswith("/"))
        return out

    def _literal(self, rel: str, relative: bool) -> list[tuple[str, bool]]:
        hits = self._at(rel)
        if hits is not None or not relative or (self.root / rel).exists():
            return hits or []
        # Not there from the root: the command ran inside the folder (a Codex exec_command
        # `workdir`, which its JSON does not report; a `cd` in an earlier tool call).
        base = PurePosixPath(self.refs_dir)
        for parent in (base, *base.parents[:-1]):
            hits = self._at(os.path.normpath(f"{parent}/{rel}"))
            if hits is not None:
                return hits
        return []

    def _at(self, rel: str) -> list[tuple[str, bool]] | None:
        """An existing reference file (named), or the references under an existing folder
        inside the references folder (swept); None when `rel` is neither."""
        path = self.root / rel
        if is_reference(rel, self.refs_dir) and path.is_file():
            return [(PurePosixPath(rel).as_posix(), False)]
        if _within(rel, self.refs_dir) and path.is_dir():
            return [(f, True) for f in self._swept(rel) if _within(f, rel)]
        return None

    def _swept(self, named: str) -> list[str]:
        """The references a sweep of `named` (a folder or a glob) may reach: aged ones in
        the archive only when it names the archive (a search of the folder that also went
        through the archive was not after an aged reference)."""
        if _within(named, self.archive):
            return self.files()
        return [f for f in self.files() if not _within(f, self.archive)]

    def names(self, raw: str, path: str) -> bool:
        """Whether a read of `raw` (braces and globs included) is a read of `path`."""
        for alt in expand_braces(raw):
            rel = agent_path(alt, self.root)
            if rel is not None and (rel == path or (_has_wildcard(rel) and glob_match(rel, path))):
                return True
        return False


def _within(rel: str, folder: str) -> bool:
    return rel == folder or rel.startswith(folder + "/")


def _markdown_under(root: Path, folder: str) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root / folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = PurePosixPath(os.path.relpath(dirpath, root)).as_posix()
        out += [f"{rel}/{f}" for f in sorted(filenames) if f.endswith(".md") and f[0] != "."]
    return out


def _has_wildcard(text: str) -> bool:
    return any(c in text for c in "*?[")


def glob_match(pattern: str, path: str) -> bool:
    """Whether a relative posix `path` matches a shell glob: `*`, `?` and `[...]` within one
    name (not matching a leading dot), `**` for any number of folders (as `find DIR -name`
    is written by agents.reads, and as globstar reads it)."""
    pats = pattern.split("/")
    names = path.split("/")
    # ok[j]: pats[:i] matches names[:j], row by row (time: pattern parts x path parts).
    ok = [True] + [False] * len(names)
    for pat in pats:
        if pat == "**":
            for j in range(1, len(names) + 1):
                ok[j] = ok[j] or ok[j - 1]
            continue
        ok = [False] + [ok[j] and _name_match(pat, names[j]) for j in range(len(names))]
    return ok[-1]


def _name_match(pattern: str, name: str) -> bool:
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


MAX_BRACE_WORDS = 64
MAX_BRACE_TEXT = 1024  # longer than any path: left as written (the scan is quadratic)


def expand_braces(word: str, limit: int = MAX_BRACE_WORDS) -> list[str]:
    """A word's shell brace expansion (`a/{b,c}.md` -> `a/b.md`, `a/c.md`; nested and
    repeated groups too), at most `limit` words; `${x}`, `{}` and a group without a comma
    stay as written."""
    if len(word) > MAX_BRACE_TEXT:
        return [word]
    queue = [word]
    out: list[str] = []
    while queue and len(out) < limit:
        text = queue.pop(0)
        span = _brace_group(text)
        if span is None:
            out.append(text)
            continue
        start, end, alts = span
        queue += [text[:start] + a + text[end + 1 :] for a in alts][: limit - len(queue)]
    return out


def _brace_group(text: str) -> tuple[int, int, list[str]] | None:
    """The first `{...}` with a top-level comma: (its start, its end, its alternatives)."""
    start = text.find("{")
    while start != -1:
        if start == 0 or text[start - 1] != "$":
            depth, commas = 0, []
            for i in range(start, len(text)):
                ch = text[i]
                depth += (ch == "{") - (ch == "}")
                if ch == "," and depth == 1:
                    commas.append(i)
                elif depth == 0:
                    if not commas:
                        break
                    cuts = [start, *commas, i]
                    return start, i, [text[a + 1 : b] for a, b in itertools.pairwise(cuts)]
        start = text.find("{", start + 1)
    return None


def _iterations(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("event") == "iteration"]


def prior_from_ledger(
    records: Iterable[Mapping[str, Any]],
    *,
    half_life: float = PRIOR_HALF_LIFE,
    horizon: int = PRIOR_HORIZON,
) -> dict[str, float]:
    """Per reference path, a prior in (0, 1] from its recent misses: each miss weighs
    0.5 ** (stories since / half_life) (0 for the latest story), summed and capped at 1.
    Stories are counted by distinct story id, newest first; misses older than `horizon`
    stories are forgotten. References never missed are absent."""
    its = [r for r in _iterations(records) if r.get("story_id")]
    order: list[str] = []
    for r in reversed(its):
        if r["story_id"] not in order:
            order.append(str(r["story_id"]))
    age = {sid: n for n, sid in enumerate(order[:horizon])}
    prior: dict[str, float] = {}
    for r in its:
        n = age.get(str(r["story_id"]))
        if n is None:
            continue
        for path in r.get(MISSED) or []:
            prior[str(path)] = prior.get(str(path), 0.0) + 0.5 ** (n / half_life)
    return {p: round(min(1.0, w), 6) for p, w in prior.items()}


def prior_of(
    ledger_path: Path | str | None, paths: Iterable[str] = (), refs_dir: str = ""
) -> dict[str, float]:
    """`prior_from_ledger` of the project's ledger, keyed by the ledger's paths and also by
    each of `paths` as the index writes it (a bare file name, `./ralph/...`), which is how
    the selector names references. {} when there is no ledger yet, or it cannot be read:
    the prior only helps ranking, and a prompt must not fail for it."""
    if not ledger_path:
        return {}
    try:
        prior = prior_from_ledger(recent_iterations(Path(ledger_path), PRIOR_HORIZON))
    except (OSError, FatalError) as exc:
        log.warning("prior_unavailable", ledger=str(ledger_path), error=str(exc))
        return {}
    for path in paths if prior else ():
        key = index_path(path, refs_dir) if refs_dir else path
        if key in prior:
            prior[path] = prior[key]
    return prior


def recent_iterations(path: Path, stories: int) -> list[dict[str, Any]]:
    """The iteration records of the last `stories` distinct stories, in file order, read
    from the end of the ledger: a prompt is built every iteration, and parsing a long
    ledger whole for the last few stories would cost more than the ranking. Damaged lines
    are skipped, as `ledger.read` does."""
    if not fsutil.present(path):
        return []
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in reversed(fsutil.read_bytes(path).splitlines()):
        if b'"iteration"' not in line[:48]:  # `event` is a record's first key
            continue
        rec = ledger.parse_line(line)  # None for a damaged line or wrong field types
        if rec is None or rec.get("event") != "iteration":
            continue
        sid = str(rec.get("story_id") or "")
        if sid not in seen and len(seen) == stories:
            break
        seen.add(sid)
        out.append(rec)
    return out[::-1]


@dataclass
class UseSummary:
    """Reference use over a set of iterations (those whose stream showed reads)."""

    known: int = 0  # iterations that recorded their reads
    opened: int = 0
    swept: int = 0  # read by a search or glob over the folder, besides those opened
    missed: Counter[str] = field(default_factory=Counter)
    untouched: int = 0
    progress_reads: int = 0

    @property
    def misses(self) -> int:
        return sum(self.missed.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "known": self.known,
            "opened": self.opened,
            "swept": self.swept,
            "missed": self.misses,
            "missed_paths": dict(self.missed.most_common()),
            "untouched": self.untouched,
            "progress_reads": self.progress_reads,
        }


def summarize(records: Iterable[Mapping[str, Any]]) -> UseSummary:
    """Totals over the iteration records given; records without the keys are skipped."""
    out = UseSummary()
    for r in _iterations(records):
        if OPENED not in r:
            continue
        out.known += 1
        out.opened += len(r.get(OPENED) or [])
        out.swept += int(r.get(SWEPT) or 0)
        out.missed.update(str(p) for p in r.get(MISSED) or [])
        out.untouched += len(r.get(UNTOUCHED) or [])
        if r.get("mode") != "full":  # full mode inlines the log: reading it breaks no rule
            out.progress_reads += int(r.get(PROGRESS_READS) or 0)
    return out
