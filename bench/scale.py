"""How the memory commands grow with history and with references.

    .venv/bin/python bench/scale.py            # bench/results/scale.{md,json}, docs/img/scale.png
    .venv/bin/python bench/scale.py --quick    # small sizes, one repeat: a sanity run (seconds)
    .venv/bin/python bench/scale.py --profile migrate:1000   # cProfile one command at one size

Projects come from bench/synth.py (entries shaped like the corpus's). Two axes:
- history: 30 / 300 / 1,000 / 3,000 stories. `ralph migrate --dry-run` and `ralph migrate`
  on the flat log; `check`, `compact` (dry run), `prompt` and `status` on an indexed project
  with 100 references and that history in progress.txt;
- references: 10 / 100 / 1,000 / 10,000 index rows over a 3,000-story history;
- extras (`--extras`, on by default): start-up (`--version`, `--help`, `status` on a 30-story
  project), `status` and `prompt` on a 50 MB progress.txt (`--big-log MB`), and one loop
  iteration (`ralph run --tool bench 1` with a trivial agent, `--iteration-refs` references):
  its CPU is the ralph process and its git calls, the agent's own CPU (a shell reading the
  prompt, reported by `times`) subtracted.

`--baseline DIR` times another checkout (its `orchestrator/` package, run as `python -m
orchestrator` with PYTHONPATH=DIR) against this one, run after run, each on its own copy of
the same project, so both see the same machine: cells become "before -> after" with the CPU
ratio.

Every command runs as a real `ralph` subprocess; wall time from `time.perf_counter`, CPU time
(user + system) from `resource.getrusage(RUSAGE_CHILDREN)`, median of `--repeats`. The growth
exponent is the slope of log(CPU) against log(size) (least squares over all sizes, and
between the two largest, where start-up no longer hides the growth). The machine this runs on
is often shared: CPU seconds are the steadier figure, wall seconds say what a user waits.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import synth  # noqa: E402

HISTORY = (30, 300, 1000, 3000)
REFS = (10, 100, 1000, 10000)
HISTORY_REFS = 100  # references of the indexed projects on the history axis
REFS_STORIES = 3000  # history of the projects on the references axis
BIG_LOG_MB = 50.0
ITERATION_REFS = 10000
EXTRA_AXES = ("startup", "big log", "iteration")
AGENT_TIMES = "bench-agent.times"
QUICK_HISTORY = (10, 40)
QUICK_REFS = (5, 20)
# Commands per project kind: (label, argv after `ralph`).
FLAT_COMMANDS = (("migrate --dry-run", ["migrate", "--dry-run"]), ("migrate", ["migrate"]))
INDEXED_COMMANDS = (
    ("check", ["check"]),
    ("compact", ["compact"]),
    ("prompt", ["prompt", "--json"]),
    ("status", ["status", "--json"]),
)


def ralph_argv() -> list[str]:
    """The installed `ralph` beside this interpreter, else `python -m orchestrator`."""
    exe = Path(sys.executable).with_name("ralph")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "orchestrator"]


def source_argv(source: Path | None) -> tuple[list[str], dict[str, str] | None]:
    """(argv prefix, environment) running `ralph` from `source` (a checkout), or the
    installed one when None. Both sides of a comparison run as `python -m orchestrator`."""
    if source is None:
        return ralph_argv(), None
    env = dict(os.environ, PYTHONPATH=str(source))
    return [sys.executable, "-m", "orchestrator"], env


def timed(
    argv: Sequence[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run one command; wall and CPU seconds, exit code and the tail of its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = None, str(exc.stdout or ""), "timed out"
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "exit": code, "stdout": out, "stderr": err[-400:]}


def _prompt_facts(stdout: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except ValueError:
        return {}
    parts = data.get("parts") or {}
    return {"prompt_tokens": data.get("tokens"), "index_tokens": parts.get("index")}


def _agent_cpu(cwd: Path) -> float:
    """CPU seconds the bench agent reported (`times`: the shell, then its children)."""
    path = cwd / AGENT_TIMES
    if not path.exists():
        return 0.0
    total = 0.0
    for word in path.read_text().split():
        m, _, sec = word.rstrip("s").partition("m")
        with contextlib.suppress(ValueError):
            total += int(m) * 60 + float(sec)
    path.unlink()
    return total


def _one(
    argv: list[str], project: Path, timeout: float, fresh: bool, source: Path | None
) -> dict[str, Any]:
    cwd = project
    if fresh:
        cwd = project.with_name(project.name + "-run")
        shutil.rmtree(cwd, ignore_errors=True)
        shutil.copytree(project, cwd, symlinks=True)
        if (cwd / ".git").is_dir():
            # A copy's files have new inodes and times, so git's index no longer matches
            # their stat data and every `git status` would hash the whole tree again; a
            # real project's index is current (each git status or commit refreshes it).
            subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=cwd, check=False)
    prefix, env = source_argv(source)
    r = timed([*prefix, *argv], cwd, timeout, env)
    r["cpu"] -= _agent_cpu(cwd)
    if fresh:
        shutil.rmtree(cwd, ignore_errors=True)
    return r


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall": statistics.median(r["wall"] for r in runs),
        "cpu": statistics.median(r["cpu"] for r in runs),
        "exit": runs[-1]["exit"],
        "runs": [{k: r[k] for k in ("wall", "cpu", "exit")} for r in runs],
    }


def measure(
    label: str,
    argv: list[str],
    project: Path,
    repeats: int,
    timeout: float,
    fresh: bool,
    baseline: Path | None = None,
    source: Path | None = None,
) -> dict[str, Any]:
    """Median of `repeats` runs; `fresh` runs each on a new copy (commands that write).
    With `baseline`, each repeat runs that checkout first, then this one, each on its own
    copy of the project: the caches in its log folder (token counts, ref-index.json) are
    keyed by the ranking code, so two versions sharing them would undo each other's."""
    runs: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    base_project = project
    if baseline is not None:
        base_project = project.with_name(project.name + "-baseline")
        shutil.rmtree(base_project, ignore_errors=True)
        shutil.copytree(project, base_project, symlinks=True)
        # Unmeasured: the first run on a project fills its caches, for both sides alike
        # (a fresh copy carries them: the iteration's warm-up is a `ralph prompt`).
        warm = ["prompt", "--json"] if fresh else argv
        _one(warm, base_project, timeout, False, baseline)
        _one(warm, project, timeout, False, source)
    for _ in range(repeats):
        if baseline is not None:
            base.append(_one(argv, base_project, timeout, fresh, baseline))
        r = _one(argv, project, timeout, fresh, source)
        runs.append(r)
        if r["exit"] is None:
            break  # a timed-out command is not worth repeating
    if base_project != project:
        shutil.rmtree(base_project, ignore_errors=True)
    row: dict[str, Any] = {"command": label, **_summary(runs)}
    if base:
        row["baseline"] = _summary(base)
    if label == "prompt":
        row.update(_prompt_facts(runs[-1]["stdout"]))
    if runs[-1]["exit"] not in (0, 1):  # check exits 1 with findings: a result, not a failure
        row["stderr"] = runs[-1]["stderr"]
    return row


