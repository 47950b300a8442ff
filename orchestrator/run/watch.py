"""A run seen from outside: what `ralph status`, `ralph status --follow` and `ralph serve` show.

Everything comes from what the running loop already writes, so a watcher needs no channel to
it and works from any terminal (or over ssh): the project lock (held for the whole run; its
side file names the pid and start), the ledger (`run_start` with the budgets,
`iteration_start`, `iteration`, `limit_wait`, `transient_retry`, `run_end`) and the
transcripts in `<logs>/<run_id>/`. Read-only: nothing here writes a file.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import ledger
from orchestrator.errors import FatalError, InputError
from orchestrator.log import terminal_safe
from orchestrator.memory.prd import Prd
from orchestrator.project import Project
from orchestrator.run.formats import duration, money, relative
from orchestrator.tokens import fmt

if TYPE_CHECKING:
    from rich.console import Console, Group

# How much of a transcript to read when starting to follow it (the rest is history).
_TAIL_BYTES = 64 * 1024
_WAIT_EVENTS = {
    "limit_wait": ("waited_s", "usage limit"),
    "transient_retry": ("delay_s", "backoff"),
}


def parse_ts(value: Any) -> datetime | None:
    """A ledger `ts` (ISO 8601, UTC) as an aware datetime; None when absent or damaged."""
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def clock(ts: datetime | None) -> str:
    return ts.strftime("%H:%M:%S UTC") if ts else "-"


@dataclass
class Wait:
    reason: str
    until: datetime
    reset_at: str | None = None

    def left(self, now: datetime) -> float:
        return max(0.0, (self.until - now).total_seconds())


@dataclass
class RunView:
    """One run as its ledger lines and lock describe it (live or finished)."""

    run_id: str
    live: bool
    pid: int | None = None
    agent: str | None = None
    started: datetime | None = None
    story_id: str | None = None
    story_title: str | None = None
    iteration: int = 0
    max_iterations: int | None = None
    in_iteration: bool = False  # an agent is running (iteration_start without its record)
    totals: ledger.Totals = field(default_factory=ledger.Totals)
    spent_tokens: int = 0
    spent_cost: float = 0.0
    costed: bool = False
    budget_tokens: int | None = None
    budget_cost: float | None = None
    wait: Wait | None = None
    end: dict[str, Any] | None = None
    stories: tuple[int, int] | None = None  # passed, total (prd.json now)
    transcript: Path | None = None

    def elapsed(self, now: datetime) -> float | None:
        return (now - self.started).total_seconds() if self.started else None


def live_run_id(project: Project, records: list[dict[str, Any]]) -> str | None:
    """The run holding the project's lock now, or None when no run is live."""
    starts = [r for r in records if r.get("event") == "run_start" and r.get("run_id")]
    if not starts:
        return None
    run_id = str(starts[-1]["run_id"])
    return run_id if _still_live(project, records, run_id) else None


def _still_live(project: Project, records: list[dict[str, Any]], run_id: str) -> bool:
    """No `run_end` yet and the lock is held (a killed run leaves no run_end, but the
    kernel has released its lock). The lock is probed only when needed, and never created:
    a watcher must not write into the project."""
    if any(r.get("event") == "run_end" and r.get("run_id") == run_id for r in records):
        return False
    # The lock module (filelock, the redaction patterns) only when a run may be live:
    # `ralph status` on a project with no unfinished run never needs it.
    from orchestrator import lock

    return Path(project.lock_path).exists() and lock.is_locked(project)


def _spend(r: dict[str, Any], view: RunView) -> None:
    """What one attempt cost, as the run's budget counts it (reported, else our estimate)."""
    usage = r.get("usage")
    if usage:
        view.spent_tokens += ledger.usage_in(usage) + int(usage.get("output_tokens") or 0)
    elif r.get("event") == "iteration":
        view.spent_tokens += int(r.get("prompt_tokens") or 0)
    if r.get("cost_usd") is not None:
        view.costed = True
        view.spent_cost += float(r["cost_usd"])


def _apply(view: RunView, r: dict[str, Any]) -> None:
    ev = r.get("event")
    if ev == "run_start":
        view.started = parse_ts(r.get("ts"))
        view.agent = r.get("agent")
        view.max_iterations = r.get("max_iterations")
        budget = r.get("budget") or {}
        view.budget_tokens, view.budget_cost = budget.get("run_tokens"), budget.get("run_cost_usd")
    elif ev == "iteration_start":
        view.iteration = int(r.get("iteration") or view.iteration)
        view.story_id, view.story_title = r.get("story_id"), r.get("story_title")
        view.in_iteration, view.wait = True, None
    elif ev == "iteration":
        view.iteration = int(r.get("iteration") or view.iteration)
        view.story_id = r.get("story_id") or view.story_id
        view.story_title = r.get("story_title") or view.story_title
        view.in_iteration, view.wait = False, None
        _spend(r, view)
    elif ev in _WAIT_EVENTS:
        key, reason = _WAIT_EVENTS[ev]
        ts = parse_ts(r.get("ts"))
        if ts is not None:
            until = datetime.fromtimestamp(ts.timestamp() + float(r.get(key) or 0), timezone.utc)
            kind = f" ({r['kind']})" if r.get("kind") else ""
            view.wait = Wait(f"{reason}{kind}", until, r.get("reset_at"))
        _spend(r, view)
    elif ev == "run_end":
        view.end, view.in_iteration, view.wait = r, False, None


