"""Helpers for the end-to-end tests: the real agent CLIs, their offline environment, real
processes on real ptys (pexpect) and real git repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
NPM_PREFIX = REPO / ".ci" / "npm"
NPM_BIN = NPM_PREFIX / "node_modules" / ".bin"
# The versions .ci/run installs; the tests are written against what these CLIs send and print.
PACKAGES = {"claude": "@anthropic-ai/claude-code@2.1.197", "codex": "@openai/codex@0.171.0"}
# Variables that could point a CLI at a real account or change its behaviour under test.
_LEAKY_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "AMP_", "GEMINI_", "RALPH_")


def in_ci() -> bool:
    return os.environ.get("RALPH_CI") == "1"


def _lookup(name: str) -> str | None:
    pinned = NPM_BIN / name
    if pinned.exists():
        return str(pinned)
    return shutil.which(name)


def find_cli(name: str) -> str:
    """The real CLI: <repo>/.ci/npm (pinned by .ci/run) first, then PATH. Installs it with
    npm like .ci/run when missing; skips (with the reason) only when node/npm are absent,
    and never skips under RALPH_CI=1."""
    found = _lookup(name)
    if found:
        return found
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"real `{name}` CLI unavailable: {' and '.join(missing)} not installed"
        if in_ci():
            pytest.fail(f"{reason} (RALPH_CI=1: e2e tests must run)")
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    NPM_PREFIX.mkdir(parents=True, exist_ok=True)
    with FileLock(str(NPM_PREFIX / ".install.lock")):
        if not _lookup(name):
            proc = subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                    str(NPM_PREFIX),
                    *PACKAGES.values(),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if proc.returncode != 0:
                pytest.fail(f"npm install {PACKAGES[name]} failed:\n{proc.stderr[-2000:]}")
    found = _lookup(name)
    if not found:
        pytest.fail(f"`{name}` not found after npm install into {NPM_PREFIX}")
    return found


def cli_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def base_env(home: Path, bin_dirs: list[str]) -> dict[str, str]:
    """os.environ without anything that could reach a real account, with a private HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKY_PREFIXES)}
    home.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([*bin_dirs, env.get("PATH", "/usr/bin:/bin")])
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        PATH=path,
        GIT_CONFIG_NOSYSTEM="1",
        # Clones (A/B arms) carry no local identity; the agent's `git commit` needs one.
        GIT_AUTHOR_NAME="e2e",
        GIT_AUTHOR_EMAIL="e2e@example.com",
        GIT_COMMITTER_NAME="e2e",
        GIT_COMMITTER_EMAIL="e2e@example.com",
        TERM="dumb",
        NO_COLOR="1",
    )
    return env


def claude_env(home: Path, base_url: str, claude_bin: str) -> dict[str, str]:
    env = base_env(home, [str(Path(claude_bin).parent)])
    env.update(
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY="x",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        IS_SANDBOX="1",  # --dangerously-skip-permissions refuses to run as root otherwise
    )
    return env


def codex_env(home: Path, codex_bin: str) -> dict[str, str]:
    env = base_env(home, [str(Path(codex_bin).parent)])
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    env.update(CODEX_HOME=str(home / ".codex"), OPENAI_API_KEY="x")
    return env


def run_pty(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin_path: Path | None = None,
    timeout: float = 120,
) -> tuple[int, str]:
    """Run argv on a real pty until it exits; stdin from a file (then EOF) when given.
    Returns (exit code, or 128+signal; output with \\r\\n folded)."""
    if stdin_path is not None:
        # argv stays a list: the fixed script only redirects stdin and execs "$@".
        env = dict(env, E2E_STDIN=str(stdin_path))
        cmd, args = "/bin/sh", ["-c", 'exec "$@" < "$E2E_STDIN"', "sh", *argv]
    else:
        cmd, args = argv[0], argv[1:]
    child = pexpect.spawn(
        cmd,
        args,
        cwd=str(cwd),
        env=env,
        encoding="utf-8",
        codec_errors="replace",
        timeout=timeout,
        dimensions=(50, 400),
    )
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    output = (child.before or "").replace("\r\n", "\n")
    code = child.exitstatus if child.exitstatus is not None else 128 + (child.signalstatus or 0)
    return code, output


def json_lines(output: str) -> list[dict[str, Any]]:
    """The JSON objects among the output lines (a pty may interleave other text)."""
    out: list[dict[str, Any]] = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    return proc.stdout


def init_repo(repo: Path, files: dict[str, str]) -> Path:
    """A real git repo with `files` committed on branch main, local identity set."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "e2e@example.com")
    git(repo, "config", "user.name", "e2e")
    git(repo, "config", "commit.gpgsign", "false")
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


def commit_subjects(repo: Path) -> list[str]:
    return git(repo, "log", "--format=%s").splitlines()


def ralph_argv(*args: str) -> list[str]:
    """The installed `ralph` console script next to this Python (the real entry point)."""
    script = Path(sys.executable).parent / "ralph"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "orchestrator", *args]


def read_ledger(repo: Path, log_dir: str = "ralph/logs") -> list[dict[str, Any]]:
    path = repo / log_dir / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iterations(ledger: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rec for rec in ledger if rec.get("event") == "iteration"]


def processes_in(folder: Path) -> list[int]:
    """PIDs of live processes whose working directory is inside `folder` (Linux /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            pids.append(int(proc.name))
    return pids
