"""Compare runs from their ledgers: tables, JSON and a chart a person would rather look at.

`ralph ab` and `ralph report` both end here. The numbers come only from ledger records
(`ledger.jsonl`, one JSON object per line, see docs/architecture.md), so a report can be
re-rendered at any time from two earlier runs.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import ledger, quality, tokens
from orchestrator.fsutil import atomic_write_bytes, atomic_write_text


@dataclass
class IterationRow:
    iteration: int
    story_id: str | None
    outcome: str
    prompt_tokens: int
    full_history_tokens: int | None
    input_tokens: int | None  # agent-reported, all prompt tokens (uncached + cache read + write)
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    duration_s: float
    checks_ok: bool | None


@dataclass
class Arm:
    name: str
    ledger: str
    run_id: str | None
    mode: str | None
    agent: str | None
    rows: list[IterationRow] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)  # quality.run_quality

    @property
    def stories_completed(self) -> int:
        return sum(1 for r in self.rows if r.outcome == "passed")

    @property
    def check_failures(self) -> int:
        return sum(1 for r in self.rows if r.checks_ok is False)

    def total(self, attr: str) -> float | None:
        values = [getattr(r, attr) for r in self.rows]
        if not values or all(v is None for v in values):
            return None
        return sum(v or 0 for v in values)

    def totals(self) -> dict[str, Any]:
        return {
            "stories_completed": self.stories_completed,
            "iterations": len(self.rows),
            "prompt_tokens": self.total("prompt_tokens"),
            "input_tokens": self.total("input_tokens"),
            "cache_read_tokens": self.total("cache_read_tokens"),
            "cache_write_tokens": self.total("cache_write_tokens"),
            "output_tokens": self.total("output_tokens"),
            "cost_usd": self.total("cost_usd"),
            "duration_s": self.total("duration_s"),
            "check_failures": self.check_failures,
            **self.quality,
            "stories_per_usd": _per(self.stories_completed, self.total("cost_usd")),
        }


def _per(n: float, cost: float | None) -> float | None:
    return round(n / cost, 3) if cost else None


def _agent_input(usage: dict[str, Any] | None) -> tuple[int | None, int | None, int | None]:
    """All prompt tokens the agent reported, and the cache split (read, write)."""
    if not usage:
        return None, None, None
    read = int(usage.get("cache_read_tokens") or 0)
    write = int(usage.get("cache_write_tokens") or 0)
    return int(usage.get("input_tokens") or 0) + read + write, read, write


def _row(rec: dict[str, Any]) -> IterationRow:
    usage = rec.get("usage") or None
    total_in, read, write = _agent_input(usage)
    checks = rec.get("checks")
    checks_ok = checks.get("ok") if isinstance(checks, dict) else None
    return IterationRow(
        iteration=int(rec.get("iteration") or 0),
        story_id=rec.get("story_id"),
        outcome=str(rec.get("outcome") or "unknown"),
        prompt_tokens=int(rec.get("prompt_tokens") or 0),
        full_history_tokens=rec.get("full_history_tokens"),
        input_tokens=total_in,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=(usage or {}).get("output_tokens") if usage else None,
        cost_usd=rec.get("cost_usd"),
        duration_s=float(rec.get("duration_s") or 0.0),
        checks_ok=checks_ok,
    )


def load_arm(path: Path, name: str | None = None, run_id: str | None = None) -> Arm:
    """The iterations of one run in a ledger: `run_id`, else the ledger's last run."""
    records = ledger.read(Path(path), strict=True)
    iterations = [r for r in records if r.get("event") == "iteration"]
    if run_id is None and iterations:
        run_id = iterations[-1].get("run_id")
    chosen = [r for r in iterations if r.get("run_id") == run_id]
    first = chosen[0] if chosen else {}
    run_records = [r for r in records if run_id is not None and r.get("run_id") == run_id]
    return Arm(
        name=name or first.get("mode") or Path(path).parent.name,
        ledger=str(path),
        run_id=run_id,
        mode=first.get("mode"),
        agent=first.get("agent"),
        rows=[_row(r) for r in chosen],
        quality=quality.run_quality(run_records, Path(path)),
    )


