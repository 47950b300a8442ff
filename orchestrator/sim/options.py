"""Options of the simulated agent: flags, `RALPH_SIM_*` environment knobs and fault state.

Every knob is a flag and an environment variable (the flag wins), so tests and ralph.yaml
(`agents.sim.args` / `agents.sim.env`) can set them alike:

  --fault NAME         RALPH_SIM_FAULT        comma list of faults (see FAULTS)
  --fault-story ID     RALPH_SIM_FAULT_STORY  only fault on these story ids (comma list)
  --fault-times N      RALPH_SIM_FAULT_TIMES  fault only the first N matching runs, counted in
                                              the state file ("limit once then succeed": 1)
  --state PATH         RALPH_SIM_STATE        state file (default <git dir>/ralph-sim-state.json)
  --delay SECONDS      RALPH_SIM_DELAY        pause after each step, to watch live status
  --script PATH        RALPH_SIM_SCRIPT       the sim script (default <Ralph folder>/sim.yaml)
  --ralph-dir PATH     RALPH_SIM_RALPH_DIR    the folder holding prd.json and progress.txt
  --model NAME         RALPH_SIM_MODEL        model name reported in the output
  --exit-code N        RALPH_SIM_EXIT_CODE    exit code of `crash` (default 2)
  --limit-reset SECS   RALPH_SIM_LIMIT_RESET  `limit-event` resets this many seconds from now
  --limit-text TEXT    RALPH_SIM_LIMIT_TEXT   the message of `limit-text`
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import fsutil, git, tokens
from orchestrator.errors import UsageError

FAULTS = {
    "crash": "exit non-zero after a little output, changing nothing",
    "crash-midway": "write the story's source files, then exit non-zero (no commit)",
    "hang": "print nothing and sleep forever",
    "hang-after-output": "start work (init, a message, a read), then sleep forever",
    "limit-event": "rate_limit_event rejected with resetsAt, error result, exit 1",
    "limit-text": 'error result "You\'ve hit your limit · resets 7pm (...)", exit 1',
    "limit-429": "API Error 429 result like the real CLI, exit 1",
    "transient": "print 'Error: No messages returned' and exit 1",
    "noop": "read, then finish normally without doing the story",
    "skip-prd": "do the story but leave passes false in prd.json",
    "skip-commit": "do the story but do not commit",
    "forget-index-row": "indexed mode: write the reference but not its index row",
    "truncate-progress": "rewrite progress.txt keeping only the header and the new entry",
    "delete-reference": "delete an existing reference file",
    "wipe-reference": "replace the first indexed reference with its title and '(nothing)'",
    "condense-reference": "rewrite the first indexed reference shorter, keeping its facts",
    "drop-index-row": "remove the first index row, leaving its reference file",
    "early-sentinel": "say <promise>COMPLETE</promise> while stories remain",
    "mention-sentinel": "mention <promise>COMPLETE</promise> inside a sentence, claiming nothing",
    "echo-prompt": "echo the prompt in plain output before working",
}

DEFAULT_LIMIT_TEXT = "You've hit your limit · resets 7pm (America/Los_Angeles)"


@dataclass
class Options:
    faults: set[str] = field(default_factory=set)
    fault_stories: set[str] = field(default_factory=set)
    fault_times: int | None = None
    state: Path | None = None
    delay: float = 0.0
    script: Path | None = None
    ralph_dir: Path | None = None
    model: str = "claude-sim"
    encoding: str = tokens.DEFAULT_ENCODING
    exit_code: int = 2
    limit_reset: float = 2.0
    limit_text: str = DEFAULT_LIMIT_TEXT
    prompt_file: Path | None = None
    # Memory that matters (sim_needs.py): the seed of the agent's variability (`ralph ab`
    # gives replicate i seed i), how often it opens a needed reference it sees in the index,
    # and how often a missing learning turns into the mistake it prevents.
    seed: int = 0
    open_rate: float = 0.9
    mistake_rate: float = 0.8


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.sim.agent",
        description="Simulated coding agent (a simulation, not an AI): reads the prompt on "
        "stdin, does one story from the project's sim script, prints Claude-style "
        "stream-json. Faults: " + ", ".join(sorted(FAULTS)),
    )
    p.add_argument(
        "--fault",
        action="append",
        default=None,
        help="misbehave on purpose (repeatable or comma list; see FAULTS)",
    )
    p.add_argument("--fault-story", default=None, help="only for these story ids (comma list)")
    p.add_argument(
        "--fault-times",
        type=int,
        default=None,
        help="only the first N matching runs (counted in the state file)",
    )
    p.add_argument(
        "--state", default=None, help="state file (default <git dir>/ralph-sim-state.json)"
    )
    p.add_argument("--delay", type=float, default=None, help="seconds to pause after each step")
    p.add_argument("--script", default=None, help="sim script (default <Ralph folder>/sim.yaml)")
    p.add_argument("--ralph-dir", default=None, help="folder holding prd.json and progress.txt")
    p.add_argument("--model", default=None, help="model name to report (default claude-sim)")
    p.add_argument("--encoding", default=None, help="tiktoken encoding (default o200k_base)")
    p.add_argument("--exit-code", type=int, default=None, help="exit code of crash faults (2)")
    p.add_argument(
        "--limit-reset",
        type=float,
        default=None,
        help="limit-event resets this many seconds from now (2)",
    )
    p.add_argument("--limit-text", default=None, help="message of the limit-text fault")
    p.add_argument("--prompt-file", default=None, help="read the prompt here, not stdin")
    p.add_argument("--seed", type=int, default=None, help="seed of the agent's variability (0)")
    p.add_argument(
        "--open-rate",
        type=float,
        default=None,
        help="chance to open a needed reference named in the index (0.9)",
    )
    p.add_argument(
        "--mistake-rate",
        type=float,
        default=None,
        help="chance that a missing learning causes its mistake (0.8)",
    )
    # Accepted for command-line compatibility with `claude -p ... --verbose`; no effect.
    p.add_argument("-p", "--print", action="store_true")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--output-format", default="stream-json")
    p.add_argument("--dangerously-skip-permissions", action="store_true")
    return p


def _split(value: str | None) -> set[str]:
    return {v.strip() for v in (value or "").split(",") if v.strip()}


def _pick(flag: object, env: dict[str, str], key: str) -> str | None:
    if flag is not None:
        return str(flag)
    return env.get(key) or None


def parse(argv: list[str], env: dict[str, str] | None = None) -> Options:
    """Options from flags, then RALPH_SIM_* variables; unknown faults are a UsageError."""
    env = dict(os.environ if env is None else env)
    ns = _parser().parse_args(argv)
    opts = Options()
    faults = set()
    for value in ns.fault or [env.get("RALPH_SIM_FAULT", "")]:
        faults |= _split(value)
    unknown = sorted(faults - set(FAULTS))
    if unknown:
        raise UsageError(
            f"sim agent: unknown fault {', '.join(unknown)} (--fault / "
            f"RALPH_SIM_FAULT); use one of {', '.join(sorted(FAULTS))}"
        )
    opts.faults = faults
    opts.fault_stories = _split(_pick(ns.fault_story, env, "RALPH_SIM_FAULT_STORY"))
    times = _pick(ns.fault_times, env, "RALPH_SIM_FAULT_TIMES")
    opts.fault_times = int(times) if times else None
    for name, attr, conv in (
        ("state", "state", Path),
        ("script", "script", Path),
        ("ralph_dir", "ralph_dir", Path),
        ("model", "model", str),
        ("encoding", "encoding", str),
        ("delay", "delay", float),
        ("exit_code", "exit_code", int),
        ("limit_reset", "limit_reset", float),
        ("limit_text", "limit_text", str),
        ("prompt_file", "prompt_file", Path),
        ("seed", "seed", int),
        ("open_rate", "open_rate", float),
        ("mistake_rate", "mistake_rate", float),
    ):
        value = _pick(getattr(ns, name), env, "RALPH_SIM_" + name.upper())
        if value is not None:
            try:
                setattr(opts, attr, conv(value))
            except ValueError as exc:
                raise UsageError(
                    f"sim agent: --{name.replace('_', '-')} / RALPH_SIM_{name.upper()}: "
                    f"{value!r} is not a valid {conv.__name__}"
                ) from exc
    for rate in ("open_rate", "mistake_rate"):
        if not 0 <= getattr(opts, rate) <= 1:
            raise UsageError(f"sim agent: --{rate.replace('_', '-')} must be between 0 and 1")
    return opts


# ---- fault state: "fault only the first N times" survives between runs ---------------------
def default_state_path(cwd: Path) -> Path:
    """Inside the git dir (per worktree), so the state never shows up as a project change."""
    git_dir = git.git_dir(cwd)
    return git_dir / "ralph-sim-state.json" if git_dir else cwd / ".ralph-sim-state.json"


def fault_applies(opts: Options, story_id: str | None, cwd: Path) -> bool:
    """Whether this run misbehaves; counts the run in the state file when it does."""
    if not opts.faults:
        return False
    if opts.fault_stories and story_id not in opts.fault_stories:
        return False
    if opts.fault_times is None:
        return True
    path = opts.state or default_state_path(cwd)
    try:
        state = json.loads(fsutil.read_text(path))
    except (OSError, ValueError):
        state = {}
    fired = int(state.get("faults_fired", 0))
    if fired >= opts.fault_times:
        return False
    state["faults_fired"] = fired + 1
    fsutil.atomic_write_text(path, json.dumps(state) + "\n")
    return True
