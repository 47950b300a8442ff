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

from orchestrator import fsutil, tokens
from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.memory import areas, refloss
from orchestrator.memory.journal import Transaction
from orchestrator.memory.markdown import sections
from orchestrator.project import ensure_logs_dir
from orchestrator.upkeep import audit

log = get_logger()

LOG_ARCHIVE = "progress-log.md"
ARCHIVED_HEADING = "## Archived"
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
    """Keys of references selected or updated in the last `window` distinct stories, and how
    many distinct stories the ledger knows (fewer than the window: too early to age)."""
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


def _read_ledger(project: Any) -> list[dict[str, Any]]:
    try:
        from orchestrator import ledger

        return ledger.read(project.ledger_path)
    except (ImportError, OSError):
        return []


def plan(project: Any) -> CompactPlan:
    cfg = project.config
    mem = audit.MemoryFiles.load(project)
    cap = cfg.references.max_tokens
    out = CompactPlan(progress_before=tokens.count(mem.text))
    # A row with extra cells is the user's to fix (`ralph check` names it): merging or ageing
    # it would drop the line, and what the extra cells said with it.
    live = [r for r in mem.rows if not r.archived and not r.extra_cells]
    texts = {r.path: mem.read(r.path) for r in live}
    out.refs_before = sum(tokens.count(t) for t in texts.values() if t is not None)
    always = {audit.norm_topic(t) for t in [*cfg.references.always, "Codebase patterns"]}
    text = mem.text
    ref_writes: dict[Path, str | None] = {}

    # 1. near-duplicate topics: merge the later row into the earlier (every line kept)
    dropped: set[str] = set()
    for a, b in audit.near_duplicate_pairs(live):
        a_text, b_text = texts.get(a.path), texts.get(b.path)
        if a.path in dropped or b.path in dropped or a_text is None:
            continue
        if b_text is None or a.path == b.path:
            continue
        out.merges.append((a, b))
        texts[a.path] = merge_texts(a_text, b_text, b)
        ref_writes[mem.abs(a.path)] = texts[a.path]
        ref_writes[mem.abs(_archived_path(mem, b.path, "merged"))] = b_text
        ref_writes[mem.abs(b.path)] = None
        text = remove_row(text, b)
        dropped.add(b.path)
    live = [r for r in live if r.path not in dropped]

    # 2. ageing, from the ledger
    window = cfg.references.stale_after
    if window:
        records = _read_ledger(project)
        used, n_stories = recent_usage(records, window)
        if n_stories < window:
            out.stale_note = (
                f"ageing skipped: the ledger records {n_stories} stories, fewer than "
                f"references.stale_after ({window})"
            )
        else:
            for r in live:
                keys = _ref_keys(r.path) | _ref_keys(r.topic)
                for n in mem.nested_of(r.path):  # an area is in use when one of its topics is
                    keys |= _ref_keys(n.path) | _ref_keys(n.topic)
                if audit.norm_topic(r.topic) in always or keys & used or texts.get(r.path) is None:
                    continue
                # A reference written (migrated, edited) after those stories has not had
                # its chance yet: age it only after `window` stories ran since.
                if stories_since(records, mem.abs(r.path).stat().st_mtime) < window:
                    continue
                out.stale.append(r)
                dest = _archived_path(mem, r.path, "")
                ref_writes[mem.abs(dest)] = texts[r.path]
                ref_writes[mem.abs(r.path)] = None
                text = archive_row(remove_row(text, r), r.topic, dest)
    stale_paths = {r.path for r in out.stale}
    live = [r for r in live if r.path not in stale_paths]

    # 3. bounded topics: past references.max_topics rows, group them under area references
    limit = getattr(cfg.references, "max_topics", None)
    if limit and len(live) > limit:
        text = _nest(out, mem, text, live, always, limit, ref_writes)

    # 4. oversized (listed; condensed only on request)
    for r in live:
        t = texts.get(r.path)
        if t is not None and not areas.is_area(t) and tokens.count(t) > cap:
            out.oversized.append((r, tokens.count(t)))

    # 5. log rotation
    text, moved = rotate_log(text, cfg.log.keep_entries)
    if moved:
        out.rotated = len(moved)
        archive = project.archive_dir / LOG_ARCHIVE
        old = fsutil.read_text(archive) if archive.exists() else ""
        sep = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
        out.writes[archive] = old + sep + "".join(moved)

    if text != mem.text:
        out.writes[project.progress_path] = text
    out.writes.update(ref_writes)
    out.progress_after = tokens.count(text)
    out.refs_after = sum(
        tokens.count(t) for p, t in texts.items() if p not in dropped and p not in stale_paths and t
    )
    return out


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


