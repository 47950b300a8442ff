"""The ledger: one JSON line per record, readable back, summed per run."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from orchestrator import ledger


def _it(n: int, **kw) -> dict:
    rec = {
        "iteration": n,
        "story_id": f"US-{n:03d}",
        "outcome": "passed",
        "prompt_tokens": 100,
        "full_history_tokens": 400,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_tokens": 80,
            "cache_write_tokens": 10,
        },
        "cost_usd": 0.5,
        "duration_s": 2.0,
    }
    rec.update(kw)
    return rec


def test_lines_are_json_with_identity_first(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "ledger.jsonl"
    with ledger.Ledger(path, run_id="r1") as led:
        led.event("run_start", agent="sim")
        led.iteration(_it(1))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    rec = json.loads(lines[1])
    assert list(rec)[:5] == ["event", "ts", "run_id", "iteration", "story_id"]
    assert rec["event"] == "iteration" and rec["run_id"] == "r1"
    assert rec["ts"].endswith("Z")


def test_unknown_outcome_refused(tmp_path: Path) -> None:
    with ledger.Ledger(tmp_path / "l.jsonl") as led, pytest.raises(ValueError):
        led.iteration(_it(1, outcome="great"))


def test_append_only_across_runs_and_totals(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with ledger.Ledger(path, run_id="a") as led:
        led.iteration(_it(1))
    with ledger.Ledger(path, run_id="b") as led:
        led.iteration(_it(1, outcome="no_progress", usage=None, cost_usd=None))
        led.iteration(_it(2))
        led.event("limit_wait", waited_s=30)
    recs = ledger.read(path)
    assert ledger.run_ids(recs) == ["a", "b"]
    t = ledger.run_totals(recs)
    assert (t.iterations, t.passed, t.usage_reported, t.cost_reported) == (2, 1, 1, 1)
    assert t.input_tokens == 100 and t.output_tokens == 5
    assert t.saved_tokens == 600 and t.saved_pct == pytest.approx(75.0)
    assert (t.limit_waits, t.limit_wait_s) == (1, 30.0)
    assert ledger.run_totals(recs, "a").iterations == 1
    assert set(ledger.by_story(recs)) == {"US-001", "US-002"}


def test_damaged_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"event": "iteration", "run_id": "x", "outcome": "passed"}\n{broken\n\n')
    assert len(ledger.read(path)) == 1
    assert ledger.read(tmp_path / "missing.jsonl") == []


def _writer(path: str, run_id: str) -> None:
    with ledger.Ledger(Path(path), run_id=run_id) as led:
        for i in range(200):
            led.iteration(_it(i, story_title="x" * 500))


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    procs = [multiprocessing.Process(target=_writer, args=(str(path), f"r{i}")) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 600
    assert all(json.loads(line)["event"] == "iteration" for line in lines)


def test_run_ids_sort_by_time() -> None:
    assert ledger.new_run_id(0) < ledger.new_run_id(100)
    assert ledger.new_run_id(0).startswith("19700101-000000-")


def test_failed_append_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ledger.jsonl"
    lg = ledger.Ledger(path, run_id="r1")
    lg.event("run_start")
    before = path.read_bytes()
    real_write = ledger.os.write

    def half_write(fd: int, data: bytes) -> int:  # what a full disk does: part of the line
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(ledger.os, "write", half_write)
    with pytest.raises(ledger.LedgerWriteError, match="could not append a ledger record"):
        lg.iteration(_it(1))
    monkeypatch.undo()
    assert path.read_bytes() == before
    lg.event("run_end")
    lg.close()
    assert [r["event"] for r in ledger.read(path)] == ["run_start", "run_end"]


def test_a_torn_tail_gets_a_newline_before_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text('{"event": "run_start", "run_id": "r0"}\n{"event": "iteration", "ru')
    with ledger.Ledger(path, run_id="r1") as lg:
        lg.event("run_start")
    records = ledger.read(path)
    assert records.skipped == [2] and [r["run_id"] for r in records] == ["r0", "r1"]
    assert "skipped 1 damaged line(s) (line 2)" in records.skipped_note()
