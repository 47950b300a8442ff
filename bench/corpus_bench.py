"""Indexed vs full-history prompts on real Ralph histories.

    .venv/bin/python bench/corpus_bench.py            # whole corpus -> bench/results/
    .venv/bin/python bench/corpus_bench.py --only tap  # histories whose folder name matches

For each history with entries E1..En and each k >= 2: build the indexed memory from E1..E(k-1)
(`migrate.build_memory`, what `ralph migrate` runs), take story k from
prd.json (else its id and the title from Ek's heading, never Ek's body), assemble the
indexed and the full prompt, and measure prompt ratio, memory ratio, recall of the relevant
earlier learnings (Ek's changed files are used only to score, never given to the selector)
and assembly time. See bench/README.md for the definitions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from orchestrator.memory import areas  # noqa: E402
from orchestrator.memory.prd import Prd, Story  # noqa: E402
from orchestrator.memory.progress import Progress, new_progress_text  # noqa: E402
from orchestrator.run import prompt as pr  # noqa: E402
from orchestrator.run import select as sel  # noqa: E402
from orchestrator.run import templates  # noqa: E402


def memory_builder() -> tuple[Any, str]:
    from orchestrator.upkeep.migrate import build_memory

    return build_memory, "orchestrator.upkeep.migrate.build_memory"


@dataclass(frozen=True)
class Ref:
    topic: str
    path: str
    text: str
    exists: bool = True
    area: str = ""  # the area reference listing it (as memory.Reference)
    is_area: bool = False


def memory_refs(index_rows: list[Any], ref_texts: dict[str, str]) -> list[Ref]:
    """The references as `Memory.load` sees them: index rows in order, each area
    reference followed by the topics it lists."""
    refs: list[Ref] = []
    for row in index_rows:
        text = ref_texts.get(row.path)
        if text is None:
            continue
        is_area = areas.is_area(text)
        refs.append(Ref(row.topic, row.path, text, is_area=is_area))
        if is_area:
            refs += [
                Ref(t, p, ref_texts[p], area=row.topic)
                for t, p in areas.nested_rows(text)
                if p in ref_texts
            ]
    return refs


@dataclass
class History:
    name: str
    text: str
    entries: list[Any]  # progress.Entry, chronological
    spans: list[tuple[int, int]]  # where each entry sits in text
    prd: Prd | None


def corpus_root() -> Path:
    return Path(os.environ.get("RALPH_CORPUS") or ROOT.parent / "shared" / "corpus")


def load_history(folder: Path) -> History:
    text = (folder / "progress.txt").read_bytes().decode("utf-8", errors="surrogateescape")
    entries = Progress.parse(text).entries
    spans, pos = [], 0
    for e in entries:
        start = text.find(e.text, pos)
        spans.append((start, start + len(e.text)))
        pos = start + len(e.text)
    prd = None
    if (folder / "prd.json").exists():
        try:
            prd = Prd.load(folder / "prd.json")
        except Exception:  # a broken prd.json: stories fall back to the log's headings
            prd = None
    pairs = list(zip(entries, spans, strict=False))
    if _newest_first(entries):
        pairs.reverse()
    return History(folder.name, text, [p[0] for p in pairs], [p[1] for p in pairs], prd)


def _newest_first(entries: list[Any]) -> bool:
    dates = [e.date[:10] for e in entries if e.date and re.match(r"\d{4}-\d{2}-\d{2}", e.date)]
    return len(dates) >= 3 and dates[0] > dates[-1]


def prefix(h: History, k: int) -> str:
    """The log as it stood before entry k (1-based): everything but entries k..n."""
    drop = sorted(h.spans[k - 1 :])
    out, pos = [], 0
    for a, b in drop:
        out.append(h.text[pos:a])
        pos = b
    out.append(h.text[pos:])
    return "".join(out)


def from_prd(h: History, k: int) -> bool:
    ids = set(h.entries[k - 1].story_ids)
    return h.prd is not None and any(s.id in ids for s in h.prd.stories)


def story_for(h: History, k: int) -> Story:
    entry = h.entries[k - 1]
    if h.prd is not None:
        for sid in entry.story_ids:
            for s in h.prd.stories:
                if s.id == sid:
                    return s
    heading = re.sub(r"^#+\s*", "", entry.heading)
    sid = entry.story_ids[0] if entry.story_ids else f"E{k}"
    title = heading
    if entry.date:
        title = title.replace(entry.date, " ")
    title = title.replace(sid, " ")
    title = re.sub(r"^[\s\[\]()\-–—:|,]+|[\s\[\]()\-–—:|,]+$", "", re.sub(r"\s+", " ", title))
    return Story(id=sid, title=title or sid)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _norm_path(p: str) -> tuple[str, ...]:
    return tuple(x for x in p.strip().strip("`").lstrip("./").split("/") if x)


def overlaps(a: list[str], b: list[str]) -> bool:
    """Same file: equal paths, or one a trailing part of the other (logs vary in prefixes)."""
    na, nb = [_norm_path(x) for x in a], [_norm_path(x) for x in b]
    for x in na:
        for y in nb:
            if x and y and (x[-len(y) :] == y or y[-len(x) :] == x):
                return True
    return False


def relevant_bullets(h: History, k: int) -> list[str]:
    target = h.entries[k - 1].files_changed
    if not target:
        return []
    out: list[str] = []
    for e in h.entries[: k - 1]:
        if e.learnings and overlaps(e.files_changed, target):
            out.extend(e.learnings)
    return list(dict.fromkeys(out))


def inputs(
    h: History,
    k: int,
    story: Story,
    log_text: str,
    index_text: str,
    refs: list[Ref],
    cfg: argparse.Namespace,
) -> pr.Inputs:
    return pr.Inputs(
        story=story,
        progress_text=log_text,
        index_text=index_text,
        references=refs,
        indexed_template=templates.builtin_template("prompt.md"),
        full_template=templates.builtin_template("prompt-full.md"),
        budget=cfg.budget,
        ref_cap=cfg.ref_cap,
        cutoff=cfg.cutoff,
        blend=cfg.blend,
        stories={s.id: s.text() for s in h.prd.stories} if h.prd else {},
        paths={
            "progress_path": "scripts/ralph/progress.txt",
            "prd_path": "scripts/ralph/prd.json",
            "references_dir": "ralph/references",
            "branch": "ralph/feature",
        },
    )


def evaluate(h: History, build_memory: Any, cfg: argparse.Namespace) -> list[dict]:
    rows = []
    empty_log = new_progress_text("2026-01-01")
    n = len(h.entries)
    for k in range(2, n + 1):
        story = story_for(h, k)
        log_text = prefix(h, k)
        new_text, ref_texts = build_memory(log_text, h.prd, rel_dir="ralph/references")
        progress = Progress.parse(new_text)
        refs = memory_refs(progress.index_rows, ref_texts)
        inp = inputs(h, k, story, log_text, progress.index_text, refs, cfg)
        t0 = time.perf_counter()
        indexed = pr.build_indexed(inp, with_counterfactual=False)
        elapsed = time.perf_counter() - t0
        full = pr.build_full(inp)
        base_idx = pr.build_indexed(
            inputs(h, k, story, empty_log, "", [], cfg), with_counterfactual=False
        )
        base_full = pr.build_full(inputs(h, k, story, empty_log, "", [], cfg))
        wanted = relevant_bullets(h, k)
        hay = _norm(indexed.text)
        found = sum(1 for b in wanted if _norm(b) in hay)
        log_tokens = full.parts["progress"]
        rows.append(
            {
                "history": h.name,
                "k": k,
                "n": n,
                "story": story.id,
                "from_prd": from_prd(h, k),
                "log_tokens": log_tokens,
                "references": len(refs),
                "indexed_tokens": indexed.tokens,
                "full_tokens": full.tokens,
                "prompt_ratio": indexed.tokens / full.tokens,
                "memory_ratio": (indexed.tokens - base_idx.tokens)
                / max(1, full.tokens - base_full.tokens),
                "relevant": len(wanted),
                "found": found,
                "recall": found / len(wanted) if wanted else None,
                "assemble_ms": elapsed * 1000,
                "parts": indexed.parts,
            }
        )
    return rows


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(rows: list[dict]) -> dict:
    """Headline figures on the issue's populations."""
    by_h: dict[str, list[dict]] = {}
    for r in rows:
        by_h.setdefault(r["history"], []).append(r)
    last_q = []
    for hist_rows in by_h.values():
        final_log = max(r["log_tokens"] for r in hist_rows)
        if final_log <= 5000:
            continue
        n = hist_rows[0]["n"]
        last_q += [r for r in hist_rows if r["k"] > 0.75 * n]
    big = [r for r in rows if r["log_tokens"] > 10000]
    big_lq = [r for r in last_q if r["log_tokens"] > 10000]
    recall_lq = [r["recall"] for r in last_q if r["recall"] is not None]
    return {
        "stories": len(rows),
        "last_quarter_stories": len(last_q),
        "median_memory_ratio_last_quarter": _median([r["memory_ratio"] for r in last_q]),
        "median_recall_last_quarter": _median(recall_lq),
        "mean_recall_last_quarter": statistics.mean(recall_lq) if recall_lq else None,
        "stories_scored_for_recall_last_quarter": len(recall_lq),
        "median_prompt_ratio_log_over_10k": _median([r["prompt_ratio"] for r in big]),
        "stories_log_over_10k": len(big),
        "median_prompt_ratio_last_quarter_log_over_10k": _median(
            [r["prompt_ratio"] for r in big_lq]
        ),
        "median_recall_last_quarter_story_in_prd": _median(
            [r["recall"] for r in last_q if r["recall"] is not None and r["from_prd"]]
        ),
        "scored_last_quarter_story_in_prd": sum(
            1 for r in last_q if r["recall"] is not None and r["from_prd"]
        ),
        "median_recall_all": _median([r["recall"] for r in rows if r["recall"] is not None]),
        "median_memory_ratio_all": _median([r["memory_ratio"] for r in rows]),
        "max_assemble_ms": max((r["assemble_ms"] for r in rows), default=None),
        "median_assemble_ms": _median([r["assemble_ms"] for r in rows]),
    }


