"""`ralph compact` (placeholder until its owner lands it)."""

from __future__ import annotations

import argparse

from orchestrator.cli import add_common
from orchestrator.errors import FatalError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compact", help="(not yet available)")
    add_common(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise FatalError("'ralph compact' is not available yet")
