"""`ralph run [--tool NAME | --tool=NAME] [MAX_ITERATIONS] [flags]`: the Ralph loop.

Takes ralph.sh's arguments as they are (`--tool X` or `--tool=X`, a bare number sets the
maximum iterations and the last number wins, other words are ignored with a warning), plus
flags for what ralph.sh cannot do. Every flag beats ralph.yaml, which beats the defaults.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from orchestrator import log, project, stopsignals
from orchestrator.commands.common import add_common
from orchestrator.run import loop

_NUMBER = re.compile(r"^[0-9]+$")


def _add_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `ralph run`, in the order `--help` lists them."""
    _add_agent_flags(p)
    _add_budget_flags(p)
    _add_timing_flags(p)
    _add_behaviour_flags(p)


def _add_agent_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tool",
        metavar="NAME",
        help="agent: amp, claude, codex, gemini, opencode, sim, or a name under "
        "agents: in ralph.yaml (default: ralph.yaml's tool, else amp)",
    )
    p.add_argument(
        "--mode",
        choices=("auto", "indexed", "full"),
        help="memory: indexed references, Ralph's full progress.txt, or auto "
        "(indexed when progress.txt has a Progress Index)",
    )


def _add_budget_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget-tokens",
        type=int,
        metavar="N",
        help="stop before the run's agent tokens would pass N (budget.run_tokens)",
    )
    p.add_argument(
        "--budget-usd",
        type=float,
        metavar="X",
        help="stop before the run's agent cost would pass $X (budget.run_cost_usd)",
    )
    p.add_argument(
        "--prompt-budget",
        type=int,
        metavar="N",
        help="token budget of one prompt (budget.prompt_tokens)",
    )
    p.add_argument(
        "--checks", choices=("warn", "retry", "fail"), help="what a failed post-story check does"
    )


def _add_timing_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=int,
        metavar="SECS",
        help="wall-clock limit of one iteration (timeouts.iteration)",
    )
    p.add_argument(
        "--idle-timeout",
        type=int,
        metavar="SECS",
        help="stop an agent silent this long (timeouts.idle)",
    )
    p.add_argument(
        "--sleep",
        type=float,
        metavar="SECS",
        dest="sleep_between",
        help="pause between iterations (sleep_between, ralph.sh: 2)",
    )
    p.add_argument(
        "--max-retries",
        type=int,
        metavar="N",
        help="retries of a failed agent call within one iteration (retries.transient, "
        "default 3); every retry is an agent call and counts against MAX_ITERATIONS",
    )


def _add_behaviour_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stuck-after",
        type=int,
        metavar="N",
        help="stop (exit 4) after N iterations in a row without progress",
    )
    p.add_argument(
        "--compat",
        action="store_true",
        help="behave like ralph.sh for scripts: exit 1 on every failure and print its "
        "console lines (ralph.yaml: compat: true)",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="hide the agent's output (summaries and the table still print)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run the loop: one story per iteration until all pass",
        usage="ralph run [--tool NAME | --tool=NAME] [MAX_ITERATIONS] [options]",
        description="Run the agent loop, ralph.sh-compatible: "
        "`ralph run [--tool NAME] [MAX_ITERATIONS]`. Exit codes: 0 all stories pass, "
        "1 iterations used up, 2 usage/config/input error, 3 budget or usage limit beyond "
        "limits.max_wait, 4 stuck or failed checks (checks: fail), 128+signal when stopped: "
        "130 Ctrl-C, 143 SIGTERM, 129 SIGHUP.",
    )
    add_common(p)
    _add_flags(p)
    # Everything after the first bare word is re-read by _merge_rest, so numbers and flags
    # can come in any order, as ralph.sh allows (`ralph run 20 --tool claude`).
    p.add_argument(
        "words",
        nargs=argparse.REMAINDER,
        metavar="MAX_ITERATIONS",
        help="maximum agent calls, retries included, as in ralph.sh (default: ralph.yaml's "
        "max_iterations, else 10)",
    )
    p.set_defaults(func=run)


def _merge_rest(args: argparse.Namespace) -> tuple[int | None, list[str]]:
    """Parse the words after the first positional like ralph.sh: numbers set the maximum
    (last wins), flags are applied, anything else is returned to be reported as ignored."""
    p = argparse.ArgumentParser(prog="ralph run", add_help=False)
    add_common(p)
    _add_flags(p)
    p.add_argument("rest", nargs="*")
    p.set_defaults(**{k: None for k in vars(args) if k not in ("words",)})
    later, unknown = p.parse_known_intermixed_args(args.words)
    for key, value in vars(later).items():
        # `is`, not `in`: 0 == False, and `--sleep 0` / `--max-retries 0` are real values.
        if key != "rest" and value is not None and value is not False:
            setattr(args, key, value)
    max_iter = None
    ignored = list(unknown)
    for w in later.rest:
        if _NUMBER.match(w):
            max_iter = int(w)
        else:
            ignored.append(w)
    return max_iter, ignored


def overrides(args: argparse.Namespace, max_iterations: int | None) -> dict[str, Any]:
    return {
        "tool": args.tool,
        "max_iterations": max_iterations,
        "mode": args.mode,
        "budget.run_tokens": args.budget_tokens,
        "budget.run_cost_usd": args.budget_usd,
        "budget.prompt_tokens": args.prompt_budget,
        "checks": args.checks,
        "timeouts.iteration": args.timeout,
        "timeouts.idle": args.idle_timeout,
        "sleep_between": args.sleep_between,
        "stuck_after": args.stuck_after,
        "retries.transient": args.max_retries,
        "compat": True if args.compat else None,
    }


AB_PARENT_ENV = "RALPH_AB_PARENT"  # set by `ralph ab` for its arms


def run(args: argparse.Namespace) -> int:
    log.configure(None, verbose=args.verbose)  # config warnings as readable stderr lines
    parent = os.environ.get(AB_PARENT_ENV, "")
    if parent.isdigit():  # an arm of `ralph ab`: it ends when ab ends, even by SIGKILL
        stopsignals.stop_with_parent(int(parent))
    max_iter, ignored = _merge_rest(args)
    for w in ignored:
        print(f"ralph: warning: ignored argument {w!r} (ralph.sh ignores it too)", file=sys.stderr)
    # cli.main reads `exit_one`: ralph.sh exits 1 on every failure. The flag counts even
    # when ralph.yaml cannot be read; the config key once it has been.
    args.exit_one = bool(args.compat)
    proj = project.locate(Path.cwd(), args.ralph_dir, overrides(args, max_iter))
    args.exit_one = proj.config.compat
    summary = loop.run(proj, loop.RunOptions(quiet=args.quiet, verbose=args.verbose))
    return summary.exit_code
