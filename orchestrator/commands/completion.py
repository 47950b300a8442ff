"""`ralph completion bash|zsh|tcsh`: a shell completion script, generated from the parser."""

from __future__ import annotations

import argparse

import shtab

SHELLS = ("bash", "zsh", "tcsh")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or tcsh)",
        description="Print the completion script for SHELL, generated from ralph's own "
        "arguments (shtab), so it never goes stale. bash: "
        "`ralph completion bash > ~/.local/share/bash-completion/completions/ralph`; zsh: "
        "`ralph completion zsh > ~/.zfunc/_ralph` (with ~/.zfunc on fpath); tcsh: "
        "`ralph completion tcsh > ~/.ralph.tcsh` and `source ~/.ralph.tcsh` in ~/.tcshrc.",
    )
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash, zsh or tcsh")
    p.set_defaults(func=run)


# Arguments that name paths, by dest: the shell completes them as such.
_PATHS = {"ralph_dir": shtab.DIRECTORY, "out": shtab.DIRECTORY, "ledgers": shtab.FILE}


def _mark_paths(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.dest in _PATHS:
            # shtab reads a `complete` attribute that argparse.Action does not declare.
            action.complete = _PATHS[action.dest]  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub)


def run(args: argparse.Namespace) -> int:
    # The whole command line, handed over by cli.build_parser (commands never import cli).
    parser: argparse.ArgumentParser = args.root_parser
    _mark_paths(parser)
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0