def slope(sizes: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) against log(size)."""
    pts = [(math.log(s), math.log(v)) for s, v in zip(sizes, values, strict=True) if v > 0]
    if len(pts) < 2:
        return None
    mx = statistics.mean(p[0] for p in pts)
    my = statistics.mean(p[1] for p in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def exponents(rows: list[dict[str, Any]], axis: str) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for cmd in dict.fromkeys(r["command"] for r in rows if r["axis"] == axis):
        pts = sorted(
            (r["size"], r["cpu"]) for r in rows if r["axis"] == axis and r["command"] == cmd
        )
        sizes, cpus = [p[0] for p in pts], [p[1] for p in pts]
        out[cmd] = {"all": slope(sizes, cpus), "top two": slope(sizes[-2:], cpus[-2:])}
    return out


def run_axis(
    axis: str, sizes: Sequence[int], work: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        if axis == "history":
            projects = [
                (synth.flat_project(work / f"flat-{size}", size), FLAT_COMMANDS),
                (
                    synth.indexed_project(work / f"idx-{size}", size, args.history_refs),
                    INDEXED_COMMANDS,
                ),
            ]
        else:
            projects = [
                (
                    synth.indexed_project(work / f"refs-{size}", args.refs_stories, size),
                    INDEXED_COMMANDS,
                )
            ]
        for project, commands in projects:
            for label, argv in commands:
                if args.only and label.split()[0] not in args.only:
                    continue
                fresh = argv == ["migrate"]
                row = measure(
                    label,
                    argv,
                    project,
                    args.repeats,
                    args.timeout,
                    fresh,
                    args.baseline,
                    args.source,
                )
                row.update(axis=axis, size=size)
                _keep(rows, row, args)
            shutil.rmtree(project, ignore_errors=True)
    return rows


def _keep(rows: list[dict[str, Any]], row: dict[str, Any], args: argparse.Namespace) -> None:
    rows.append(row)
    if args.progress_file:  # rows so far survive an interrupted run
        with open(args.progress_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    base = row.get("baseline")
    before = f"(before: wall {base['wall']:.2f}s cpu {base['cpu']:.2f}s)  " if base else ""
    print(
        f"{row['axis']:>10} {row['size']:>6} {row['command']:<18} wall {row['wall']:8.2f}s  "
        f"cpu {row['cpu']:8.2f}s  {before}exit {row['exit']}",
        flush=True,
    )


def bench_project(root: Path, n_stories: int, n_refs: int) -> Path:
    """An indexed project in a git repo whose ralph.yaml has a `bench` agent: a shell that
    reads the prompt and writes its own CPU time (`times`) to AGENT_TIMES."""
    synth.indexed_project(root, n_stories, n_refs)
    agent = root / "bench-agent.sh"
    agent.write_text(f"#!/bin/sh\ncat > /dev/null\necho done\ntimes >> {AGENT_TIMES}\n")
    (root / "ralph.yaml").write_text(
        "sleep_between: 0\nagents:\n  bench:\n    command: [sh, bench-agent.sh]\n"
    )
    (root / ".gitignore").write_text(f"{AGENT_TIMES}\n")
    for git_args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.email=bench@example.com", "-c", "user.name=bench", "commit", "-qm", "init"],
    ):
        subprocess.run(["git", *git_args], cwd=root, check=True, capture_output=True)
    # The log folder a first run makes (git ignores it): the caches that an unmeasured
    # `ralph prompt` fills go there, so each fresh copy of the project carries them.
    logs = root / "ralph" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / ".gitignore").write_text("*\n")
    return root


def run_extras(work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Start-up, a long progress.txt, one loop iteration (see the module doc)."""
    rows: list[dict[str, Any]] = []
    small = synth.indexed_project(work / "small", 30, 10)
    big = synth.big_log_project(work / "big", args.big_log, n_stories=min(3000, args.refs_stories))
    loop = bench_project(work / "loop", args.refs_stories, args.iteration_refs)
    jobs = [
        ("startup", 0, "--version", ["--version"], small, False),
        ("startup", 0, "--help", ["--help"], small, False),
        ("startup", 30, "status", ["status"], small, False),
        ("big log", args.big_log, "status", ["status", "--json"], big, False),
        ("big log", args.big_log, "prompt", ["prompt", "--json"], big, False),
        ("iteration", args.iteration_refs, "run 1", ["run", "--tool", "bench", "1"], loop, True),
        ("iteration", args.iteration_refs, "run 2", ["run", "--tool", "bench", "2"], loop, True),
    ]
    for axis, size, label, argv, project, fresh in jobs:
        if args.only and label.split()[0].lstrip("-") not in args.only and axis not in args.only:
            continue
        if axis == "iteration":
            # An iteration after the first: the project's token counts are cached (each
            # measured run works on a fresh copy of the project, cache included).
            _one(["prompt", "--json"], project, args.timeout, False, args.source)
        row = measure(
            label, argv, project, args.repeats, args.timeout, fresh, args.baseline, args.source
        )
        row.update(axis=axis, size=size)
        _keep(rows, row, args)
    for project in (small, big, loop):
        shutil.rmtree(project, ignore_errors=True)
    return rows


