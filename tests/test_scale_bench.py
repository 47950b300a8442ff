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


def test_one_loop_iteration_is_timed_against_a_baseline_checkout(tmp_path: Path) -> None:
    root = scale.bench_project(tmp_path / "loop", 6, 4)
    argv = ["run", "--tool", "bench", "1"]
    row = scale.measure("run 1", argv, root, 1, 300.0, fresh=True, baseline=BENCH.parent)
    assert row["exit"] in (0, 1), row  # 1: max iterations reached, stories left
    assert row["cpu"] > 0 and row["baseline"]["cpu"] > 0
    assert not (root / scale.AGENT_TIMES).exists()  # runs happen on copies
    row.update(axis="iteration", size=4)
    result = {
        "when": "now",
        "machine": "test",
        "load": "0",
        "repeats": 1,
        "history_sizes": [],
        "refs_sizes": [],
        "history_refs": 0,
        "refs_stories": 6,
        "baseline": str(BENCH.parent),
        "rows": [row],
        "exponents": {"history": {}, "references": {}},
    }
    text = scale.markdown(result)
    assert "| one iteration, 4 references (agent CPU excluded) | `ralph run 1` |" in text
    assert " -> " in text


def test_agent_cpu_is_read_from_the_shells_times(tmp_path: Path) -> None:
    (tmp_path / scale.AGENT_TIMES).write_text("0m0.010s 0m0.020s\n0m1.500s 0m0.000s\n")
    assert scale._agent_cpu(tmp_path) == pytest.approx(1.53)
    assert scale._agent_cpu(tmp_path) == 0.0  # consumed


def test_big_log_project_reaches_its_size(tmp_path: Path) -> None:
    root = synth.big_log_project(tmp_path / "big", 0.3, n_refs=5, n_stories=20)
    text = (root / "scripts/ralph/progress.txt").read_text()
    assert len(text.encode()) >= 300_000
    prog = Progress.parse(text)
    assert len(prog.index_rows) == 5 and prog.entry_count > 20
