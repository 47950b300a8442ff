"""`ralph migrate [--dry-run]`: a flat progress.txt becomes index + topic references."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import lock, project, stopsignals, tokens
from orchestrator.commands.common import add_common
from orchestrator.memory import journal
from orchestrator.tokens import fmt
from orchestrator.upkeep import migrate

if TYPE_CHECKING:
    from orchestrator.project import Project


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "migrate",
        help="turn a flat progress.txt into an index plus topic references (lossless)",
        description="Moves every learning of every log entry verbatim into topic references, "
        "keeps the header, an index table and one summary line per past story in progress.txt, "
        "and archives the original file whole. Running it twice changes nothing.",
    )
    add_common(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    proj = project.locate(Path.cwd(), args.ralph_dir)
    if args.dry_run:
        journal.refuse_if_pending(proj.ralph_dir, "ralph migrate --dry-run")
        return _run(args, proj)
    # The plan is made under the lock too: one made while a run edits memory is stale.
    # A stop signal (timeout(1), systemd) becomes the usual "interrupted" (143) and releases
    # the lock; the journal rolls back what it had prepared.
    with stopsignals.interrupt_on_stop_signals(), lock.memory_lock(proj, "ralph migrate"):
        return _run(args, proj)


def _run(args: argparse.Namespace, proj: Project) -> int:
    mig = migrate.prepare(proj)
    plan = mig.plan
    if plan.already_indexed:
        print(
            f"ralph migrate: {proj.rel(proj.progress_path)} already has a Progress Index; "
            "nothing to do"
        )
        return 0
    verb = "would write" if args.dry_run else "wrote"
    print(
        f"ralph migrate: {proj.rel(proj.progress_path)} "
        f"{fmt(plan.tokens_before)} -> {fmt(plan.tokens_after)} tokens "
        f"(index + {len(plan.summaries)} summary lines)"
    )
    refs_total = sum(_count(t) for t in plan.references.values())
    print(f"  {len(plan.topics)} topics, {fmt(refs_total)} tokens in references:")
    for t in plan.topics:
        n = "always selected" if t.always else f"{len(t.items)} bullets"
        print(f"    {t.name:<48} {n:>16}  {fmt(_count(plan.references[t.path])):>6}  {t.path}")
    print(f"  original kept whole at {proj.rel(mig.archive)}")
    for note in mig.notes:
        print(f"  config: {note}")
    if args.dry_run:
        print(f"dry run: {verb} {len(mig.writes)} files; run without --dry-run to apply")
        return 0
    migrate.apply(proj, mig)
    print(f"{verb} {len(mig.writes)} files; `ralph check` validates the result")
    return 0


def _count(text: str) -> int:
    return tokens.count(text)
