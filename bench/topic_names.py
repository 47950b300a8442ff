"""Topic names `ralph migrate` gives real histories, and how many of them are made of
verbs, adjectives or adverbs instead of the things the learnings are about.

    .venv/bin/python bench/topic_names.py                # 20 random histories (seed 2026)
    .venv/bin/python bench/topic_names.py -n 45 --first 0 --json /tmp/names.json

Runs the same code as `ralph migrate --dry-run` (`migrate.build_plan`, default settings)
on each history of the corpus ($RALPH_CORPUS or ../shared/corpus); nothing is written
there. A name counts as weak when one of its words is in WEAK, a fixed list of verbs,
adjectives and adverbs of developer prose kept apart from the naming code's own lists
(so the count is not the naming code grading itself). With `lemminflect` importable
(`pip install lemminflect`; not a dependency of ralph), a second count asks its
dictionary: a word with a verb, adjective or adverb reading and no noun reading.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.errors import FatalError  # noqa: E402
from orchestrator.memory.prd import Prd  # noqa: E402
from orchestrator.upkeep import migrate  # noqa: E402

# Verbs, adjectives and adverbs that describe rather than name: written once, from
# English usage in developer notes, not from the names this bench prints.
_WEAK = """
    provide provides provided complete completed omit omits include includes included
    reject rejects rejected allow allows allowed await awaiting stale critical dynamic away
    current decorative minimal previous zero exact identically identical unchanged reduced
    graceful visual quick hide sorts converts creates create passes stored running extra
    specific external alone concurrent primary bigger manual muted rounded inline available
    showing verifying built requires require defines define upper computed unsafe compiles
    maintain open auto useful found produces affect avoid risky excludes exclude resets
    queued latest last separate cross single incremental hidden generic basic simple static
    global local internal optional additional different same similar new old full empty
    valid invalid correct wrong proper properly automatically explicitly directly always
    never often already still only just also even more less most least better best worse
    good bad large small big long short high low fast slow easy hard safe secure stable
    broken missing visible enabled disabled active inactive ready pending done failed
    successful important necessary possible required unique multiple several various
    entire whole major minor real actual final initial original prior recent deprecated
    experimental custom native raw clean dirty fresh consistent gets adds removes keeps
    needs shows saves supports ensures ensure prevents prevent contains contain expects
    expect applies apply wraps wrap skips skip falls fails fail succeeds succeed respects
    respect preserves preserve takes take makes uses using used
    """
WEAK = frozenset(_WEAK.split())


def corpus_dir() -> Path:
    return Path(os.environ.get("RALPH_CORPUS") or ROOT.parent / "shared" / "corpus")


def prd_of(folder: Path) -> Prd | None:
    """The history's prd.json, as `ralph migrate` reads it (stories' titles)."""
    if not (folder / "prd.json").is_file():
        return None
    try:
        return Prd.load(folder / "prd.json")
    except FatalError:
        return None  # migrate goes on without one


def topic_lists() -> dict[str, list[str]]:
    """History folder -> its topic names (patterns topic left out: always the same)."""
    out: dict[str, list[str]] = {}
    for folder in sorted(corpus_dir().iterdir()):
        log = folder / "progress.txt"
        if not log.is_file():
            continue
        text = log.read_text(encoding="utf-8", errors="surrogateescape")
        plan = migrate.build_plan(text, prd_of(folder))
        if not plan.already_indexed:
            out[folder.name] = [t.name for t in plan.topics if not t.always]
    return out


def name_words(name: str) -> list[str]:
    """The words a name took from its learnings: after the area's "Head: ", if any."""
    body = name.split(": ", 1)[-1]
    return [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", body)]


def lemminflect_judge() -> Callable[[str], bool] | None:
    try:
        from lemminflect import getAllLemmas  # optional: an outside dictionary to grade by
    except ImportError:
        return None

    def weak(word: str) -> bool:
        tags = set(getAllLemmas(word))
        return bool(tags) and not tags & {"NOUN", "PROPN"}

    return weak


def count_weak(lists: dict[str, list[str]], weak: Callable[[str], bool]) -> tuple[int, int]:
    names = [n for ns in lists.values() for n in ns]
    return sum(any(weak(w) for w in name_words(n)) for n in names), len(names)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20, help="histories to sample (seeded)")
    ap.add_argument("--first", type=int, default=8, help="names shown per history (0: all)")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--json", type=Path, help="write {history: names} of the sample here")
    args = ap.parse_args(argv)
    if not corpus_dir().is_dir():
        ap.error(f"no corpus at {corpus_dir()}: set RALPH_CORPUS to its folder")
    lists = topic_lists()
    pick = sorted(random.Random(args.seed).sample(sorted(lists), min(args.n, len(lists))))
    sample = {h: lists[h] for h in pick}
    for h, names in sample.items():
        shown = names[: args.first] if args.first else names
        more = f" (+{len(names) - len(shown)})" if len(shown) < len(names) else ""
        print(f"{h}: " + "; ".join(shown) + more)
    weak, total = count_weak(sample, lambda w: w in WEAK)
    print(f"\nnames with a word of WEAK: {weak} of {total}")
    judge = lemminflect_judge()
    if judge is not None:
        weak, total = count_weak(sample, judge)
        print(
            f"names with a word lemminflect reads as verb/adjective/adverb only: {weak} of {total}"
        )
    if args.json:
        args.json.write_text(json.dumps(sample, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
