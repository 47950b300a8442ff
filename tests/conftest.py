"""Shared fixtures. Add fixtures with small edits; do not rewrite this file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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
