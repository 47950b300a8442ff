"""Helpers for tests that run `ralph run` for real: a tmp git repo with a Ralph project."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import fsutil

REPO = Path(__file__).resolve().parents[1]
RALPH = [sys.executable, "-m", "orchestrator"]
# The iteration record's fields (docs/architecture.md, ledger.py).
LEDGER_FIELDS = {
    "event",
    "ts",
    "run_id",
    "iteration",
    "story_id",
    "story_title",
    "mode",
    "agent",
    "model",
    "prompt_tokens",
    "full_history_tokens",
    "saved_tokens",
    "saved_pct",
    "selected_references",
    "usage",
    "cost_usd",
    "duration_s",
    "exit_code",
    "outcome",
    "checks",
    "updated_references",
}
SUMMARY = (
    r"US-\d+ passed · prompt [\d.k]+ tok \(full history [\d.k]+: saved \d+%\) · "
    r"agent [\d.k]+ in / [\d.k]+ out · \$[\d.]+ · \d+s"
)


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


def make_project(
    root: Path,
    n: int = 3,
    *,
    branch: str = "ralph/demo",
    config: dict | None = None,
    sim_env: dict | None = None,
    sim_args: list[str] | None = None,
) -> Path:
    """A git repo with scripts/ralph/prd.json holding `n` stories, committed. Returns root."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    rd = root / "scripts" / "ralph"
    rd.mkdir(parents=True)
    stories = [
        {
            "id": f"US-{i:03d}",
            "title": f"Add feature {i}",
            "description": f"As a user I want feature {i}.",
            "acceptanceCriteria": [f"feature {i} works"],
            "priority": i,
            "passes": False,
            "notes": "",
        }
        for i in range(1, n + 1)
    ]
    (rd / "prd.json").write_text(
        json.dumps(
            {
                "project": "demo",
                "branchName": branch,
                "description": "demo",
                "userStories": stories,
            },
            indent=2,
        )
        + "\n"
    )
    cfg = {
        "sleep_between": 0,
        "retries": {"transient": 0, "backoff": 0},
        "agents": {"sim": {"args": sim_args or [], "env": sim_env or {}}},
    }
    for k, v in (config or {}).items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    (root / "ralph.yaml").write_text(yaml.safe_dump(cfg))
    (root / ".gitignore").write_text("/ralph/logs/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("RALPH_SIM_FAULT", None)
    e.update(extra)
    return e


def ralph(
    root: Path, *args: str, timeout: float = 120, **extra_env: str
) -> subprocess.CompletedProcess:
    """`ralph ARGS` in `root` as a real process (stdout not a terminal)."""
    return subprocess.run(
        [*RALPH, *args],
        cwd=root,
        env=env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ledger(root: Path) -> list[dict]:
    path = root / "ralph" / "logs" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def iterations(root: Path) -> list[dict]:
    return [r for r in ledger(root) if r["event"] == "iteration"]


def prd(root: Path) -> dict:
    return json.loads((root / "scripts" / "ralph" / "prd.json").read_text())


def opened_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files fsutil opens from now on (a spy on read_bytes_stat)."""
    opened: list[str] = []
    real = fsutil.read_bytes_stat

    def spy(path: Path | str) -> tuple[bytes, os.stat_result]:
        opened.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(fsutil, "read_bytes_stat", spy)
    return opened
