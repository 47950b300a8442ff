"""The `ralph` command: parse argv, dispatch to one command module, turn errors into exit codes.

Each command lives in `orchestrator/commands/<name>.py` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func=run`, where
`run(args: argparse.Namespace) -> int`. This module is the only place that knows about
exit codes for errors: every `FatalError` becomes one message on stderr and its exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence

from orchestrator import __version__
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USAGE, FatalError

# What a shell reports for a command killed by SIGPIPE (128 + 13): `ralph ... | head` ends
# the way `cat big | head` does, quietly.
EXIT_BROKEN_PIPE = 141
# Not a FatalError: a bug. Distinct from every documented code so scripts can tell.
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h)

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
        code = int(args.func(args))
        sys.stdout.flush()  # a reader that went away shows up here, inside the try
        return code
    except FatalError as exc:
        _say(f"ralph: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        _say("ralph: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as exc:  # last resort: a file error that no helper turned into an InputError
        from orchestrator import log  # lazy: the error path only
        from orchestrator.fsutil import file_error

        # Which write failed is in the traceback: keep it for whoever fixes the gap.
        saved = log.record_crash(exc)
        where = f" (details: {saved})" if saved else ""
        if exc.filename:
            _say(f"ralph: error: {file_error(exc.filename, exc, 'use')}{where}")
        else:
            _say(
                f"ralph: error: {exc.strerror or exc} (errno {exc.errno}); check disk space and "
                f"permissions of the project and its ralph/logs folder, then run again{where}"
            )
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line, the traceback goes to the log file
        from orchestrator import log  # lazy: the error path only

        saved = log.record_crash(exc)
        where = f"see {saved} for the traceback" if saved else "no log file could be written"
        _say(f"ralph: internal error: {type(exc).__name__}: {exc} ({where})")
        return EXIT_INTERNAL


def _say(line: str) -> None:
    """One line on stderr; stderr itself may be a closed pipe, which must not raise."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def _broken_pipe() -> int:
    """The reader of stdout went away (`ralph ... | head`): stop quietly like other unix tools.
    stdout is pointed at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE
