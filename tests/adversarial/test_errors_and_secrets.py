"""Adversarial: every command against unreadable/odd user files, disk full, a closed pipe, and
secrets that an agent prints or writes. Real `ralph` processes on real files throughout.

The bar: no Python traceback, no hang, a non-zero documented exit code (2) and one message
that names the file; and no secret value in any file under ralph/logs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from run_helpers import RALPH, env, make_project

IS_ROOT = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")
NOBODY = 65534
TIMEOUT = 60

PROGRESS = (
    "# Ralph Progress Log\nStarted: x\n---\n\n## Progress Index\n"
    "| Topic | Reference Path |\n|---|---|\n"
    "| Auth flow | ralph/references/auth-flow.md |\n"
    "\n## 2026-01-01 - US-001\n- did it\n- **Learnings:**\n  - tokens expire hourly\n---\n"
)

PRD = "scripts/ralph/prd.json"
PROG = "scripts/ralph/progress.txt"
YAML = "ralph.yaml"
REF = "ralph/references/auth-flow.md"


# ---------------------------------------------------------------------------- the project
def _project(parent: Path) -> Path:
    root = make_project(parent / "p", 2)
    (root / PROG).write_text(PROGRESS)
    (root / REF).parent.mkdir(parents=True)
    (root / REF).write_text("# Auth flow\n- tokens expire after one hour\n")
    return root


def _world_writable(root: Path) -> None:
    """Let `nobody` (the EACCES case, run as another user) read and write what it should."""
    for dirpath, dirs, files in os.walk(root):
        os.chmod(dirpath, 0o777)
        for f in files:
            with contextlib.suppress(OSError):
                os.chmod(Path(dirpath) / f, 0o666)


# ---------------------------------------------------------------------------- conditions
# Each condition breaks one file of the project and says how to run `ralph` so it bites.
def _as_dir(root: Path, rel: str) -> None:
    (root / rel).unlink()
    (root / rel).mkdir()
    (root / rel / "x").write_text("in the way\n")


def _as_fifo(root: Path, rel: str) -> None:
    (root / rel).unlink()
    os.mkfifo(root / rel)


def _as_loop(root: Path, rel: str) -> None:
    (root / rel).unlink()
    os.symlink(root / rel, root / rel)  # points at itself: ELOOP


def _as_dangling(root: Path, rel: str) -> None:
    (root / rel).unlink()
    os.symlink(root / "nowhere" / "gone.json", root / rel)


def _unreadable(root: Path, rel: str) -> None:
    os.chmod(root / rel, 0)


BREAKERS: dict[str, Callable[[Path, str], None]] = {
    "dir": _as_dir,
    "fifo": _as_fifo,
    "loop": _as_loop,
    "dangling": _as_dangling,
    "eacces": _unreadable,
}
TARGETS = {"prd": PRD, "progress": PROG, "yaml": YAML, "ref": REF}
# A representative spread: every target with every way to break it would be 20 conditions x
# 11 commands; these 11 cover each file and each errno/kind at least twice.
CONDITIONS = [
    ("prd", "dir"),
    ("prd", "fifo"),
    ("prd", "loop"),
    ("prd", "eacces"),
    ("progress", "fifo"),
    ("progress", "dangling"),
    ("progress", "eacces"),
    ("yaml", "dir"),
    ("yaml", "eacces"),
    ("ref", "dir"),
    ("ref", "eacces"),
]


def _prefix(kind: str) -> list[str]:
    """Root reads a mode-000 file anyway: run that case as `nobody` instead."""
    if kind != "eacces" or not IS_ROOT:
        return []
    if not SETPRIV:
        pytest.skip("running as root without setpriv: chmod 000 cannot deny root a read")
    return [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


# ---------------------------------------------------------------------------- the commands
def _argv(command: str, target: str) -> list[str]:
    """How each command is pointed at the project (or, for the ones taking a path, at the
    broken file itself)."""
    return {
        "demo": ["demo", "--into", target, "--tool", "sim"],
        "init": ["init"],
        "run": ["run", "--tool", "sim", "1"],
        "status": ["status"],
        "prompt": ["prompt"],
        "migrate": ["migrate", "--dry-run"],
        "check": ["check"],
        "compact": ["compact"],
        "ab": ["ab", "--tool", "sim", "1"],
        "report": ["report", target],
        "savings": ["savings"],
    }[command]


def _help_commands() -> list[str]:
    """The commands `ralph --help` lists: a new command must join this suite."""
    out = subprocess.run(
        [*RALPH, "--help"], capture_output=True, text=True, cwd=tempfile.gettempdir(), check=True
    ).stdout
    block = out.split("positional arguments:")[1].split("options:")[0]
    return re.findall(r"^    (\w+)\s", block, flags=re.M)


COMMANDS = [
    "demo",
    "init",
    "run",
    "status",
    "prompt",
    "migrate",
    "check",
    "compact",
    "ab",
    "report",
    "savings",
]

# (command, target) pairs where the broken file is not the command's business, so success is
# right (exit 0) - still with no traceback and no hang.
NOT_READ = {
    ("report", "yaml"),  # reads only the ledger it is given... which here is the broken path
}


def test_every_listed_command_is_covered() -> None:
    assert _help_commands() == COMMANDS


@contextlib.contextmanager
def _shared_tmp() -> Iterator[Path]:
    """A folder `nobody` can enter (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="ralph-adv-"))
    os.chmod(d, 0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run(root: Path, argv: list[str], prefix: list[str], **extra: str) -> subprocess.CompletedProcess:
    e = env(**extra)
    e.update(HOME=str(root.parent), GIT_CONFIG_COUNT="1")
    e.update(GIT_CONFIG_KEY_0="safe.directory", GIT_CONFIG_VALUE_0="*")
    try:
        return subprocess.run(
            [*prefix, *RALPH, *argv],
            cwd=root,
            env=e,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"ralph {' '.join(argv)} hung for {TIMEOUT}s: {exc.stderr!r}")


def _assert_clean_failure(proc: subprocess.CompletedProcess, target: str, what: str) -> None:
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, f"{what}: traceback\n{both}"
    assert proc.returncode == 2, f"{what}: exit {proc.returncode}\n{both}"
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("ralph: error:")]
    assert len(errors) == 1, f"{what}: expected one error line\n{proc.stderr}"
    assert Path(target).name in errors[0], f"{what}: error does not name {target}\n{errors[0]}"
    assert "Fix:" in errors[0] or "fix" in errors[0].lower(), errors[0]


@pytest.mark.parametrize(
    ("which", "kind"), CONDITIONS, ids=[f"{w}-{k}" for w, k in CONDITIONS]
)
@pytest.mark.parametrize("command", COMMANDS)
def test_command_against_broken_file(command: str, which: str, kind: str) -> None:
    target = TARGETS[which]
    prefix = _prefix(kind)
    with _shared_tmp() as tmp:
        root = _project(tmp)
        if prefix:
            _world_writable(root)
        BREAKERS[kind](root, target)
        before = {p: p.read_bytes() for p in (root / PRD, root / PROG) if p.is_file()}
        proc = _run(root, _argv(command, target), prefix)
        what = f"ralph {command} with {target} as {kind}"
        if (command, which) in NOT_READ:
            assert "Traceback" not in proc.stdout + proc.stderr
        else:
            _assert_clean_failure(proc, target, what)
        after = {p: p.read_bytes() for p in before if p.is_file()}
        assert after == before, f"{what}: changed a user file"
