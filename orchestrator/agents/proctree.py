"""Everything one spawned process started, found and ended whatever sessions or groups it made.

A process group is not enough: an agent's tool may run `setsid sleep 300` (a new session and
group) or double-fork a daemon (reparented to init). `Tree` therefore finds members four ways
and ends their union:

- a cgroup v2 made for this one process, when the cgroup2 hierarchy is writable here (root, or
  a delegated subtree): the child joins it before exec (`stdin_exec.py` reads
  `CGROUP_PROCS_ENV`), and nothing it starts can leave it;
- descendants recorded while it runs (psutil, polled about once a second and at the end);
- its process group and session (the pty child is a session leader);
- a marker in the environment (`RALPH_TREE_<token>=1`, one variable per tree so nested trees
  keep each other's) that every descendant inherits unless it scrubs its environment, which
  catches a double fork made between two polls.

Ending: SIGTERM to every member, a grace period, then SIGKILL (`cgroup.kill` when present).
Zombies are not members (they cannot be killed; their parent or init reaps them); the direct
child is reaped by its owner through `reap`, never here, so no exit status is stolen.
`RALPH_NO_CGROUP=1` turns the cgroup off (to test the fallback or where cgroups misbehave).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from orchestrator.log import get_logger

log = get_logger()

MARKER_PREFIX = "RALPH_TREE_"
CGROUP_PROCS_ENV = "RALPH_CGROUP_PROCS"
NO_CGROUP_ENV = "RALPH_NO_CGROUP"
POLL_EVERY_S = 1.0
_counter = itertools.count(1)


@dataclass(frozen=True)
class Killed:
    pid: int
    name: str
    cmdline: str

    def __str__(self) -> str:
        return f"{self.cmdline or self.name} (pid {self.pid})"


def _cgroup2_root() -> Path | None:
    """The cgroup2 folder this process belongs to, or None (no cgroup2, cgroup v1 only)."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = next(
        (line.split()[4] for line in mounts if " - cgroup2 " in line and len(line.split()) > 4),
        None,
    )
    rel = next((line[3:] for line in own if line.startswith("0::")), None)
    if mount is None or rel is None or ".." in rel:
        return None
    base = Path(mount) / rel.lstrip("/")
    return base if base.is_dir() else None


def make_cgroup() -> Path | None:
    """A new, empty cgroup v2 beside us, or None when none can be made here."""
    if os.environ.get(NO_CGROUP_ENV):
        return None
    base = _cgroup2_root()
    if base is None:
        return None
    _sweep(base)
    path = base / f"ralph-{os.getpid()}-{next(_counter)}"
    try:
        path.mkdir()
    except OSError:
        return None
    if not (path / "cgroup.procs").exists():
        with contextlib.suppress(OSError):
            path.rmdir()
        return None
    return path


def _sweep(base: Path) -> None:
    """Remove our empty cgroups whose ralph process is gone (one killed with SIGKILL cannot
    remove its own); a cgroup still holding processes is never touched."""
    for stale in base.glob("ralph-*-*"):
        owner = stale.name.split("-")[1]
        if owner.isdigit() and not psutil.pid_exists(int(owner)):
            with contextlib.suppress(OSError):
                stale.rmdir()  # fails (EBUSY) while it still has members


