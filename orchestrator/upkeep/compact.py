"""`ralph compact`: the ageing rule that keeps references/ from becoming the new graveyard.

Driven by the ledger (which references each story selected or updated): references unused
in the last `references.stale_after` stories move to `references/archive/` and their rows to
an `## Archived` table (still findable); oversized references are listed for condensing;
near-duplicate topics are merged (every bullet kept); the narrative log beyond the last
`log.keep_entries` entries moves to the archive file. Dry run by default; `apply` performs
all writes as one journalled `Transaction`, so an interrupted apply is completed or rolled
back, never left half-done.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator import fsutil, ledger, tokens
from orchestrator.agents import runner
from orchestrator.agents.base import get_agent
from orchestrator.log import get_logger
from orchestrator.memory import areas, refloss, usage
from orchestrator.memory.journal import Transaction
from orchestrator.memory.progress import Progress
from orchestrator.project import Project, ensure_logs_dir
from orchestrator.upkeep import audit

log = get_logger()

LOG_ARCHIVE = "progress-log.md"
OTHER_AREA = "Other topics"


# ---------------------------------------------------------------- the plan


@dataclass
class CompactPlan:
    stale: list[audit.Row] = field(default_factory=list)
    stale_note: str = ""
    oversized: list[tuple[audit.Row, int]] = field(default_factory=list)
    merges: list[tuple[audit.Row, audit.Row]] = field(default_factory=list)
    # (area topic, its index path, the rows it now lists): past references.max_topics
    nested: list[tuple[str, str, list[audit.Row]]] = field(default_factory=list)
    rotated: int = 0
    rotate_note: str = ""
    writes: dict[Path, str | None] = field(default_factory=dict)
    progress_before: int = 0
    progress_after: int = 0
    refs_before: int = 0
    refs_after: int = 0

    @property
    def empty(self) -> bool:
        return not self.writes


def _ref_keys(value: str) -> set[str]:
    v = value.strip().strip("`").lower()
    return {v, Path(v).stem, audit.norm_topic(v)}


def recent_usage(records: list[dict[str, Any]], window: int) -> tuple[set[str], int]:
    """Keys of references selected, opened or updated in the last `window` distinct stories,
    and how many distinct stories the ledger knows (fewer than the window: too early to age)."""
    its = [r for r in records if r.get("event") == "iteration" and r.get("story_id")]
    order: list[str] = []
    for r in reversed(its):
        if r["story_id"] not in order:
            order.append(r["story_id"])
    recent = set(order[:window])
    used: set[str] = set()
    for r in its:
        if r["story_id"] in recent:
            for ref in (r.get("selected_references") or []) + (r.get("updated_references") or []):
                used |= _ref_keys(str(ref))
            for ref in r.get(usage.OPENED) or []:  # opened (missed or not): still in use
                used |= _ref_keys(str(ref))
    return used, len(order)


def _epoch(ts: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stories_since(records: list[dict[str, Any]], since: float) -> int:
    """Distinct stories the ledger records after `since` (records without a readable
    timestamp count: better to age a little early than to keep a graveyard)."""
    ids = set()
    for r in records:
        if r.get("event") == "iteration" and r.get("story_id"):
            t = _epoch(r.get("ts"))
            if t is None or t > since:
                ids.add(r["story_id"])
    return len(ids)


def _read_ledger(project: Project) -> list[dict[str, Any]]:
    try:
        return ledger.read(project.ledger_path)
    except OSError:
        return []


@dataclass
class _Work:
    """What the steps of `plan` share: the memory as read, the index rows still live, the
    references' texts as they will be, and the writes so far."""

    mem: audit.MemoryFiles
    progress: Progress
    live: list[audit.Row]
    texts: dict[str, str | None]
    always: set[str]
    ref_writes: dict[Path, str | None] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)  # paths of merged and archived references


