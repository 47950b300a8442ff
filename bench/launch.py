"""How fast `ralph` starts, side by side with ralph.sh.

    .venv/bin/python bench/launch.py                       # 7 runs each
    RALPH_SH=/path/to/ralph.sh .venv/bin/python bench/launch.py --runs 11

Measures, as the median of N runs (wall and CPU seconds of the process and its children; for
launch to agent, the CPU `ralph` itself had used when the agent started):
- `ralph --version`, `ralph --help`, `ralph status` on a small project;
- launch to first agent call: from starting `ralph run --tool stamp 1` to the moment the
  agent process starts, where the agent is a tiny shell script writing a timestamp file;
- the same for ralph.sh (`ralph.sh --tool claude 1`, with a `claude` on PATH that is the same
  shell script), on an identical project. ralph.sh is not part of this repository: give a copy
  of snarktank/ralph's ralph.sh with RALPH_SH or --ralph-sh; without one that column is skipped.

The `ralph` used is the one installed next to this Python (`<venv>/bin/ralph`), as a user
runs it. Prints a table and writes bench/results/launch.json. The machine's load average is
recorded with the figures: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# The agent: records when it started and the CPU ticks its parent had used by then (utime,
# stime, cutime, cstime of /proc/<ppid>/stat: for `ralph run` the parent is ralph itself,
# since the prompt trampoline execs in place), then reads its prompt (stdin) to EOF.
STAMP_SH = """#!/bin/sh
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ ut st cut cst _ < /proc/$PPID/stat
echo "$(date +%s.%N) $ut $st $cut $cst" > "$STAMP_FILE"
cat > /dev/null
echo done
"""
PRD = {
    "project": "bench",
    "branchName": "ralph/bench",
    "description": "launch bench",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add a greeting",
            "description": "As a user I want a greeting.",
            "acceptanceCriteria": ["greeting shown"],
            "priority": 1,
            "passes": False,
            "notes": "",
        }
    ],
}
CONFIG = "sleep_between: 0\nagents:\n  stamp:\n    command: [sh, {stamp}]\n"


def ralph_bin() -> str:
    found = Path(sys.executable).parent / "ralph"
    return str(found) if found.exists() else shutil.which("ralph") or "ralph"


def ralph_argv(source: Path | None) -> list[str]:
    """The installed `ralph`, or with `source` (a checkout) `python -m orchestrator` run
    with PYTHONPATH=source (set by `bench`), to time two versions on one machine."""
    return [ralph_bin()] if source is None else [sys.executable, "-m", "orchestrator"]


def make_project(root: Path, stamp: Path, ralph_sh: Path | None) -> Path:
    """A git repo with scripts/ralph/{prd.json,CLAUDE.md,prompt.md} (and ralph.sh if given)."""
    rd = root / "scripts" / "ralph"
    rd.mkdir(parents=True)
    (rd / "prd.json").write_text(json.dumps(PRD, indent=2) + "\n")
    (rd / "CLAUDE.md").write_text("Implement the next story in prd.json.\n")
    (rd / "prompt.md").write_text("Implement the next story in prd.json.\n")
    (root / "ralph.yaml").write_text(CONFIG.format(stamp=stamp))
    if ralph_sh is not None:
        shutil.copy(ralph_sh, rd / "ralph.sh")
        (rd / "ralph.sh").chmod(0o755)
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.email", "bench@example.com"],
        ["config", "user.name", "bench"],
        ["add", "-A"],
        ["commit", "-qm", "init"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(start time, wall seconds, CPU seconds of the process tree) of one run."""
    before = os.times()
    t0 = time.time()
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return t0, wall, cpu


def launch_to_agent(
    argv: list[str], tmp: Path, ralph_sh: Path | None, n: int
) -> tuple[list[float], list[float]]:
    """Seconds from process start to the agent's start, and the CPU seconds the agent's
    parent had used by then; one figure each per fresh project."""
    out, cpu = [], []
    tick = os.sysconf("SC_CLK_TCK")
    stamp_sh = tmp / "stamp.sh"
    stamp_sh.write_text(STAMP_SH)
    stamp_sh.chmod(0o755)
    bin_dir = tmp / "bin"  # ralph.sh runs `claude`: make it the same stamp script
    bin_dir.mkdir(exist_ok=True)
    shutil.copy(stamp_sh, bin_dir / "claude")
    for i in range(n):
        root = make_project(Path(tempfile.mkdtemp(dir=tmp)), stamp_sh, ralph_sh)
        stamp = tmp / f"stamp-{i}-{os.getpid()}"
        env = dict(os.environ, STAMP_FILE=str(stamp), PATH=f"{bin_dir}:{os.environ['PATH']}")
        cmd = [str(root / "scripts" / "ralph" / "ralph.sh") if a == "RALPH_SH" else a for a in argv]
        t0, _, _ = timed(cmd, root, env)
        when, *ticks = stamp.read_text().split()
        out.append(float(when) - t0)
        cpu.append(sum(int(t) for t in ticks) / tick)
    return out, cpu


