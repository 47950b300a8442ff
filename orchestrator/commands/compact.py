"""`ralph compact [--apply]`: age, merge and rotate the memory (dry run by default)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import lock, project, stopsignals
from orchestrator.commands.common import add_common
from orchestrator.log import terminal_safe
from orchestrator.memory import journal
from orchestrator.tokens import fmt
from orchestrator.upkeep import compact

if TYPE_CHECKING:
    from orchestrator.project import Project
    from orchestrator.upkeep.compact import CompactPlan


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compact",
        help="archive stale references, merge near-duplicates, rotate the log (dry run)",
        description="Uses the ledger's record of selected/updated references. Dry run by "
        "default; --apply writes everything atomically (journalled).",
    )
    add_common(p)
    p.add_argument("--apply", action="store_true", help="perform the plan")
    p.add_argument(
        "--agent", metavar="NAME", help="ask this agent to condense the first oversized reference"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--recover", action="store_true", help="complete an interrupted apply from its journal"
    )
    g.add_argument(
        "--rollback", action="store_true", help="undo an interrupted apply from its journal"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    proj = project.locate(Path.cwd(), args.ralph_dir)
    recovering = bool(args.recover or args.rollback)
    if not (args.apply or recovering):
        # A dry run writes nothing, not even a recovery: it says what is pending.
        journal.refuse_if_pending(proj.ralph_dir, "ralph compact (dry run)")
        return _run(args, proj)
    # Planning happens under the lock too: a plan made while a run edits memory is stale.
    # A stop signal becomes the usual "interrupted" (143); the journal undoes what it had
    # prepared (a recovery defers signals until it is done).
    with (
        stopsignals.interrupt_on_stop_signals(),
        lock.memory_lock(proj, _action(args), recovering=recovering),
    ):
        return _run(args, proj)


def _action(args: argparse.Namespace) -> str:
    flags = [f for f, on in (("--apply", args.apply), ("--recover", args.recover)) if on]
    flags += ["--rollback"] if args.rollback else []
    return " ".join(["ralph compact", *flags])


def _run(args: argparse.Namespace, proj: Project) -> int:
    if args.recover or args.rollback:
        done = journal.recover(proj.ralph_dir, rollback=args.rollback, root=proj.root)
        print(f"ralph compact: {done or 'no interrupted apply to recover'}")
        return 0
    plan = compact.plan(proj)
    _print_plan(plan, fmt)
    if args.agent:
        return _condense(proj, plan, args.agent, apply=args.apply)
    if plan.empty:
        print("nothing to change")
        return 0
    if not args.apply:
        print("dry run: run with --apply to perform it")
        return 0
    compact.apply(proj, plan)
    print(f"applied: {len(plan.writes)} file operations")
    return 0


def _print_plan(plan: CompactPlan, fmt: Callable[[int], str]) -> None:
    _say(
        f"progress.txt {fmt(plan.progress_before)} -> {fmt(plan.progress_after)} tokens; "
        f"references {fmt(plan.refs_before)} -> {fmt(plan.refs_after)} tokens"
    )
    if plan.stale_note:
        _say(f"  {plan.stale_note}")
    for r in plan.stale:
        _say(f"  archive (stale): {r.topic} ({r.path})")
    for a, b in plan.merges:
        _say(f"  merge: {b.topic} ({b.path}) into {a.topic} ({a.path})")
    for name, path, rows in plan.nested:
        _say(f"  group: {len(rows)} topics under the area {name} ({path})")
    for r, n in plan.oversized:
        _say(f"  condense: {r.topic} ({r.path}) is {fmt(n)} tokens")
    if plan.rotated:
        _say(f"  rotate: {plan.rotated} old log entries to the archive file")
    if plan.rotate_note:
        _say(f"  {plan.rotate_note}")


def _say(line: str) -> None:
    # Topics and paths come from the user's progress.txt: shown as text, never obeyed.
    print(terminal_safe(line))


def _condense(proj: Project, plan: CompactPlan, agent: str, *, apply: bool) -> int:
    if not plan.oversized:
        print("no reference is over references.max_tokens")
        return 0
    row, _n = plan.oversized[0]
    return compact.condense_with_agent(proj, row, agent, apply=apply)
