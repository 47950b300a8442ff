from __future__ import annotations

from pathlib import Path

import pytest
from conftest import corpus_cases

from orchestrator import fsutil
from orchestrator.progress import HEADER, Progress, new_progress_text


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_corpus_round_trips_byte_for_byte(path: Path) -> None:
    text = fsutil.read_text(path)
    assert Progress.parse(text).render() == text


def test_new_progress_text_is_ralph_header() -> None:
    assert new_progress_text("Mon Jan 1") == HEADER.format(date="Mon Jan 1")
    assert new_progress_text("X") == "# Ralph Progress Log\nStarted: X\n---\n"
