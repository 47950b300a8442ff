"""The ledger: one JSON line per record, readable back, summed per run."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import subprocess
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


# What `Iteration.record` built as a dict before the record had a type: the keys in this
# order, saved_* derived from the token counts.
_RECORD_INPUT = {
    "iteration": 3,
    "story_id": "US-003",
    "story_title": "Add priority",
    "mode": "indexed",
    "agent": "claude",
    "model": "claude-sonnet-4-5",
    "prompt_tokens": 1234,
    "prompt_tokens_estimated": True,
    "full_history_tokens": 5678,
    "selected_references": ["ralph/references/db.md"],
    "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": 0},
    "cost_usd": 0.25,
    "duration_s": 12.5,
    "exit_code": 0,
    "outcome": "passed",
    "timed_out": None,
    "killed_processes": ["sleep 100"],
    "attempts": 2,
    "completion": None,
    "committed": True,
    "files_changed": True,
    "error": None,
    "checks": {"ok": True, "findings": [{"kind": "not_passed", "path": None}]},
    "updated_references": ["ralph/references/db.md"],
    "transcript": "ralph/logs/r1/iteration-3.log",
}


def _dict_as_before(inp: dict) -> dict:
    """The dict Iteration.record returned before IterationRecord (its code, inlined)."""
    saved = inp["full_history_tokens"] - inp["prompt_tokens"]
    keys = list(inp)
    at = keys.index("full_history_tokens") + 1
    out = {k: inp[k] for k in keys[:at]}
    out["saved_tokens"] = saved
    out["saved_pct"] = (
        round(100 * saved / inp["full_history_tokens"], 1) if inp["full_history_tokens"] else 0.0
    )
    out.update({k: inp[k] for k in keys[at:]})
    return out


@pytest.mark.parametrize("full", [5678, 0, 1234, 1000])
def test_iteration_record_serialises_to_the_dict_of_before(tmp_path: Path, full: int) -> None:
    inp = {**_RECORD_INPUT, "full_history_tokens": full}
    rec = ledger.IterationRecord(**inp)
    assert list(rec.to_json().items()) == list(_dict_as_before(inp).items())
    # Through the ledger: identity first, then the record's keys in the same order.
    path = tmp_path / "ledger.jsonl"
    with ledger.Ledger(path, run_id="r1") as led:
        led.iteration(rec)
        led.iteration(_dict_as_before(inp))  # a plain dict still works (tests, old callers)
    typed, plain = (json.loads(line) for line in path.read_text().splitlines())
    assert list(typed)[:5] == ["event", "ts", "run_id", "iteration", "story_id"]
    typed.pop("ts"), plain.pop("ts")
    assert list(typed.items()) == list(plain.items())


def test_iteration_record_is_a_copy_and_checks_its_outcome() -> None:
    rec = ledger.IterationRecord(**_RECORD_INPUT)
    out = rec.to_json()
    out["checks"]["ok"] = False
    assert rec.checks["ok"] is True
    with pytest.raises(ValueError, match="unknown outcome"):
        ledger.IterationRecord(**{**_RECORD_INPUT, "outcome": "great"})


def test_an_optional_field_is_written_only_when_set() -> None:
    """How a later field is added: declared with `optional()`, a record that does not set it
    serialises exactly as before."""

    @dataclasses.dataclass(frozen=True)
    class Extended(ledger.IterationRecord):
        opened_references: list[str] | None = ledger.optional()

    plain = ledger.IterationRecord(**_RECORD_INPUT).to_json()
    assert Extended(**_RECORD_INPUT).to_json() == plain
    opened = Extended(**_RECORD_INPUT, opened_references=["ralph/references/db.md"]).to_json()
    assert list(opened) == [*plain, "opened_references"]


@pytest.mark.parametrize(
    ("full", "used"), [(0, 0), (0, 10), (3, 1), (400, 100), (100, 150), (7, 7), (1000, 1)]
)
def test_saved_pct_is_the_one_rule_every_caller_had(full: int, used: int) -> None:
    exact = 100.0 * (full - used) / full if full else 0.0
    assert ledger.saved_pct(full, used, digits=None) == exact
    assert ledger.saved_pct(full, used) == round(exact, 1)
    t = ledger.totals([{"event": "iteration", "prompt_tokens": used, "full_history_tokens": full}])
    assert t.saved_pct == exact and t.as_dict()["saved_pct"] == round(exact, 1)


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


def test_records_mask_values_learned_elsewhere_and_keep_their_lines(tmp_path: Path) -> None:
    """The ledger masks a value the run's transcript learned behind a label, and a key block
    cut short in one record masks only that string, never the records after it."""
    from orchestrator.redact import MASK, Redactor, forget

    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYLEDGER0001"
    path = tmp_path / "ledger.jsonl"
    try:
        Redactor(env={})(json.dumps({"content": f"AWS_SECRET_ACCESS_KEY={value}\nX=1"}))
        with ledger.Ledger(path, run_id="r1") as lg:
            lg.event("note", error=f"failed: {value}")
            lg.event("note", error="openssl: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAK", n=1)
            lg.event("note", error="next record", n=2)
    finally:
        forget()
    records = ledger.read(path)
    assert not records.skipped
    assert [r["error"] for r in records] == [
        f"failed: {MASK}",
        f"openssl: {MASK}",
        "next record",
    ]
    assert records[1]["n"] == 1 and value not in path.read_text()


# JSON that is not a record: a field readers rely on has a type they cannot use.
WRONG_TYPES = [
    '{"event":"iteration","run_id":"r1","iteration":1,"story_id":["a"],'
    '"prompt_tokens":"many","selected_references":"abc"}',
    '{"event":"iteration","run_id":5,"iteration":"x"}',
    '{"event":"iteration","run_id":"r1","iteration":true}',
    '{"event":"iteration","run_id":"r1","usage":{"input_tokens":"3"}}',
    '{"event":"limit_wait","run_id":"r1","waited_s":"long"}',
    '{"event":"iteration","run_id":"r1","cost_usd":1e400}',
    '{"event":"iteration","run_id":"r1","prompt_tokens":' + "9" * 400 + "}",
    '{"run_id":"r1","iteration":1}',
    "[1, 2]",
]


@pytest.mark.parametrize("line", WRONG_TYPES)
def test_a_record_with_wrong_types_is_skipped_as_damaged(tmp_path: Path, line: str) -> None:
    path = tmp_path / "ledger.jsonl"
    good = json.dumps({"event": "iteration", "run_id": "r1", **_it(1)})
    path.write_text(f"{good}\n{line}\n")
    records = ledger.read(path)
    assert records == [json.loads(good)] and records.skipped == [2]
    assert "skipped 1 damaged line(s) (line 2)" in records.skipped_note()
    assert ledger.totals(records).prompt_tokens == 100


def test_status_compact_and_report_skip_records_with_wrong_types(tmp_path: Path) -> None:
    from run_helpers import RALPH, env, make_project

    root = make_project(tmp_path / "p", 1)
    assert subprocess.run([*RALPH, "run", "--tool", "sim"], cwd=root, env=env()).returncode == 0
    path = root / "ralph" / "logs" / "ledger.jsonl"
    run_id = json.loads(path.read_text().splitlines()[0])["run_id"]
    n = len(path.read_text().splitlines())
    odd = '"story_id":"US-001","missed_references":[1],"opened_references":{"a":1}}'
    bad = [*WRONG_TYPES[:2], WRONG_TYPES[0].replace('"r1"', json.dumps(run_id))]
    bad.append(WRONG_TYPES[2].replace("true}", f"2,{odd}"))
    with path.open("a") as f:
        f.write("\n".join(bad) + "\n")
    report = ["report", str(path), "--out", str(tmp_path / "r")]
    # `prompt` reads the last stories' records for the prior (memory/usage.py).
    for args in (["status"], ["compact"], ["prompt", "--story", "US-001"], report):
        proc = subprocess.run([*RALPH, *args], cwd=root, env=env(), capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stdout + proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert (
        "4 damaged line(s) skipped"
        in subprocess.run(
            [*RALPH, "status"], cwd=root, env=env(), capture_output=True, text=True
        ).stdout
    )
    lines = ", ".join(str(n + i) for i in (1, 2, 3, 4))
    assert f"skipped 4 damaged line(s) (line {lines})" in proc.stderr
