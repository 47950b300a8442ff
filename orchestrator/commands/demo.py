"""`ralph demo`: the main job on the built-in default, for a first look.

Copies the bundled example project into a fresh git repository and runs `ralph ab` on it with
the simulated agent: the loop twice, indexed memory against the full history, then the report.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from orchestrator import stopsignals
from orchestrator.errors import UsageError
from orchestrator.project import locate
from orchestrator.reports import ab, charts
from orchestrator.sim import examples

# Two paired replicates: every figure gets an interval, at twice the time of one run (one
# replicate of the example takes ~4.7 min with both arms at once on this 2-core machine
# under load, ~2 CPU-minutes). `--repeat 3` tightens the intervals, `--repeat 1` is quickest.
DEFAULT_REPEAT = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="copy the bundled example into a new git repo and run `ralph ab` on it (sim agent)",
        description="Runs the A/B comparison (indexed vs full history) on a copy of a bundled "
        "example with the simulated agent, and prints where the report and chart are.",
    )
    p.add_argument("--example", default="recipe-box", help="example name (default recipe-box)")
    p.add_argument(
        "--into", type=Path, help="folder for the example copy (default: ./ralph-demo-<time>)"
    )
    p.add_argument("--tool", default="sim", help="agent for both arms (default: sim)")
    p.add_argument("--sequential", action="store_true", help="run the arms one after the other")
    p.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_REPEAT,
        metavar="N",
        help=f"paired replicates per arm, for intervals (default {DEFAULT_REPEAT})",
    )
    p.add_argument("max_iterations", nargs="?", type=int, default=40, help="per arm (default 40)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    charts.require("demo")
    # SIGTERM/SIGHUP stop the demo like Ctrl-C (arms stopped, copies removed, exit 128+signal).
    with stopsignals.interrupt_on_stop_signals():
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    dest = (args.into or Path(f"ralph-demo-{time.strftime('%Y%m%d-%H%M%S')}")).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty: pass --into with a new folder")
    examples.copy_example(args.example, dest)
    print(f"example '{args.example}' copied to {dest} (a new git repository)")
    project = locate(dest)
    out = dest / "ab-report"
    opts = ab.AbOptions(
        out_dir=out,
        tool=args.tool,
        max_iterations=args.max_iterations,
        parallel=not args.sequential,
        repeat=max(1, args.repeat),
    )
    logs_rel = os.path.relpath(project.logs_dir, project.root)
    written = ab.run_ab(project.root, project.ralph_dir, logs_rel, opts, on_status=print)
    print(written.summary(), end="")
    print(f"next: cd {dest} && ralph status")
    return 0