def build(project: Project, records: list[dict[str, Any]], run_id: str, live: bool) -> RunView:
    """The view of run `run_id` from the ledger records (and, when live, the lock holder)."""
    view = RunView(run_id=run_id, live=live)
    mine = [r for r in records if r.get("run_id") == run_id]
    for r in mine:
        _apply(view, r)
    view.totals = ledger.totals(mine)
    if live:
        from orchestrator import lock  # see _still_live

        holder = lock.read_holder(Path(project.lock_path))
        view.pid = holder.pid if holder else None
    view.stories = _stories(project)
    view.transcript = latest_transcript(Path(project.logs_dir) / run_id)
    return view


def _stories(project: Project) -> tuple[int, int] | None:
    try:
        prd = Prd.load(Path(project.prd_path))
    except InputError:
        return None
    return prd.passed_count(), len(prd.stories)


def latest_transcript(run_dir: Path) -> Path | None:
    """The transcript written last in a run folder (iteration-N[.attempt-K].log)."""
    logs = [p for p in run_dir.glob("iteration-*.log") if p.is_file()]
    return max(logs, key=lambda p: p.stat().st_mtime_ns) if logs else None


class TranscriptTail:
    """New readable lines of the current transcript, through the agent's own display filter
    (transcripts hold the raw output, e.g. stream-json; the terminal showed readable lines)."""

    def __init__(self, show: Callable[[str], str | None], keep: int = 8) -> None:
        self.show = show
        self.path: Path | None = None
        self.offset = 0
        self.skip_fragment = False
        self.last: deque[str] = deque(maxlen=keep)

    def poll(self, path: Path | None) -> list[str]:
        if path is None:
            return []
        if path != self.path:
            self.path, self.last, self.offset = path, deque(maxlen=self.last.maxlen), 0
            with contextlib.suppress(OSError):
                self.offset = max(0, path.stat().st_size - _TAIL_BYTES)
            # Started inside the file: the first line read is a fragment.
            self.skip_fragment = self.offset > 0
        try:
            with path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        lines = chunk[: end + 1].decode("utf-8", errors="replace").splitlines()
        if self.skip_fragment:
            lines, self.skip_fragment = lines[1:], False
        shown = [s for s in (self.show(line) for line in lines) if s]
        self.last.extend(shown)
        return shown


def display_filter(project: Project, agent_name: str | None) -> Callable[[str], str | None]:
    """The agent adapter's display(line), or plain stripped lines if it cannot be built."""
    show: Callable[[str], str | None] = lambda line: line.strip() or None  # noqa: E731
    if agent_name:
        # The adapters (and what they import) only for --follow and serve: `ralph status`
        # imports this module for live_run_id/build and must start quickly.
        from orchestrator.agents import get_agent

        with contextlib.suppress(FatalError):
            show = get_agent(agent_name, project.config.agent(agent_name), check=False).display
    root = str(project.root)

    def shown(line: str) -> str | None:
        text = show(line)
        # The agent's output is data: no escape sequence of it reaches a terminal.
        return terminal_safe(relative(text, root), newlines=False) if text else None

    return shown


# ---- rendering ------------------------------------------------------------------------------


def _of(spent: str, limit: str | None, pct: float | None) -> str:
    if limit is None:
        return spent
    return f"{spent} of {limit}" + (f" ({pct:.0%})" if pct is not None else "")


