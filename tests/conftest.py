"""Shared fixtures. Add fixtures with small edits; do not rewrite this file."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The user cache (token counts of projects that never ran, tiktoken's files) of every test
# and every `ralph` it starts: a private folder per test process, never the real ~/.cache.
_CACHE = tempfile.mkdtemp(prefix="ralph-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)
NO_CORPUS = "Ralph corpus not found: set RALPH_CORPUS or place shared/corpus beside the repo"


def corpus_dir() -> Path | None:
    """The real Ralph histories: $RALPH_CORPUS, /work/shared/corpus or ../shared/corpus."""
    env = os.environ.get("RALPH_CORPUS")
    for c in (env, "/work/shared/corpus", REPO.parent / "shared" / "corpus"):
        if c and Path(c).is_dir():
            return Path(c)
    return None


def corpus_cases(filename: str) -> list:
    """pytest params, one per corpus folder holding `filename` (one skipped param if none)."""
    root = corpus_dir()
    if root is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_CORPUS))]
    dirs = sorted(d for d in root.iterdir() if (d / filename).is_file())
    return [pytest.param(d / filename, id=d.name) for d in dirs]


@pytest.fixture
def corpus() -> Path:
    root = corpus_dir()
    if root is None:
        pytest.skip(NO_CORPUS)
    return root


# ---- tests/e2e: the real agent CLIs (helpers in tests/e2e/e2e_support.py). They live here,
# not in tests/e2e/conftest.py, because a second conftest module would replace this one as
# `conftest` in sys.modules and break `from conftest import ...` in the tests above.
def _e2e_support():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
    import e2e_support

    return e2e_support


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The real Claude Code CLI (pinned in .ci/npm, else PATH); see tests/e2e/README.md."""
    return _real_cli("claude")


@pytest.fixture(scope="session")
def codex_bin() -> str:
    """The real Codex CLI (pinned in .ci/npm, else PATH); see tests/e2e/README.md."""
    return _real_cli("codex")


def _real_cli(name: str) -> str:
    support = _e2e_support()
    path = support.find_cli(name)
    print(f"\n{name} CLI: {path} ({support.cli_version(path)})")
    return path


@pytest.fixture
def cli_home(tmp_path: Path) -> Path:
    """A private HOME for an agent CLI: its config and session files go here, not in ~."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e drives real agent CLIs: mark it `e2e`, so that
    `pytest -m "not e2e"` is the fast loop."""
    e2e_dir = Path(__file__).resolve().parent / "e2e"
    for item in items:
        if e2e_dir in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
