"""What every project command shares."""

from __future__ import annotations

import argparse


def add_common(parser: argparse.ArgumentParser) -> None:
    """Flags every project command shares."""
    parser.add_argument(
        "--dir",
        dest="ralph_dir",
        metavar="DIR",
        help="the Ralph folder holding prd.json and progress.txt "
        "(default: ralph.yaml's ralph_dir, else scripts/ralph/ if it has prd.json, else the "
        "one folder found holding prd.json or progress.txt, else .)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug output")
