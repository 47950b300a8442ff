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

from orchestrator import ledger, redact, tokens
from orchestrator.reports import abstats, charts, quality


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
    skipped_lines: int = 0  # damaged ledger lines left out (torn records)
    skipped_note: str = ""
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
        skipped_lines=len(records.skipped),
        skipped_note=records.skipped_note(),
        quality=quality.run_quality(run_records, Path(path)),
    )


def _saving(base: float | None, new: float | None) -> dict[str, float] | None:
    if base is None or new is None or base <= 0:
        return None
    return {"saved": base - new, "pct": ledger.saved_pct(base, new)}


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
                "skipped_lines": a.skipped_lines,
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
    plt = charts.pyplot()

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
    return charts.save_png(fig, path)


@dataclass(frozen=True)
class Written:
    """A written report: its files and the comparison they were rendered from."""

    markdown: Path
    json: Path
    chart: Path
    data: dict[str, Any]

    def summary(self) -> str:
        """What the commands print: the totals table and where the files are."""
        said = (
            "".join(f"  {w}\n" for w in words(self.data["summary"]))
            if "summary" in self.data
            else ""
        )
        shows = f"What the A/B shows:\n{said}" if said else ""
        return f"{console_table(self.data)}{shows}report: {self.markdown}\nchart:  {self.chart}\n"


