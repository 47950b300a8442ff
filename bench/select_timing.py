"""Assembly time over 1,000 references of real corpus learnings, in a fresh process.

    .venv/bin/python bench/select_timing.py            # -> bench/results/select_timing.json
    .venv/bin/python bench/select_timing.py --semantic 0.3   # with wordllama similarity

Each reference has 9 learnings tagged with the story they came from (`- [US-0042] ...`,
as `ralph migrate` writes them), and the log names each story with its "Files changed",
so recency and file overlap run as in a real project. The first prompt of the process
(imports, tokenizer, indexing every reference) and the median of the next ones (warm) are
timed, wall and CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.memory.prd import Story  # noqa: E402
from orchestrator.memory.progress import Progress  # noqa: E402


def corpus_learnings(corpus: Path) -> tuple[list[str], list[list[str]]]:
    bullets: list[str] = []
    files: list[list[str]] = []
    for folder in sorted(corpus.iterdir()):
        if (folder / "progress.txt").is_file():
            text = (folder / "progress.txt").read_bytes().decode("utf-8", errors="replace")
            for e in Progress.parse(text).entries:
                bullets.extend(e.learnings)
                if e.files_changed:
                    files.append(e.files_changed)
    return bullets, files


def project(n_refs: int, corpus: Path) -> tuple[list[object], str, str]:
    """(references, index text, log text): story s's learnings spread over references."""
    from corpus_bench import Ref

    bullets, files = corpus_learnings(corpus)
    refs, log = [], []
    for i in range(n_refs):
        body = [f"# Topic {i}\n"]
        for s in range(3):
            sid = f"US-{(i * 3 + s) % (n_refs * 2):04d}"
            picks = [bullets[(i * 9 + s * 3 + b) % len(bullets)] for b in range(3)]
            body.append(f"\n## Section {s}\n" + "".join(f"- [{sid}] {p}\n" for p in picks))
        refs.append(Ref(f"Topic {i}", f"ralph/references/topic-{i}.md", "".join(body)))
    for j in range(n_refs * 2):
        changed = "".join(f"- {f}\n" for f in files[j % len(files)])
        log.append(f"## 2026-01-01 - US-{j:04d}\nDone.\n### Files Changed\n{changed}\n")
    rows = "\n".join(f"| {r.topic} | {r.path} |" for r in refs)
    index = f"## Progress Index\n| Topic | Reference Path |\n|---|---|\n{rows}\n"
    return refs, index, "# Ralph Progress Log\n\n" + "".join(log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--semantic", type=float, default=None)
    ap.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="keep token counts and the reference index (run/refcache.py) in DIR, as a "
        "project's log folder holds them: run twice, the second process's first call is warm",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "select_timing.json")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import corpus_bench as cb

    refs, index, log = project(args.refs, cb.corpus_root())
    story = Story(
        id="US-2001",
        title="Add a settings page with theme and language options",
        description="As a user I want to change theme and language in settings.",
        acceptance_criteria=["Theme toggle persists", "Language list from i18n"],
    )
    t0, c0 = time.perf_counter(), time.process_time()
    from orchestrator import tokens
    from orchestrator.run import prompt as pr  # timed: a first call pays its imports
    from orchestrator.run import templates

    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
        tokens.use_disk_cache(args.cache)

    inp = pr.Inputs(
        story=story,
        progress_text=log,
        index_text=index,
        references=refs,
        indexed_template=templates.builtin_template("prompt.md"),
        full_template=templates.builtin_template("prompt-full.md"),
        budget=16000,
        ref_cap=800,
    )
    if args.semantic is not None:
        inp.semantic = args.semantic
    inp.logs_dir = args.cache
    times, cpu = [], []
    for _ in range(args.repeats + 1):
        out = pr.build_indexed(inp, with_counterfactual=False)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        t0, c0 = time.perf_counter(), time.process_time()
    res = {
        "references": args.refs,
        "disk_cache": args.cache is not None,
        "items": 9 * args.refs,
        "log_stories": 2 * args.refs,
        "first_ms": round(times[0], 1),
        "first_cpu_ms": round(cpu[0], 1),
        "warm_median_ms": round(statistics.median(times[1:]), 1),
        "warm_median_cpu_ms": round(statistics.median(cpu[1:]), 1),
        "selected": len(out.selected),
        "prompt_tokens": out.tokens,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
