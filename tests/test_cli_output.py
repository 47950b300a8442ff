"""What a new user sees in a terminal: warnings on stderr for every command, `ralph status` at
80 columns, `ralph report`'s default folder, agent lines with project-relative paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pexpect
from run_helpers import RALPH, env, make_project, ralph

from orchestrator import ledger
from orchestrator.agents import runner


def test_config_warnings_go_to_stderr_for_every_command(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    with (root / "ralph.yaml").open("a") as f:
        f.write("bogus_key: 1\n")
    for args in (["status"], ["status", "--json"], ["check"], ["prompt"]):
        res = ralph(root, *args)
        assert "bogus_key" not in res.stdout, args
        assert "ralph: warning: ralph.yaml: unknown key 'bogus_key'" in res.stderr, args
    json.loads(ralph(root, "status", "--json").stdout)  # stdout stays pure JSON


def test_output_that_is_not_utf8_shows_question_marks_not_a_traceback(tmp_path: Path) -> None:
    """A pipe or terminal in ASCII or Latin-1 cannot show "·" or "…": the command still
    prints everything else and exits 0."""
    root = make_project(tmp_path / "p", 1)
    for encoding, dot in (("ascii", "?"), ("latin-1", "·")):
        res = subprocess.run(
            [*RALPH, "status"], cwd=root, env=env(PYTHONIOENCODING=encoding), capture_output=True
        )
        out, err = res.stdout.decode(encoding), res.stderr.decode(encoding)
        assert res.returncode == 0, err
        assert f"stories: 0/1 passed {dot} next: US-001" in out
        assert "Traceback" not in err and "internal error" not in err


def test_status_at_80_columns_keeps_every_column(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    refs = root / "ralph" / "references"
    refs.mkdir(parents=True)
    long_name = "a-rather-long-reference-name-about-the-database-migrations-and-seeding.md"
    (refs / long_name).write_text("# Migrations\n- run them in order\n")
    res = ralph(root, "status", COLUMNS="80")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    head = next(line for line in lines if line.split()[:1] == ["topic"])
    assert head.split() == ["topic", "tokens", "path", "note"]
    table = lines[lines.index(head) : lines.index(head) + 3]
    assert all(len(line) <= 80 for line in table)
    row = next(line for line in table if "ralph/references/a-rather" in line)
    assert "…" in row and long_name not in row  # shortened visibly, not cut silently


def test_report_writes_into_the_log_folder_by_default(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    paths = []
    for name in ("indexed", "full"):
        path = tmp_path / f"{name}.jsonl"
        with ledger.Ledger(path, run_id=name) as led:
            led.event("run_start", mode=name, agent="sim")
            led.iteration(
                {"iteration": 1, "story_id": "US-001", "outcome": "passed", "prompt_tokens": 100}
            )
        paths.append(f"{name}={path}")
    before = set(root.iterdir())
    res = ralph(root, "report", *paths)
    assert res.returncode == 0, res.stderr
    assert set(root.iterdir()) == before | ({root / "ralph"} - before)
    (written,) = (root / "ralph" / "logs").glob("report-*/ab-report.md")
    assert str(written.relative_to(root)) in res.stdout.replace(str(root) + "/", "")


def test_agent_lines_show_paths_relative_to_the_project(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    res = ralph(root, "run", "--tool", "sim")
    assert res.returncode == 0, res.stderr
    assert "⏺ Read scripts/ralph/prd.json" in res.stdout
    assert f"⏺ Read {root}" not in res.stdout


def test_tool_lines_use_the_terminal_width(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    child = pexpect.spawn(
        sys.executable,
        [*RALPH[1:], "run", "--tool", "sim"],
        cwd=str(root),
        env=env(COLUMNS="200", LINES="50"),
        encoding="utf-8",
        dimensions=(50, 200),
        timeout=120,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    text = child.before
    lines = [runner.clean_line(line) for line in text.replace("\r\n", "\n").split("\n")]
    bash = [line.strip() for line in lines if line.strip().startswith("⏺ Bash: cat >>")]
    assert bash, text[-2000:]
    # Cut at the terminal's width (200), not at the old fixed 120 characters.
    assert all(len(line) > 130 for line in bash), bash
