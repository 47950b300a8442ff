"""Tables, plot and the 1,000-reference timing for bench/corpus_bench.py."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from orchestrator.memory.prd import Story
from orchestrator.memory.progress import Progress
from orchestrator.run import prompt as pr
from orchestrator.run import templates


def _fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def scale_timing(folders: Any, cfg: Any, n_refs: int = 1000, repeats: int = 5) -> dict:
    """Assemble one prompt over `n_refs` references made of real corpus learnings."""
    from corpus_bench import Ref, corpus_root

    bullets: list[str] = []
    headings: list[str] = []
    for folder in sorted(corpus_root().iterdir()):
        if not (folder / "progress.txt").is_file():
            continue
        text = (folder / "progress.txt").read_bytes().decode("utf-8", errors="replace")
        for e in Progress.parse(text).entries:
            if e.learnings:
                headings.append(e.heading.lstrip("#").strip())
                bullets.extend(e.learnings)
    refs = []
    for i in range(n_refs):
        # 3 sections of 3 bullets each, ~250 tokens a reference: a typical topic file.
        body = [f"# Topic {i}\n"]
        for s in range(3):
            j = (i * 3 + s) % len(headings)
            picks = [bullets[(i * 9 + s * 3 + b) % len(bullets)] for b in range(3)]
            body.append(f"\n## {headings[j]}\n" + "".join(f"- {p}\n" for p in picks))
        refs.append(Ref(f"Topic {i}", f"ralph/references/topic-{i}.md", "".join(body)))
    rows = "\n".join(f"| {r.topic} | {r.path} |" for r in refs)
    index = f"## Progress Index\n| Topic | Reference Path |\n|---|---|\n{rows}\n"
    story = Story(
        id="US-900",
        title="Add a settings page with theme and language options",
        description="As a user I want to change theme and language in settings.",
        acceptance_criteria=["Theme toggle persists", "Language list from i18n"],
    )
    inp = pr.Inputs(
        story=story,
        progress_text="",
        index_text=index,
        references=refs,
        indexed_template=templates.builtin_template("prompt.md"),
        full_template=templates.builtin_template("prompt-full.md"),
        budget=None,
        ref_cap=cfg.ref_cap,
        cutoff=cfg.cutoff,
    )
    times, cpu = [], []
    out = None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = pr.build_indexed(inp, with_counterfactual=False)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    assert out is not None
    # The index of 1,000 rows is itself ~15k tokens: the timing is about the selector,
    # so the budget is off here.
    # CPU time too: on a shared machine wall time mostly measures the neighbours.
    return {
        "references": n_refs,
        "items": 9 * n_refs,
        "median_ms": statistics.median(times),
        "median_cpu_ms": statistics.median(cpu),
        "first_cpu_ms": cpu[0],
        "first_ms": times[0],
        "min_ms": min(times),
        "prompt_tokens": out.tokens,
        "selected": len(out.selected),
    }


def plot(rows: list[dict], path: Path, n_histories: int = 4) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The longest histories among those with learnings to score (recall needs them).
    scored = {r["history"] for r in rows if r["recall"] is not None}
    sizes = {r["history"]: r["n"] for r in rows if r["history"] in scored}
    longest = [h for h, _ in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))]
    longest = longest[:n_histories]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5))
    panels = [
        ("prompt_ratio", "prompt ratio (indexed / full)"),
        ("memory_ratio", "memory ratio"),
        ("recall", "recall of relevant learnings"),
    ]
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for h in longest:
            pts = [(r["k"], r[key]) for r in rows if r["history"] == h and r[key] is not None]
            if pts:
                ax.plot(*zip(*pts, strict=False), marker=".", linewidth=1, label=h[:38])
        ax.set_title(title)
        ax.set_xlabel("story k")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    ax = axes.flat[3]
    ax.scatter([r["log_tokens"] for r in rows], [r["assemble_ms"] for r in rows], s=6)
    ax.set_title("assembly time vs log size (all stories)")
    ax.set_xlabel("log tokens before the story")
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def write_report(result: dict, out: Path) -> None:
    (out / "corpus.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    s = result["summary"]
    lines = [
        "# Corpus benchmark: indexed vs full-history prompts",
        "",
        f"Memory built with {result['memory_builder']}; config {result['config']}.",
        "",
        "## Headline (targets from the issue)",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| median memory ratio, last quarter, logs > 5k tokens | "
        f"{_fmt(s['median_memory_ratio_last_quarter'], 3)} | <= 0.15 |",
        f"| median recall, same stories ({s['stories_scored_for_recall_last_quarter']} scored) | "
        f"{_fmt(s['median_recall_last_quarter'], 3)} (mean "
        f"{_fmt(s['mean_recall_last_quarter'], 3)}) | >= 0.90 |",
        f"| same, only stories whose text is in prd.json "
        f"({s['scored_last_quarter_story_in_prd']} scored) | "
        f"{_fmt(s['median_recall_last_quarter_story_in_prd'], 3)} | |",
        f"| median prompt ratio, stories whose log > 10k tokens ({s['stories_log_over_10k']}) | "
        f"{_fmt(s['median_prompt_ratio_log_over_10k'], 3)} | <= 0.30 |",
        f"| same, last quarter only | "
        f"{_fmt(s['median_prompt_ratio_last_quarter_log_over_10k'], 3)} | |",
        f"| assembly ms, median / max over all stories | {_fmt(s['median_assemble_ms'], 1)}"
        f" / {_fmt(s['max_assemble_ms'], 1)} | flat in log length |",
    ]
    if result.get("scale"):
        sc = result["scale"]
        lines.append(
            f"| assembly ms, {sc['references']} references ({sc['items']} items), "
            f"median of 5 / first run: wall {_fmt(sc['median_ms'], 1)} / "
            f"{_fmt(sc['first_ms'], 1)}, CPU {_fmt(sc['median_cpu_ms'], 1)} / "
            f"{_fmt(sc['first_cpu_ms'], 1)} | < 100 |"
        )
    lines += [
        "",
        "## Assembly time as the log grows",
        "",
        "| log tokens before the story | stories | median ms | p90 ms |",
        "|---|---|---|---|",
    ]
    for lo, hi in ((0, 2000), (2000, 5000), (5000, 10000), (10000, 20000), (20000, 10**9)):
        ms = sorted(r["assemble_ms"] for r in result["rows"] if lo <= r["log_tokens"] < hi)
        if ms:
            label = f"{lo}-{hi}" if hi < 10**9 else f">= {lo}"
            lines.append(
                f"| {label} | {len(ms)} | {statistics.median(ms):.1f} | "
                f"{ms[int(0.9 * (len(ms) - 1))]:.1f} |"
            )
    lines += [
        "",
        f"All {s['stories']} stories: median memory ratio {_fmt(s['median_memory_ratio_all'], 3)},"
        f" median recall {_fmt(s['median_recall_all'], 3)}.",
        "",
        "## Per history",
        "",
        "| history | entries | final log tokens | prompt ratio | memory ratio | recall "
        "(scored) | ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in result["histories"]:
        lines.append(
            f"| {h['history']} | {h['entries']} | {h['final_log_tokens']} | "
            f"{_fmt(h['median_prompt_ratio'])} | {_fmt(h['median_memory_ratio'], 3)} | "
            f"{_fmt(h['median_recall'])} ({h['scored']}) | {_fmt(h['median_ms'], 1)} |"
        )
    lines += ["", "Per-history figures are medians over k = 2..n."]
    if result["skipped"]:
        lines += ["", "Skipped (fewer than 2 entries parsed): " + ", ".join(result["skipped"])]
    if result.get("plot"):
        lines += ["", f"![ratios and recall against k]({result['plot']})"]
    (out / "corpus.md").write_text("\n".join(lines) + "\n")
