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

from orchestrator import __version__, stopsignals
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_USAGE, FatalError

# What a shell reports for a command killed by SIGPIPE (128 + 13): `ralph ... | head` ends
# the way `cat big | head` does, quietly.
EXIT_BROKEN_PIPE = 141
# Not a FatalError: a bug. Distinct from every documented code so scripts can tell.
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h)

# name -> the one-line help of `ralph --help`, in the order shown there. The top-level parser
# is built from this table alone: importing every command module (and through them pydantic,
# rich, numpy, tiktoken...) cost ~0.7 s of CPU before `ralph --version` could answer. Only
# the chosen command's module is imported. tests/test_cli_lazy.py keeps this table equal to
# the help each module registers.
COMMANDS: dict[str, str] = {
    "demo": "copy the bundled example into a new git repo and run `ralph ab` on it (sim agent)",
    "init": "add ralph.yaml, progress.txt, prd.json and the references folder to a project",
    "run": "run the loop: one story per iteration until all pass",
    "status": "stories, the index, references, the last run (--follow: watch the live run)",
    "prompt": "print the prompt `ralph run` would send for a story (--json: its token accounting)",
    "migrate": "turn a flat progress.txt into an index plus topic references (lossless)",
    "check": "validate progress.txt's index and the references folder",
    "compact": "archive stale references, merge near-duplicates, rotate the log (dry run)",
    "ab": "run the project twice (indexed vs full history) in isolated copies and compare",
    "report": "render the comparison report and chart from existing ledgers",
    "savings": "what every past story would have loaded, indexed vs full history (no agent run)",
    "serve": "a local web dashboard of the runs (read-only)",
    "completion": "print a shell completion script (bash, zsh or tcsh)",
}


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The `ralph` parser. Only `command`'s module is imported and registers its real
    parser (all of them with `every`, for tests); the others are help-only stand-ins."""
    parser = argparse.ArgumentParser(
        prog="ralph",
        description="Ralph's agent loop with an indexed memory (ralph-index).",
    )
    parser.add_argument("--version", action="version", version=f"ralph-index {__version__}")
    # `ralph completion` describes the whole command line: it gets the parser itself.
    parser.set_defaults(root_parser=parser)
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
    _tolerant_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = chosen_command(argv)
    # `ralph completion` describes every command, so it needs all of them registered.
    parser = build_parser(command, every=command == "completion")
    args, extra = parser.parse_known_args(argv)
    if extra:
        # The command's own usage (`ralph migrate [--dry-run] ...`), not the top-level one,
        # so a wrong flag shows the flags that exist.
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    code = _call(args)
    stopped = code == EXIT_INTERRUPTED or stopsignals.received() is not None
    if getattr(args, "exit_one", False) and code != 0 and not stopped:
        return 1  # `ralph run --compat`: ralph.sh exits 1 for every failure
    return code


def _tolerant_streams() -> None:
    """Output that is not UTF-8 (PYTHONIOENCODING=ascii, an old C locale) cannot show "·"
    or "…": such a character prints as "?" instead of stopping the command mid-output."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        reconfigure = getattr(stream, "reconfigure", None)
        if encoding != "utf8" and reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a stream already in use
                reconfigure(errors="replace")


def _command_parser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse has no public handle on its sub-parsers
        choices = action.choices
        if isinstance(choices, dict) and name in choices:
            found = choices[name]
            if isinstance(found, argparse.ArgumentParser):
                return found
    return parser


def _call(args: argparse.Namespace) -> int:
    # Every command logs the same way: warnings (e.g. unknown ralph.yaml keys) as
    # `ralph: warning: ...` lines on stderr, never on stdout where --json output goes.
    from orchestrator import log  # lazy: `ralph --version` stays light

    log.configure(None, verbose=bool(getattr(args, "verbose", False)))
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a reader that went away shows up here, inside the try
        return code
    except FatalError as exc:
        _say(f"ralph: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        _say("ralph: interrupted")
        return stopsignals.exit_code()
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as exc:  # last resort: a file error that no helper turned into an InputError
        from orchestrator import log  # lazy: the error path only
        from orchestrator.fsutil import file_error  # lazy: keeps `ralph --version` light

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
    from orchestrator.log import terminal_safe  # lazy: `ralph --version` stays light

    with contextlib.suppress(OSError):
        # An error may quote a story id or a file's text: escaped, never obeyed.
        print(terminal_safe(line), file=sys.stderr, flush=True)


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
