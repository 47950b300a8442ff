"""`ralph report LEDGER...`: the A/B report and chart from existing ledgers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.reports import report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="render the comparison report and chart from existing ledgers",
        description="Each LEDGER is a ledger.jsonl (its last run is used; NAME=PATH names the "
        "arm). With two ledgers the first one's saving against the second is shown.",
    )
    p.add_argument("ledgers", nargs="+", metavar="LEDGER", help="[NAME=]path/to/ledger.jsonl")
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (default: .)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    arms = []
    for spec in args.ledgers:
        name, _, path = spec.rpartition("=")
        arm = report.load_arm(Path(path), name=name or None)
        if arm.skipped_note:
            print(f"ralph report: warning: {arm.skipped_note}", file=sys.stderr)
        arms.append(arm)
    print(report.write_report(arms, args.out, stem="ab").summary(), end="")
    return 0