def facts(view: RunView, now: datetime) -> list[str]:
    """The run's state as short lines (shared by the live panel, plain output and serve)."""
    head = f"{'live' if view.live else 'ended'} run {view.run_id}"
    if view.pid:
        head += f" · pid {view.pid}"
    if view.agent:
        head += f" · {view.agent}"
    head += f" · since {clock(view.started)} ({duration(view.elapsed(now))})"
    story = f"{view.story_id or '-'} {view.story_title or ''}".rstrip()
    where = f"story {story} · iteration {view.iteration}/{view.max_iterations or '?'}"
    if not view.in_iteration and view.live and view.iteration:
        where += " (between iterations)"
    if view.stories:
        where += f" · stories {view.stories[0]}/{view.stories[1]} passed"
    bt, bc = view.budget_tokens, view.budget_cost
    tok = fmt(view.spent_tokens)
    if bt:
        tok = _of(tok, fmt(bt), view.spent_tokens / bt)
    cost = money(view.spent_cost) if view.costed else "cost not reported"
    if bc:
        cost = _of(cost, money(bc), view.spent_cost / bc if view.costed else None)
    t = view.totals
    spend = f"tokens {tok} · {cost} · {t.iterations} iteration(s) done, {t.passed} passed"
    if t.full_history_tokens:
        spend += (
            f" · saved {t.saved_pct:.0f}% ({fmt(t.prompt_tokens)} prompt tok vs "
            f"{fmt(t.full_history_tokens)} full history)"
        )
    lines = [head, where, spend]
    if view.wait and view.wait.left(now) > 0:
        w = view.wait
        reset = f", resets {w.reset_at}" if w.reset_at else ""
        lines.append(f"waiting: {w.reason}: {duration(w.left(now))} left{reset}")
    if view.end:
        lines.append(
            f"ended: {view.end.get('status')} (exit {view.end.get('exit_code')})"
            + (f": {view.end['message']}" if view.end.get("message") else "")
        )
    # Story ids and titles come from prd.json: shown as text, never as terminal controls.
    return [terminal_safe(line, newlines=False) for line in lines]


def panel(view: RunView, last: list[str], now: datetime) -> Group:
    """The live view for a terminal: facts, then the agent's last lines."""
    # rich only where it draws (~0.1 s of imports that `ralph status --json` never needs).
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, overflow="ellipsis")
    for i, line in enumerate(facts(view, now)):
        style = "bold cyan" if i == 0 else "bold" if i == 1 else ""
        style = "yellow" if line.startswith("waiting:") else style
        grid.add_row(Text(line, style=style))
    agent = Table.grid()
    agent.add_column(no_wrap=True, overflow="ellipsis")
    agent.add_row(Text(f"── agent ({view.transcript.name if view.transcript else '-'})", "dim"))
    for line in last:
        agent.add_row(Text(line))
    return Group(grid, agent)


# ---- following --------------------------------------------------------------------------------


def follow(
    project: Project,
    console: Console,
    *,
    interval: float = 0.5,
    lines: int = 8,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Show the live run until it ends (rich Live on a terminal, plain lines otherwise)."""
    records = ledger.read(Path(project.ledger_path))
    run_id = live_run_id(project, records)
    if run_id is None:
        console.print("no run is live (start one with `ralph run`)", markup=False)
        return 0
    view = build(project, records, run_id, live=True)
    tail = TranscriptTail(display_filter(project, view.agent), keep=lines)
    if console.is_terminal:
        view = _follow_live(project, console, run_id, tail, interval, sleep)
    else:
        view = _follow_plain(project, console, run_id, tail, interval, sleep)
    for line in facts(view, datetime.now(timezone.utc))[-1:]:
        console.print(line, markup=False, soft_wrap=True)
    return 0


def _poll(project: Project, run_id: str) -> RunView:
    records = ledger.read(Path(project.ledger_path))
    return build(project, records, run_id, live=_still_live(project, records, run_id))


def _follow_live(
    project: Project,
    console: Console,
    run_id: str,
    tail: TranscriptTail,
    interval: float,
    sleep: Callable[[float], None],
) -> RunView:
    from rich.live import Live  # see panel()

    view = _poll(project, run_id)
    tail.poll(view.transcript)
    with Live(
        panel(view, list(tail.last), datetime.now(timezone.utc)),
        console=console,
        refresh_per_second=4,
        transient=True,
    ) as live:
        while view.live:
            sleep(interval)
            view = _poll(project, run_id)
            tail.poll(view.transcript)
            live.update(panel(view, list(tail.last), datetime.now(timezone.utc)))
    for line in facts(view, datetime.now(timezone.utc))[:-1]:
        console.print(line, markup=False, soft_wrap=True)
    return view


def _follow_plain(
    project: Project,
    console: Console,
    run_id: str,
    tail: TranscriptTail,
    interval: float,
    sleep: Callable[[float], None],
) -> RunView:
    """Without a terminal: a state line when the story, iteration or wait changes, and each
    new agent line once (no control codes, so the output can be logged or grepped)."""
    shown: tuple[Any, ...] = ()
    first = facts(_poll(project, run_id), datetime.now(timezone.utc))[0]
    console.print(first, markup=False, soft_wrap=True)
    while True:
        view = _poll(project, run_id)
        now = datetime.now(timezone.utc)
        waiting = view.wait.reason if view.wait and view.wait.left(now) > 0 else None
        key = (view.story_id, view.iteration, view.in_iteration, waiting, view.totals.iterations)
        if key != shown and view.live:
            shown = key
            for line in facts(view, now)[1:]:
                console.print(f"[{now:%H:%M:%S}] {line}", markup=False, soft_wrap=True)
        for line in tail.poll(view.transcript):
            console.print(f"  {line}", markup=False, soft_wrap=True)
        if not view.live:
            return view
        sleep(interval)