def _nest(
    out: CompactPlan,
    mem: audit.MemoryFiles,
    text: str,
    live: list[audit.Row],
    always: set[str],
    limit: int,
    ref_writes: dict[Path, str | None],
) -> str:
    """Group index rows under area references (written beside them, listing their rows) so
    the index keeps at most `limit` rows; the topics' files stay where they are."""
    keep = [r for r in live if audit.norm_topic(r.topic) in always or mem.is_area(r.path)]
    movable = [r for r in live if r not in keep]
    texts = {r.path: mem.read(r.path) for r in movable}
    groups = _groups(movable, texts, limit, len(keep))
    used = {r.path for r in live}
    replace: dict[str, tuple[str, str, list[audit.Row]]] = {}
    for name, rows in groups.items():
        if len(rows) < 2:
            continue
        path, n = mem.project.references.index_path_for(name), 2
        while path in used or mem.abs(path).exists():
            path, n = mem.project.references.index_path_for(f"{name} {n}"), n + 1
        used.add(path)
        about = f"{name.lower()}" if name != OTHER_AREA else "topics of no one area"
        ref_writes[mem.abs(path)] = areas.render(name, about, [(r.topic, r.path) for r in rows])
        out.nested.append((name, path, rows))
        for r in rows:
            replace[r.path] = (name, path, rows)
    return _rewrite_index(text, replace)


def _rewrite_index(text: str, replace: dict[str, tuple[str, str, list[audit.Row]]]) -> str:
    """One pass over the index: a grouped row gives way to its area's row (written where
    the area's first row was), the others stay as they are."""
    rows, _problems = audit.parse_tables(text)
    lines = text.split("\n")
    written: set[str] = set()
    drop: set[int] = set()
    for r in rows:
        if r.archived or r.path not in replace:
            continue
        name, path, _members = replace[r.path]
        if path in written:
            drop.add(r.line - 1)
        else:
            lines[r.line - 1] = f"| {name} | {path} |"
            written.add(path)
    return "\n".join(ln for i, ln in enumerate(lines) if i not in drop)


def apply(project: Any, p: CompactPlan) -> None:
    txn = Transaction(project.ralph_dir)
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


def remove_row(text: str, row: audit.Row) -> str:
    """Drop the table line that holds this row (found by content: earlier removals shift
    line numbers)."""
    lines = text.split("\n")
    for i, ln in enumerate(lines):
        cells = audit.split_row(ln)
        if cells and len(cells) == 2 and cells[0] == row.topic and cells[1].strip("`") == row.path:
            del lines[i]
            return "\n".join(lines)
    raise InputError(f"progress.txt: index row for {row.topic!r} vanished while compacting; retry")


def archive_row(text: str, topic: str, path: str) -> str:
    """Add a row to the `## Archived` table, creating it after the index section."""
    row = f"| {topic} | {path} |"
    lines = text.split("\n")
    secs = sections(lines)
    arch = next((s for s in secs if s[0].lower().startswith(ARCHIVED_HEADING.lower())), None)
    if arch is not None:
        end = arch[2]
        while end > arch[1] + 1 and not lines[end - 1].strip():
            end -= 1
        lines.insert(end, row)
        return "\n".join(lines)
    idx = next((s for s in secs if s[0].lower().startswith(audit.INDEX_HEADING.lower())), None)
    at = idx[2] if idx else len(lines)
    while idx and at > idx[1] + 1 and not lines[at - 1].strip():
        at -= 1
    block = ["", ARCHIVED_HEADING, "| Topic | Reference Path |", "|---|---|", row]
    lines[at:at] = block
    return "\n".join(lines)


def rotate_log(text: str, keep: int) -> tuple[str, list[str]]:
    """Move log entries beyond the last `keep` out of the text (kept in file order)."""
    lines = text.split("\n")
    entries = [s for s in sections(lines) if audit.is_log_section(s[0])]
    if len(entries) <= keep:
        return text, []
    old = entries[: len(entries) - keep]
    drop: set[int] = set()
    moved: list[str] = []
    for _h, start, end in old:
        drop.update(range(start, end))
        block = "\n".join(lines[start:end]).rstrip("\n") + "\n"
        moved.append(block if block.endswith("\n\n") else block + "\n")
    kept = [ln for i, ln in enumerate(lines) if i not in drop]
    return "\n".join(kept), moved


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


def condense_with_agent(project: Any, row: audit.Row, agent_name: str, *, apply: bool) -> int:
    """Ask an agent to condense one oversized reference, then verify it shrank and kept its
    topic; the original is archived first and restored when the result is refused."""
    from orchestrator.agents import runner
    from orchestrator.agents.base import get_agent

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
