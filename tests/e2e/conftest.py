"""Fixtures for the end-to-end tests: the real Claude Code and Codex CLIs, offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_support import cli_version, find_cli


@pytest.fixture(scope="session")
def claude_bin() -> str:
    path = find_cli("claude")
    print(f"\nclaude CLI: {path} ({cli_version(path)})")
    return path


@pytest.fixture(scope="session")
def codex_bin() -> str:
    path = find_cli("codex")
    print(f"\ncodex CLI: {path} ({cli_version(path)})")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private HOME: the CLIs write their config and session files here, not in ~."""
    path = tmp_path / "home"
    path.mkdir()
    return path