class Tree:
    """Track and end one spawned process and everything it starts (see the module docstring).

    Use: `tree = Tree()`; spawn with `tree.env()` added to the child's environment; then
    `tree.attach(pid)`; call `tree.poll()` often (it rate-limits itself); finally
    `killed = tree.end(grace, reap)`.
    """

    def __init__(self, *, use_cgroup: bool = True) -> None:
        self.marker = MARKER_PREFIX + secrets.token_hex(8)
        self.cgroup = make_cgroup() if use_cgroup else None
        self.pid: int | None = None
        self.seen: dict[int, psutil.Process] = {}
        self._last_poll = 0.0

    def env(self) -> dict[str, str]:
        extra = {self.marker: "1"}
        if self.cgroup is not None:
            extra[CGROUP_PROCS_ENV] = str(self.cgroup / "cgroup.procs")
        return extra

    def attach(self, pid: int) -> None:
        self.pid = pid
        if self.cgroup is not None:  # the child joins by itself too; this covers a late exec
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.procs").write_text(str(pid))
        self.poll(force=True)

    def poll(self, force: bool = False) -> None:
        """Record the current descendants (cheap; at most once per POLL_EVERY_S)."""
        now = time.monotonic()
        if self.pid is None or (not force and now - self._last_poll < POLL_EVERY_S):
            return
        self._last_poll = now
        roots = [self.pid, *self.seen]
        for pid in roots:
            proc = self.seen.get(pid) or _process(pid)
            if proc is None:
                continue
            self.seen.setdefault(pid, proc)
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    self.seen.setdefault(child.pid, child)

    def members(self) -> list[psutil.Process]:
        """Every live (non-zombie) process of the tree, ourselves excluded."""
        self.poll(force=True)
        found: dict[int, psutil.Process] = {}
        for pid in self._cgroup_pids():
            proc = _process(pid)
            if proc is not None:
                found[pid] = proc
        for pid, proc in self.seen.items():
            found.setdefault(pid, proc)
        for proc in self._scan():
            found.setdefault(proc.pid, proc)
        me = os.getpid()
        return [p for pid, p in found.items() if pid != me and _alive(p)]

    def end(self, grace: float, reap: Callable[[], object] = lambda: None) -> list[Killed]:
        """SIGTERM every member, SIGKILL what is left after `grace`; returns what was alive
        besides the tracked process itself (the leftovers that had to be killed)."""
        members = self.members()
        leftovers = [_describe(p) for p in members if p.pid != self.pid]
        if members:
            self._signal(members, signal.SIGTERM)
            members = self._wait(members, grace, reap)
        if members:
            log.debug("process_tree_killed", pids=[p.pid for p in members])
            self._kill_cgroup()
            self._signal(members, signal.SIGKILL)
            self._wait(members, 2.0, reap)
        reap()
        self._remove_cgroup()
        if leftovers:
            log.info("process_tree_leftovers_killed", killed=[str(k) for k in leftovers])
        return leftovers

    def close(self) -> None:
        """Remove the cgroup without ending anything (for a tree that never started)."""
        self._remove_cgroup()

    # ---- internals ------------------------------------------------------------------------
    def _scan(self) -> list[psutil.Process]:
        """Processes in the tracked group or session, or carrying our marker."""
        found = []
        marker = f"{self.marker}=1".encode()
        uid = os.getuid()
        for proc in psutil.process_iter():
            pid = proc.pid
            try:
                if self.pid is not None and self.pid in (os.getpgid(pid), os.getsid(pid)):
                    found.append(proc)
                    continue
                if proc.uids().real != uid and uid != 0:
                    continue
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except (OSError, psutil.Error):
                continue
            if marker in environ.split(b"\0"):
                found.append(proc)
        return found

    def _cgroup_pids(self) -> list[int]:
        if self.cgroup is None:
            return []
        try:
            text = (self.cgroup / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(w) for w in text.split() if w.isdigit()]

    def _signal(self, procs: list[psutil.Process], sig: signal.Signals) -> None:
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, sig)  # the group first: members that fork meanwhile too
        for proc in procs:
            # Once each: a second SIGTERM can cut short a handler that is cleaning up.
            with contextlib.suppress(psutil.Error, OSError):
                if self.pid is None or os.getpgid(proc.pid) != self.pid:
                    proc.send_signal(sig)

    def _wait(
        self, procs: list[psutil.Process], limit: float, reap: Callable[[], object]
    ) -> list[psutil.Process]:
        deadline = time.monotonic() + limit
        rescan = time.monotonic() + 0.5
        while True:
            reap()
            procs = [p for p in procs if _alive(p)]
            if time.monotonic() >= rescan:
                # Members may have started processes while being ended: end those too.
                rescan = time.monotonic() + 0.5
                known = {q.pid for q in procs}
                fresh = [p for p in self.members() if p.pid not in known]
                if fresh:
                    self._signal(fresh, signal.SIGTERM)
                    procs += fresh
            if not procs or time.monotonic() >= deadline:
                return procs
            time.sleep(0.05)

    def _kill_cgroup(self) -> None:
        if self.cgroup is not None and (self.cgroup / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.cgroup / "cgroup.kill").write_text("1")

    def _remove_cgroup(self) -> None:
        if self.cgroup is None:
            return
        cgroup = self.cgroup
        for _ in range(40):
            try:
                cgroup.rmdir()
                self.cgroup = None
                return
            except FileNotFoundError:
                self.cgroup = None
                return
            except OSError:
                time.sleep(0.05)  # members still exiting
        log.warning("cgroup_not_removed", path=str(self.cgroup))


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _describe(proc: psutil.Process) -> Killed:
    try:
        name = proc.name()
        cmdline = " ".join(proc.cmdline())[:200]
    except psutil.Error:
        name, cmdline = "?", ""
    return Killed(proc.pid, name, cmdline)
