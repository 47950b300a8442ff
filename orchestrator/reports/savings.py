"""`ralph savings`: what a project's past stories would have loaded, indexed vs full history.

No agent runs. For each entry Ek (k >= 2) of the project's narrative log, in the order the
stories were done:

- full: what Ralph loaded for story k, i.e. its prompt with progress.txt as it stood before
  Ek (header, patterns, E1..E(k-1)); the same counterfactual `ralph run` logs as
  `full_history_tokens` (the user's prompt.md/CLAUDE.md plus the whole log when present).
- indexed: what ralph-index sends for story k: template + story + the Progress Index and the
  references selected from a memory built by `migrate.build_memory` over E1..E(k-1).

Story k's text comes from prd.json (matched by the ids in Ek's heading), else its id and
title from the heading, never Ek's body: the body was written after the story was done.

Reads only. The outputs (savings.json, savings-tokens.png) go to a folder of the caller's
choice (default: the project's log folder), never to prd.json, progress.txt or references.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import fsutil, ledger, redact
from orchestrator import tokens as tok
from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.progress import Entry, Progress
from orchestrator.memory.store import Memory, Reference
from orchestrator.project import Project
from orchestrator.reports import charts
from orchestrator.run import prompt as pr
from orchestrator.upkeep import migrate

log = get_logger()

JSON_NAME = "savings.json"
CHART_NAME = "savings-tokens.png"
ARCHIVE_GLOB = "progress-before-migrate-*.txt"


@dataclass
class Row:
    k: int  # 1-based position of the entry in chronological order
    story_id: str
    title: str
    log_tokens: int  # progress.txt before Ek
    full_tokens: int
    indexed_tokens: int
    references: int  # references built from E1..E(k-1)
    selected: list[str] = field(default_factory=list)
    over_budget: bool = False  # the indexed prompt could not fit budget.prompt_tokens

    @property
    def saved_pct(self) -> float:
        return ledger.saved_pct(self.full_tokens, self.indexed_tokens, digits=None)

    def to_dict(self) -> dict[str, Any]:
        saved = ledger.saved_pct(self.full_tokens, self.indexed_tokens)
        return {**dataclasses.asdict(self), "saved_pct": saved}


@dataclass
class Savings:
    project: str
    source: str  # the log replayed, root-relative
    entries: int
    rows: list[Row]
    current: dict[str, Any] | None = None  # next story with the project's real memory
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        full = sum(r.full_tokens for r in self.rows)
        indexed = sum(r.indexed_tokens for r in self.rows)
        return {
            "stories": len(self.rows),
            "full_tokens": full,
            "indexed_tokens": indexed,
            "saved_tokens": full - indexed,
            "saved_pct": ledger.saved_pct(full, indexed),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "source": self.source,
            "entries": self.entries,
            "rows": [r.to_dict() for r in self.rows],
            "totals": self.totals(),
            "current": self.current,
            "notes": self.notes,
        }


# ------------------------------------------------------------------------- the log


def log_source(project: Project) -> tuple[Path | None, str | None]:
    """The narrative log to replay, and a note when it is not progress.txt itself.

    A migrated progress.txt holds one line per past story, not the entries: its original is
    in the archive, which is what Ralph would have kept loading. An index without rows (a
    project set up by `ralph init` and run in full mode) still has every learning in the log.
    """
    path = Path(project.progress_path)
    if not path.is_file():
        return None, f"{project.rel(path)} does not exist: no history to replay"
    if not Progress.parse(fsutil.read_text(path)).index_rows:
        return path, None
    archived = sorted(Path(project.archive_dir).glob(ARCHIVE_GLOB))
    if archived:
        return archived[-1], (
            f"{project.rel(path)} is indexed: replaying the original log "
            f"archived by migrate, {project.rel(archived[-1])}"
        )
    return None, (
        f"{project.rel(path)} is already indexed and no original log is archived "
        f"({ARCHIVE_GLOB} in {project.rel(project.archive_dir)}): "
        "only the next story is measured"
    )


def chronological(text: str) -> list[tuple[Entry, tuple[int, int]]]:
    """Entries with their (start, end) in `text`, oldest first (some logs are newest first)."""
    pairs, pos = [], 0
    for e in Progress.parse(text).entries:
        start = text.find(e.text, pos)
        if start < 0:  # cannot happen for a lossless parse; never guess a span
            raise InputError(
                f"progress log: entry {e.heading!r} not found verbatim; "
                "please report this file (progress.Progress is lossless)"
            )
        pairs.append((e, (start, start + len(e.text))))
        pos = start + len(e.text)
    dates = [e.date[:10] for e, _ in pairs if e.date and re.match(r"\d{4}-\d{2}-\d{2}", e.date)]
    if len(dates) >= 3 and dates[0] > dates[-1]:
        pairs.reverse()
    return pairs


def before(text: str, later: list[tuple[int, int]]) -> str:
    """`text` without the spans of the entries not yet written (the log as it stood)."""
    out, pos = [], 0
    for a, b in sorted(later):
        out.append(text[pos:a])
        pos = b
    return "".join(out) + text[pos:]


def story_for(entry: Entry, prd: Prd | None, k: int) -> Story:
    if prd is not None:
        by_id = {s.id: s for s in prd.stories}
        for sid in entry.story_ids:
            if sid in by_id:
                return by_id[sid]
    sid = entry.story_ids[0] if entry.story_ids else f"E{k}"
    title = re.sub(r"^#+\s*", "", entry.heading)
    for noise in (entry.date, sid):
        if noise:
            title = title.replace(noise, " ")
    title = re.sub(r"^[\s\[\]()\-–—:|,]+|[\s\[\]()\-–—:|,]+$", "", re.sub(r"\s+", " ", title))
    return Story(id=sid, title=title or sid)


def _load_prd(path: Path) -> tuple[Prd | None, str | None]:
    """prd.json, or None and why (stories then come from the log's headings)."""
    if not path.is_file():
        return None, None
    try:
        return Prd.load(path), None
    except (OSError, InputError) as exc:
        reason = str(exc).splitlines()[0]
        log.info("savings.no_prd", path=str(path), reason=reason)
        return None, f"prd.json not used, stories named from the log's headings: {reason}"


# ------------------------------------------------------------------------- prompts


def _memory_at(
    log_text: str, prd: Prd | None, rel_dir: str, cap: int | None, enc: str
) -> tuple[Progress, list[Reference]]:
    before_index = Progress.parse(log_text)
    if before_index.index_text and not before_index.index_rows:
        # `ralph init`'s empty index: migrate leaves any indexed log alone, so cut it out.
        log_text = log_text.replace(before_index.index_text, "", 1)
    new_text, ref_texts = migrate.build_memory(
        log_text, prd, rel_dir=rel_dir, max_tokens=cap or migrate.DEFAULT_MAX_TOKENS
    )
    progress = Progress.parse(new_text)
    topics = {r.path: r.topic for r in progress.index_rows}
    refs = [
        Reference(topics.get(p, p), p, t, tok.count(t, enc), True) for p, t in ref_texts.items()
    ]
    return progress, refs


def _indexed(inp: pr.Inputs) -> tuple[pr.Assembled, bool]:
    try:
        return pr.build_indexed(inp, with_counterfactual=False), False
    except pr.PromptOverBudget:
        # `ralph run` would stop here; the figure without the budget still says what the
        # index alone costs, and the row is flagged.
        return pr.build_indexed(
            dataclasses.replace(inp, budget=None), with_counterfactual=False
        ), True


def replay_row(base: pr.Inputs, k: int, entry: Entry, log_text: str, prd: Prd | None) -> Row:
    story = story_for(entry, prd, k)
    progress, refs = _memory_at(
        log_text,
        prd,
        base.paths.get("references_dir", "ralph/references"),
        base.ref_cap,
        base.encoding,
    )
    always = tuple(base.always)
    if any(r.topic == migrate.PATTERNS_TOPIC for r in refs):
        always += (migrate.PATTERNS_TOPIC,)  # what migrate adds to ralph.yaml
    inp = dataclasses.replace(
        base,
        story=story,
        progress_text=log_text,
        index_text=progress.index_text,
        references=refs,
        always=always,
    )
    indexed, over = _indexed(inp)
    # The references were cut from this very log: Ralph had them once, in the log, so the
    # counterfactual must not add them again (prompt.counterfactual_tokens adds a real
    # project's references, whose learnings are no longer in its progress.txt).
    full = pr.counterfactual_tokens(dataclasses.replace(inp, references=[]))
    return Row(
        k=k,
        story_id=str(story.id),
        title=str(story.title),
        log_tokens=tok.count(log_text, base.encoding),
        full_tokens=full,
        indexed_tokens=indexed.tokens,
        references=len(refs),
        selected=indexed.selected,
        over_budget=over,
    )


def _base_inputs(project: Project, first: Story) -> pr.Inputs:
    empty = Memory(progress=Progress.parse(""), progress_text="", references=[])
    return pr.inputs_for(project, first, empty)


def current_state(project: Project, prd: Prd | None) -> dict[str, Any] | None:
    """The next story's real indexed prompt vs full, when the project has an index."""
    memory = Memory.load(project)
    if not memory.progress.index_rows or prd is None:
        return None
    story = prd.next_story()
    if story is None:
        return None
    try:
        a = pr.assemble(project, story, memory, mode="indexed")
    except pr.PromptOverBudget as exc:
        return {"story_id": story.id, "error": str(exc)}
    return {
        "story_id": story.id,
        "title": story.title,
        "indexed_tokens": a.tokens,
        "full_tokens": a.full_history_tokens,
        "selected": a.selected,
        "saved_pct": ledger.saved_pct(a.full_history_tokens, a.tokens),
    }


def measure(
    project: Project, *, last: int | None = None, on_row: Callable[[int, int], None] | None = None
) -> Savings:
    """Replay the project's history (the last `last` stories only, if given).

    Each row rebuilds the memory from scratch (as migrating at that point would), so a long
    history costs O(n^2); `on_row(done, total)` lets a caller show progress."""
    prd, prd_note = _load_prd(Path(project.prd_path))
    source, note = log_source(project)
    notes = [n for n in (note, prd_note) if n]
    text = fsutil.read_text(source) if source else ""
    pairs = chronological(text) if source else []
    rows: list[Row] = []
    if len(pairs) >= 2:
        base = _base_inputs(project, story_for(pairs[0][0], prd, 1))
        first = 2 if last is None else max(2, len(pairs) - last + 1)
        for k in range(first, len(pairs) + 1):
            log_text = before(text, [span for _, span in pairs[k - 1 :]])
            rows.append(replay_row(base, k, pairs[k - 1][0], log_text, prd))
            if on_row:
                on_row(len(rows), len(pairs) - first + 1)
    elif source is not None:
        notes.append(
            f"{project.rel(source)} has {len(pairs)} story "
            f"entr{'y' if len(pairs) == 1 else 'ies'}: savings need at least 2"
        )
    name = (prd.project if prd and prd.project else None) or Path(project.root).name
    return Savings(
        project=name,
        source=project.rel(source) if source else "",
        entries=len(pairs),
        rows=rows,
        current=current_state(project, prd),
        notes=notes,
    )


# ------------------------------------------------------------------------- outputs


def render_chart(s: Savings, path: Path) -> Path:
    """Tokens per past story and cumulative, full vs indexed, x = the story's position k.

    (report.render_chart numbers iterations from 1; here the first row is k = 2.)
    """
    plt = charts.pyplot()

    ks = [r.k for r in s.rows]
    series = {
        "full history (Ralph)": [r.full_tokens for r in s.rows],
        "indexed (ralph-index)": [r.indexed_tokens for r in s.rows],
    }
    fig, (per, cum) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for label, ys in series.items():
        per.plot(ks, ys, marker="o", markersize=3, label=label)
        cum.plot(ks, list(itertools.accumulate(ys)), marker="o", markersize=3, label=label)
    per.set_title("Prompt tokens per past story (est.)")
    cum.set_title(f"Cumulative: {s.totals()['saved_pct']:.1f}% saved")
    for ax in (per, cum):
        ax.set_xlabel("story k (order in the log)")
        ax.set_ylabel("tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{s.project}: {s.source}", fontsize=9)
    return charts.save_png(fig, path)


def write_outputs(s: Savings, out_dir: Path) -> dict[str, Path]:
    """savings.json and (when there are rows) savings-tokens.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / JSON_NAME}
    redact.write_text(paths["json"], json.dumps(s.to_dict(), indent=2) + "\n")
    if s.rows:
        paths["chart"] = render_chart(s, out_dir / CHART_NAME)
    return paths
