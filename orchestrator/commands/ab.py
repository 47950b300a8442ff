"""`ralph ab`: indexed against full history on the same project, side by side."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from orchestrator import ab, stopsignals
from orchestrator.cli import add_common
from orchestrator.project import locate


def register(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--parallel", action="store_true", help="run both arms at once")
    p.add_argument("--keep", action="store_true", help="keep the arms' project copies")
    p.add_argument("max_iterations", nargs="?", type=int, help="per arm (default 10)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    project = locate(Path.cwd(), args.ralph_dir)
    logs_rel = os.path.relpath(project.logs_dir, project.root)
    out = args.out or ab.default_out_dir(project.logs_dir)
    opts = ab.AbOptions(
        out_dir=out,
        tool=args.tool,
        max_iterations=args.max_iterations,
        parallel=args.parallel,
        keep_workspaces=args.keep,
    )
    print(f"A/B on {project.root} → {out}")
    # SIGTERM/SIGHUP stop the A/B like Ctrl-C (arms stopped, copies removed, exit 128+signal).
    with stopsignals.interrupt_on_stop_signals():
        written = ab.run_ab(project.root, project.ralph_dir, logs_rel, opts, on_status=print)
    print(written.summary(), end="")
    return 0
