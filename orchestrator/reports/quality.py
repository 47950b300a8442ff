"""Quality of one run, beside its cost: what a user asks before switching memory modes.

From the ledger (one run's records): stories passed, iterations per passed story, post-story
check failures and restores, retries (transient failures and usage-limit waits), false
completions, wall time. From the agent's stream (the iteration transcripts the ledger names):
memory misses, i.e. reference files the agent opened although the prompt did not inline them
(the selector left out something the agent needed) and, in indexed mode, reads of the whole
`progress.txt` (against the template's "read the index table only").

Runs record what their agent opened in the ledger (memory.usage: `missed_references`,
`progress_reads`); for older ledgers the transcript is read by the agent's adapter
(`Agent.file_reads`), or as Claude-style and Codex-style streams when the agent is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.agents import claude, codex
from orchestrator.agents.base import get_agent, json_events
from orchestrator.agents.reads import FileRead
from orchestrator.errors import FatalError
from orchestrator.memory import usage

_REFERENCE = re.compile(r"(^|/)references/[^/\s]+\.md$")


@dataclass
class StreamReads:
    """What the agent opened during one iteration, from its stream."""

    references: list[str] = field(default_factory=list)  # paths as the agent named them
    progress_full_reads: int = 0


def stream_reads(text: str, agent: str | None = None) -> StreamReads:
    """What a transcript shows the agent opened, read by its adapter (`agent`: the ledger's
    agent name) or, when unknown, as Claude-style and Codex-style streams both."""
    events = json_events(text)
    found: list[FileRead] | None = None
    if agent:
        try:
            found = get_agent(agent, check=False).file_reads(text)
        except FatalError:  # a ralph.yaml-only agent name: its settings are not known here
            found = None
    if found is None:
        found = [*claude.stream_reads(events), *codex.exec_reads(events)]
    reads = StreamReads()
    for path, whole in found:
        _note(reads, path, whole=whole)
    return reads


def _note(reads: StreamReads, path: str, whole: bool) -> None:
    posix = path.replace("\\", "/")
    if _REFERENCE.search(posix):
        reads.references.append(posix)
    elif PurePosixPath(posix).name == "progress.txt" and whole:
        reads.progress_full_reads += 1


def transcript_path(ledger_path: Path, rec: dict[str, Any]) -> Path | None:
    """The iteration's transcript beside its ledger: `<logs>/<run_id>/iteration-N.log` (the
    ledger names it relative to the project; reports may sit elsewhere)."""
    rel = rec.get("transcript")
    if not rel:
        return None
    parts = PurePosixPath(str(rel)).parts
    if len(parts) < 2:
        return None
    return Path(ledger_path).parent / parts[-2] / parts[-1]


def iteration_misses(rec: dict[str, Any], ledger_path: Path) -> dict[str, Any]:
    """Memory misses of one iteration: as the run recorded them (memory.usage keys), else
    read from its transcript (older ledgers); None when neither is there."""
    indexed = rec.get("mode") == "indexed"
    if usage.OPENED in rec:
        return {
            "references_not_inlined": len(rec.get(usage.MISSED) or []),
            "progress_reads": int(rec.get(usage.PROGRESS_READS) or 0) if indexed else 0,
        }
    path = transcript_path(ledger_path, rec)
    if path is None or not path.is_file():
        return {"references_not_inlined": None, "progress_reads": None}
    text = path.read_text(encoding="utf-8", errors="replace")
    reads = stream_reads(text, str(rec.get("agent") or "") or None)
    selected = [str(s) for s in rec.get("selected_references") or []]
    missed = [r for r in reads.references if not any(r.endswith(s) for s in selected)]
    return {
        "references_not_inlined": len(missed),
        "progress_reads": reads.progress_full_reads if indexed else 0,
    }


def _ts(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _wall_time(records: list[dict[str, Any]], iterations: list[dict[str, Any]]) -> float:
    start = next((r for r in records if r.get("event") == "run_start"), None)
    end = next((r for r in reversed(records) if r.get("event") == "run_end"), None)
    t0, t1 = (_ts(start.get("ts")) if start else None), (_ts(end.get("ts")) if end else None)
    if t0 is not None and t1 is not None:
        return round((t1 - t0).total_seconds(), 1)
    return round(sum(float(r.get("duration_s") or 0) for r in iterations), 1)


def run_quality(records: list[dict[str, Any]], ledger_path: Path) -> dict[str, Any]:
    """Quality figures of one run, from its records (all events of that run)."""
    its = [r for r in records if r.get("event") == "iteration"]
    passed = {r.get("story_id") for r in its if r.get("outcome") == "passed"}
    misses = [iteration_misses(r, ledger_path) for r in its]
    known = [m for m in misses if m["references_not_inlined"] is not None]
    refs = sum(m["references_not_inlined"] for m in known)
    progress = sum(m["progress_reads"] for m in known)
    checks: list[dict[str, Any]] = [
        c if isinstance(c := r.get("checks"), dict) else {} for r in its
    ]
    return {
        "stories_passed": len(passed),
        "iterations": len(its),
        "iterations_per_passed_story": round(len(its) / len(passed), 3) if passed else None,
        "check_failures": sum(1 for c in checks if c.get("ok") is False),
        "restores": sum(1 for c in checks if c.get("restored")),
        "retries": sum(1 for r in records if r.get("event") in ("transient_retry", "limit_wait")),
        "false_completions": sum(1 for r in its if r.get("completion") == "false"),
        "wall_time_s": _wall_time(records, its),
        "memory_misses": refs + progress if known else None,
        "references_opened_not_inlined": refs if known else None,
        "progress_reads_indexed": progress if known else None,
        "streams_read": len(known),
    }
