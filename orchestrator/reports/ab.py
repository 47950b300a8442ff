"""A/B: the same project, agent and stories run twice, once with indexed memory, once with the
full history, in isolated copies; then one report from the two ledgers.

Isolation: each arm is a local `git clone` of the project (or a plain copy outside git) in the
output folder, overlaid with the working copy's uncommitted changes so both arms start from the
same files as the user sees them. Clones rather than worktrees because a Ralph agent checks out
`branchName`, and one branch cannot be checked out in two worktrees; clones also leave nothing
registered in the user's repository, so an interrupted A/B leaves nothing stray behind.
Each arm is a real `ralph run` process; the user's working copy is never written.

Replicates (`--repeat N`): replicate i runs both arms from the same files with the same seed
(`RALPH_SIM_SEED=i`, which the simulated agent uses; real agents vary by themselves), so the
report compares them pair by pair (report.write_replicates_report). Up to `jobs` arms run at
once. The options are kept in `ab-options.json` and every finished arm's logs are collected
at once, so an interrupted A/B resumes (`--resume DIR`) without redoing finished arms; an arm
that was interrupted is run again from the start (its old logs are kept aside).

Stopping: SIGINT, SIGTERM and SIGHUP to `ralph ab` all stop it the same way: each arm gets
SIGINT (it ends its agent's process tree and records the iteration as interrupted), an arm
that does not exit within ARM_STOP_S is killed, and whatever is left of each arm's process
tree (found by `proctree.Tree`) is ended; the arms' ledgers are kept beside the report, the
copies in `work/` are removed, and the exit code is 128 + the signal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator import fsutil, git, ledger, redact, stopsignals
from orchestrator.agents import proctree
from orchestrator.errors import FatalError, Interrupted
from orchestrator.memory.markdown import close_fences
from orchestrator.memory.progress import Progress
from orchestrator.project import locate
from orchestrator.reports import report

ARMS = ("indexed", "full")
ARM_STOP_S = 15.0  # an arm's own agent grace (5 s) plus recording the interrupted iteration


OPTIONS_FILE = "ab-options.json"


@dataclass
class AbOptions:
    out_dir: Path
    tool: str | None = None
    max_iterations: int | None = None
    parallel: bool = False  # both arms at once (jobs=2), kept for `ralph demo` and scripts
    keep_workspaces: bool = False
    extra_args: list[str] = field(default_factory=list)
    repeat: int = 1
    jobs: int | None = None  # arms at once; default 2 with `parallel`, else 1
    budget_usd: float | None = None  # per arm: both stop at the same spend
    budget_tokens: int | None = None

    def slots(self) -> int:
        return max(1, self.jobs or (2 if self.parallel else 1))

    def saved(self) -> dict[str, object]:
        """What a resumed A/B must reuse to stay comparable."""
        return {
            "tool": self.tool,
            "max_iterations": self.max_iterations,
            "repeat": self.repeat,
            "extra_args": self.extra_args,
            "budget_usd": self.budget_usd,
            "budget_tokens": self.budget_tokens,
        }

    def ok_exits(self) -> set[int]:
        # 0: all stories pass; 1: iterations used up; 3: the arm's budget ran out (expected
        # when the A/B sets one: both arms stop at the same spend).
        return {0, 1, 3} if self.budget_usd or self.budget_tokens else {0, 1}


@dataclass
class ArmRun:
    name: str
    workspace: Path
    ledger: Path
    log: Path
    dest: Path = Path()  # where its logs are collected (beside the report)
    replicate: int = 1
    collected: bool = False
    process: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    tree: proctree.Tree | None = None


_AB_IDENTITY = git.Identity("ralph-ab", "ralph-ab@localhost")


def _is_git(root: Path) -> bool:
    return (root / ".git").exists()


def _overlay_uncommitted(root: Path, dest: Path) -> None:
    """Copy the working copy's modified and untracked (not ignored) files into the clone."""
    entries = git.status(root)
    if entries is None:
        raise FatalError(f"{root}: git status failed; is this a readable git repository?")
    # A staged rename's source is gone from the working copy too: mirror that as a deletion.
    paths = [p for e in entries for p in (e.path, e.orig) if p is not None]
    for path in paths:
        src, dst = root / path, dest / path
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        elif not src.exists() and dst.exists():
            dst.unlink()
    if not git.is_clean(dest):
        git.commit_all(dest, "ab: start from the working copy", _AB_IDENTITY)


