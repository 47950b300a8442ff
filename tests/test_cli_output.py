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


HOSTILE_TITLE = "API\x1b]0;PWNED\x07\x1b[2J"
HOSTILE_ID = "US-001\x1b[8m"
# What the terminal gets instead: the same text, escaped.
SHOWN_TITLE = "API\\x1b]0;PWNED\\x07\\x1b[2J"
SHOWN_ID = "US-001\\x1b[8m"
RAW = ("\x1b]0;PWNED", "\x1b[2J", "\x1b[8m", "\x07", "\x9b")


def _hostile_project(root: Path) -> Path:
    make_project(root, 2)
    path = root / "scripts" / "ralph" / "prd.json"
    prd = json.loads(path.read_text())
    prd["userStories"][0].update(id=HOSTILE_ID, title=HOSTILE_TITLE)
    prd["userStories"][1]["title"] = "C1 CSI \x9b2J and a CR\roverwrite"
    path.write_text(json.dumps(prd, indent=2) + "\n")
    subprocess.run(["git", "commit", "-qam", "hostile"], cwd=root, check=True)
    return root


def test_control_characters_from_prd_json_never_reach_the_terminal(tmp_path: Path) -> None:
    root = _hostile_project(tmp_path / "p")
    before = ralph(root, "status")
    assert before.returncode == 0, before.stderr
    assert f"next: {SHOWN_ID} {SHOWN_TITLE}" in before.stdout
    # On a terminal (banner, live status line, agent lines, summary, end-of-run table), where
    # rich adds its own codes: the hostile ones are shown escaped.
    child = pexpect.spawn(
        sys.executable,
        [*RALPH[1:], "run", "--tool", "sim", "1"],
        cwd=str(root),
        env=env(COLUMNS="200", LINES="50"),
        encoding="utf-8",
        dimensions=(50, 200),
        timeout=120,
    )
    child.expect(pexpect.EOF)
    child.close()
    tty = child.before
    assert f"Ralph Iteration 1 of 1 (sim) · {SHOWN_ID}" in tty
    assert f"▶ {SHOWN_ID} · iteration 1/1" in tty and f"{SHOWN_ID} passed" in tty
    assert f"is done: {SHOWN_TITLE}" in tty  # the agent's own line
    after = ralph(root, "status")
    assert "next: US-002 C1 CSI \\x9b2J and a CR\\x0doverwrite" in after.stdout
    piped = ralph(root, "run", "--tool", "sim", "1")
    assert piped.returncode == 0, piped.stdout + piped.stderr
    err = ralph(root, "prompt", "--story", "X\x1b[2J")
    assert err.returncode == 2 and "X\\x1b[2J" in err.stderr
    saved = ralph(root, "savings")  # reads the progress log the hostile story wrote to
    assert saved.returncode == 0, saved.stdout + saved.stderr
    checked = ralph(root, "check")
    for out in (tty, *(p.stdout + p.stderr for p in (before, after, piped, err, saved, checked))):
        assert not [c for c in RAW if c in out], out
        assert "\roverwrite" not in out


def test_control_characters_in_index_topics_are_escaped_by_status_and_compact(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "p", 1, config={"references": {"max_tokens": 20}})
    refs = root / "ralph" / "references"
    refs.mkdir(parents=True)
    (refs / "db.md").write_text("# Database\n\n" + "- a learning about the schema\n" * 20)
    (root / "scripts" / "ralph" / "progress.txt").write_text(
        "# Ralph Progress Log\n\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
        "| Database\x1b[2J\x9b8m and migrations | ralph/references/db.md |\n\n---\n"
    )
    shown = "Database\\x1b[2J\\x9b8m and migrations"
    status = ralph(root, "status", "--all")
    compact = ralph(root, "compact")
    assert status.returncode == 0 and compact.returncode == 0, status.stderr + compact.stderr
    assert "Database\\x1b[2J" in status.stdout  # the table cell (may be cut at its width)
    assert f"condense: {shown} (ralph/references/db.md)" in compact.stdout
    for proc in (status, compact):
        assert not [c for c in RAW if c in proc.stdout + proc.stderr], proc.stdout
