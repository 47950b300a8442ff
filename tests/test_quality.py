"""Quality beside cost: figures from real ledgers and real agent streams."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env, make_project  # noqa: E402

from orchestrator.reports import quality  # noqa: E402


def _assistant(name: str, args: dict) -> str:
    block = {"type": "tool_use", "id": "t", "name": name, "input": args}
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


def test_stream_reads_tell_whole_reads_from_index_only_reads() -> None:
    lines = [
        _assistant("Read", {"file_path": "/p/scripts/ralph/progress.txt", "limit": 12}),
        _assistant("Read", {"file_path": "/p/scripts/ralph/progress.txt"}),
        _assistant("Bash", {"command": "cat scripts/ralph/progress.txt"}),
        _assistant("Bash", {"command": "head -n 20 scripts/ralph/progress.txt"}),
        _assistant("Read", {"file_path": "/p/ralph/references/auth.md"}),
        json.dumps(
            {
                "type": "item.completed",
                "item": {"type": "command_execution", "command": "cat ralph/references/db.md"},
            }
        ),
        _assistant("Bash", {"command": "cat >> scripts/ralph/progress.txt <<'EOF'\nx\nEOF"}),
        _assistant("Bash", {"command": "git add -A -- ralph/references/x.md && git commit"}),
        "not json at all",
    ]
    reads = quality.stream_reads("\n".join(lines))
    assert reads.progress_full_reads == 2  # the limited Read and `head` are index-only
    assert reads.references == ["/p/ralph/references/auth.md", "ralph/references/db.md"]


def test_ledger_figures_retries_and_false_completions(tmp_path: Path) -> None:
    ledger = tmp_path / "logs" / "ledger.jsonl"
    it = {"event": "iteration", "run_id": "r", "mode": "indexed"}
    records = [
        {"event": "run_start", "run_id": "r", "ts": "2026-12-01T10:00:00Z"},
        {**it, "story_id": "A", "outcome": "passed", "checks": {"ok": True}},
        {"event": "transient_retry", "run_id": "r"},
        {"event": "limit_wait", "run_id": "r"},
        {
            **it,
            "story_id": "B",
            "outcome": "failed",
            "completion": "false",
            "checks": {"ok": False, "restored": True},
        },  # noqa: E501
        {**it, "story_id": "B", "outcome": "passed", "checks": {"ok": True}},
        {"event": "run_end", "run_id": "r", "ts": "2026-12-01T10:01:30Z"},
    ]
    q = quality.run_quality(records, ledger)
    assert q["stories_passed"] == 2 and q["iterations"] == 3
    assert q["iterations_per_passed_story"] == 1.5
    assert (q["check_failures"], q["restores"], q["retries"], q["false_completions"]) == (
        1,
        1,
        2,
        1,
    )
    assert q["wall_time_s"] == 90.0
    assert q["memory_misses"] is None  # no transcripts: unknown, not zero


def test_report_counts_what_a_real_sim_run_did(tmp_path: Path) -> None:
    """A real `ralph run` whose agent damages progress.txt and claims completion early:
    `ralph report` shows the restore, the failed check and the false completion, and counts
    the agent's reads from the real stream."""
    root = make_project(
        tmp_path / "p",
        3,
        config={"mode": "indexed"},
        sim_env={
            "RALPH_SIM_FAULT": "truncate-progress,early-sentinel",
            "RALPH_SIM_FAULT_STORY": "US-002",
        },
    )
    run = subprocess.run(
        [*RALPH, "run", "--tool", "sim", "3"],
        cwd=root,
        env=env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ledger = root / "ralph" / "logs" / "ledger.jsonl"
    out = tmp_path / "rep"
    res = subprocess.run(
        [*RALPH, "report", f"indexed={ledger}", "--out", str(out)],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    [arm] = json.loads((out / "ab-report.json").read_text())["arms"]
    t = arm["totals"]
    assert t["stories_passed"] == 3 and t["iterations"] == 3
    assert t["restores"] == 1 and t["check_failures"] >= 1 and t["false_completions"] == 1
    assert t["streams_read"] == 3 and t["memory_misses"] is not None
    md = (out / "ab-report.md").read_text()
    assert "| false completions | 1 |" in md and "| restores (lost memory put back) | 1 |" in md
    assert "memory misses" in res.stdout