def write_report(arms: list[Arm], out_dir: Path, stem: str = "ab") -> Written:
    """ab-report.md, ab-report.json and ab-tokens.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = compare(arms)
    chart = render_chart(data, out_dir / f"{stem}-tokens.png")
    md = out_dir / f"{stem}-report.md"
    js = out_dir / f"{stem}-report.json"
    redact.write_text(md, render_markdown(data, chart.name))
    redact.write_text(js, json.dumps(data, indent=2) + "\n")
    return Written(markdown=md, json=js, chart=chart, data=data)


def console_table(data: dict[str, Any]) -> str:
    """The totals as a plain-text table for the terminal (rich renders it)."""
    # rich is imported where a table is drawn: `ralph report --json` never pays for it.
    from rich.console import Console
    from rich.table import Table

    summary = data.get("summary") or {}
    if summary.get("replicates", 1) > 1:
        return _console_summary(summary)
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


# ---- replicates: mean ± 95% interval per arm, paired difference, plain words --------------
# (label, totals key, format) of the replicate summary, quality first.
SUMMARY_ROWS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("stories passed", "stories_passed", _num),
    ("iterations per passed story", "iterations_per_passed_story", _num),
    ("check failures", "check_failures", _num),
    ("restores", "restores", _num),
    ("retries", "retries", _num),
    ("false completions", "false_completions", _num),
    ("memory misses", "memory_misses", _num),
    ("wall time (s)", "wall_time_s", _num),
    ("prompt tokens (est.)", "prompt_tokens", tokens.fmt),
    ("agent input tokens", "input_tokens", tokens.fmt),
    ("output tokens", "output_tokens", tokens.fmt),
    ("cost (USD)", "cost_usd", _num),
    ("stories per dollar", "stories_per_usd", _num),
]


def summarize(replicates: list[list[Arm]]) -> dict[str, Any]:
    """Per figure: each arm's estimate over the replicates and the paired difference of the
    first arm against the second, with its sentence."""
    names = [a.name for a in replicates[0]]
    totals = [[a.totals() for a in rep] for rep in replicates]
    out: dict[str, Any] = {"replicates": len(replicates), "arms": names, "figures": {}}
    for label, key, _ in SUMMARY_ROWS:
        per_arm = [[t[i].get(key) for t in totals] for i in range(len(names))]
        fig: dict[str, Any] = {
            "label": label,
            "arms": {n: abstats.estimate(v).to_dict() for n, v in zip(names, per_arm, strict=True)},
        }
        if len(names) == 2:
            diff = abstats.paired_difference(per_arm[0], per_arm[1])
            fig["difference"] = {**diff.to_dict(), "of": f"{names[0]} - {names[1]}"}
            fig["significant"] = diff.excludes_zero
            fig["words"] = abstats.sentence(label, key, diff, names[0], names[1])
        out["figures"][key] = fig
    return out


def _interval(e: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    if e["mean"] is None:
        return "-"
    if e["low"] is None:
        return fmt(e["mean"])
    return f"{fmt(e['mean'])} [{fmt(e['low'])}, {fmt(e['high'])}]"


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    names = summary["arms"]
    n = summary["replicates"]
    lines = [
        f"## Replicates: N={n} (paired: replicate i of both arms starts from the same files "
        "and seed)",
        "",
        "Mean [95% bootstrap interval] per arm; the difference is "
        f"{' - '.join(names)}, replicate by replicate.",
        "",
        "| | " + " | ".join(names) + " | difference | |",
        "|---|" + "---:|" * len(names) + "---:|---|",
    ]
    fmts = {key: fmt for _, key, fmt in SUMMARY_ROWS}
    for key, fig in summary["figures"].items():
        fmt = fmts[key]
        cells = [_interval(fig["arms"][a], fmt) for a in names]
        diff = fig.get("difference")
        verdict = ("significant" if fig.get("significant") else "not significant") if diff else ""
        if diff and diff["low"] is None:
            verdict = ""
        lines.append(
            f"| {fig['label']} | "
            + " | ".join(cells)
            + f" | {_interval(diff, fmt) if diff else '-'} | {verdict} |"
        )
    return lines


def words(summary: dict[str, Any]) -> list[str]:
    """The sentences a user reads first: each measurable difference (quality first, then
    cost), then one sentence naming the figures the A/B cannot tell apart."""
    n = summary["replicates"]
    figs = [f for f in summary["figures"].values() if "difference" in f]
    if not figs:
        return []
    if n < 2:
        return [
            "One replicate: no intervals, so noise cannot be told from a difference; run "
            "`ralph ab --repeat 3` (or more) to decide."
        ]
    said = [f["words"] for f in figs if f.get("significant")]
    same = [f["label"] for f in figs if not f.get("significant") and f["arms"]]
    if same:
        said.append(f"No measurable difference in {', '.join(same)} at N={n}.")
    return said


def write_replicates_report(
    replicates: list[list[Arm]], out_dir: Path, stem: str = "ab"
) -> Written:
    """The A/B report over N paired replicates (N=1 gives the single-run report plus the
    summary without intervals). `arms`/`saving` describe the means; `runs` each replicate."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [compare(rep) for rep in replicates]
    summary = summarize(replicates)
    data = dict(runs[0]) if len(runs) == 1 else _mean_comparison(runs, summary)
    data["summary"] = summary
    data["runs"] = runs if len(runs) > 1 else []
    chart = render_replicate_chart(runs, out_dir / f"{stem}-tokens.png")
    md_lines = render_markdown(data, chart.name).rstrip("\n").split("\n")
    head = md_lines[:2]
    text = "\n".join(
        head
        + ["**What the A/B shows**", ""]
        + [f"- {w}" for w in words(summary)]
        + [""]
        + _summary_lines(summary)
        + [""]
        + md_lines[2:]
    )
    md = out_dir / f"{stem}-report.md"
    js = out_dir / f"{stem}-report.json"
    redact.write_text(md, text + "\n")
    redact.write_text(js, json.dumps(data, indent=2) + "\n")
    return Written(markdown=md, json=js, chart=chart, data=data)


