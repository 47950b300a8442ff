"""The stories bench/cv.py scores, and every figure of one story under one setting.

A *case* is one late story of one history: the log as it stood before it, the indexed
memory `ralph migrate` builds from that log (cached on disk by content), the story from
prd.json, and the earlier learnings relevant to it (corpus_bench.relevant_bullets: their
entry changed a file this story changed; used only to score, never given to the selector).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import corpus_bench as cb

from orchestrator import tokens as tok
from orchestrator.memory.progress import Progress, new_progress_text
from orchestrator.run import prompt as pr
from orchestrator.run import select as sel

CACHE = cb.ROOT / "bench" / "results" / "cache"
# The naive baseline's fixed cost (its index line and instructions), as the issue states it.
BASELINE_TEMPLATE_TOKENS = 60
BASELINE_REFS = 3


@dataclass
class Case:
    history: str
    k: int
    n: int
    log_tokens: int
    inp: pr.Inputs
    relevant: list[str]  # normalised relevant bullets
    full: int  # full prompt tokens
    full_empty: int  # full prompt with an empty log
    idx_empty: int  # indexed prompt with an empty memory
    idx_base: int  # indexed prompt with the index but no reference
    free: int  # the budget left after the fixed part of the prompt
    earlier: list[Any]  # progress.Entry of the earlier stories (the baseline's input)

    @property
    def scored(self) -> bool:
        return bool(self.relevant)


def _migrate_hash() -> str:
    """The source of everything `migrate.build_memory` runs: upkeep/ and memory/."""
    h = hashlib.sha256()
    for wing in ("upkeep", "memory"):
        for path in sorted((cb.ROOT / "orchestrator" / wing).glob("*.py")):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _cache_path(log_text: str, prd_path: Path) -> Path:
    """Where the memory built from this log is kept: keyed by the hash of the log, prd.json
    and the source migrate runs (a changed migrate rebuilds)."""
    h = hashlib.sha256(_migrate_hash().encode())
    h.update(log_text.encode("utf-8", "surrogateescape"))
    h.update(prd_path.read_bytes() if prd_path.exists() else b"")
    return CACHE / f"{h.hexdigest()[:32]}.json"


def memory_for(h: cb.History, folder: Path, log_text: str) -> tuple[str, dict[str, str]]:
    """migrate.build_memory of the log, cached on disk."""
    path = _cache_path(log_text, folder / "prd.json")
    if path.exists():
        data = json.loads(path.read_text())
        return data["progress"], data["references"]
    build, _ = cb.memory_builder()
    new_text, refs = build(log_text, h.prd, rel_dir="ralph/references")
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"progress": new_text, "references": refs}))
    return new_text, refs


def late_ks(h: cb.History) -> list[int]:
    """The target population: stories in the last quarter (k > 0.75 n), k >= 2."""
    n = len(h.entries)
    return [k for k in range(2, n + 1) if k > 0.75 * n]


def make_case(h: cb.History, folder: Path, k: int, args: Any) -> Case:
    story = cb.story_for(h, k)
    log_text = cb.prefix(h, k)
    new_text, ref_texts = memory_for(h, folder, log_text)
    progress = Progress.parse(new_text)
    refs = cb.memory_refs(progress.index_rows, ref_texts)
    inp = cb.inputs(h, k, story, log_text, progress.index_text, refs, args)
    empty = cb.inputs(h, k, story, new_progress_text("2026-01-01"), "", [], args)
    full = pr.build_full(inp)
    base = pr.build_indexed(dataclasses.replace(inp, cutoff=2.0), with_counterfactual=False)
    _, base_n, _ = pr._fixed_part(inp)
    return Case(
        h.name,
        k,
        len(h.entries),
        full.parts["progress"],
        inp,
        [cb._norm(b) for b in cb.relevant_bullets(h, k)],
        full.tokens,
        pr.build_full(empty).tokens,
        pr.build_indexed(empty, with_counterfactual=False).tokens,
        base.tokens,
        args.budget - base_n,
        list(h.entries[: k - 1]),
    )


def figures(c: Case, memory_tokens: int, found: int) -> dict[str, Any]:
    """Memory ratio, recall and prompt ratio for a prompt whose memory costs
    `memory_tokens` and holds `found` of the relevant bullets."""
    return {
        "memory_ratio": memory_tokens / max(1, c.full - c.full_empty),
        "recall": found / len(c.relevant) if c.relevant else None,
        "prompt_ratio": (c.idx_empty + memory_tokens) / c.full,
    }


def _found(c: Case, text: str) -> int:
    hay = cb._norm(text)
    return sum(1 for b in c.relevant if b in hay)


def weights_of(c: Case, w: sel.Weights) -> sel.Scored:
    inp = c.inp
    return sel.score(
        pr._query(inp.story),
        _sources(c),
        w,
        stories=pr._other_stories(inp),
        history=inp.progress_text,
    )


def _sources(c: Case) -> list[Any]:
    return [r for r in c.inp.references if not getattr(r, "is_area", False)]


def room(c: Case, share: float) -> int:
    """What the references may take: the ceiling (a share of the budget), or less when the
    fixed part leaves less (prompt.build_indexed's rule)."""
    return min(c.free, int(share * c.inp.budget))


def sweep(
    c: Case, scored: sel.Scored, cutoffs: list[float], share: float, floor: float = 0.0
) -> list[dict[str, Any]]:
    """Figures at each cut-off over one scoring: the selection `select` makes (same
    ceiling, same caps), its references block counted as the prompt renders it."""
    out = []
    sources = _sources(c)
    for cut in cutoffs:
        s = sel.take(
            scored, sources, cutoff=cut, budget=room(c, share), ref_cap=c.inp.ref_cap, floor=floor
        )
        block = sel.render(s, sources, sel.listed_in(c.inp.index_text, sources))
        mem = c.idx_base - c.idx_empty + (tok.count(block) + 1 if block else 0)
        out.append(figures(c, mem, _found(c, block)))
    return out


def real(c: Case, w: sel.Weights, share: float) -> dict[str, Any]:
    """The figures through the real path (prompt.build_indexed), for the operating point."""
    inp = dataclasses.replace(
        c.inp,
        cutoff=w.cutoff,
        blend=w.blend,
        recency=w.recency,
        files=w.files,
        semantic=w.semantic,
        feedback=w.feedback,
        ref_share=share,
    )
    got = pr.build_indexed(inp, with_counterfactual=False)
    return figures(c, got.tokens - c.idx_empty, _found(c, got.text))


def _top_folder(path: str) -> str:
    parts = [p for p in path.strip().strip("`").lstrip("./").split("/") if p]
    return parts[0] if len(parts) > 1 else "(top level)"


def baseline(c: Case) -> dict[str, Any]:
    """The issue's naive baseline: learnings grouped by the top-level folder of their
    entry's changed files, the 3 groups with most word overlap with the story inlined whole,
    plus a 60-token template."""
    groups: dict[str, list[str]] = {}
    for e in c.earlier:
        for folder in dict.fromkeys(_top_folder(f) for f in e.files_changed or ["(none)"]):
            groups.setdefault(folder, []).extend(e.learnings)
    texts = {g: "\n".join(f"- {b}" for b in bs) for g, bs in groups.items() if bs}
    words = set(sel.tokenize(pr._query(c.inp.story)))
    ranked = sorted(texts, key=lambda g: (-len(words & set(sel.tokenize(texts[g]))), g))
    inlined = "\n\n".join(texts[g] for g in ranked[:BASELINE_REFS])
    mem = BASELINE_TEMPLATE_TOKENS + (tok.count(inlined) if inlined else 0)
    return figures(c, mem, _found(c, inlined))


def oracle(c: Case) -> dict[str, Any]:
    """Only the relevant bullets, nothing else."""
    text = "\n".join(f"- {b}" for b in c.relevant)
    return figures(c, tok.count(text) if text else 0, len(c.relevant))


def owner_repo(name: str) -> str:
    """Histories that are forks or branches of one repository share `owner__repo`."""
    return "__".join(re.split(r"__", name)[:2])