def per_history(rows: list[dict]) -> list[dict]:
    out = []
    names = list(dict.fromkeys(r["history"] for r in rows))
    for name in names:
        hr = [r for r in rows if r["history"] == name]
        rec = [r["recall"] for r in hr if r["recall"] is not None]
        out.append(
            {
                "history": name,
                "entries": hr[0]["n"],
                "final_log_tokens": max(r["log_tokens"] for r in hr),
                "median_prompt_ratio": _median([r["prompt_ratio"] for r in hr]),
                "median_memory_ratio": _median([r["memory_ratio"] for r in hr]),
                "median_recall": _median(rec),
                "scored": len(rec),
                "median_ms": _median([r["assemble_ms"] for r in hr]),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=corpus_root())
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--only", help="substring of history folder names to run")
    ap.add_argument("--budget", type=int, default=16000, help="budget.prompt_tokens")
    ap.add_argument("--ref-cap", type=int, default=800, help="references.max_tokens")
    ap.add_argument("--cutoff", type=float, default=sel.DEFAULT_CUTOFF)
    ap.add_argument("--blend", type=float, default=sel.DEFAULT_BLEND)
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-scale", action="store_true", help="skip the 1,000-reference timing")
    cfg = ap.parse_args(argv)
    build_memory, builder = memory_builder()
    folders = sorted(p for p in cfg.corpus.iterdir() if (p / "progress.txt").is_file())
    if cfg.only:
        folders = [f for f in folders if cfg.only in f.name]
    rows: list[dict] = []
    skipped: list[str] = []
    for folder in folders:
        h = load_history(folder)
        if len(h.entries) < 2:
            skipped.append(f"{h.name} ({len(h.entries)} entries)")
            continue
        rows += evaluate(h, build_memory, cfg)
        print(f"{h.name}: {len(h.entries)} entries", file=sys.stderr)
    from report import plot, scale_timing, write_report

    result = {
        "memory_builder": builder,
        "config": {
            "budget": cfg.budget,
            "ref_cap": cfg.ref_cap,
            "cutoff": cfg.cutoff,
            "blend": cfg.blend,
        },
        "summary": summarize(rows),
        "histories": per_history(rows),
        "skipped": skipped,
        "scale": None if cfg.no_scale else scale_timing(folders, cfg),
        "rows": rows,
    }
    cfg.out.mkdir(parents=True, exist_ok=True)
    if not cfg.no_plot:
        result["plot"] = plot(rows, cfg.out / "corpus.png")
    write_report(result, cfg.out)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
