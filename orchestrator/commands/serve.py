"""`ralph serve`: the local, read-only dashboard (orchestrator/reports/serve.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator import project
from orchestrator.commands.common import add_common
from orchestrator.errors import UsageError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="a local web dashboard of the runs (read-only)",
        description="Serve a read-only dashboard of this project on http://HOST:PORT: runs "
        "from the ledger, the per-iteration table, the live iteration (new lines appear as the "
        "agent writes them), tokens per iteration (indexed vs full history), the index and "
        "references, and A/B reports. Works offline. Needs: pip install 'ralph-index[serve]'.",
    )
    add_common(p)
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        from orchestrator.reports import serve
    except ImportError as exc:
        raise UsageError(
            f"ralph serve needs the dashboard extras ({exc.name} is not installed): "
            "pip install 'ralph-index[serve]'"
        ) from None
    proj = project.locate(Path.cwd(), args.ralph_dir)
    return serve.serve(proj, host=args.host, port=args.port)
