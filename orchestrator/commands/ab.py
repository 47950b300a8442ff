"""`ralph ab`: indexed against full history on the same project, side by side."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from orchestrator import stopsignals
from orchestrator.commands.common import add_common
from orchestrator.errors import UsageError
from orchestrator.memory.prd import Prd
from orchestrator.project import ensure_logs_dir, locate
from orchestrator.reports import ab, charts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ab",
        help="run the project twice (indexed vs full history) in isolated copies and compare",
        description="Runs arm A (indexed memory) and arm B (full history) on isolated copies of "
        "the project with the same agent and settings, then writes ab-report.md, "
        "ab-report.json and ab-tokens.png. Your working copy is never touched.",
    )
    add_common(p)
    p.add_argument("--tool", help="agent for both arms (default: ralph.yaml's tool)")
    p.add_argument("--out", type=Path, help="output folder (default: <log dir>/ab-<time>)")
    p.add_argument(
        "--parallel",
        nargs="?",
        type=_positive,
        const=2,
        default=None,
        metavar="K",
        help="run up to K arms at once (K defaults to 2: both arms of a replicate)",
    )
    p.add_argument(
        "--repeat",
        type=_positive,
        default=1,
        metavar="N",
        help="N paired replicates per arm; figures as mean ± 95%% interval (default 1)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue an interrupted A/B in DIR with its options (finished runs are kept)",
    )
    p.add_argument("--budget-usd", type=float, metavar="X", help="per arm: stop at $X")
    p.add_argument("--budget-tokens", type=int, metavar="N", help="per arm: stop at N tokens")
    p.add_argument("--keep", action="store_true", help="keep the arms' project copies")
    p.add_argument(
        "max_iterations",
        nargs="?",
        type=int,
        help="agent calls per arm (default: ralph.yaml's max_iterations)",
    )
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    charts.require("ab")
    project = locate(Path.cwd(), args.ralph_dir)
    Prd.load(project.prd_path)  # no arm can run without it: say so before copying anything
    logs_rel = os.path.relpath(project.logs_dir, project.root)
    if args.resume and args.out and args.out.resolve() != args.resume.resolve():
        raise UsageError("--resume DIR already names the output folder: drop --out")
    out = args.resume or args.out or ab.default_out_dir(ensure_logs_dir(project))
    opts = ab.AbOptions(
        out_dir=out,
        tool=args.tool,
        max_iterations=args.max_iterations,
        jobs=args.parallel,
        keep_workspaces=args.keep,
        repeat=args.repeat,
        budget_usd=args.budget_usd,
        budget_tokens=args.budget_tokens,
    )
    print(f"A/B on {project.root} → {out}")
    # SIGTERM/SIGHUP stop the A/B like Ctrl-C (arms stopped, copies removed, exit 128+signal).
    with stopsignals.interrupt_on_stop_signals():
        written = ab.run_ab(
            project.root,
            project.ralph_dir,
            logs_rel,
            opts,
            on_status=print,
            resume=args.resume is not None,
        )
    print(written.summary(), end="")
    return 0
