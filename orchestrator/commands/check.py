"""`ralph check`: validate the indexed memory (exit 0 clean, 1 with findings)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import project
from orchestrator.commands.common import add_common
from orchestrator.log import terminal_safe
from orchestrator.upkeep import audit


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="validate progress.txt's index and the references folder",
        description="Reports rows without files, files without rows, paths escaping the folder, "
        "duplicate or near-duplicate topics, references over references.max_tokens, a "
        "malformed table, log entries without a story id and a code fence left open. One "
        "line per finding.",
    )
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    proj = project.locate(Path.cwd(), args.ralph_dir)
    findings = audit.check(proj)
    for f in findings:
        print(terminal_safe(f.format()))  # findings quote the user's files
    if findings:
        print(f"ralph check: {len(findings)} finding(s)")
        return 1
    mem = audit.MemoryFiles.load(proj)
    print(
        f"ralph check: OK ({len(mem.rows)} index rows, {len(proj.references.files())} references)"
    )
    return 0
