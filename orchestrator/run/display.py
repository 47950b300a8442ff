"""What `ralph run` shows: banners, the agent's readable lines, a live status line, the
one-line iteration summary, and the end-of-run table (rich).

The live status line (story, iteration i/N, stories passed x/y, elapsed) is drawn only when
stdout is a terminal; piped output gets plain lines and no control codes, so logs stay clean.
Every text drawn passes through `log.terminal_safe` (in `Display.line`, the status line, the
countdown and the table's cells): story ids and titles from prd.json and the agent's own
lines are data, and an escape sequence in them must not reach the terminal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator import ledger
from orchestrator.agents import base as agent_base
from orchestrator.log import terminal_safe
from orchestrator.run.formats import duration as duration
from orchestrator.run.formats import money as money
from orchestrator.run.formats import relative as relative
from orchestrator.run.formats import saving as saving
from orchestrator.tokens import fmt


def summary_line(rec: dict[str, Any]) -> str:
    """`US-004 passed · prompt 3.1k tok (full history 27.4k: saved 88%) · agent 141k in /
    2.3k out · $0.41 · 3m12s` from one ledger iteration record."""
    parts = [f"{rec.get('story_id') or '-'} {str(rec.get('outcome', '?')).replace('_', ' ')}"]
    prompt = f"prompt {fmt(rec.get('prompt_tokens'))} tok"
    if rec.get("full_history_tokens"):
        prompt += " " + saving(rec["full_history_tokens"], rec.get("saved_pct"))
    parts.append(prompt)
    usage = rec.get("usage")
    if usage:
        parts.append(
            f"agent {fmt(ledger.usage_in(usage))} in / {fmt(usage.get('output_tokens'))} out"
        )
    else:
        parts.append("agent usage not reported")
    if rec.get("cost_usd") is not None:
        parts.append(money(rec["cost_usd"]))
    parts.append(duration(rec.get("duration_s")))
    if rec.get("killed_processes"):
        parts.append(f"killed {len(rec['killed_processes'])} leftover process(es)")
    checks = rec.get("checks") or {}
    if checks.get("errors") or checks.get("warnings"):
        parts.append(
            f"checks: {checks.get('errors', 0)} error(s), {checks.get('warnings', 0)} warning(s)"
        )
    if checks.get("restored_files"):
        # Lost memory put back must be seen on the one line a user reads per story.
        kept = " (agent's version in backups)" if checks.get("backups") else ""
        parts.append(f"restored {', '.join(checks['restored_files'])}{kept}")
    return " · ".join(parts)


@dataclass
class Status:
    """The facts on the live status line."""

    story: str = ""
    iteration: int = 0
    max_iterations: int = 0
    passed: int = 0
    total: int = 0
    started: float = 0.0
    note: str = ""
    run_started: float = 0.0  # the whole run (started is this attempt)
    tokens: int | None = None  # spent so far in the run (the budget's count)
    cost_usd: float | None = None

    def __rich__(self) -> Text:
        now = time.monotonic()
        elapsed = duration(now - self.started) if self.started else "-"
        if self.run_started and self.run_started < self.started:
            elapsed += f" (run {duration(now - self.run_started)})"
        line = (
            f"▶ {self.story} · iteration {self.iteration}/{self.max_iterations} · "
            f"stories {self.passed}/{self.total} passed · {elapsed}"
        )
        if self.tokens:
            line += f" · {fmt(self.tokens)} tok"
        if self.cost_usd:
            line += f" · {money(self.cost_usd)}"
        if self.note:
            line += f" · {self.note}"
        return Text(
            terminal_safe(line, newlines=False),
            style="bold cyan",
            no_wrap=True,
            overflow="ellipsis",
        )


class Display:
    def __init__(
        self, console: Console | None = None, *, quiet: bool = False, compat: bool = False
    ) -> None:
        self.console = console or Console(highlight=False)
        self.quiet = quiet
        # ralph.sh's lines, unstyled, so scripts that grep its output keep matching.
        self.compat = compat
        self.root: str | None = None  # the project root: agent lines show paths relative to it
        self.status = Status()
        if self.console.is_terminal:
            # Adapters shorten tool lines for display: to this terminal's width, not less.
            agent_base.live_width = self.console.width
        self._live: Live | None = None

    @property
    def live_enabled(self) -> bool:
        return self.console.is_terminal and not self.quiet

    def line(self, text: str, style: str | None = None) -> None:
        style = None if self.compat else style
        self.console.print(
            terminal_safe(text), style=style, markup=False, highlight=False, soft_wrap=True
        )

    def warn(self, text: str) -> None:
        self.line(f"ralph: warning: {text}", style="yellow")

    def banner(self, i: int, n: int, tool: str, story: str) -> None:
        self.line("")
        self.line("=" * 63)
        story_note = "" if self.compat else f" · {story}"
        self.line(f"  Ralph Iteration {i} of {n} ({tool}){story_note}", style="bold")
        self.line("=" * 63)

    def agent(self, text: str) -> None:
        """One readable line from the agent (adapter.display output)."""
        if not self.quiet:
            self.line(relative(text, self.root))

    @contextlib.contextmanager
    def live(self) -> Iterator[Status]:
        """Show the status line while the block runs (a no-op without a terminal)."""
        self.status.started = time.monotonic()
        self.status.run_started = self.status.run_started or self.status.started
        if not self.live_enabled:
            yield self.status
            return
        with Live(
            self.status,
            console=self.console,
            refresh_per_second=2,
            transient=True,
            redirect_stdout=True,
            redirect_stderr=True,
        ) as live:
            self._live = live
            try:
                yield self.status
            finally:
                self._live = None

    def countdown(
        self, seconds: float, reason: str, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        """Wait `seconds`, showing the time left (one line without a terminal)."""
        end = time.monotonic() + seconds
        self.line(
            f"ralph: {reason}: waiting {duration(seconds)} (Ctrl-C stops the run)", style="yellow"
        )
        if not self.live_enabled:
            sleep(max(0.0, seconds))
            return
        text = Text("")
        with Live(text, console=self.console, refresh_per_second=2, transient=True):
            while (left := end - time.monotonic()) > 0:
                text.plain = terminal_safe(f"⏳ {reason}: {duration(left)} left", newlines=False)
                sleep(min(1.0, left))

    def run_table(self, records: list[dict[str, Any]], title: str = "ralph run") -> Table:
        """One row per iteration and a totals footer (agent in = input + cache tokens)."""
        table = Table(
            title=title,
            show_footer=True,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        tot = ledger.totals(records)
        cols = [
            ("#", f"{tot.iterations}"),
            ("story", "total"),
            ("outcome", f"{tot.passed} pass"),
            ("prompt", fmt(tot.prompt_tokens)),
            ("full", fmt(tot.full_history_tokens)),
            ("saved", f"{tot.saved_pct:.0f}%"),
            ("in", fmt(tot.input_tokens)),
            ("out", fmt(tot.output_tokens)),
            ("cost", money(tot.cost_usd) if tot.cost_reported else "-"),
            ("time", duration(tot.duration_s)),
        ]
        for name, footer in cols:
            numeric = name not in ("story", "outcome")
            table.add_column(
                name, footer=footer, justify="right" if numeric else "left", no_wrap=True
            )
        for r in ledger.iterations(records):
            table.add_row(*(terminal_safe(c, newlines=False) for c in iteration_cells(r)))
        return table

    def print_table(self, records: list[dict[str, Any]]) -> None:
        if ledger.iterations(records):
            self.console.print(self.run_table(records))


def iteration_cells(r: dict[str, Any]) -> list[str]:
    """One iteration record as the cells of the run table (console and dashboard alike):
    iteration, story, outcome, prompt, full history, saved, agent in, out, cost, time."""
    u = r.get("usage")
    return [
        str(r.get("iteration")),
        str(r.get("story_id") or "-"),
        str(r.get("outcome")),
        fmt(r.get("prompt_tokens")),
        fmt(r.get("full_history_tokens")),
        f"{r.get('saved_pct') or 0:.0f}%",
        fmt(ledger.usage_in(u)) if u else "-",
        fmt(u.get("output_tokens")) if u else "-",
        money(r.get("cost_usd")),
        duration(r.get("duration_s")),
    ]
