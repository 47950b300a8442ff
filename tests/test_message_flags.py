"""Every `--flag` a message names exists: a user told to "point --ralph-dir at the folder"
(the flag is `--dir`) is stuck. The strings are read from the source with `ast`, so a new
message is checked as soon as it is written."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from orchestrator import cli
from orchestrator.sim import options as sim_options

SRC = Path(cli.__file__).resolve().parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND = re.compile(r"\bralph (" + "|".join(cli.COMMANDS) + r")\b")
# Flags of other programs quoted in messages (the agent CLIs we drive, git), with where.
FOREIGN = {
    "--yes-always",  # aider, in agents/command.py's example command
    "--message-file",  # aider, same example
}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def ralph_flags() -> tuple[set[str], dict[str, set[str]]]:
    """Top-level flags, and each command's flags, from the real parsers."""
    parser = cli.build_parser(every=True)
    top = _options(parser)
    per: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            per = {name: _options(p) | top for name, p in action.choices.items()}
    return top, per


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def message_strings(path: Path) -> list[tuple[int, str]]:
    """String literals with a space in them (prose, not argv words), docstrings excluded.
    An f-string counts as one string with its holes left blank."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    out: list[tuple[int, str]] = []
    parts_of_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else " " for v in node.values)
            parts_of_fstrings |= {id(v) for v in node.values}
            out.append((node.lineno, text))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip | parts_of_fstrings
        ):
            out.append((node.lineno, node.value))
    return [(n, s) for n, s in out if " " in s.strip()]


def flags_named(text: str) -> list[tuple[str, str | None]]:
    """(flag, the command when the flag is part of a `ralph <command> ...` invocation, i.e.
    follows it before any backtick, quote, parenthesis or sentence end)."""
    spans = []
    for m in COMMAND.finditer(text):
        end = re.search(r"[`'\"();]|\. |$", text[m.end() :])
        spans.append((m.end(), m.end() + (end.start() if end else 0), m.group(1)))
    found = []
    for m in FLAG.finditer(text):
        owner = next((c for a, b, c in spans if a <= m.start() < b), None)
        found.append((m.group(), owner))
    return found


def test_every_flag_in_a_message_exists() -> None:
    top, per = ralph_flags()
    every = set().union(*per.values())
    sim = _options(sim_options._parser())
    wrong = []
    checked = 0
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        is_sim = rel.startswith("sim/")
        for line, text in message_strings(path):
            for flag, command in flags_named(text):
                checked += 1
                if flag in FOREIGN:
                    continue
                known = sim if is_sim else per[command] if command else every
                if flag not in known:
                    where = f"`ralph {command}`" if command else "any ralph command"
                    wrong.append(f"{rel}:{line}: {flag} is not a flag of {where}: {text!r}")
    assert checked > 20  # the scan found the messages at all
    assert not wrong, "\n".join(wrong)


def test_the_scan_catches_a_wrong_flag() -> None:
    _, per = ralph_flags()
    every = set().union(*per.values())
    bad = "run `ralph compact --recover` (or point --ralph-dir at the folder)"
    named = flags_named(bad)
    assert named == [("--recover", "compact"), ("--ralph-dir", None)]
    assert "--recover" in per["compact"]
    assert "--ralph-dir" not in every
    assert "--apply" not in per["run"]  # command-aware: a flag of another command fails
