"""`ralph savings`: indexed vs full-history prompt tokens over a project's past stories."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from orchestrator import log, project
from orchestrator.commands.common import add_common
from orchestrator.errors import UsageError
from orchestrator.log import terminal_safe
from orchestrator.reports import charts, savings
from orchestrator.tokens import fmt

if TYPE_CHECKING:
    from orchestrator.reports.savings import Savings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "savings",
        help="what every past story would have loaded, indexed vs full history (no agent run)",
        description="Replays the project's progress log: for each past story k >= 2, the "
        "prompt Ralph loaded (whole log before it) vs the one ralph-index would send (index "
        "+ selected references built from the earlier entries). Writes savings.json and "
        "savings-tokens.png; never changes prd.json, progress.txt or references.",
    )
    add_common(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for savings.json and the chart (default: the log folder)",
    )
    p.add_argument("--last", type=int, metavar="N", help="only the last N stories")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    charts.require("savings")
    log.configure(verbose=args.verbose)  # log lines on stderr: --json keeps stdout clean

    if args.last is not None and args.last < 1:
        raise UsageError(f"--last must be at least 1, got {args.last}")
    proj = project.locate(Path.cwd(), args.ralph_dir)
    with Progress(
        TextColumn("replaying past stories"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("replay", total=None)
        result = savings.measure(
            proj,
            last=args.last,
            on_row=lambda done, total: bar.update(task, completed=done, total=total),
        )
    # Nothing measured (no history, no index): no files, so a wrong folder is not littered.
    measured = bool(result.rows or result.current)
    paths = {}
    if measured:
        paths = savings.write_outputs(result, args.out or project.ensure_logs_dir(proj))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    console = Console(highlight=False)
    for note in result.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    if result.rows:
        console.print(
            f"{result.project} · {result.source} · {result.entries} entries · prompt "
            "tokens per past story, full history vs indexed (estimated)",
            markup=False,
            soft_wrap=True,
        )
        console.print(table(result))
    _current(console, result.current)
    for what, path in paths.items():
        console.print(f"{what}: {proj.rel(path)}", markup=False, soft_wrap=True)
    return 0


def table(result: Savings) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_footer=True)
    tot = result.totals()
    t.add_column("k", footer="total", justify="right")
    t.add_column("story", footer=f"{tot['stories']} stories")
    t.add_column("full", footer=fmt(tot["full_tokens"]), justify="right")
    t.add_column("indexed", footer=fmt(tot["indexed_tokens"]), justify="right")
    t.add_column("saved", footer=f"{tot['saved_pct']:.1f}%", justify="right")
    for r in result.rows:
        t.add_row(
            str(r.k),
            terminal_safe(r.story_id, newlines=False),  # from the user's progress.txt
            fmt(r.full_tokens),
            fmt(r.indexed_tokens) + (" *" if r.over_budget else ""),
            f"{r.saved_pct:.1f}%",
        )
    if any(r.over_budget for r in result.rows):
        t.caption = "* over budget.prompt_tokens: `ralph run` would stop there"
    return t


def _current(console: Console, cur: dict[str, Any] | None) -> None:
    if not cur:
        return
    if "error" in cur:
        console.print(terminal_safe(f"next story {cur['story_id']}: {cur['error']}"), markup=False)
        return
    console.print(
        terminal_safe(f"next story {cur['story_id']} (current memory): indexed ")
        + f"{fmt(cur['indexed_tokens'])} vs full {fmt(cur['full_tokens'])} tokens, "
        f"{cur['saved_pct']:.1f}% saved",
        markup=False,
        soft_wrap=True,
    )
