"""`ralph prompt`: print exactly what `ralph run` would send for a story, or its accounting."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from orchestrator import log
from orchestrator import project as proj_mod
from orchestrator.commands.common import add_common
from orchestrator.errors import InputError
from orchestrator.memory import journal
from orchestrator.memory.prd import Prd
from orchestrator.memory.store import Memory
from orchestrator.run import prompt


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "prompt",
        help="print the prompt `ralph run` would send for a story (--json: its token accounting)",
        description="Print exactly the prompt `ralph run` would send the agent for a story "
        "(the next one by default): the template, the story, the index and the references "
        "chosen for it. Nothing is run and nothing is written. --json gives its token "
        "accounting instead (prompt vs full history, references inlined, budget).",
    )
    add_common(p)
    p.add_argument("--story", metavar="ID", help="story id (default: the next story to do)")
    p.add_argument(
        "--mode",
        choices=("auto", "indexed", "full"),
        help="memory mode (default: ralph.yaml's mode, else auto)",
    )
    p.add_argument(
        "--tool",
        help="agent the prompt is for; in full mode claude reads CLAUDE.md, "
        "others prompt.md (default: ralph.yaml's tool)",
    )
    p.add_argument(
        "--budget",
        type=int,
        metavar="TOKENS",
        help="prompt token budget (default: budget.prompt_tokens)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the accounting as JSON: tokens by part, the full-history "
        "counterfactual, every reference considered with score and reason",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    log.configure(verbose=args.verbose)  # log lines on stderr: stdout is the prompt only
    # --budget is budget.prompt_tokens for this command: checked as ralph.yaml's value is.
    project = proj_mod.locate(Path.cwd(), args.ralph_dir, {"budget.prompt_tokens": args.budget})
    if note := journal.pending_note(project.ralph_dir):
        print(f"ralph prompt: warning: {note}", file=sys.stderr)
    prd = Prd.load(project.prd_path)
    story = prd.get(args.story) if args.story else prd.next_story()
    if story is None:
        raise InputError(
            f"{project.rel(project.prd_path)}: every story passes, so there is no next "
            "story; name one with --story ID"
        )
    with prompt.gc_paused():
        memory = Memory.load(project)
        out = prompt.assemble(
            project, story, memory, mode=args.mode, budget=args.budget, tool=args.tool, prd=prd
        )
    for why in memory.refused:
        print(f"ralph: warning: left out of the prompt: {why}", file=sys.stderr)
    if args.json:
        print(_json(out.to_json()))
    else:
        # Bytes exactly as the agent gets them (a user's prompt.md may hold any bytes).
        sys.stdout.flush()
        sys.stdout.buffer.write(out.text.encode("utf-8", errors="surrogateescape"))
        sys.stdout.buffer.flush()
    return 0


def _json(data: dict[str, Any]) -> str:
    """`json.dumps(data, indent=2, ensure_ascii=False)`, made by msgspec: the accounting of
    10,000 references took the json module a fifth of the command's time. Text msgspec
    refuses (a lone surrogate from a file that is not UTF-8) goes through json."""
    try:
        return msgspec.json.format(msgspec.json.encode(data), indent=2).decode("utf-8")
    except (msgspec.EncodeError, UnicodeError, TypeError, ValueError):
        return json.dumps(data, indent=2, ensure_ascii=False)
