"""bench/scale.py and its synthetic projects: shaped like the corpus, timed as real commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402
import synth  # noqa: E402

from orchestrator import tokens  # noqa: E402
from orchestrator.memory.progress import Progress  # noqa: E402


def test_flat_project_is_a_corpus_shaped_log(tmp_path: Path) -> None:
    root = synth.flat_project(tmp_path / "p", 12)
    text = (root / "scripts/ralph/progress.txt").read_text()
    prog = Progress.parse(text)
    assert len(prog.entries) == 12 and not prog.has_index
    sizes = [tokens.count(e.text) for e in prog.entries]
    assert 180 < sum(sizes) / len(sizes) < 400  # ~300-token entries
    assert all(e.learnings and e.files_changed for e in prog.entries)
    prd = json.loads((root / "scripts/ralph/prd.json").read_text())
    assert [s["passes"] for s in prd["userStories"]].count(False) == 3
    # Deterministic for a seed.
    again = synth.flat_project(tmp_path / "q", 12)
    assert (again / "scripts/ralph/progress.txt").read_text() == text


def test_indexed_project_rows_match_reference_files(tmp_path: Path) -> None:
    root = synth.indexed_project(tmp_path / "p", 20, 30)
    prog = Progress.parse((root / "scripts/ralph/progress.txt").read_text())
    assert len(prog.index_rows) == 30 and len(prog.entries) == 20
    assert len({r.topic for r in prog.index_rows}) == 30
    for row in prog.index_rows:
        body = (root / row.path).read_text()
        assert body.startswith(f"# {row.topic}\n") and body.count("\n- [US-") >= 2


def test_slope_is_the_log_log_growth() -> None:
    assert scale.slope([10, 100, 1000], [1.0, 10.0, 100.0]) == pytest.approx(1.0)
    assert scale.slope([10, 100], [2.0, 200.0]) == pytest.approx(2.0)
    assert scale.slope([10], [1.0]) is None


def test_measure_runs_a_real_command_and_reports_cpu(tmp_path: Path) -> None:
    root = synth.indexed_project(tmp_path / "p", 6, 4)
    row = scale.measure("status", ["status", "--json"], root, 1, 120.0, fresh=False)
    assert row["exit"] == 0, row
    assert row["wall"] > 0 and row["cpu"] > 0
    result = {
        "when": "now",
        "machine": "test",
        "load": "0",
        "repeats": 1,
        "history_sizes": [],
        "refs_sizes": [4],
        "history_refs": 0,
        "refs_stories": 6,
        "rows": [{**row, "axis": "references", "size": 4}],
        "exponents": {"history": {}, "references": {"status": {"all": None, "top two": None}}},
    }
    assert "`ralph status`" in scale.markdown(result)
