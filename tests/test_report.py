"""The A/B report's numbers come from the ledgers, and the chart is a real PNG."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import InputError
from orchestrator.reports import report


def _ledger(path: Path, mode: str, prompts: list[int], run_id: str = "r1") -> Path:
    lines = [{"event": "run_start", "run_id": "old"}]
    # An older run in the same ledger must be ignored by default.
    lines.append({"event": "iteration", "run_id": "old", "iteration": 1, "prompt_tokens": 10**6})
    lines.append({"event": "run_start", "run_id": run_id})
    for i, p in enumerate(prompts, start=1):
        lines.append(
            {
                "event": "iteration",
                "run_id": run_id,
                "iteration": i,
                "story_id": f"US-{i:03d}",
                "mode": mode,
                "agent": "sim",
                "prompt_tokens": p,
                "full_history_tokens": p * 3,
                "usage": {
                    "input_tokens": p,
                    "output_tokens": 100,
                    "cache_read_tokens": 50,
                    "cache_write_tokens": 5,
                },
                "cost_usd": p / 1000,
                "duration_s": 2.0,
                "outcome": "passed" if i < len(prompts) else "no_progress",
                "checks": {"ok": i != 2},
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_compare_numbers_match_the_ledgers(tmp_path: Path) -> None:
    a = report.load_arm(_ledger(tmp_path / "a.jsonl", "indexed", [1000, 1000, 1000]), "indexed")
    b = report.load_arm(_ledger(tmp_path / "b.jsonl", "full", [1000, 2000, 3000]), "full")
    data = report.compare([a, b])
    ta, tb = (x["totals"] for x in data["arms"])
    assert ta["prompt_tokens"] == 3000 and tb["prompt_tokens"] == 6000
    assert ta["input_tokens"] == 3 * (1000 + 55)
    assert ta["cache_read_tokens"] == 150
    assert ta["stories_completed"] == 2 and ta["iterations"] == 3
    assert ta["check_failures"] == 1
    assert tb["cost_usd"] == pytest.approx(6.0)
    assert data["saving"]["prompt_tokens"]["pct"] == 50.0
    assert data["saving"]["cost_usd"]["pct"] == 50.0
    assert data["saving"]["input_tokens"]["pct"] == pytest.approx(
        round(100 * (6165 - 3165) / 6165, 1)
    )


def test_write_report_renders_markdown_json_and_chart(tmp_path: Path) -> None:
    a = report.load_arm(_ledger(tmp_path / "a.jsonl", "indexed", [900, 950, 1000]), "indexed")
    b = report.load_arm(_ledger(tmp_path / "b.jsonl", "full", [900, 4000, 9000]), "full")
    written = report.write_report([a, b], tmp_path / "out")
    md = written.markdown.read_text()
    assert "| stories passed | 2 | 2 |" in md and "ab-tokens.png" in md
    assert json.loads(written.json.read_text()) == written.data
    assert written.data["arms"][1]["totals"]["prompt_tokens"] == 13900
    width, height = _png_size(written.chart)
    assert width > 600 and height > 300
    assert written.chart.stat().st_size > 10_000  # lines, labels and legends were drawn


def test_report_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    la = _ledger(tmp_path / "a.jsonl", "indexed", [100, 100])
    lb = _ledger(tmp_path / "b.jsonl", "full", [100, 300])
    code = main(["report", f"indexed={la}", f"full={lb}", "--out", str(tmp_path / "r")])
    assert code == 0
    out = capsys.readouterr().out
    assert "prompt tokens 50.0%" in out
    # The totals table itself, not just the saving line under it.
    assert re.search(r"stories passed\s+│\s+1\s+│\s+1\s+│", out), out
    assert re.search(r"prompt tokens \(est\.\)\s+│\s+200\s+│\s+400\s+│", out), out
    assert (tmp_path / "r" / "ab-tokens.png").is_file()


def test_bad_ledger_line_is_skipped_and_counted(tmp_path: Path) -> None:
    bad = tmp_path / "ledger.jsonl"
    bad.write_text('{"event": "run_start"}\nnot json\n')
    arm = report.load_arm(bad)
    assert arm.skipped_lines == 1
    assert "ledger.jsonl: skipped 1 damaged line(s) (line 2)" in arm.skipped_note
    with pytest.raises(InputError, match="no such ledger"):
        report.load_arm(tmp_path / "missing.jsonl")
