"""What `ralph migrate` makes of every real history in the corpus: progress.txt before and
after (index + summaries), reference files, and their topic names.

    .venv/bin/python bench/migrate_table.py              # -> bench/results/migrate.{md,json}
    .venv/bin/python bench/migrate_table.py --names 20   # also 20 random topic lists (seeded)

The same code `ralph migrate` runs (`migrate.build_plan`, default settings, the history's
prd.json when it has one); nothing is written to the corpus. The README's migrate table
comes from here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.errors import FatalError  # noqa: E402
from orchestrator.memory.prd import Prd  # noqa: E402
from orchestrator.upkeep import migrate  # noqa: E402


def corpus_dir() -> Path:
    return Path(os.environ.get("RALPH_CORPUS") or ROOT.parent / "shared" / "corpus")


def measure(folder: Path) -> dict[str, object] | None:
    log = folder / "progress.txt"
    if not log.is_file():
        return None
    prd = None
    if (folder / "prd.json").is_file():
        try:
            prd = Prd.load(folder / "prd.json")
        except FatalError:
            prd = None  # migrate goes on without one, as `ralph migrate` does
    plan = migrate.build_plan(log.read_text(encoding="utf-8", errors="surrogateescape"), prd)
    return {
        "history": folder.name,
        "before": plan.tokens_before,
        "after": plan.tokens_after,
        "references": len(plan.references),
        "topics": [t.name for t in plan.topics],
        "already_indexed": plan.already_indexed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--names", type=int, default=0, help="print N random topic lists")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    rows = [r for f in sorted(corpus_dir().iterdir()) if f.is_dir() and (r := measure(f))]
    rows = [r for r in rows if not r["already_indexed"]]
    shrink = [1 - int(r["after"]) / int(r["before"]) for r in rows if int(r["before"])]
    summary = {
        "histories": len(rows),
        "median_shrink": round(statistics.median(shrink), 3),
        "median_before": statistics.median(int(r["before"]) for r in rows),
        "median_after": statistics.median(int(r["after"]) for r in rows),
        "total_before": sum(int(r["before"]) for r in rows),
        "total_after": sum(int(r["after"]) for r in rows),
        "reference_files": sum(int(r["references"]) for r in rows),
    }
    lines = [
        "| history | progress.txt before | after (index + summaries) | reference files |",
        "|---|---:|---:|---:|",
        *(
            f"| {r['history']} | {r['before']:,} | {r['after']:,} | {r['references']} |"
            for r in rows
        ),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "migrate.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    (args.out / "migrate.md").write_text(json.dumps(summary) + "\n\n" + "\n".join(lines) + "\n")
    print(json.dumps(summary, indent=1))
    print("\n".join(lines))
    for r in random.Random(2026).sample(rows, min(args.names, len(rows))):
        print(f"\n{r['history']} ({len(r['topics'])} topics): " + "; ".join(r["topics"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