def _mean_comparison(runs: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """`arms` with totals averaged over the replicates (iteration rows: replicate 1)."""
    arms = []
    for i, first in enumerate(runs[0]["arms"]):
        keys = first["totals"].keys()
        mean: dict[str, Any] = {}
        for key in keys:
            vals = [r["arms"][i]["totals"].get(key) for r in runs]
            nums = [v for v in vals if isinstance(v, (int, float))]
            mean[key] = round(sum(nums) / len(nums), 3) if nums else None
        arms.append({**first, "totals": mean, "replicate_of_rows": 1})
    data: dict[str, Any] = {"arms": arms}
    if len(arms) == 2:
        a, b = arms[0]["totals"], arms[1]["totals"]
        data["saving"] = {
            key: _saving(b[key], a[key])
            for key in ("prompt_tokens", "input_tokens", "output_tokens", "cost_usd")
        }
        data["saving"]["of"] = f"{arms[0]['name']} vs {arms[1]['name']} (means)"
    return data


def render_replicate_chart(runs: list[dict[str, Any]], path: Path) -> Path:
    """One run: render_chart. Several: cumulative tokens per arm, mean with a 95% band over
    the replicates, beside the quality figures (stories passed, iterations per story)."""
    if len(runs) == 1:
        return render_chart(runs[0], path)
    plt = charts.pyplot()

    fig, (cum, qual) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    names = [a["name"] for a in runs[0]["arms"]]
    for i, name in enumerate(names):
        series = [list(itertools.accumulate(_series(r["arms"][i])[1])) for r in runs]
        longest = max((len(s) for s in series), default=0)
        xs, means, lows, highs = [], [], [], []
        for x in range(longest):
            # A replicate that finished earlier keeps its final total.
            est = abstats.estimate([s[min(x, len(s) - 1)] for s in series if s])
            xs.append(x + 1)
            means.append(est.mean or 0)
            lows.append(est.low if est.low is not None else est.mean or 0)
            highs.append(est.high if est.high is not None else est.mean or 0)
        line = cum.plot(xs, means, label=f"{name} (mean of {len(runs)})")[0]
        cum.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.2)
    cum.set_title("Cumulative tokens, 95% band over replicates")
    cum.set_xlabel("iteration")
    cum.set_ylabel("tokens")
    cum.grid(alpha=0.3)
    cum.legend(fontsize=8)
    keys = [("stories_passed", "stories passed"), ("iterations", "iterations")]
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        ests = [abstats.estimate([r["arms"][i]["totals"].get(k) for r in runs]) for k, _ in keys]
        ms = [e.mean or 0 for e in ests]
        err = [
            [m - (e.low if e.low is not None else m) for m, e in zip(ms, ests, strict=True)],
            [(e.high if e.high is not None else m) - m for m, e in zip(ms, ests, strict=True)],
        ]
        qual.bar([j + i * width for j in range(len(keys))], ms, width, yerr=err, label=name)
    qual.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(keys))])
    qual.set_xticklabels([label for _, label in keys])
    qual.set_title("Quality (mean, 95% interval)")
    qual.legend(fontsize=8)
    return charts.save_png(fig, path)


def _console_summary(summary: dict[str, Any]) -> str:
    """Replicates: mean [95% interval] per arm and the paired difference, as a rich table."""
    from rich.console import Console
    from rich.table import Table

    names = summary["arms"]
    table = Table(
        title=f"A/B: indexed vs full history, N={summary['replicates']} paired replicates "
        "(mean [95% interval])"
    )
    table.add_column("")
    for name in names:
        table.add_column(name, justify="right")
    table.add_column(" - ".join(names), justify="right")
    fmts = {key: fmt for _, key, fmt in SUMMARY_ROWS}
    for key, fig in summary["figures"].items():
        fmt = fmts[key]
        diff = fig.get("difference")
        mark = " *" if fig.get("significant") else ""
        table.add_row(
            fig["label"],
            *(_interval(fig["arms"][n], fmt) for n in names),
            (_interval(diff, fmt) + mark) if diff else "-",
        )
    console = Console(width=120)
    with console.capture() as captured:
        console.print(table)
    return captured.get() + "* the interval of the difference excludes zero\n"