def plan(project: Project) -> CompactPlan:
    cfg = project.config
    mem = audit.MemoryFiles.load(project)
    out = CompactPlan(progress_before=tokens.count(mem.text))
    # A row with extra cells is the user's to fix (`ralph check` names it): merging or ageing
    # it would drop the line, and what the extra cells said with it.
    live = [r for r in mem.rows if not r.archived and not r.extra_cells]
    texts = {r.path: mem.read(r.path) for r in live}
    out.refs_before = sum(tokens.count(t) for t in texts.values() if t is not None)
    always = {audit.norm_topic(t) for t in [*cfg.references.always, "Codebase patterns"]}
    work = _Work(mem, mem.progress, live, texts, always)
    _merge(out, work)
    if cfg.references.stale_after:
        _age(out, work, project, cfg.references.stale_after)
    # Bounded topics: past references.max_topics rows, group them under area references.
    limit = cfg.references.max_topics
    if limit and len(work.live) > limit:
        _nest(out, work, limit)
    _oversized(out, work, cfg.references.max_tokens)
    _rotate(out, work, project, cfg.log.keep_entries)
    text = work.progress.render()
    if text != mem.text:
        out.writes[project.progress_path] = text
    out.writes.update(work.ref_writes)
    out.progress_after = tokens.count(text)
    out.refs_after = sum(tokens.count(t) for p, t in texts.items() if p not in work.gone and t)
    return out


def _merge(out: CompactPlan, work: _Work) -> None:
    """Near-duplicate topics: merge the later row into the earlier (every line kept)."""
    mem, texts = work.mem, work.texts
    dropped: set[str] = set()
    for a, b in audit.near_duplicate_pairs(work.live):
        a_text, b_text = texts.get(a.path), texts.get(b.path)
        if a.path in dropped or b.path in dropped or a_text is None:
            continue
        if b_text is None or a.path == b.path:
            continue
        out.merges.append((a, b))
        texts[a.path] = merge_texts(a_text, b_text, b)
        work.ref_writes[mem.abs(a.path)] = texts[a.path]
        work.ref_writes[mem.abs(_archived_path(mem, b.path, "merged"))] = b_text
        work.ref_writes[mem.abs(b.path)] = None
        dropped.add(b.path)
    work.progress = work.progress.without_rows([(b.topic, b.path) for _a, b in out.merges])
    work.live = [r for r in work.live if r.path not in dropped]
    work.gone |= dropped


def _age(out: CompactPlan, work: _Work, project: Project, window: int) -> None:
    """References unused in the last `window` stories of the ledger move to the archive
    folder, their rows to the `## Archived` table."""
    records = _read_ledger(project)
    used, n_stories = recent_usage(records, window)
    if n_stories < window:
        out.stale_note = (
            f"ageing skipped: the ledger records {n_stories} stories, fewer than "
            f"references.stale_after ({window})"
        )
        return
    mem = work.mem
    archived: list[tuple[str, str]] = []
    for r in work.live:
        if not _is_stale(work, r, used) or (text := work.texts.get(r.path)) is None:
            continue
        # A reference written (migrated, edited) after those stories has not had its
        # chance yet: age it only after `window` stories ran since.
        if stories_since(records, mem.abs(r.path).stat().st_mtime) < window:
            continue
        out.stale.append(r)
        dest = _archived_path(mem, r.path, "")
        work.ref_writes[mem.abs(dest)] = text
        work.ref_writes[mem.abs(r.path)] = None
        archived.append((r.topic, dest))
    stale = [(r.topic, r.path) for r in out.stale]
    work.progress = work.progress.without_rows(stale).with_archived_rows(archived)
    stale_paths = {r.path for r in out.stale}
    work.live = [r for r in work.live if r.path not in stale_paths]
    work.gone |= stale_paths


def _is_stale(work: _Work, r: audit.Row, used: set[str]) -> bool:
    """Neither an `always` topic nor used recently (an area is in use when one of its
    topics is)."""
    keys = _ref_keys(r.path) | _ref_keys(r.topic)
    for n in work.mem.nested_of(r.path):
        keys |= _ref_keys(n.path) | _ref_keys(n.topic)
    return audit.norm_topic(r.topic) not in work.always and not keys & used


