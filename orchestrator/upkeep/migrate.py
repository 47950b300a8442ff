"""`ralph migrate`: turn a flat progress.txt into an index plus topic references, losslessly.

The pure core is `build_memory(progress_text, prd)`: it splits the log into blocks (story
entries, notes, the Codebase Patterns section), pulls out the learning items verbatim, groups
them into topics (code areas from the files each item concerns, then keyword clusters) and
renders the new progress.txt (header + index + one summary line per past story) and one
reference per topic. `plan()` / `apply()` add the file system around it: the original is
copied whole into the archive folder and every write goes through one journalled transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from orchestrator import fsutil, tokens
from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.memory import areas as area_refs
from orchestrator.memory.entries import (
    DATE,
    FILES_BY_STORY,
    FILES_LINE,
    META,
    STORY_FIELD,
    Block,
    Item,
    bullet_key,
    classify,
    count_tokens,
    explode,
    group_items,
    items_of,
    learning_lines,
    line_keys,
    source,
    split_big,
    split_blocks,
    suffix_files,
)
from orchestrator.memory.journal import Transaction
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import HISTORY_HEADING, INDEX_HEADING, Progress
from orchestrator.project import Project
from orchestrator.upkeep.topics import (
    DEFAULT_MAX_TOPICS,
    FILL,
    Topic,
    make_topics,
    reference_header,
    resolve_bare_names,
)
from orchestrator.upkeep.topics import (
    PATTERNS_TOPIC as PATTERNS_TOPIC,  # re-exported: reports.savings reads it here
)

if TYPE_CHECKING:
    from orchestrator.memory.prd import Prd

log = get_logger()

DEFAULT_MAX_TOKENS = 800  # config.references.max_tokens default


@dataclass
class Plan:
    """What `build_memory` decided: enough to print a dry run and to test."""

    progress_text: str
    references: dict[str, str]
    topics: list[Topic]
    summaries: list[str]
    tokens_before: int
    tokens_after: int
    already_indexed: bool = False


def is_indexed(text: str) -> bool:
    """The log already has a `## Progress Index`, read as every command reads it (outside
    code fences, heading spacing and case as the model allows)."""
    return Progress.parse(text).has_index


# ---------------------------------------------------------------- rendering


def _render_reference(topic: Topic) -> str:
    out = [f"# {topic.name}", "", *reference_header(topic.areas, topic.items)]
    out.extend(it.render(files=False) for it in topic.items)
    return "\n".join(out + _files_by_story(topic.items)).rstrip() + "\n"


def _files_by_story(items: list[Item]) -> list[str]:
    """Where the learnings apply whose text names no path: one line per story, after them
    (see entries.FILES_BY_STORY). Not on the bullets: paths there outweighed the words of
    the learning in ranking (recall on the corpus bench fell by a fifth)."""
    where: dict[str, list[str]] = {}
    for it in items:
        if it.says_files:
            where.setdefault(it.source, suffix_files(it.applies))
    if not where:
        return []
    return ["", FILES_BY_STORY, *(f"- {src}: {', '.join(fs)}" for src, fs in where.items())]


def _render_always(units: list[list[str]]) -> str:
    body = "\n".join("\n".join(u) for u in units).strip("\n")
    return f"# {PATTERNS_TOPIC}\n\n{body}\n"


def _summary_title(block: Block, titles: dict[str, str]) -> str:
    for ln in block.body[:4]:  # the log's own "**Story**: 1.2 - Title" beats the prd's
        m = STORY_FIELD.match(ln)
        if m:
            rest = ln[m.end() :].strip(" -:—–*")
            if len(rest) >= 4:
                return _clip(rest)
    for sid in block.story_ids:
        if titles.get(sid):
            return titles[sid]
    head = re.sub(r"^#+\s*|^\[[^\]]*\]\s*", "", block.heading).strip()
    head = re.sub(r"\b\d{1,2}:\d{2}(?::\d{2})?\b", "", head)
    for sid in block.story_ids:
        head = head.replace(sid, "")
    head = DATE.sub("", head)
    head = re.sub(r"(?i)^\W*(story|task|feature|iteration)\b\W*", "", head)
    head = re.sub(r"^[\s\W]+", "", head).strip(" -:—–*")
    if len(head) < 4:
        for ln in block.body:
            label_only = re.match(r"^\W*[\w ]{1,24}\W*:\W*\S*\W*$", ln.strip())
            if ln.strip() and not (
                META.match(ln) or FILES_LINE.match(ln) or label_only or ln.lstrip().startswith("#")
            ):
                head = bullet_key(ln).strip("*_ ")
                head = re.sub(r"^\**[\w ]{1,24}\**\s*:\s*\**\s*", "", head)
                for sid in block.story_ids:
                    head = head.replace(sid, "", 1)
                head = head.strip(" -:—–*")
                break
    return _clip(head)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 100 else text[:99].rstrip() + "…"


def _summaries(blocks: list[Block], titles: dict[str, str]) -> list[str]:
    lines: list[str] = []
    seen: dict[str, int] = {}
    for n, b in enumerate(blocks, 1):
        if b.kind not in ("story", "aside"):
            continue
        key = ",".join(b.story_ids)
        if key and key in seen:
            continue  # a retried story: one line per story
        seen[key] = len(lines)
        src = ",".join(b.story_ids) if b.story_ids else source(b, n)
        when = f" ({b.date})" if b.date and b.date != src else ""
        lines.append(f"- {src}{when}: {_summary_title(b, titles)}".rstrip(": "))
    return lines


def _render_progress(
    header: list[str],
    topics: list[Topic],
    summaries: list[str],
    n_entries: int,
    archive_path: str | None,
) -> str:
    head = "\n".join(header).rstrip()
    if not head.strip():
        head = "# Ralph Progress Log\n---"
    out = [head, "", INDEX_HEADING, "| Topic | Reference Path |", "|---|---|"]
    out.extend(f"| {t.name} | {t.path} |" for t in topics if not t.area)
    out += ["", HISTORY_HEADING]
    where = f" the original file is kept whole at {archive_path}" if archive_path else ""
    out.append(
        f"<!-- ralph migrate: {n_entries} log entries moved; their learnings are in the "
        f"references above;{where or ' the original file is kept whole in the archive'}. -->"
    )
    out.extend(summaries)
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- the pure core


def _story_titles(prd: Prd | None) -> dict[str, str]:
    titles: dict[str, str] = {}
    for st in getattr(prd, "stories", None) or []:
        sid = str(getattr(st, "id", "") or "")
        if sid:
            titles[sid] = " ".join(str(getattr(st, "title", "") or "").split())
    return titles


def _always_units(blocks: list[Block], cap: int) -> list[list[str]]:
    """Codebase Patterns items, then notes sections that precede the first story (preambles
    such as "Hard rules for every story"): the candidates for the always-selected reference."""
    units: list[list[str]] = []
    for b in blocks:
        if b.kind == "patterns":
            for g in group_items(b.body):
                units.extend(split_big(g, cap // 3))
        elif b.kind == "note":
            units.extend(split_big([b.heading, *b.body], cap // 3))
    return units


def _split_always(units: list[list[str]], cap: int) -> tuple[list[list[str]], list[list[str]]]:
    """Keep patterns in the always-selected reference up to the fill level, in file order;
    the rest becomes ordinary items so no reference outgrows the cap."""
    fill = int(cap * FILL)
    kept: list[list[str]] = []
    used = tokens.count(f"# {PATTERNS_TOPIC}\n\n")
    for n, u in enumerate(units):
        t = tokens.count("\n".join(u)) + 1
        if used + t > fill:
            return kept, units[n:]
        kept.append(u)
        used += t
    return kept, []


def build_plan(
    progress_text: str,
    prd: Prd | None = None,
    *,
    rel_dir: str = "ralph/references",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    archive_path: str | None = None,
    max_topics: int = DEFAULT_MAX_TOPICS,
) -> Plan:
    """Everything `build_memory` returns plus the topics and figures for a dry run."""
    before = tokens.count(progress_text)
    if is_indexed(progress_text):
        return Plan(progress_text, {}, [], [], before, before, already_indexed=True)
    if "\r\n" in progress_text:  # Windows line ends: plan on \n, write back what came in
        plan = build_plan(
            progress_text.replace("\r\n", "\n"),
            prd,
            rel_dir=rel_dir,
            max_tokens=max_tokens,
            archive_path=archive_path,
            max_topics=max_topics,
        )
        plan.progress_text = plan.progress_text.replace("\n", "\r\n")
        plan.references = {k: v.replace("\n", "\r\n") for k, v in plan.references.items()}
        plan.tokens_before, plan.tokens_after = before, tokens.count(plan.progress_text)
        return plan
    titles = _story_titles(prd)
    known = {sid: n for n, sid in enumerate(sorted(titles, key=len, reverse=True))}
    header, raw = split_blocks(progress_text)
    blocks: list[Block] = []
    seen_story = False
    for heading, body in raw:
        new = explode(classify(heading, body, known, seen_story))
        blocks.extend(new)
        seen_story = seen_story or any(b.kind in ("story", "aside") for b in new)
    kept, overflow = _split_always(_always_units(blocks, max_tokens), max_tokens)
    items: list[Item] = []
    for u in overflow:
        items.extend(items_of(Block("", u, "note"), u, "patterns", len(items), max_tokens))
    for n, b in enumerate(blocks, 1):
        if b.kind in ("story", "aside"):
            lines, _explicit = learning_lines(b.body)
            items.extend(items_of(b, lines, source(b, n), len(items), max_tokens))
    resolve_bare_names(items)
    count_tokens(items)  # a resolved name is longer: the files suffix counts as written
    topics = make_topics(items, kept, rel_dir, max_tokens, max_topics)
    refs = {t.path: _render_topic(t, kept) for t in topics}
    summaries = _summaries(blocks, titles)
    n_entries = sum(1 for b in blocks if b.kind == "story")
    text = _render_progress(header, topics, summaries, n_entries, archive_path)
    _verify_lossless(items, kept, refs)
    return Plan(text, refs, topics, summaries, before, tokens.count(text))


def _render_topic(topic: Topic, kept: list[list[str]]) -> str:
    if topic.always:
        return _render_always(kept)
    if topic.children:
        where = ", ".join(f"`{a}/`" for a in topic.areas[:4] if a)
        about = where or f"{topic.name.lower()}"
        return area_refs.render(topic.name, about, [(t.name, t.path) for t in topic.children])
    return _render_reference(topic)


def _verify_lossless(items: list[Item], kept: list[list[str]], refs: dict[str, str]) -> None:
    """Refuse to produce a plan that would drop a learning (a bug guard, not user input)."""
    keys: set[str] = set()
    for text in refs.values():
        keys |= line_keys(text)
    for ln in [ln for it in items for ln in it.lines] + [ln for u in kept for ln in u]:
        if bullet_key(ln) and bullet_key(ln) not in keys:
            raise AssertionError(f"migrate would lose a line: {ln!r}")


def build_memory(
    progress_text: str,
    prd: Prd | None = None,
    *,
    rel_dir: str = "ralph/references",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    archive_path: str | None = None,
) -> tuple[str, dict[str, str]]:
    """(new progress.txt text, {index path: reference text}); pure and deterministic.

    An already indexed text comes back unchanged with no references (migrating twice is a
    no-op). Every learning line and the whole Codebase Patterns section land verbatim in the
    references; the original file itself is archived by `apply`, not here.
    """
    plan = build_plan(
        progress_text, prd, rel_dir=rel_dir, max_tokens=max_tokens, archive_path=archive_path
    )
    return plan.progress_text, plan.references


# ---------------------------------------------------------------- the project around it


@dataclass
class Migration:
    """A planned migration of one project: the pure plan plus every file it will write."""

    plan: Plan
    archive: Path
    writes: dict[Path, str]
    notes: list[str]


def _load_prd(project: Project) -> Prd | None:
    if not Path(project.prd_path).is_file():
        return None
    try:
        return Prd.load(project.prd_path)
    except InputError as exc:  # titles only make summaries nicer; the log is what matters
        log.warning("migrate.prd_unreadable", error=str(exc))
        return None


def _archive_target(project: Project, text: str) -> tuple[Path, bool]:
    """Where the original goes, and whether it is already there (an earlier, interrupted
    run): never overwrite a different archived file."""
    base = Path(project.archive_dir) / f"progress-before-migrate-{date.today().isoformat()}"
    n = 1
    while True:
        path = Path(f"{base}{'' if n == 1 else f'-{n}'}.txt")
        if not path.exists():
            return path, False
        if path.read_bytes() == text.encode("utf-8", errors="surrogateescape"):
            return path, True
        n += 1


def prepare(project: Project) -> Migration:
    """Plan the migration of `project` (reads only). Raises InputError, changing nothing,
    when progress.txt is missing or a reference file with other content is in the way."""
    path = Path(project.progress_path)
    # present(): a folder or FIFO named progress.txt is that error, not "no progress.txt".
    if not fsutil.present(path):
        raise InputError(
            f"{path}: no progress.txt to migrate. Fix: run in the project or pass "
            "--dir with the Ralph folder that holds progress.txt"
        )
    text = fsutil.read_text(path)
    archive, archived = _archive_target(project, text)
    plan = build_plan(
        text,
        _load_prd(project),
        rel_dir=project.references.rel_dir,
        max_tokens=project.config.references.max_tokens,
        archive_path=project.rel(archive),
        max_topics=project.config.references.max_topics,
    )
    if plan.already_indexed:
        return Migration(
            plan,
            archive,
            {},
            ["progress.txt already has a Progress Index: nothing to migrate (use `ralph compact`)"],
        )
    writes: dict[Path, str] = {} if archived else {archive: text}
    for index_path, ref in plan.references.items():
        target = project.references.resolve(index_path)
        if target.exists() and fsutil.read_text(target) != ref:
            raise InputError(
                f"{target}: a different reference already exists there. Fix: move "
                "it aside (or add it to the index by hand), then run migrate again"
            )
        writes[target] = ref
    notes = _config_writes(project, plan, writes)
    writes[path] = plan.progress_text
    return Migration(plan, archive, writes, notes)


def _config_writes(project: Project, plan: Plan, writes: dict[Path, str]) -> list[str]:
    """Make the patterns reference always selected: add it to ralph.yaml references.always."""
    if not any(t.always for t in plan.topics):
        return []
    always = [a.lower() for a in project.config.references.always]
    if PATTERNS_TOPIC.lower() in always:
        return []
    cfg = Path(project.config_path or Path(project.root) / "ralph.yaml")
    old = fsutil.read_text(cfg) if cfg.is_file() else ""
    new = _with_always(old)
    ok = False
    if new is not None:
        try:
            loaded = yaml.safe_load(new) or {}
            ok = PATTERNS_TOPIC in loaded.get("references", {}).get("always", [])
        except (yaml.YAMLError, AttributeError):  # not YAML, or not the mapping shape
            ok = False
    if new is None or not ok:
        return [
            f"add '{PATTERNS_TOPIC}' to references.always in {cfg.name} so the patterns "
            "reference is always selected"
        ]
    if old:
        writes[cfg.with_name(cfg.name + ".bak")] = old
    writes[cfg] = new
    return [f"{project.rel(cfg)}: references.always += '{PATTERNS_TOPIC}'"]


def _with_always(old: str) -> str | None:
    """ralph.yaml text with the patterns topic in references.always (a minimal text edit
    so the user's comments survive), or None when the file's shape is not the simple one."""
    item = f'"{PATTERNS_TOPIC}"'
    if not re.search(r"(?m)^references:", old):
        sep = "" if not old or old.endswith("\n") else "\n"
        return f"{old}{sep}references:\n  always: [{item}]\n"
    if re.search(r"(?m)^[ \t]+always:", old):
        m = re.search(r"(?m)^([ \t]+always:[ \t]*)\[(.*)\][ \t]*$", old)
        if not m:
            return None
        inner = m.group(2).strip()
        items = f"{inner}, {item}" if inner else item
        return old[: m.start()] + f"{m.group(1)}[{items}]" + old[m.end() :]
    m = re.search(r"(?m)^references:[ \t]*\n", old)
    if not m:
        return None
    return old[: m.end()] + f"  always: [{item}]\n" + old[m.end() :]


def apply(project: Project, migration: Migration) -> None:
    """Write everything in one journalled transaction (see memory.journal.Transaction)."""
    if not migration.writes:
        return
    txn = Transaction(project.ralph_dir, project.root)
    for path, text in migration.writes.items():
        txn.write(path, text)
    txn.commit()
