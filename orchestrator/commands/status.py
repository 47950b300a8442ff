"""`ralph status`: stories, the index, references with their sizes, and the last run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import project
from orchestrator.commands.common import add_common
from orchestrator.log import terminal_safe
from orchestrator.memory import journal
from orchestrator.run import status, watch
from orchestrator.run.formats import duration, money, saving
from orchestrator.tokens import fmt

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


# Rows of the references' table `ralph status` shows without --all.
TABLE_ROWS = 40


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "status",
        help="stories, the index, references, the last run (--follow: watch the live run)",
        description="Show the stories, the index and references with their sizes, the last "
        "run from the ledger and, while `ralph run` is going on, the live run (pid, story, "
        "iteration, since). --follow watches the live run until it ends.",
    )
    add_common(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument(
        "--all",
        action="store_true",
        help=f"list every index row and reference (default: {TABLE_ROWS}, flagged ones first)",
    )
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="watch the live run (story, iteration, tokens and cost against the budgets, "
        "savings, waits, the agent's last lines) until it ends; plain lines when piped",
    )
    p.add_argument(
        "--interval", type=float, default=0.5, metavar="SECONDS", help="--follow refresh period"
    )
    p.add_argument(
        "--lines", type=int, default=8, metavar="N", help="--follow: agent lines shown (8)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    proj = project.locate(Path.cwd(), args.ralph_dir)
    if args.follow:
        return watch.follow(proj, _console(), interval=max(0.1, args.interval), lines=args.lines)
    st = status.collect(proj)
    if note := journal.pending_note(proj.ralph_dir):
        st["warnings"].insert(0, note)
    if args.json:
        print(json.dumps(st, indent=2, default=str))
        return 0
    render(st, _console(), limit=None if args.all else TABLE_ROWS)
    return 0


def _terminal_safe(value: Any) -> Any:
    """The status with every text escaped for the terminal: titles, topics, paths and the
    project's name come from the user's files, and an escape sequence in one must be shown,
    not obeyed."""
    if isinstance(value, str):
        return terminal_safe(value)
    if isinstance(value, dict):
        return {k: _terminal_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_terminal_safe(v) for v in value]
    return value


def _console() -> Console:
    # rich only for the views that draw with it: `status --json` prints without it.
    from rich.console import Console

    return Console(highlight=False)


def render(st: dict[str, Any], console: Console, limit: int | None = None) -> None:
    """The status for a person; `limit`: the most rows of the references' table."""
    st = _terminal_safe(st)
    _render_summary(st, console)
    if st["index"] or st["references"]:
        shown = _shown(st["references"], limit)
        console.print(_references_table(shown, console.width))
        if hidden := len(st["references"]) - len(shown):
            flagged = sum(map(_flagged, st["references"])) - sum(map(_flagged, shown))
            which = f" ({flagged:,} of them flagged)" if flagged else ""
            console.print(
                f"… and {hidden:,} more{which}: `ralph status --all` lists them, "
                "`--json` for scripts",
                markup=False,
                soft_wrap=True,
            )
    live = st.get("live")
    if live:
        _render_live(live, console)
    _render_last_run(st["last_run"], live, console)


