"""Every git subprocess goes through here, so there is one place that decides how git is run.

Two kinds of call: `run` is for work that must happen (clone, commit) and raises when git
fails; `output` and the helpers built on it are for questions (which HEAD, is this ignored)
where "git is missing, this is not a repository, git timed out" all mean "no answer" (None),
because ralph works outside git too.

Output is decoded as UTF-8 with replacement, not the locale's encoding: git writes paths as
bytes, and a stray byte in a file name must not crash a run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from orchestrator.errors import FatalError

DEFAULT_TIMEOUT = 60.0


class GitError(FatalError):
    """A git step ralph needed failed; the message carries git's own words."""


class Identity(NamedTuple):
    """A committer for our own commits, passed with `git -c` so the user's config is untouched."""

    name: str
    email: str

    def args(self) -> list[str]:
        return ["-c", f"user.name={self.name}", "-c", f"user.email={self.email}"]


class StatusEntry(NamedTuple):
    """One `git status --porcelain -z` entry; `orig` is a rename's or copy's source path."""

    code: str
    path: str
    orig: str | None = None


def run(
    args: Sequence[str],
    cwd: Path | None = None,
    *,
    check: bool = True,
    timeout: float | None = DEFAULT_TIMEOUT,
    identity: Identity | None = None,
) -> subprocess.CompletedProcess[str]:
    """`git <args>` in `cwd`, output captured. With `check`, a failure is a GitError (the CLI
    prints it, no traceback); without, OSError when git is missing. TimeoutExpired after
    `timeout` seconds (None: wait)."""
    argv = ["git", *(identity.args() if identity else []), *args]
    try:
        out = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
        )
    except OSError as exc:
        if check:
            raise GitError(
                f"cannot run git ({exc.strerror}): install git or put it on PATH"
            ) from exc
        raise
    if check and out.returncode != 0:
        said = out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}"
        raise GitError(f"git {' '.join(args)} failed in {cwd or Path.cwd()}: {said}")
    return out


def output(args: Sequence[str], cwd: Path) -> str | None:
    """git's stdout when it exits 0; None when git is missing, fails or times out."""
    try:
        out = run(args, cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def tracked_files(cwd: Path, limit: int = 5_000) -> list[str]:
    """The repository's tracked files (`git ls-files`), at most `limit` of them; [] outside
    git. What a story may touch: the selector matches the names a story's text mentions
    (~0.06 s a prompt at 5,000 files; matching 20,000 cost 0.23 s)."""
    out = output(["ls-files", "-z"], cwd)
    return [p for p in out.split("\0") if p][:limit] if out else []


def _line(args: Sequence[str], cwd: Path) -> str | None:
    out = output(args, cwd)
    return out.strip() or None if out else None


def head(cwd: Path) -> str | None:
    """The commit HEAD points at; None outside git or before the first commit."""
    return _line(["rev-parse", "--verify", "-q", "HEAD"], cwd)


def toplevel(cwd: Path) -> Path | None:
    """The work tree's top level containing `cwd`; None outside git."""
    line = _line(["rev-parse", "--show-toplevel"], cwd)
    return Path(line).resolve() if line else None


def git_dir(cwd: Path) -> Path | None:
    """This worktree's own git directory (absolute); None outside git."""
    line = _line(["rev-parse", "--absolute-git-dir"], cwd)
    return Path(line) if line else None


def is_ignored(cwd: Path, path: str) -> bool:
    """Whether .gitignore rules ignore `path` (tracked or not: `--no-index`)."""
    return output(["check-ignore", "-q", "--no-index", path], cwd) is not None


def config(cwd: Path, key: str) -> str | None:
    return _line(["config", key], cwd)


def status(cwd: Path) -> list[StatusEntry] | None:
    """Modified, staged and untracked (not ignored) paths; None outside git.

    `--no-optional-locks`: asking must not rewrite the user's .git/index (an editor or the
    agent may hold it).
    """
    out = output(
        ["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd
    )
    if out is None:
        return None
    entries: list[StatusEntry] = []
    items = out.split("\0")
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if len(item) < 4:
            continue
        code, path, orig = item[:2], item[3:], None
        if code[0] in "RC":  # with -z, a rename's or copy's source is the next item
            orig = items[i] if i < len(items) else None
            i += 1
        entries.append(StatusEntry(code, path, orig))
    return entries


def is_clean(cwd: Path) -> bool:
    """No changes git would commit with `add -A` (False outside git: nothing is known)."""
    return status(cwd) == []


def commit_all(cwd: Path, message: str, identity: Identity | None = None) -> None:
    """Stage everything and commit it; GitError when git refuses."""
    run(["add", "-A"], cwd)
    run(["commit", "-q", "-m", message], cwd, identity=identity, timeout=None)