def _saving(base: float | None, new: float | None) -> dict[str, float] | None:
    if base is None or new is None or base <= 0:
        return None
    return {"saved": base - new, "pct": round(100.0 * (base - new) / base, 1)}


def compare(arms: list[Arm]) -> dict[str, Any]:
    """Totals per arm and, for two arms, what the first saves against the second."""
    out: dict[str, Any] = {
        "arms": [
            {
                "name": a.name,
                "ledger": a.ledger,
                "run_id": a.run_id,
                "mode": a.mode,
                "agent": a.agent,
                "totals": a.totals(),
                "iterations": [asdict(r) for r in a.rows],
            }
            for a in arms
        ]
    }
    if len(arms) == 2:
        a, b = (x.totals() for x in arms)
        out["saving"] = {
            key: _saving(b[key], a[key])
            for key in ("prompt_tokens", "input_tokens", "output_tokens", "cost_usd")
        }
        out["saving"]["of"] = f"{arms[0].name} vs {arms[1].name}"
    return out


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}s"


# (label, totals key, format): the quality rows of every table, in order.
QUALITY_ROWS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("stories passed", "stories_passed", _num),
    ("iterations", "iterations", _num),
    ("iterations per passed story", "iterations_per_passed_story", _num),
    ("check failures", "check_failures", _num),
    ("restores (lost memory put back)", "restores", _num),
    ("retries (transient, limits)", "retries", _num),
    ("false completions", "false_completions", _num),
    ("memory misses", "memory_misses", _num),
    ("· references opened, not inlined", "references_opened_not_inlined", _num),
    ("· progress.txt read in full (indexed)", "progress_reads_indexed", _num),
    ("wall time", "wall_time_s", _secs),
]


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:.2f}"


def _pct(s: dict[str, float] | None) -> str:
    return "-" if not s else f"{s['pct']:.1f}%"


