"""A/B: the same project, agent and stories run twice, once with indexed memory, once with the
full history, in isolated copies; then one report from the two ledgers.

Isolation: each arm is a local `git clone` of the project (or a plain copy outside git) in the
output folder, overlaid with the working copy's uncommitted changes so both arms start from the
same files as the user sees them. Clones rather than worktrees because a Ralph agent checks out
`branchName`, and one branch cannot be checked out in two worktrees; clones also leave nothing
registered in the user's repository, so an interrupted A/B leaves nothing stray behind.
Each arm is a real `ralph run` process; the user's working copy is never written.

Stopping: SIGINT, SIGTERM and SIGHUP to `ralph ab` all stop it the same way: each arm gets
SIGINT (it ends its agent's process tree and records the iteration as interrupted), an arm
that does not exit within ARM_STOP_S is killed, and whatever is left of each arm's process
tree (found by `proctree.Tree`) is ended; the arms' ledgers are kept beside the report, the
copies in `work/` are removed, and the exit code is 128 + the signal.
"""

from __future__ import annotations

import contextlib
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

from orchestrator import git, ledger, proctree, report, stopsignals
from orchestrator.errors import FatalError, Interrupted

ARMS = ("indexed", "full")
ARM_STOP_S = 15.0  # an arm's own agent grace (5 s) plus recording the interrupted iteration


@dataclass
class AbOptions:
    out_dir: Path
    tool: str | None = None
    max_iterations: int | None = None
    parallel: bool = False
    keep_workspaces: bool = False
    extra_args: list[str] = field(default_factory=list)


@dataclass
class ArmRun:
    name: str
    workspace: Path
    ledger: Path
    log: Path
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


def _arm_argv(name: str, ralph_dir_rel: str, opts: AbOptions) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator", "run", "--mode", name, "--dir", ralph_dir_rel]
    if opts.tool:
        argv += ["--tool", opts.tool]
    argv += opts.extra_args
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
    env = dict(os.environ, RALPH_AB_ARM=arm.name, **arm.tree.env())
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


def _wait(
    arms: list[ArmRun], on_status: Callable[[str], None], poll: float = 0.5, every: float = 10.0
) -> None:
    """Report progress when it changes, at most every `every` seconds (and at the end)."""
    last, last_at = "", 0.0
    while True:
        for arm in arms:
            if arm.process and arm.exit_code is None:
                arm.exit_code = arm.process.poll()
                if arm.tree is not None:
                    arm.tree.poll()
        done = all(a.exit_code is not None for a in arms if a.process)
        line = " · ".join(_progress(a) for a in arms)
        if line != last and (done or time.monotonic() - last_at >= every):
            on_status(line)
            last, last_at = line, time.monotonic()
        if done:
            return
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
        if arm.tree is not None:
            reap = arm.process.poll if arm.process else (lambda: None)
            killed += [f"{arm.name}: {k}" for k in arm.tree.end(2.0, reap=reap)]
    return killed


def run_ab(
    root: Path,
    ralph_dir: Path,
    logs_rel: str,
    opts: AbOptions,
    on_status: Callable[[str], None] = print,
) -> report.Written:
    """Run both arms and write the report."""
    out = opts.out_dir.resolve()
    work = out / "work"
    ralph_dir_rel = os.path.relpath(ralph_dir, root)
    arms = [
        ArmRun(
            name=name,
            workspace=work / name,
            ledger=work / name / logs_rel / "ledger.jsonl",
            log=out / name / "run.log",
        )
        for name in ARMS
    ]
    try:
        with stopsignals.interrupt_on_stop_signals():
            for arm in arms:
                make_workspace(root, arm.workspace, logs_rel)
            batches = [arms] if opts.parallel else [[a] for a in arms]
            for batch in batches:
                for arm in batch:
                    _start(arm, _arm_argv(arm.name, ralph_dir_rel, opts))
                _wait(batch, on_status)
        for killed in _end_trees(arms):
            on_status(f"warning: ended a process left behind by arm {killed}")
        for arm in arms:
            if arm.exit_code not in (0, 1):  # 0: all stories pass; 1: iterations used up
                on_status(
                    f"warning: arm '{arm.name}' stopped with exit {arm.exit_code} "
                    f"(see {arm.log}); its report covers the iterations it ran"
                )
            _collect(arm, out / arm.name, logs_rel)
        loaded = [report.load_arm(out / a.name / "ledger.jsonl", name=a.name) for a in arms]
        return report.write_report(loaded, out)
    except KeyboardInterrupt:
        with stopsignals.deferred():  # a second signal must not cut the cleanup in half
            _cleanup_interrupted(arms, out, logs_rel, on_status)
            if not opts.keep_workspaces:
                shutil.rmtree(work, ignore_errors=True)
        raise Interrupted(
            f"A/B interrupted: both arms were stopped and their ledgers kept in {out}/<arm>/; "
            "run `ralph ab` again to start over"
        ) from None
    except BaseException:
        with stopsignals.deferred():
            _stop(arms)
        raise
    finally:
        if not opts.keep_workspaces:
            shutil.rmtree(work, ignore_errors=True)


def _cleanup_interrupted(
    arms: list[ArmRun], out: Path, logs_rel: str, on_status: Callable[[str], None]
) -> None:
    for killed in _stop(arms):
        on_status(f"ended a process left behind by arm {killed}")
    for arm in arms:
        if arm.workspace.is_dir():
            # Keep the interrupted records: they say how far each arm got.
            with contextlib.suppress(FatalError, OSError):
                _collect(arm, out / arm.name, logs_rel)


def _collect(arm: ArmRun, dest: Path, logs_rel: str) -> None:
    """Keep each arm's ledger and transcripts beside the report."""
    logs = arm.workspace / logs_rel
    dest.mkdir(parents=True, exist_ok=True)
    if not logs.is_dir():
        raise FatalError(f"arm '{arm.name}' wrote no ledger (exit {arm.exit_code}); see {arm.log}")
    shutil.copytree(logs, dest, dirs_exist_ok=True)


def default_out_dir(logs_dir: Path) -> Path:
    return logs_dir / f"ab-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