def _oversized(out: CompactPlan, work: _Work, cap: int) -> None:
    """References over the cap are listed (condensed only on request)."""
    for r in work.live:
        t = work.texts.get(r.path)
        if t is not None and not areas.is_area(t) and tokens.count(t) > cap:
            out.oversized.append((r, tokens.count(t)))


def _rotate(out: CompactPlan, work: _Work, project: Project, keep: int) -> None:
    """The log's entries before the last `keep` move to the archive file; not those of a
    log without a Progress Index, whose learnings are in its entries only (a Ralph agent
    reads progress.txt, never the archive)."""
    rotated, moved = work.progress.rotated(keep)
    if not moved:
        return
    if not work.progress.has_index:
        out.rotate_note = (
            f"kept {len(moved)} old log entries: this log has no Progress Index, so their "
            "learnings are nowhere else; run `ralph migrate` first, then compact"
        )
        return
    work.progress = rotated
    out.rotated = len(moved)
    archive = project.archive_dir / LOG_ARCHIVE
    old = fsutil.read_text(archive) if archive.exists() else ""
    sep = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
    out.writes[archive] = old + sep + "".join(moved)


def _area_key(row: audit.Row, text: str | None) -> str:
    """Which area a topic belongs to: its name's lead ("Billing" of "Billing: refunds"),
    else the first folder its reference's `Areas:` line names, else none ("")."""
    lead = row.topic.split(":", 1)[0].strip() if ":" in row.topic else ""
    if lead:
        return lead
    m = re.search(r"(?m)^Areas?:\s*`?([^`,\n]+?)/?`?(?:,|$)", text or "")
    if m:
        parts = [p for p in m.group(1).split("/") if p]
        return " / ".join(parts[-2:]).capitalize() if parts else ""
    return ""


def _groups(
    rows: list[audit.Row], texts: dict[str, str | None], limit: int, fixed: int
) -> dict[str, list[audit.Row]]:
    """Rows by area; the smallest groups fold into "Other topics" until the index (the
    groups, the rows left alone and `fixed` rows that stay) is within `limit`."""
    groups: dict[str, list[audit.Row]] = {}
    for r in rows:
        groups.setdefault(_area_key(r, texts.get(r.path)) or OTHER_AREA, []).append(r)
    other = groups.pop(OTHER_AREA, [])
    order = sorted(groups, key=lambda k: (len(groups[k]), k))
    while order and len(order) + fixed + (1 if other else 0) > limit:
        other.extend(groups.pop(order.pop(0)))
    if other:
        groups[OTHER_AREA] = sorted(other, key=lambda r: r.line)
    return groups


def _nest(out: CompactPlan, work: _Work, limit: int) -> None:
    """Group index rows under area references (written beside them, listing their rows) so
    the index keeps at most `limit` rows; the topics' files stay where they are."""
    mem, live = work.mem, work.live
    keep = [r for r in live if audit.norm_topic(r.topic) in work.always or mem.is_area(r.path)]
    movable = [r for r in live if r not in keep]
    texts = {r.path: mem.read(r.path) for r in movable}
    groups = _groups(movable, texts, limit, len(keep))
    used = {r.path for r in live}
    replace: dict[str, tuple[str, str]] = {}
    for name, rows in groups.items():
        if len(rows) < 2:
            continue
        path, n = mem.project.references.index_path_for(name), 2
        while path in used or mem.abs(path).exists():
            path, n = mem.project.references.index_path_for(f"{name} {n}"), n + 1
        used.add(path)
        about = f"{name.lower()}" if name != OTHER_AREA else "topics of no one area"
        rendered = areas.render(name, about, [(r.topic, r.path) for r in rows])
        work.ref_writes[mem.abs(path)] = rendered
        out.nested.append((name, path, rows))
        replace.update((r.path, (name, path)) for r in rows)
    # One pass over the index: a grouped row gives way to its area's row (written where
    # the area's first row was), the others stay as they are.
    work.progress = work.progress.with_rows_replaced(replace)


def apply(project: Project, p: CompactPlan) -> None:
    txn = Transaction(project.ralph_dir, project.root)
    for path, text in p.writes.items():
        if text is None:
            txn.delete(path)
        else:
            txn.write(path, text)
    txn.commit()


