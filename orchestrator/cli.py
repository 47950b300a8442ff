"""The `ralph` command: parse argv, dispatch to one command module, turn errors into exit codes.

Each command lives in `orchestrator/commands/<name>.py` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func=run`, where
`run(args: argparse.Namespace) -> int`. This module is the only place that knows about
exit codes for errors: every `FatalError` becomes one message on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from orchestrator import __version__, stopsignals
from orchestrator.errors import FatalError

# Order is the order shown in `ralph --help`.
COMMANDS = (
    "demo",
    "init",
    "run",
    "status",
    "prompt",
    "migrate",
    "check",
    "compact",
    "ab",
    "report",
    "savings",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ralph",
        description="Ralph's agent loop with an indexed memory (ralph-index).",
    )
    parser.add_argument("--version", action="version", version=f"ralph-index {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"orchestrator.commands.{name}")
        module.register(sub)
    return parser


def add_common(parser: argparse.ArgumentParser) -> None:
    """Flags every project command shares."""
    parser.add_argument(
        "--dir",
        dest="ralph_dir",
        metavar="DIR",
        help="the Ralph folder holding prd.json and progress.txt "
        "(default: ralph.yaml's ralph_dir, else scripts/ralph/ if it has prd.json, else .)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug output")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except FatalError as exc:
        print(f"ralph: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ralph: interrupted", file=sys.stderr)
        return stopsignals.exit_code()
