"""`ralph report LEDGER...`: the A/B report and chart from existing ledgers."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from orchestrator import project
from orchestrator.reports import charts, report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="render the comparison report and chart from existing ledgers",
        description="Each LEDGER is a ledger.jsonl (its last run is used; NAME=PATH names the "
        "arm). With two ledgers the first one's saving against the second is shown.",
    )
    p.add_argument("ledgers", nargs="+", metavar="LEDGER", help="[NAME=]path/to/ledger.jsonl")
    p.add_argument(
        "--out",
        type=Path,
        help="output folder (default: <log dir>/report-<time>, e.g. ralph/logs/report-...)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    charts.require("report")
    arms = []
    for spec in args.ledgers:
        name, _, path = spec.rpartition("=")
        arm = report.load_arm(Path(path), name=name or None)
        if arm.skipped_note:
            print(f"ralph report: warning: {arm.skipped_note}", file=sys.stderr)
        arms.append(arm)
    print(report.write_report(arms, args.out or _default_out(), stem="ab").summary(), end="")
    return 0


def _default_out() -> Path:
    """Next to the runs, like `ralph ab`: never scattered into the current folder."""
    logs = Path(project.locate(Path.cwd()).logs_dir)
    return logs / f"report-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