def median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def bench(runs: int, ralph_sh: Path | None, source: Path | None = None) -> dict:
    ralph = ralph_argv(source)
    results: dict = {
        "runs": runs,
        "ralph": " ".join(ralph) + (f" (PYTHONPATH={source})" if source else ""),
        "load_before": os.getloadavg(),
    }
    if source is not None:
        os.environ["PYTHONPATH"] = str(source)  # every run below inherits it
        # Time the checkout as an install runs (pip writes bytecode): with
        # PYTHONDONTWRITEBYTECODE set and no __pycache__, every run would compile every
        # module again (~0.3 s of a `ralph status`).
        compileall.compile_dir(source / "orchestrator", quiet=1)
    with tempfile.TemporaryDirectory(prefix="ralph-launch-") as tmp_s:
        tmp = Path(tmp_s)
        small = make_project(tmp / "small", tmp / "stamp.sh", None)
        env = dict(os.environ)
        for name, argv in (
            # The floor: the interpreter starting with the venv's site-packages and exiting.
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("ralph --version", [*ralph, "--version"]),
            ("ralph --help", [*ralph, "--help"]),
            ("ralph status", [*ralph, "status"]),
        ):
            samples = [timed(argv, small, env)[1:] for _ in range(runs)]
            results[name] = {
                "wall_s": median([w for w, _ in samples]),
                "cpu_s": median([c for _, c in samples]),
            }
        mine, cpu = launch_to_agent([*ralph, "run", "--tool", "stamp", "1"], tmp, None, runs)
        results["launch to agent: ralph run"] = {
            "wall_s": median(mine),
            "cpu_s": median(cpu),
            "samples": mine,
        }
        if ralph_sh is not None:
            # CPU is not shown for ralph.sh: the agent's parent is a subshell of its pipeline.
            theirs, _ = launch_to_agent(["RALPH_SH", "--tool", "claude", "1"], tmp, ralph_sh, runs)
            results["launch to agent: ralph.sh"] = {"wall_s": median(theirs), "samples": theirs}
        else:
            results["launch to agent: ralph.sh"] = {
                "skipped": "no ralph.sh: set RALPH_SH or pass --ralph-sh (a copy of "
                "snarktank/ralph's ralph.sh; it is not shipped here)"
            }
    results["load_after"] = os.getloadavg()
    return results


def table(results: dict) -> str:
    rows = ["| measure | median wall | median CPU |", "|---|---:|---:|"]
    for key, val in results.items():
        if not isinstance(val, dict):
            continue
        if "skipped" in val:
            rows.append(f"| {key} | skipped: {val['skipped']} | |")
            continue
        cpu = f"{val['cpu_s']:.3f} s" if "cpu_s" in val else "-"
        rows.append(f"| {key} | {val['wall_s']:.3f} s | {cpu} |")
    load = ", ".join(f"{x:.1f}" for x in results["load_before"])
    rows.append(f"\n{results['runs']} runs each; load average before: {load}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per measure (median taken)")
    ap.add_argument("--ralph-sh", type=Path, default=os.environ.get("RALPH_SH") or None)
    ap.add_argument("--out", type=Path, default=RESULTS / "launch.json")
    ap.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="time the checkout in DIR (python -m orchestrator, PYTHONPATH=DIR) instead of "
        "the installed ralph: run once with and once without to compare versions",
    )
    args = ap.parse_args()
    ralph_sh = args.ralph_sh if args.ralph_sh and Path(args.ralph_sh).is_file() else None
    if args.ralph_sh and ralph_sh is None:
        print(f"note: {args.ralph_sh} not found: the ralph.sh column is skipped", file=sys.stderr)
    results = bench(args.runs, ralph_sh, args.source)
    print(table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
