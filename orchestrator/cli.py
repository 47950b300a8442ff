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

from orchestrator import __version__, log
from orchestrator.errors import EXIT_INTERRUPTED, FatalError

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
    "serve",
    "completion",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ralph",
        description="Ralph's agent loop with an indexed memory (ralph-index).",
    )
    parser.add_argument("--version", action="version", version=f"ralph-index {__version__}")
    # `ralph completion` describes the whole command line: it gets the parser itself.
    parser.set_defaults(root_parser=parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"orchestrator.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    # Every command logs the same way: warnings (e.g. unknown ralph.yaml keys) as
    # `ralph: warning: ...` lines on stderr, never on stdout where --json output goes.
    log.configure(None, verbose=bool(getattr(args, "verbose", False)))
    try:
        return int(args.func(args))
    except FatalError as exc:
        print(f"ralph: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ralph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