def render_markdown(data: dict[str, Any], chart: str | None = None) -> str:
    arms = data["arms"]
    lines = ["# A/B report: indexed memory against full history", ""]
    lines += ["| | " + " | ".join(a["name"] for a in arms) + " |"]
    lines += ["|---|" + "---:|" * len(arms)]

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(a["totals"]) for a in arms) + " |")

    lines += ["| **quality** |" + " |" * len(arms)]
    for label, key, fmt in QUALITY_ROWS:
        row(label, lambda t, key=key, fmt=fmt: fmt(t.get(key)))
    lines += ["| **cost** |" + " |" * len(arms)]
    row("prompt tokens (estimated)", lambda t: tokens.fmt(t["prompt_tokens"]))
    row("agent input tokens (all)", lambda t: tokens.fmt(t["input_tokens"]))
    row("· of which cache read", lambda t: tokens.fmt(t["cache_read_tokens"]))
    row("· of which cache write", lambda t: tokens.fmt(t["cache_write_tokens"]))
    row("output tokens", lambda t: tokens.fmt(t["output_tokens"]))
    row("cost", lambda t: _money(t["cost_usd"]))
    row("agent time", lambda t: f"{(t['duration_s'] or 0):.0f}s")
    row("stories per dollar", lambda t: _num(t.get("stories_per_usd")))
    if "saving" in data:
        s = data["saving"]
        lines += [
            "",
            f"**Saving ({s['of']})**: prompt tokens {_pct(s['prompt_tokens'])}, "
            f"agent input tokens {_pct(s['input_tokens'])}, cost {_pct(s['cost_usd'])}.",
        ]
    if chart:
        lines += ["", f"![tokens per iteration]({chart})"]
    for a in arms:
        lines += ["", f"## {a['name']} ({a['agent'] or '?'}, run {a['run_id']})", ""]
        lines += [
            "| # | story | outcome | prompt (est.) | agent in | cache read | out | cost | time |"
        ]
        lines += ["|---:|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in a["iterations"]:
            lines.append(
                f"| {r['iteration']} | {r['story_id'] or '-'} | {r['outcome']} | "
                f"{tokens.fmt(r['prompt_tokens'])} | {tokens.fmt(r['input_tokens'])} | "
                f"{tokens.fmt(r['cache_read_tokens'])} | {tokens.fmt(r['output_tokens'])} | "
                f"{_money(r['cost_usd'])} | {r['duration_s']:.0f}s |"
            )
    return "\n".join(lines) + "\n"


def _series(arm: dict[str, Any]) -> tuple[list[int], list[int], str]:
    """Agent-reported input per iteration where every iteration has it, else our estimate."""
    rows = arm["iterations"]
    if rows and all(r["input_tokens"] is not None for r in rows):
        return list(range(1, len(rows) + 1)), [r["input_tokens"] for r in rows], "agent input"
    return list(range(1, len(rows) + 1)), [r["prompt_tokens"] for r in rows], "prompt (est.)"


def render_chart(data: dict[str, Any], path: Path) -> Path:
    """Tokens per iteration and cumulative tokens, one line per arm, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import io

    import matplotlib.pyplot as plt

    fig, (per, cum) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for arm in data["arms"]:
        xs, ys, what = _series(arm)
        label = f"{arm['name']} ({what})"
        line = per.plot(xs, ys, marker="o", markersize=3, label=label)[0]
        if what != "prompt (est.)":
            # Our own estimate of the assembled prompt, for comparison with what the agent saw.
            est = [r["prompt_tokens"] for r in arm["iterations"]]
            per.plot(
                xs,
                est,
                linestyle="--",
                color=line.get_color(),
                alpha=0.7,
                label=f"{arm['name']} (prompt, est.)",
            )
        cum.plot(xs, list(itertools.accumulate(ys)), marker="o", markersize=3, label=label)
    per.set_title("Tokens per iteration")
    cum.set_title("Cumulative tokens")
    for ax in (per, cum):
        ax.set_xlabel("iteration")
        ax.set_ylabel("tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


@dataclass(frozen=True)
class Written:
    """A written report: its files and the comparison they were rendered from."""

    markdown: Path
    json: Path
    chart: Path
    data: dict[str, Any]

    def summary(self) -> str:
        """What the commands print: the totals table and where the files are."""
        return f"{console_table(self.data)}report: {self.markdown}\nchart:  {self.chart}\n"


def write_report(arms: list[Arm], out_dir: Path, stem: str = "ab") -> Written:
    """ab-report.md, ab-report.json and ab-tokens.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = compare(arms)
    chart = render_chart(data, out_dir / f"{stem}-tokens.png")
    md = out_dir / f"{stem}-report.md"
    js = out_dir / f"{stem}-report.json"
    atomic_write_text(md, render_markdown(data, chart.name))
    atomic_write_text(js, json.dumps(data, indent=2) + "\n")
    return Written(markdown=md, json=js, chart=chart, data=data)


def console_table(data: dict[str, Any]) -> str:
    """The totals as a plain-text table for the terminal (rich renders it)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="A/B: indexed vs full history")
    table.add_column("")
    for a in data["arms"]:
        table.add_column(a["name"], justify="right")
    keys: list[tuple[str, str, Callable[[Any], str]]] = [
        *QUALITY_ROWS,
        ("prompt tokens (est.)", "prompt_tokens", tokens.fmt),
        ("agent input tokens", "input_tokens", tokens.fmt),
        ("output tokens", "output_tokens", tokens.fmt),
        ("cost", "cost_usd", _money),
        ("stories per dollar", "stories_per_usd", _num),
    ]
    for label, key, fmt in keys:
        table.add_row(label, *(fmt(a["totals"].get(key)) for a in data["arms"]))
    # capture() keeps the table off the terminal and hands back its text; the caller prints.
    console = Console(width=100)
    with console.capture() as captured:
        console.print(table)
    text = captured.get()
    if "saving" in data:
        s = data["saving"]
        text += (
            f"saving ({s['of']}): prompt tokens {_pct(s['prompt_tokens'])}, "
            f"agent input {_pct(s['input_tokens'])}, cost {_pct(s['cost_usd'])}\n"
        )
    return text