def _render_summary(st: dict[str, Any], console: Console) -> None:
    """The project, its stories, the memory's sizes and the warnings."""
    from rich.text import Text  # see _console()

    s = st["stories"]
    nxt = s["next"]
    # Text, not markup: a project or branch named "Acme [/v2]" is printed as written.
    console.print(
        Text.assemble(
            (st["project"] or "project", "bold"), f" · branch {st['branch'] or '-'} · {st['prd']}"
        )
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


def _flagged(ref: dict[str, Any]) -> bool:
    """A row whose note asks something of the user (a missing file, a path outside the
    folder, a file no row names), not one that only informs ("in area Billing")."""
    return str(ref["note"]).startswith(status.PROBLEMS)  # before any "; in area X"


def _shown(refs: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """At most `limit` rows, in index order: the flagged rows first (what needs the user),
    then the first others. A 10,000-row table took seconds to draw and buried the summary
    above it; a migrated project's rows nearly all carry an area note, which says nothing
    is wrong, so only the flagged ones come first."""
    if limit is None or len(refs) <= limit:
        return refs
    flags = [_flagged(r) for r in refs]
    first = [i for i, f in enumerate(flags) if f][:limit]
    rest = [i for i, f in enumerate(flags) if not f][: limit - len(first)]
    return [refs[i] for i in sorted(first + rest)]


def _references_table(refs: list[dict[str, Any]], width: int) -> Table:
    from rich import box  # see _console()
    from rich.table import Table
    from rich.text import Text

    t = Table(
        title="index and references", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    # Widths are set here, not left to rich: on a narrow terminal rich drops whole
    # columns; instead every column stays and long cells end in an ellipsis.
    topic_w = min(24, max(len("topic"), *(len(r["topic"] or "-") for r in refs)))
    note_w = min(20, max(len("note"), *(len(r["note"]) for r in refs)))
    path_w = max(len(r["path"]) for r in refs)
    # 6 for tokens; 14 for the padding between and around the columns.
    path_w = max(12, min(path_w, width - topic_w - 6 - note_w - 14))
    t.add_column("topic", no_wrap=True, overflow="ellipsis", width=topic_w)
    t.add_column("tokens", justify="right", no_wrap=True, width=6)
    # A path is what the user copies: never wrapped.
    t.add_column("path", no_wrap=True, overflow="ellipsis", width=path_w)
    t.add_column("note", no_wrap=True, overflow="ellipsis", width=note_w)
    for r in refs:
        # Text, not str: rich reads a str cell as markup ("[/x]" in a topic is an error).
        cells = (r["topic"] or "-", fmt(r["tokens"]) if r["exists"] else "-", r["path"], r["note"])
        t.add_row(*(Text(c) for c in cells))
    return t


def _render_live(live: dict[str, Any], console: Console) -> None:
    since = (live["since"] or "-").replace("T", " ").split("+")[0]
    console.print(
        f"run live: {live['run_id']} · pid {live['pid'] or '?'} · story "
        f"{live['story_id'] or '-'} · iteration {live['iteration']}/"
        f"{live['max_iterations'] or '?'} · since {since} UTC "
        "(`ralph status --follow` to watch)",
        style="bold cyan",
        markup=False,
        soft_wrap=True,
    )


def _render_last_run(
    last: dict[str, Any] | None, live: dict[str, Any] | None, console: Console
) -> None:
    if not last:
        console.print("last run: none recorded")
        return
    cost = money(last["cost_usd"]) if last["cost_reported"] else "cost not reported"
    state = "running" if live and live["run_id"] == last["run_id"] else "unfinished"
    console.print(
        f"last run {last['run_id']} ({last['status'] or state}): "
        f"{last['iterations']} iteration(s), {last['passed']} passed · prompts "
        f"{fmt(last['prompt_tokens'])} tok "
        f"{saving(last['full_history_tokens'], last['saved_pct'])} · agent "
        f"{fmt(last['input_tokens'])} in / "
        f"{fmt(last['output_tokens'])} out · {cost} · {duration(last['duration_s'])}",
        markup=False,
        soft_wrap=True,
    )
    use = last.get("references_use") or {}
    if use.get("known"):
        console.print(use_line(use), markup=False, soft_wrap=True)
    if last.get("skipped_lines"):
        console.print(
            f"ledger: {last['skipped_lines']} damaged line(s) skipped (torn records)",
            markup=False,
        )


def use_line(use: dict[str, Any]) -> str:
    """What the agents opened in the last run: misses (references opened though not
    inlined) by topic, untouched inlined references, whole reads of progress.txt."""
    topics = use.get("missed_topics") or []
    shown = ", ".join(topics[:4]) + (", …" if len(topics) > 4 else "")
    # Counts are per iteration: a reference missed in two iterations counts twice.
    line = f"references used: opened {use['opened']}"
    line += f" (+{use['swept']} by searches of the folder)" if use.get("swept") else ""
    line += f" · missed: {use['missed']}"
    line += f" ({shown})" if shown else ""
    line += f" · untouched {use['untouched']}"
    if use.get("progress_reads"):
        line += f" · progress.txt read in full {use['progress_reads']}x"
    return line + f" (times, over {use['known']} iteration(s) whose agent stream shows its reads)"
