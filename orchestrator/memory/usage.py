"""Learning from use: which references an iteration was given, opened and updated.

An agent's stream shows the files it opened (the adapters read it: `Agent.file_reads`).
Set beside what the prompt inlined and what the agent updated, that says:
- a *miss*: a reference it opened although the prompt did not inline it (the selector left
  out something the agent went looking for);
- *untouched*: an inlined reference it neither opened nor updated (its content was in the
  prompt, so not opening it is no fault: this only says the inlining was not followed up).
Each iteration record carries these as optional keys (`opened_references`,
`missed_references`, `untouched_references`, `progress_reads`); records without them (older
ledgers, agents whose output shows no tool calls) mean "not known", never "none".

Misses feed back: `prior_from_ledger` turns recent misses into a per-reference prior that
the selector adds to a reference's relevant items, and `ralph compact` keeps a reference
opened recently from ageing out.

Pure apart from `Path.resolve` of the project root and `prior_of`'s read of the ledger.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator import fsutil
from orchestrator.errors import FatalError
from orchestrator.log import get_logger

log = get_logger()

# Ledger keys (all optional on an iteration record).
OPENED = "opened_references"
MISSED = "missed_references"
UNTOUCHED = "untouched_references"
PROGRESS_READS = "progress_reads"
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
    inlined: Sequence[str], opened: Sequence[str], updated: Sequence[str]
) -> ReferenceUse:
    """Opened vs inlined vs updated, all already in one form (`agent_path`/`index_path`):
    missed = opened and not inlined; untouched = inlined, neither opened nor updated."""
    given = list(dict.fromkeys(inlined))
    seen = list(dict.fromkeys(opened))
    touched = set(seen) | set(updated)
    return ReferenceUse(
        inlined=given,
        opened=seen,
        missed=[p for p in seen if p not in set(given)],
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
    indexed template asks for the index table only)."""
    if reads is None:
        return {}
    opened: list[str] = []
    progress = 0
    for raw, whole in reads:
        rel = agent_path(raw, root)
        if is_reference(rel, refs_dir):
            opened.append(str(rel))
        elif rel == progress_path and whole:
            progress += 1
    use = reconcile(
        [index_path(p, refs_dir) for p in inlined],
        opened,
        [index_path(p, refs_dir) for p in updated],
    )
    return {
        OPENED: use.opened,
        MISSED: use.missed,
        UNTOUCHED: use.untouched,
        PROGRESS_READS: progress,
    }


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
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != "iteration":
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
        out.missed.update(str(p) for p in r.get(MISSED) or [])
        out.untouched += len(r.get(UNTOUCHED) or [])
        if r.get("mode") != "full":  # full mode inlines the log: reading it breaks no rule
            out.progress_reads += int(r.get(PROGRESS_READS) or 0)
    return out