def _cell(rows: list[dict[str, Any]], axis: str, cmd: str, size: int) -> str:
    r = next(
        (r for r in rows if r["axis"] == axis and r["command"] == cmd and r["size"] == size), None
    )
    return "-" if r is None else _figures(r)


def _figures(r: dict[str, Any]) -> str:
    """ "wall / CPU", or with a baseline "before -> after (CPU ratio)"."""
    bad = "" if r["exit"] in (0, 1) else f" (exit {r['exit']})"
    now = f"{r['wall']:.2f} / {r['cpu']:.2f}{bad}"
    base = r.get("baseline")
    if not base:
        return now
    ratio = f"x{base['cpu'] / r['cpu']:.1f}" if r["cpu"] > 0 else "-"
    return f"{base['wall']:.2f} / {base['cpu']:.2f} -> {now} ({ratio})"


def _fmt_exp(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    lines = [
        "# Scale benchmark: memory commands against history and references",
        "",
        f"Measured {result['when']} on {result['machine']} (load average at start "
        f"{result['load']}); median of {result['repeats']} run(s); cells are wall / CPU "
        "seconds of one real `ralph` subprocess. Growth exponent: slope of log CPU against "
        "log size, over all sizes and between the two largest.",
        "",
    ]
    if result.get("baseline"):
        lines[-1:-1] = [
            f"Cells with an arrow: `{result['baseline']}` (before) -> this checkout (after), "
            "run after run, each on its own copy of the same project; the ratio is before CPU / "
            "after CPU.",
            "",
        ]
    for axis, sizes, what in (
        (
            "history",
            result["history_sizes"],
            f"stories (indexed projects: {result['history_refs']} references)",
        ),
        (
            "references",
            result["refs_sizes"],
            f"references ({result['refs_stories']}-story history)",
        ),
    ):
        if not any(r["axis"] == axis for r in rows):
            continue
        exp = result["exponents"][axis]
        head = " | ".join(f"{s:,}" for s in sizes)
        lines += [
            f"## By {what}",
            "",
            f"| command | {head} | exponent (all / top two) |",
            "|---|" + "---:|" * len(sizes) + "---:|",
        ]
        for cmd in exp:
            cells = " | ".join(_cell(rows, axis, cmd, s) for s in sizes)
            e = exp[cmd]
            lines.append(
                f"| `ralph {cmd}` | {cells} | {_fmt_exp(e['all'])} / {_fmt_exp(e['top two'])} |"
            )
        lines.append("")
        prompts = [r for r in rows if r["axis"] == axis and r["command"] == "prompt"]
        if prompts:
            lines.append(
                "Prompt tokens (index part): "
                + ", ".join(
                    f"{r['size']:,}: {r.get('prompt_tokens')} ({r.get('index_tokens')})"
                    for r in prompts
                )
            )
            lines.append("")
    extras = [r for r in rows if r["axis"] in EXTRA_AXES]
    if extras:
        lines += [
            "## Start-up, a long progress.txt, one loop iteration",
            "",
            "| what | command | wall / CPU s |",
            "|---|---|---:|",
        ]
        for r in extras:
            what = {
                "startup": "start-up" + (f", {r['size']}-story project" if r["size"] else ""),
                "big log": f"{r['size']:g} MB progress.txt",
                "iteration": f"{_ITERATIONS.get(r['command'], r['command'])}, {r['size']:,} "
                "references (agent CPU excluded)",
            }[r["axis"]]
            lines.append(f"| {what} | `ralph {r['command']}` | {_figures(r)} |")
        lines.append("")
        lines += _second_iteration(extras)
    return "\n".join(lines)


_ITERATIONS = {"run 1": "one iteration", "run 2": "two iterations in one run"}


def _second_iteration(rows: list[dict[str, Any]]) -> list[str]:
    """What an iteration after the first costs: `run 2` minus `run 1` (start-up, imports
    and the first reads are paid once per run)."""
    by = {r["command"]: r for r in rows if r["axis"] == "iteration"}
    if "run 1" not in by or "run 2" not in by:
        return []
    one, two = by["run 1"], by["run 2"]
    line = f"An iteration after the first costs {two['cpu'] - one['cpu']:.2f} s of CPU"
    if "baseline" in one and "baseline" in two:
        line += f" (before: {two['baseline']['cpu'] - one['baseline']['cpu']:.2f} s)"
    return [line + ": `run 2` minus `run 1`, medians.", ""]


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib  # heavy: only the chart needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, axis, xlabel in zip(
        axes, ("history", "references"), ("stories", "references"), strict=True
    ):
        for cmd in result["exponents"].get(axis, {}):
            pts = sorted(
                (r["size"], r["cpu"]) for r in rows if r["axis"] == axis and r["command"] == cmd
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"ralph {cmd}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("CPU seconds (median)")
        ax.set_title(f"by {xlabel}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def profile(spec: str, work: Path, args: argparse.Namespace) -> None:
    """cProfile one command in-process: `migrate:1000` (flat log) or `prompt:1000` (refs)."""
    import cProfile
    import pstats

    cmd, size = spec.split(":")
    n = int(size)
    if cmd == "migrate":
        project = synth.flat_project(work / "prof", n)
        argv = ["migrate", "--dry-run"]
    else:
        project = synth.indexed_project(work / "prof", args.refs_stories, n)
        argv = {"prompt": ["prompt", "--json"], "status": ["status", "--json"]}.get(cmd, [cmd])
    os.chdir(project)
    from orchestrator import cli

    prof = cProfile.Profile()
    prof.enable()
    with contextlib.suppress(SystemExit):
        cli.main(argv)
    prof.disable()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--history", type=int, nargs="*", help="story counts (default 30 300 1000 3000)"
    )
    ap.add_argument("--refs", type=int, nargs="*", help="reference counts (default 10 ... 10000)")
    ap.add_argument("--history-refs", type=int, default=HISTORY_REFS)
    ap.add_argument("--refs-stories", type=int, default=REFS_STORIES)
    ap.add_argument(
        "--only", nargs="*", help="commands to run (migrate check compact prompt status)"
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per command run")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--chart", type=Path, default=ROOT / "docs" / "img" / "scale.png")
    ap.add_argument("--no-chart", action="store_true")
    ap.add_argument("--progress-file", type=Path, help="append each row as JSON as it is measured")
    ap.add_argument("--profile", metavar="CMD:SIZE", help="cProfile one command and exit")
    ap.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="also time the checkout in DIR, run after run (before -> after cells)",
    )
    ap.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="time the checkout in DIR instead of the installed ralph (e.g. a frozen copy)",
    )
    ap.add_argument(
        "--no-extras",
        dest="extras",
        action="store_false",
        help="skip start-up, the long progress.txt and the loop iteration",
    )
    ap.add_argument("--big-log", type=float, default=BIG_LOG_MB, help="MB (default 50)")
    ap.add_argument("--iteration-refs", type=int, default=ITERATION_REFS)
    args = ap.parse_args(argv)
    for flag, where in (("--baseline", args.baseline), ("--source", args.source)):
        if where is not None and not (where / "orchestrator").is_dir():
            ap.error(f"{flag} {where}: no orchestrator/ package there")
        if where is not None:
            # As installed (pip writes bytecode): else, with PYTHONDONTWRITEBYTECODE set,
            # every run would compile every module again.
            compileall.compile_dir(where / "orchestrator", quiet=1)
    if args.quick:
        args.repeats = 1
        args.history = args.history or list(QUICK_HISTORY)
        args.refs = args.refs if args.refs is not None else list(QUICK_REFS)
        args.history_refs, args.refs_stories = min(args.history_refs, 8), min(args.refs_stories, 40)
        args.big_log, args.iteration_refs = min(args.big_log, 0.2), min(args.iteration_refs, 20)
    history = HISTORY if args.history is None else tuple(args.history)
    refs = REFS if args.refs is None else tuple(args.refs)
    with tempfile.TemporaryDirectory(prefix="ralph-scale-") as tmp:
        work = Path(tmp)
        if args.profile:
            profile(args.profile, work, args)
            return 0
        rows = run_axis("history", history, work, args) + run_axis("references", refs, work, args)
        if args.extras:
            rows += run_extras(work, args)
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPUs",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "repeats": args.repeats,
        "history_sizes": list(history),
        "refs_sizes": list(refs),
        "history_refs": args.history_refs,
        "refs_stories": args.refs_stories,
        "baseline": str(args.baseline) if args.baseline else None,
        "rows": rows,
        "exponents": {
            "history": exponents(rows, "history"),
            "references": exponents(rows, "references"),
        },
    }
    name = "scale-quick" if args.quick else "scale"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (args.out / f"{name}.md").write_text(markdown(result) + "\n", encoding="utf-8")
    if not args.no_chart:
        chart(result, args.chart if not args.quick else args.out / f"{name}.png")
    print(markdown(result))
    failed = [r for r in rows if r["exit"] not in (0, 1)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
