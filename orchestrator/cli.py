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

from orchestrator import __version__
from orchestrator.errors import EXIT_INTERRUPTED, FatalError

# name -> the one-line help of `ralph --help`, in the order shown there. The top-level parser
# is built from this table alone: importing every command module (and through them pydantic,
# rich, numpy, tiktoken...) cost ~0.7 s of CPU before `ralph --version` could answer. Only
# the chosen command's module is imported. tests/test_cli_lazy.py keeps this table equal to
# the help each module registers.
COMMANDS: dict[str, str] = {
    "demo": "copy the bundled example into a new git repo and run `ralph ab` on it (sim agent)",
    "init": "add ralph.yaml, progress.txt, prd.json and the references folder to a project",
    "run": "run the loop: one story per iteration until all pass",
    "status": "stories, the index, references and the last run",
    "prompt": "print the prompt `ralph run` would send for a story (--json: its token accounting)",
    "migrate": "turn a flat progress.txt into an index plus topic references (lossless)",
    "check": "validate progress.txt's index and the references folder",
    "compact": "archive stale references, merge near-duplicates, rotate the log (dry run)",
    "ab": "run the project twice (indexed vs full history) in isolated copies and compare",
    "report": "render the comparison report and chart from existing ledgers",
    "savings": "what every past story would have loaded, indexed vs full history (no agent run)",
}


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The `ralph` parser. Only `command`'s module is imported and registers its real
    parser (all of them with `every`, for tests); the others are help-only stand-ins."""
    parser = argparse.ArgumentParser(
        prog="ralph",
        description="Ralph's agent loop with an indexed memory (ralph-index).",
    )
    parser.add_argument("--version", action="version", version=f"ralph-index {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        if every or name == command:
            module = importlib.import_module(f"orchestrator.commands.{name}")
            module.register(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command word of `argv`: the first argument that is not an option. The top-level
    parser has no option taking a value, so nothing before it can be an option's value."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    code = _call(args)
    if getattr(args, "exit_one", False) and code not in (0, EXIT_INTERRUPTED):
        return 1  # `ralph run --compat`: ralph.sh exits 1 for every failure
    return code


def _call(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except FatalError as exc:
        print(f"ralph: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ralph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