def make_workspace(root: Path, dest: Path, logs_rel: str) -> None:
    """An isolated copy of the project at `dest`, without our own logs."""
    if dest.exists():
        raise FatalError(f"{dest} already exists: choose another --out folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if _is_git(root):
        # No timeout: cloning a large repository takes as long as it takes.
        git.run(["clone", "--quiet", "--no-hardlinks", str(root), str(dest)], timeout=None)
        _overlay_uncommitted(root, dest)
    else:
        ignore = shutil.ignore_patterns(Path(logs_rel).name, ".venv", "node_modules")
        shutil.copytree(root, dest, ignore=ignore, symlinks=True)


def flatten_for_full(dest: Path, ralph_dir_rel: str) -> int:
    """In the full arm's copy, every reference appended to progress.txt: Ralph keeps its
    learnings in the log, so a full-history run of a project whose learnings now live in
    references would otherwise see none of them and lose for want of memory, not for the
    way it reads it. The number of references appended."""
    project = locate(dest, ralph_dir_rel)
    files = project.references.indexed_files()
    if not files:
        return 0
    parts = ["## Learnings kept in references (for the full-history arm of `ralph ab`)\n"]
    for index_path, path in files:
        # A code block a reference leaves open is closed: the entries the agent appends
        # after it must not read as code.
        parts.append(f"\n### {index_path}\n\n{close_fences(fsutil.read_text(path).strip())}\n")
    log = Progress.load(project.progress_path).append_entry("".join(parts))
    fsutil.atomic_write_text(project.progress_path, log.render())
    if _is_git(dest):
        git.commit_all(dest, "ab: the references in progress.txt for the full arm", _AB_IDENTITY)
    return len(files)


def _arm_argv(name: str, ralph_dir_rel: str, opts: AbOptions) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator", "run", "--mode", name, "--dir", ralph_dir_rel]
    if opts.tool:
        argv += ["--tool", opts.tool]
    argv += opts.extra_args
    if opts.budget_usd is not None:
        argv += ["--budget-usd", str(opts.budget_usd)]
    if opts.budget_tokens is not None:
        argv += ["--budget-tokens", str(opts.budget_tokens)]
    if opts.max_iterations is not None:
        argv.append(str(opts.max_iterations))
    return argv


def _progress(arm: ArmRun) -> str:
    if not arm.ledger.is_file():
        return f"{arm.name}: starting"
    try:
        rows = ledger.iterations(ledger.read(arm.ledger, strict=True))
    except FatalError:
        return f"{arm.name}: ?"
    passed = sum(1 for r in rows if r.get("outcome") == "passed")
    state = "done" if arm.exit_code is not None else "running"
    return f"{arm.name}: {len(rows)} iterations, {passed} stories passed ({state})"


def _start(arm: ArmRun, argv: list[str]) -> None:
    arm.log.parent.mkdir(parents=True, exist_ok=True)
    log = arm.log.open("wb")
    # The arm's agents run in sessions of their own: the tree (marker + descendants) finds
    # them if the arm itself has to be killed.
    arm.tree = proctree.Tree(use_cgroup=False)
    env = dict(
        os.environ,
        RALPH_AB_ARM=arm.name,
        RALPH_AB_PARENT=str(os.getpid()),  # the arm ends with us, even if we are SIGKILLed
        RALPH_AB_REPLICATE=str(arm.replicate),
        RALPH_SIM_SEED=str(arm.replicate),  # paired: both arms of a replicate, one seed
        **arm.tree.env(),
    )
    # Own session: the arm is signalled as a group by us, not by a stray terminal Ctrl-C.
    arm.process = subprocess.Popen(
        argv,
        cwd=arm.workspace,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    arm.tree.attach(arm.process.pid)


def _finish_arm(
    arm: ArmRun, logs_rel: str, opts: AbOptions, on_status: Callable[[str], None]
) -> None:
    """An arm's run ended: end what it left behind, keep its logs, drop its copy."""
    if arm.tree is not None:
        reap = arm.process.poll if arm.process else (lambda: None)
        for killed in arm.tree.end(2.0, reap=reap):
            on_status(f"warning: ended a process left behind by arm {arm.name}: {killed}")
    _collect(arm, arm.dest, logs_rel)
    arm.collected = True
    if not opts.keep_workspaces:
        shutil.rmtree(arm.workspace, ignore_errors=True)


def _schedule(
    todo: list[ArmRun],
    start: Callable[[ArmRun], None],
    finish: Callable[[ArmRun], None],
    slots: int,
    on_status: Callable[[str], None],
    poll: float = 0.5,
    every: float = 10.0,
) -> None:
    """Run the arms, up to `slots` at once; report progress when it changes (at most every
    `every` seconds, and at the end)."""
    pending, running = list(todo), list[ArmRun]()
    last, last_at = "", 0.0
    total = len(todo)
    while pending or running:
        while pending and len(running) < slots:
            arm = pending.pop(0)
            start(arm)
            running.append(arm)
        for arm in list(running):
            arm.exit_code = arm.process.poll() if arm.process else -1
            if arm.tree is not None:
                arm.tree.poll()
            if arm.exit_code is not None:
                running.remove(arm)
                finish(arm)
        done = total - len(pending) - len(running)
        line = f"{done}/{total} arm runs done" + "".join(
            f" · r{a.replicate} {_progress(a)}" for a in running
        )
        if line != last and (not (pending or running) or time.monotonic() - last_at >= every):
            on_status(line)
            last, last_at = line, time.monotonic()
        if running:
            time.sleep(poll)


def _stop(arms: list[ArmRun]) -> list[str]:
    """End running arms: SIGINT first (they record the iteration as interrupted), then KILL,
    then whatever is left of their trees. Returns the leftovers that had to be killed."""
    for arm in arms:
        if arm.process and arm.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(arm.process.pid, signal.SIGINT)
    deadline = time.monotonic() + ARM_STOP_S
    for arm in arms:
        if not arm.process:
            continue
        try:
            arm.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(arm.process.pid, signal.SIGKILL)
            arm.process.wait()
    return _end_trees(arms)


def _end_trees(arms: list[ArmRun]) -> list[str]:
    killed = []
    for arm in arms:
        if arm.tree is not None and not arm.collected:
            reap = arm.process.poll if arm.process else (lambda: None)
            killed += [f"{arm.name}: {k}" for k in arm.tree.end(2.0, reap=reap)]
    return killed


def plan_arms(out: Path, logs_rel: str, repeat: int) -> list[list[ArmRun]]:
    """Every arm run of the A/B, by replicate. One replicate keeps the classic layout
    (`<out>/<arm>/`); several go to `<out>/rep-<i>/<arm>/`."""
    plan = []
    for i in range(1, repeat + 1):
        base = out if repeat == 1 else out / f"rep-{i}"
        work = out / "work" / ("" if repeat == 1 else f"rep-{i}")
        plan.append(
            [
                ArmRun(
                    name=name,
                    workspace=work / name,
                    ledger=work / name / logs_rel / "ledger.jsonl",
                    log=base / name / "run.log",
                    dest=base / name,
                    replicate=i,
                )
                for name in ARMS
            ]
        )
    return plan


def finished(arm: ArmRun, ok_exits: set[int]) -> bool:
    """Whether this arm's collected ledger ends with a run that ended normally."""
    path = arm.dest / "ledger.jsonl"
    if not path.is_file():
        return False
    try:
        records = ledger.read(path)
    except (FatalError, OSError):
        return False
    ends = [r for r in records if r.get("event") == "run_end"]
    return bool(ends) and ends[-1].get("exit_code") in ok_exits


def _set_aside(arm: ArmRun) -> None:
    """An unfinished arm is run again: keep its earlier (interrupted) logs beside it."""
    if arm.dest.exists() and any(arm.dest.iterdir()):
        n = 1
        while (aside := arm.dest.with_name(f"{arm.name}.interrupted-{n}")).exists():
            n += 1
        arm.dest.rename(aside)
    if arm.workspace.exists():  # left by a killed A/B
        shutil.rmtree(arm.workspace)


def prepare_out(out: Path, opts: AbOptions, resume: bool) -> AbOptions:
    """Record the options of a new A/B, or load those of the one being resumed."""
    path = out / OPTIONS_FILE
    if resume:
        if not path.is_file():
            raise FatalError(
                f"{out} holds no A/B to resume ({OPTIONS_FILE} is missing): pass the folder "
                "`ralph ab` printed (`A/B on ... → DIR`)"
            )
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise FatalError(f"{path}: unreadable ({exc}); start a new A/B with --out") from exc
        return dataclasses.replace(opts, **{k: saved.get(k) for k in opts.saved()})
    if path.exists() or (out.exists() and any(out.iterdir())):
        raise FatalError(
            f"{out} already exists: choose another --out folder, or continue that A/B with "
            f"`ralph ab --resume {out}`"
        )
    out.mkdir(parents=True, exist_ok=True)
    redact.write_text(path, json.dumps(opts.saved(), indent=2) + "\n")
    return opts


def run_ab(
    root: Path,
    ralph_dir: Path,
    logs_rel: str,
    opts: AbOptions,
    on_status: Callable[[str], None] = print,
    resume: bool = False,
) -> report.Written:
    """Run every replicate of both arms (skipping finished ones on resume) and write the
    report."""
    out = opts.out_dir.resolve()
    opts = prepare_out(out, opts, resume)
    work = out / "work"
    ralph_dir_rel = os.path.relpath(ralph_dir, root)
    plan = plan_arms(out, logs_rel, opts.repeat)
    arms = [a for rep in plan for a in rep]
    todo = [a for a in arms if not finished(a, opts.ok_exits())]
    if resume:
        on_status(f"resuming: {len(arms) - len(todo)} of {len(arms)} arm runs already done")

    def start(arm: ArmRun) -> None:
        _set_aside(arm)
        make_workspace(root, arm.workspace, logs_rel)
        if arm.name == "full" and (n := flatten_for_full(arm.workspace, ralph_dir_rel)):
            on_status(f"full arm: its progress.txt holds the {n} reference(s) as Ralph's would")
        _start(arm, _arm_argv(arm.name, ralph_dir_rel, opts))

    try:
        with stopsignals.interrupt_on_stop_signals():
            _schedule(
                todo,
                start,
                lambda a: _finish_arm(a, logs_rel, opts, on_status),
                opts.slots(),
                on_status,
            )
        for arm in todo:
            if arm.exit_code not in opts.ok_exits():
                on_status(
                    f"warning: arm '{arm.name}' (replicate {arm.replicate}) stopped with exit "
                    f"{arm.exit_code} (see {arm.log}); its report covers the iterations it ran"
                )
        loaded = [
            [report.load_arm(a.dest / "ledger.jsonl", name=a.name) for a in rep] for rep in plan
        ]
        return report.write_replicates_report(loaded, out)
    except KeyboardInterrupt:
        with stopsignals.deferred():  # a second signal must not cut the cleanup in half
            _cleanup_interrupted(todo, logs_rel, on_status)
            if not opts.keep_workspaces:
                shutil.rmtree(work, ignore_errors=True)
        raise Interrupted(
            f"A/B interrupted: the running arms were stopped and their ledgers kept in {out}; "
            f"finished arm runs are kept too. Continue with `ralph ab --resume {out}`"
        ) from None
    except BaseException:
        with stopsignals.deferred():
            _stop(todo)
        raise
    finally:
        if not opts.keep_workspaces:
            shutil.rmtree(work, ignore_errors=True)


def _cleanup_interrupted(
    arms: list[ArmRun], logs_rel: str, on_status: Callable[[str], None]
) -> None:
    for killed in _stop([a for a in arms if not a.collected]):
        on_status(f"ended a process left behind by arm {killed}")
    for arm in arms:
        if arm.process is not None and not arm.collected and arm.workspace.is_dir():
            # Keep the interrupted records: they say how far each arm got.
            with contextlib.suppress(FatalError, OSError):
                _collect(arm, arm.dest, logs_rel)


def _collect(arm: ArmRun, dest: Path, logs_rel: str) -> None:
    """Keep each arm's ledger and transcripts beside the report."""
    redact.rewrite(arm.log)  # the arm's console output, written by the arm, not by us
    logs = arm.workspace / logs_rel
    dest.mkdir(parents=True, exist_ok=True)
    if not logs.is_dir():
        raise FatalError(f"arm '{arm.name}' wrote no ledger (exit {arm.exit_code}); see {arm.log}")
    shutil.copytree(logs, dest, dirs_exist_ok=True)


def default_out_dir(logs_dir: Path) -> Path:
    return logs_dir / f"ab-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
