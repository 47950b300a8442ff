"""`ralph status`: stories, the index, references with their sizes, and the last run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from orchestrator.cli import add_common


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="stories, the index, references and the last run")
    add_common(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from orchestrator import project, status

    proj = project.locate(Path.cwd(), args.ralph_dir)
    st = status.collect(proj)
    if args.json:
        print(json.dumps(st, indent=2, default=str))
        return 0
    render(st, Console(highlight=False))
    return 0


def render(st: dict, console: Console) -> None:
    from orchestrator.display import duration, money
    from orchestrator.tokens import fmt

    s = st["stories"]
    nxt = s["next"]
    console.print(
        f"[bold]{st['project'] or 'project'}[/bold] · branch {st['branch'] or '-'} · {st['prd']}"
    )
    console.print(
        f"stories: {s['passed']}/{s['total']} passed · next: "
        + (f"{nxt['id']} {nxt['title']}" if nxt else "none (all pass)"),
        markup=False,
        soft_wrap=True,
    )
    m = st["memory"]
    n_files = sum(r["exists"] for r in st["references"])
    console.print(
        f"memory: progress.txt {fmt(m['progress_tokens'])} tok, "
        f"{m['entries']} entries · index {len(st['index'])} rows · "
        f"references {n_files} files, {fmt(m['references_tokens'])} tok"
        f" · mode {st['mode']}",
        markup=False,
        soft_wrap=True,
    )
    for warning in st.get("warnings", []):
        console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    if st["index"] or st["references"]:
        t = Table(
            title="index and references", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
        )
        widest = max(len(r["path"]) for r in st["references"])
        t.add_column("topic", no_wrap=True, overflow="ellipsis", max_width=24)
        t.add_column("tokens", justify="right", no_wrap=True, min_width=6)
        # A path is what the user copies: it goes last, never wrapped.
        t.add_column("path", no_wrap=True, min_width=min(widest, 46))
        t.add_column("note")
        for r in st["references"]:
            t.add_row(
                r["topic"] or "-", fmt(r["tokens"]) if r["exists"] else "-", r["path"], r["note"]
            )
        console.print(t)
    last = st["last_run"]
    if not last:
        console.print("last run: none recorded")
        return
    cost = money(last["cost_usd"]) if last["cost_reported"] else "cost not reported"
    console.print(
        f"last run {last['run_id']} ({last['status'] or 'unfinished'}): "
        f"{last['iterations']} iteration(s), {last['passed']} passed · prompts "
        f"{fmt(last['prompt_tokens'])} tok (full history {fmt(last['full_history_tokens'])}:"
        f" saved {last['saved_pct']:.0f}%) · agent {fmt(last['input_tokens'])} in / "
        f"{fmt(last['output_tokens'])} out · {cost} · {duration(last['duration_s'])}",
        markup=False,
        soft_wrap=True,
    )