# ---------------------------------------------------------------- text helpers


def _archived_path(mem: audit.MemoryFiles, path: str, sub: str) -> str:
    # The row's path is user text: its last part becomes a name in the archive folder.
    name = fsutil.safe_name(path.rsplit("/", 1)[-1])
    parts = [mem.rel_dir, "archive", *([sub] if sub else []), name]
    return "/".join(parts)


def merge_texts(keep: str, extra: str, extra_row: audit.Row) -> str:
    """`keep` followed by every line of `extra` except its title (nothing dropped)."""
    lines = extra.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    body = "\n".join(lines).strip("\n")
    note = f"<!-- merged from {extra_row.topic} ({extra_row.path}) by ralph compact -->"
    return keep.rstrip("\n") + f"\n\n{note}\n{body}\n"


def condense_check(before: str, after: str, topic: str) -> list[str]:
    """Why an agent's condensed reference is unacceptable (empty list: accept)."""
    problems = []
    if tokens.count(after) >= tokens.count(before):
        problems.append("it did not shrink")
    title = next((ln for ln in after.splitlines() if ln.strip()), "")
    if audit.norm_topic(title.lstrip("# ")) != audit.norm_topic(topic):
        problems.append(f"its first line is not the topic title '# {topic}'")
    loss = refloss.assess(before, after)
    if loss is not None:  # the same rule the run's checks apply to a wiped reference
        problems.append(f"it dropped most of the facts ({loss.describe()})")
    return problems


# ---------------------------------------------------------------- condensing with an agent

CONDENSE_PROMPT = """\
You are condensing one reference file of this project's Ralph memory.

File: {path}
Topic: {topic}
Size: {before} tokens; the limit is {cap} tokens.

Rewrite {path} in place so that it is under {cap} tokens:
- keep the first line exactly: # {topic}
- keep every distinct fact, file path and provenance tag such as [US-001];
- merge repeated or superseded points; drop narration and anything obsolete.
Do not edit any other file. When done, reply with one line saying what you removed.
"""


def condense_with_agent(project: Project, row: audit.Row, agent_name: str, *, apply: bool) -> int:
    """Ask an agent to condense one oversized reference, then verify it shrank and kept its
    topic; the original is archived first and restored when the result is refused."""
    mem = audit.MemoryFiles.load(project)
    cap = project.config.references.max_tokens
    target = mem.abs(row.path)
    before = fsutil.read_text(target)
    if not apply:
        print(
            f"would ask {agent_name} to condense {row.path} ({tokens.count(before)} tokens, "
            f"cap {cap}); run with --apply"
        )
        return 0
    agent = get_agent(agent_name, project.config.agents.get(agent_name))
    digest = hashlib.sha256(before.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    original = mem.abs(_archived_path(mem, row.path, "originals")).with_suffix(f".{digest}.md")
    fsutil.atomic_write_text(original, before)
    logs = ensure_logs_dir(project)
    stem = fsutil.safe_name(target.stem)
    prompt = logs / f"condense-{stem}.prompt.md"
    fsutil.atomic_write_text(
        prompt,
        CONDENSE_PROMPT.format(
            path=row.path, topic=row.topic, before=tokens.count(before), cap=cap
        ),
    )
    timeouts = project.config.timeouts
    outcome, result = runner.run_agent(
        agent,
        prompt,
        cwd=project.root,
        transcript_path=logs / f"condense-{stem}.log",
        wall_timeout=timeouts.iteration,
        idle_timeout=timeouts.idle,
    )
    after = fsutil.read_text(target) if target.is_file() else ""
    problems = condense_check(before, after, row.topic)
    if result.is_error:
        problems.insert(0, f"the agent failed ({result.error})")
    if problems:
        fsutil.atomic_write_text(target, before)
        print(
            f"refused {agent_name}'s condensed {row.path}: {'; '.join(problems)}; "
            "the original is back in place"
        )
        return 1
    print(
        f"condensed {row.path}: {tokens.count(before)} -> {tokens.count(after)} tokens; "
        f"original kept at {project.rel(original)}"
    )
    return 0
