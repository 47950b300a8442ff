"""Assemble what one iteration sends to the agent, and account for every token of it.

Modes:
- `indexed`: template + story + the Progress Index + the references that matter (chosen by
  `select.py` within `budget.prompt_tokens`) + fix-up notes from the last checks.
- `full`: Ralph's own behaviour. If the Ralph folder has the user's prompt file (CLAUDE.md
  for the claude tool, prompt.md for every other tool, as ralph.sh picks them), its bytes are
  sent unchanged and the agent reads progress.txt itself. Otherwise the built-in full
  template is sent with the story and the whole progress.txt inlined.
- `auto`: `indexed` when progress.txt has a Progress Index with at least one row, else
  `full`, so a project that never adopts references behaves as it does today.

Templates: `{{name}}` placeholders (see TEMPLATE_FIELDS). The indexed template is, in order:
config `template` (a path relative to the project root), `<ralph_dir>/prompt.template.md`,
the built-in `templates/prompt.md`. Ralph's own prompt.md / CLAUDE.md are not used in
indexed mode: they tell the agent to read the whole log, which is what indexing avoids.

`build_*` functions are pure (text in, text out); `assemble` gathers their inputs from a
project. The bench calls the pure ones directly.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import git, ledger
from orchestrator import tokens as tok
from orchestrator.errors import EXIT_BUDGET, FatalError, InputError
from orchestrator.log import get_logger
from orchestrator.memory import usage
from orchestrator.memory.markdown import escape_cell
from orchestrator.memory.prd import Prd
from orchestrator.memory.store import Memory
from orchestrator.project import Project
from orchestrator.run import considered
from orchestrator.run.templates import (
    Template,
    builtin_template,
    indexed_template,
    render_template,
    user_prompt_file,
)

if TYPE_CHECKING:
    from orchestrator.run import refcache
    from orchestrator.run import select as sel

log = get_logger()

MODES = ("auto", "indexed", "full")
# References may fill at most this share of budget.prompt_tokens: with the relevance cut-off,
# a second bound that keeps the prompt small when many items match. Chosen by
# cross-validation over the shared corpus and 31 external histories (bench/README.md); 15%
# cut too many relevant learnings of logs where most stories touch the same files.
REFERENCES_SHARE = 0.25
# The whole index table is inlined while it costs at most this share of the budget. Past
# that the prompt carries the rows for this story (its selected topics and their areas) and
# one line saying how many more there are and where the whole table is: a table of 1,000
# rows is 15k tokens, most of a 16k budget, and it grows with every topic.
INDEX_INLINE_SHARE = 0.05


class PromptOverBudget(FatalError):
    """The fixed part of the prompt (template + story + index + notes) exceeds
    `budget.prompt_tokens`. Exit 3, like every budget stop; the fix is `ralph compact` or a
    larger budget, not an edit of an input file, hence not an InputError."""

    exit_code = EXIT_BUDGET


@dataclass
class Inputs:
    """Everything a prompt is made of; no I/O past this point."""

    story: Any  # prd.Story (id, title, description, acceptance_criteria, notes, references)
    progress_text: str
    index_text: str
    references: Sequence[Any]  # memory.Reference (topic, path, text, exists)
    indexed_template: Template
    full_template: Template
    user_prompt: Template | None = None  # Ralph's prompt.md / CLAUDE.md, sent as is
    notes: Sequence[str] = ()
    budget: int | None = None
    always: Sequence[str] = ()
    ref_cap: int | None = None
    encoding: str = tok.DEFAULT_ENCODING
    paths: dict[str, str] = field(default_factory=dict)  # progress_path, prd_path, ...
    cutoff: float | None = None  # None: select.DEFAULT_CUTOFF
    blend: float | None = None  # None: select.DEFAULT_BLEND
    recency: float | None = None  # None: select.DEFAULT_RECENCY
    files: float | None = None  # None: select.DEFAULT_FILES
    semantic: float | None = None  # None: select.DEFAULT_SEMANTIC
    feedback: int | None = None  # None: select.DEFAULT_FEEDBACK
    ref_share: float | None = None  # None: REFERENCES_SHARE
    tree: Sequence[str] = ()  # the repository's files (`git ls-files`) when known
    stories: dict[str, str] = field(default_factory=dict)  # prd.json id -> text, for ranking
    prior: dict[str, float] = field(default_factory=dict)  # memory.usage: path -> boost
    # The project's log folder: ranking keeps what it derives from the references there
    # (run/refcache.py, in tokens.project_cache_dir). None: nothing kept on disk.
    logs_dir: Path | None = None


# (prompt tokens, tokens per part, what Ralph would have loaded)
Counts = tuple[int, dict[str, int], int]


@dataclass
class Assembled:
    """A prompt and its token accounting. The accounting is computed on first use, not when
    the prompt is built: the loop reads it only after the agent ran, and counting needs a
    tiktoken encoder that takes about a second to build, which used to delay every agent's
    start by that much."""

    text: str
    mode: str  # "indexed" | "full"
    counter: Callable[[], Counts] = field(repr=False)
    selected: list[str]
    source: str = ""  # the template or user file the text came from
    story_id: str = ""
    # Every reference's row (score, tokens taken, why), made when `considered` is read:
    # `ralph prompt --json` shows them, a loop iteration never reads them.
    rows: considered.Rows = field(default=list, repr=False)

    @functools.cached_property
    def considered(self) -> list[dict[str, Any]]:
        return self.rows()

    @functools.cached_property
    def _counts(self) -> Counts:
        return self.counter()

    @property
    def tokens(self) -> int:
        return self._counts[0]

    @property
    def parts(self) -> dict[str, int]:
        return self._counts[1]

    @property
    def full_history_tokens(self) -> int:
        return self._counts[2]

    def to_json(self) -> dict[str, Any]:
        saved = self.full_history_tokens - self.tokens
        return {
            "story_id": self.story_id,
            "mode": self.mode,
            "source": self.source,
            "tokens": self.tokens,
            "parts": self.parts,
            "full_history_tokens": self.full_history_tokens,
            "saved_tokens": saved,
            "saved_pct": ledger.saved_pct(self.full_history_tokens, self.tokens),
            "selected": self.selected,
            "considered": self.considered,
        }


# ----------------------------------------------------------------------------- rendering


def render_story(story: Any) -> str:
    lines = [f"**{story.id}: {story.title}**"]
    if getattr(story, "description", ""):
        lines += ["", story.description.strip()]
    criteria = list(getattr(story, "acceptance_criteria", None) or [])
    if criteria:
        lines += ["", "Acceptance criteria:"] + [f"- {c}" for c in criteria]
    if (getattr(story, "notes", "") or "").strip():
        lines += ["", f"Notes: {story.notes.strip()}"]
    return "\n".join(lines)


def render_notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    body = "\n".join(f"- {n.strip()}" for n in notes if n.strip())
    return f"\n## Fix first (from the last iteration's checks)\n{body}\n" if body else ""


def _values(inp: Inputs, **parts: str) -> dict[str, str]:
    story = inp.story
    vals = {
        "story": render_story(story),
        "story_id": str(story.id),
        "story_title": str(story.title),
        "notes": render_notes(inp.notes),
        "index": "",
        "references": "",
        "progress": "",
        "progress_path": inp.paths.get("progress_path", "progress.txt"),
        "prd_path": inp.paths.get("prd_path", "prd.json"),
        "references_dir": inp.paths.get("references_dir", "ralph/references"),
        "branch": inp.paths.get("branch") or "the branchName in prd.json",
    }
    vals.update(parts)
    return vals


def _count(text: str, encoding: str) -> int:
    """tok.count, which remembers each text's count by content: the index and the story come
    back unchanged in every prompt of an iteration and often across iterations."""
    return tok.count(text, encoding)


def _parts(vals: dict[str, str], total: int, names: Sequence[str], enc: str) -> dict[str, int]:
    counted = {n: _count(vals[n], enc) for n in names}
    # Token counts are not additive across joins; the template gets the remainder.
    return {"template": max(0, total - sum(counted.values())), **counted}


# ----------------------------------------------------------------------------- the modes


def build_full(inp: Inputs) -> Assembled:
    """Ralph's behaviour: the user's prompt file as is, else template + story + whole log."""
    enc = inp.encoding
    if inp.user_prompt is not None:
        text = inp.user_prompt.text
        progress_text = inp.progress_text

        def counts_user() -> Counts:
            n = tok.count(text, enc)
            log_n = tok.count(progress_text, enc)
            return n, {"template": n, "progress (read by the agent)": log_n}, n + log_n

        return Assembled(text, "full", counts_user, [], inp.user_prompt.name, str(inp.story.id))
    vals = _values(inp, progress=inp.progress_text.rstrip("\n"))
    text = render_template(inp.full_template, vals)

    def counts() -> Counts:
        n = tok.count(text, enc)
        return n, _parts(vals, n, ("story", "notes", "progress"), enc), n

    return Assembled(text, "full", counts, [], inp.full_template.name, str(inp.story.id))


def counterfactual_tokens(inp: Inputs) -> int:
    """What Ralph would have loaded for this story: the full-mode prompt (plus the whole log
    when the agent reads progress.txt itself) and every reference, because without an index
    those learnings would sit in progress.txt."""
    refs = sum(
        _ref_tokens(r, inp.encoding)
        for r in inp.references
        if getattr(r, "exists", True) and not getattr(r, "is_area", False)
    )
    return build_full(inp).full_history_tokens + refs


def _ref_tokens(ref: Any, encoding: str) -> int:
    n = getattr(ref, "tokens", None)
    return n if isinstance(n, int) else tok.count(ref.text, encoding)


def _index_block(inp: Inputs) -> str:
    """The whole Progress Index, as progress.txt has it."""
    if inp.index_text.strip():
        return inp.index_text.strip("\n")
    top = [r for r in inp.references if not getattr(r, "area", "")]
    if not top:
        return ""
    rows = "\n".join(f"| {r.topic} | {r.path} |" for r in top)
    return f"## Progress Index\n| Topic | Reference Path |\n|---|---|\n{rows}"


def _inline_whole(index: str, inp: Inputs) -> bool:
    if inp.budget is None or not index:
        return True
    limit = int(INDEX_INLINE_SHARE * inp.budget)
    if tok.table_tokens_at_least(index) > limit:
        return False  # surely too big: not encoded
    return _count(index, inp.encoding) <= limit


def _index_rows(inp: Inputs, chosen: Sequence[Any]) -> str:
    """The index rows that matter to this story: its chosen topics (most relevant first,
    within INDEX_INLINE_SHARE of the budget), each after the row of the area that lists it,
    and one line on how many more there are and where the whole index is."""
    area_path = {r.topic: r.path for r in inp.references if getattr(r, "is_area", False)}
    room = int(INDEX_INLINE_SHARE * inp.budget) if inp.budget else None
    rows: list[str] = []
    shown: set[str] = set()
    for r in chosen:
        area = getattr(r, "area", "")
        new = []
        if area and area not in shown and area in area_path:
            new.append(f"| {escape_cell(area)} | {escape_cell(area_path[area])} |")
        if r.path not in shown:
            named = r.topic if not area or r.topic.startswith(area) else f"{area} / {r.topic}"
            new.append(f"| {escape_cell(named)} | {escape_cell(r.path)} |")
        cost = sum(_count(row, inp.encoding) + 1 for row in new)
        if room is not None and cost > room:
            break
        room = None if room is None else room - cost
        rows.extend(new)
        shown.update([area, r.path] if area else [r.path])
    more = len(inp.references) - len(rows)
    where = inp.paths.get("progress_path", "progress.txt")
    table = "\n".join(["| Topic | Reference Path |", "|---|---|", *rows]) if rows else ""
    return "\n".join(
        [
            "## Progress Index (the rows for this story)",
            *([table] if table else []),
            "",
            f"{more:,} more topics are not shown here: the whole index is the "
            f"`## Progress Index` table in `{where}` (an area's row leads to its topics).",
        ]
    )


def _fixed_part(inp: Inputs) -> tuple[dict[str, str], int, bool]:
    """(template values without references, tokens of that prompt counted against the
    budget, whether the whole index is inlined). Raises when it alone is over budget."""
    index = _index_block(inp)
    whole = _inline_whole(index, inp)
    if not whole:  # the rows come after selection; keep room for them
        index = _index_rows(inp, [])
    base_vals = _values(inp, index=index)
    base = render_template(inp.indexed_template, base_vals)
    # Only a budget needs the fixed part's size (encoding it costs as much as the prompt).
    base_n = tok.count(base, inp.encoding) if inp.budget is not None else 0
    if inp.budget is not None and not whole:
        base_n += int(INDEX_INLINE_SHARE * inp.budget)
    if inp.budget is not None and base_n > inp.budget:
        raise PromptOverBudget(
            f"story {inp.story.id}: the prompt without any reference is {base_n} tokens, "
            f"{base_n - inp.budget} over budget.prompt_tokens ({inp.budget}). "
            "Run `ralph compact` to shrink the Progress Index, shorten the story, or raise "
            "budget.prompt_tokens in ralph.yaml."
        )
    return base_vals, base_n, whole


def _select(
    inp: Inputs, sources: Sequence[Any], room: int | None, memo: refcache.Plain
) -> sel.Selection:
    from orchestrator.run import select as sel  # lazy: numpy, see build_indexed

    return sel.select(
        _query(inp.story),
        sources,
        budget=room,
        story_hints=getattr(inp.story, "references", None) or (),
        always=inp.always,
        cutoff=sel.DEFAULT_CUTOFF if inp.cutoff is None else inp.cutoff,
        blend=sel.DEFAULT_BLEND if inp.blend is None else inp.blend,
        recency=sel.DEFAULT_RECENCY if inp.recency is None else inp.recency,
        files=sel.DEFAULT_FILES if inp.files is None else inp.files,
        semantic=sel.DEFAULT_SEMANTIC if inp.semantic is None else inp.semantic,
        feedback=sel.DEFAULT_FEEDBACK if inp.feedback is None else inp.feedback,
        tree=inp.tree,
        ref_cap=inp.ref_cap,
        stories=_other_stories(inp),
        history=inp.progress_text,
        encoding=inp.encoding,
        prior=inp.prior,
        memo=memo,
    )


def _share(inp: Inputs) -> float:
    return REFERENCES_SHARE if inp.ref_share is None else inp.ref_share


def _missing_rows(inp: Inputs) -> list[dict[str, Any]]:
    return [
        considered.left_out(r, "file missing")
        for r in inp.references
        if not getattr(r, "exists", True)
    ]


def _distinct(refs: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """The references without those whose text an earlier one has (two index rows naming
    one file, an agent's alias, put the same learnings into the prompt twice), and a
    `considered` row for each left out."""
    first: dict[str, Any] = {}
    kept, rows = [], []
    for r in refs:
        earlier = first.setdefault(r.text, r)
        if earlier is r:
            kept.append(r)
        else:
            rows.append(considered.left_out(r, f"same text as {earlier.path}"))
    return kept, rows


def build_indexed(inp: Inputs, *, with_counterfactual: bool = True) -> Assembled:
    # Imported here: ranking needs numpy (~0.4 s to import), which full mode, the ralph.sh
    # path, never uses.
    from orchestrator.run import refcache
    from orchestrator.run import select as sel

    enc = inp.encoding
    base_vals, base_n, whole = _fixed_part(inp)
    # memory.Reference has the topic, path and text the selector reads
    sources, doubles = _distinct(
        [
            r
            for r in inp.references
            if getattr(r, "exists", True) and not getattr(r, "is_area", False)
        ]
    )
    room = None if inp.budget is None else min(inp.budget - base_n, int(_share(inp) * inp.budget))
    memo = refcache.open_cache(inp.logs_dir)
    while True:
        selection = _select(inp, sources, room, memo)
        vals = dict(base_vals)
        if not whole:
            vals["index"] = _index_rows(inp, _by_relevance(selection, sources))
        vals["references"] = sel.render(selection, sources, sel.listed_in(vals["index"], sources))
        text = render_template(inp.indexed_template, vals)
        n = tok.count(text, enc)
        # Headings added around the chunks cost a few tokens the selector did not see.
        if inp.budget is None or n <= inp.budget or room is None or room <= 0:
            break
        room -= n - inp.budget
    refcache.save(memo)
    parts = _parts(vals, n, ("story", "index", "references", "notes"), enc)

    def counts() -> Counts:
        # The counterfactual (Ralph's full prompt) is only for the ledger: counted on use.
        return n, parts, counterfactual_tokens(inp) if with_counterfactual else 0

    return Assembled(
        text,
        "indexed",
        counts,
        [sources[r].path for r in selection.refs],
        inp.indexed_template.name,
        str(inp.story.id),
        lambda: selection.considered + doubles + _missing_rows(inp),
    )


def _by_relevance(selection: sel.Selection, sources: Sequence[Any]) -> list[Any]:
    """The selected references, most tokens taken first (then score: `considered`'s order)."""
    return [sources[r] for r in selection.ranked]


def _other_stories(inp: Inputs) -> dict[str, str]:
    """prd.json texts for ranking earlier stories' learnings, without this story's own: its
    id on an earlier learning means a reused id (another PRD) or a failed try, and either
    way this story's text says nothing about what that learning covers."""
    sid = str(getattr(inp.story, "id", ""))
    return {k: v for k, v in inp.stories.items() if k != sid}


def _query(story: Any) -> str:
    """The story's text for ranking, without its own id: an id says nothing about what a
    story touches, and its number matches other ids ("US-008" would find "SC-008")."""
    text = getattr(story, "text", None)
    query: str = text() if callable(text) else render_story(story)  # prd.Story.text
    sid = str(getattr(story, "id", "") or "")
    return query.replace(sid, " ") if sid else query


def resolve_mode(mode: str, index_rows: int, *, fresh_index: bool = False) -> str:
    """`auto` is indexed when the index has rows, or when the project was set up with an
    (empty) index and has no history yet (`ralph init`): nothing can be lost there, and the
    first story starts the references. A flat log without rows stays `full`, as in Ralph."""
    if mode not in MODES:
        raise InputError(f"unknown mode '{mode}': use one of {', '.join(MODES)}")
    if mode == "auto":
        return "indexed" if index_rows > 0 or fresh_index else "full"
    return mode


def build(inp: Inputs, mode: str, index_rows: int, *, fresh_index: bool = False) -> Assembled:
    resolved = resolve_mode(mode, index_rows, fresh_index=fresh_index)
    out = build_indexed(inp) if resolved == "indexed" else build_full(inp)
    over = inp.budget is not None and not tok.within(out.text, inp.budget, inp.encoding)
    if resolved == "full" and over:
        # Full mode is Ralph's behaviour and is never refused; the user is told once.
        log.warning(
            "prompt.over_budget",
            story=out.story_id,
            tokens=out.tokens,
            budget=inp.budget,
            fix="run `ralph migrate` to index progress.txt",
        )
    log.debug("prompt.assembled", mode=resolved, chars=len(out.text), story=out.story_id)
    return out


# ----------------------------------------------------------------------------- projects


def _rel(path: Path, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def _prd_facts(prd_path: Path, prd: Prd | None) -> tuple[str, dict[str, str]]:
    """The branch name and each story's text: from `prd` when the caller has read it (the
    loop has), else read leniently, since a prompt must not fail on what only helps ranking."""
    try:
        prd = prd or Prd.load(prd_path)
    except (OSError, InputError):
        return "", {}
    return prd.branch_name or "", {s.id: s.text() for s in prd.stories}


def inputs_for(
    project: Project,
    story: Any,
    memory: Memory,
    *,
    notes: Sequence[str] = (),
    budget: int | None = None,
    tool: str | None = None,
    prd: Prd | None = None,
) -> Inputs:
    cfg = project.config
    branch, stories = _prd_facts(project.prd_path, prd)
    return Inputs(
        story=story,
        progress_text=memory.progress_text,
        index_text=memory.progress.index_text,
        references=list(memory.references),
        indexed_template=indexed_template(project),
        full_template=builtin_template("prompt-full.md"),
        user_prompt=user_prompt_file(project.ralph_dir, tool or cfg.tool),
        notes=tuple(notes),
        budget=budget if budget is not None else cfg.budget.prompt_tokens,
        always=tuple(cfg.references.always),
        ref_cap=cfg.references.max_tokens,
        encoding=cfg.encoding,
        paths={
            "progress_path": _rel(project.progress_path, project.root),
            "prd_path": _rel(project.prd_path, project.root),
            "references_dir": project.references.rel_dir or cfg.references.dir,
            "branch": branch,
        },
        stories=stories,
        tree=tuple(git.tracked_files(Path(project.root))),
        prior=usage.prior_of(
            project.ledger_path,
            [r.path for r in memory.references],
            project.references.rel_dir,
        ),
        logs_dir=Path(project.logs_dir),
    )


def assemble(
    project: Project,
    story: Any,
    memory: Memory,
    *,
    mode: str | None = None,
    notes: Sequence[str] = (),
    budget: int | None = None,
    tool: str | None = None,
    prd: Prd | None = None,
) -> Assembled:
    """The prompt `ralph run` sends for `story` (the loop's contract; see architecture.md).

    `mode` None means the project's configured mode (config `mode`, default auto); `budget`
    None means `budget.prompt_tokens`; `tool` None means config `tool` (it picks CLAUDE.md
    or prompt.md in full mode); `prd` None reads prd.json for the branch and story texts."""
    with gc_paused():
        notes = [*memory.refused, *notes]
        inp = inputs_for(project, story, memory, notes=notes, budget=budget, tool=tool, prd=prd)
        progress = memory.progress
        # The index rows are the references that no area lists (parsing the table again, or
        # every log entry just to see whether there is one, costs seconds on a long history).
        rows = sum(1 for r in memory.references if not r.area)
        fresh = not rows and progress.has_index and not progress.entries
        return build(inp, mode or project.config.mode, rows, fresh_index=fresh)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a prompt is assembled (and its memory loaded:
    callers wrap Memory.load too): it makes hundreds of thousands of objects (10,000
    references' texts, items and rows) and no cycles, and the collector walking them again
    and again cost a third of the time.

    On the way out what was made is frozen (`gc.freeze`): re-enabled, the collector would
    otherwise walk all of it at once (0.1-0.3 s at 10,000 references). Frozen objects are
    still freed by their reference counts when dropped; only a reference cycle among them
    would outlive its use, and these structures hold none."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
