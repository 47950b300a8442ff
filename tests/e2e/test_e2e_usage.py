"""Learning from use, end to end: the real Claude Code (and Codex) CLI, scripted API on
loopback, opens a reference the prompt did not inline. `ralph run 1` records the miss in the
ledger (read from the CLI's own stream), `ralph status` and `ralph report` show it, and the
next story's prompt, built from that ledger, inlines the missed reference where relevant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import story_project as sp
from e2e_support import (
    claude_env,
    codex_env,
    git,
    iterations,
    json_lines,
    ralph_argv,
    read_ledger,
    run_pty,
)
from fake_anthropic import FakeAnthropic, ToolUse
from fake_openai import FakeOpenAI, Shell

SUBTRACTION = f"{sp.REFS_DIR}/subtraction.md"
INTEGERS = f"{sp.REFS_DIR}/integer-inputs.md"
# Two references already in the memory. Neither story-text nor tags tie "Integer inputs" to
# US-001 (the selector leaves it out: a miss when opened), and it matches US-002 only weakly
# (one word), under the relevance cut-off unless a recent miss lifts it.
REFERENCES = {
    SUBTRACTION: "# Subtraction\n"
    "- [US-010] calc.sub subtracts: subtraction order is a minus b\n"
    "- [US-010] subtraction of equal numbers returns 0\n",
    INTEGERS: "# Integer inputs\n"
    "- [US-011] inputs are ints; a subtraction result may be negative, keep it an int\n"
    "- [US-012] never coerce inputs to float\n",
}
ROWS = f"| Subtraction | {SUBTRACTION} |\n| Integer inputs | {INTEGERS} |\n"


def _project(repo: Path, tool: str = "claude", **extra: Any) -> Path:
    sp.make_project(repo, tool, **extra)
    for rel, text in REFERENCES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    progress = repo / sp.RALPH_DIR / "progress.txt"
    progress.write_text(progress.read_text() + ROWS)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "memory: two references")
    return repo


def _open_integers(story: sp.Story, turns: list) -> list:
    """US-001's agent also opens the Integer inputs reference: through a `./` path, as the
    agent may name it; the read is real (the CLI runs it)."""
    if story.id != "US-001":
        return turns
    read = ToolUse("Read", {"file_path": f"./{INTEGERS}"}, text="Checking the conventions.")
    return [turns[0], read, *turns[1:]]


def _accounting(repo: Path, env: dict[str, str], story: str) -> dict[str, Any]:
    code, out = run_pty(ralph_argv("prompt", "--story", story, "--json"), cwd=repo, env=env)
    assert code == 0, out
    data: dict[str, Any] = json.loads(out[out.index("{") :])
    return data


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_reference_opened_though_not_inlined_is_a_recorded_miss(tmp_path, cli_home, claude_bin):
    repo = _project(tmp_path / "calc")
    script = sp.claude_script(repo, edit=_open_integers)
    with FakeAnthropic(script, resolve_story=sp.claude_resolver) as api:
        env = claude_env(cli_home, api.base_url, claude_bin)
        before = _accounting(repo, env, "US-002")["selected"]
        code, out = run_pty(ralph_argv("run", "--tool", "claude", "1"), cwd=repo, env=env)
        # The miss came from the real CLI: it sent the file's text back as the tool result.
        reqs = api.main_requests("US-001")
        assert "never coerce inputs to float" in reqs[2].last_tool_result()
    assert code == 1 and "max iterations" in out, out[-3000:]  # 1 of 3 stories done

    [rec] = iterations(read_ledger(repo))
    assert rec["outcome"] == "passed" and rec["agent"] == "claude"
    assert rec["selected_references"] == [SUBTRACTION]  # matches "calc"; Integer inputs not
    assert rec["opened_references"] == [INTEGERS]
    assert rec["missed_references"] == [INTEGERS]
    assert rec["untouched_references"] == [SUBTRACTION]  # inlined, neither opened nor edited
    assert rec["progress_reads"] == 0  # the agent read only the index (limit 20)

    code, status = run_pty(ralph_argv("status"), cwd=repo, env=env, timeout=60)
    assert code == 0, status
    assert "missed: 1 (Integer inputs)" in status and "untouched 1" in status
    print("\n" + next(ln for ln in status.splitlines() if "missed:" in ln))

    ledger = repo / "ralph" / "logs" / "ledger.jsonl"
    code, rep = run_pty(
        ralph_argv("report", f"indexed={ledger}", "--out", str(tmp_path / "rep")),
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert code == 0, rep
    [arm] = json.loads((tmp_path / "rep" / "ab-report.json").read_text())["arms"]
    assert arm["totals"]["references_opened_not_inlined"] == 1

    # The prior: the next story's prompt, from the same ledger, now inlines the reference's
    # relevant item (the one about subtraction), not its unrelated one.
    assert INTEGERS not in before
    after = _accounting(repo, env, "US-002")
    assert INTEGERS in after["selected"] and SUBTRACTION in after["selected"]
    row = next(r for r in after["considered"] if r["path"] == INTEGERS)
    assert row["prior"] == 1.0 and row["taken_items"] == 1  # missed by the story just before
    code, prompt = run_pty(ralph_argv("prompt", "--story", "US-002"), cwd=repo, env=env)
    assert "a subtraction result may be negative" in prompt
    assert "never coerce inputs to float" not in prompt


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_codex_exec_commands_that_read_a_reference_are_a_miss_too(tmp_path, cli_home, codex_bin):
    """The same with the real Codex CLI: its `command_execution` items name the shell
    command it ran (`sed -n` of the reference: a partial read is still an opening)."""

    def peek(turns: list) -> list:
        return [turns[0], Shell(f"sed -n 1,20p {INTEGERS}"), *turns[1:]]

    with FakeOpenAI(sp.codex_script(edit=peek), resolve_story=sp.codex_resolver) as api:
        repo = _project(tmp_path / "calc", "codex", agents={"codex": {"args": api.provider_args()}})
        env = codex_env(cli_home, codex_bin)
        code, out = run_pty(ralph_argv("run", "1"), cwd=repo, env=env, timeout=240)
    assert code == 1 and "max iterations" in out, out[-3000:]
    [rec] = iterations(read_ledger(repo))
    assert rec["outcome"] == "passed" and rec["agent"] == "codex"
    transcript = (repo / rec["transcript"]).read_text()
    commands = [
        e["item"]["command"]
        for e in json_lines(transcript)
        if e.get("type") == "item.completed" and e["item"].get("type") == "command_execution"
    ]
    assert any(INTEGERS in c for c in commands), commands
    print("\ncodex commands:", commands[:2])
    assert rec["selected_references"] == [SUBTRACTION]
    assert rec["missed_references"] == [INTEGERS]
    assert rec["untouched_references"] == [SUBTRACTION]
    assert rec["progress_reads"] == 0  # `head -20` of progress.txt: the index only
    code, status = run_pty(ralph_argv("status"), cwd=repo, env=env, timeout=60)
    assert code == 0 and "missed: 1 (Integer inputs)" in status, status


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_codex_reads_in_a_workdir_patterns_and_partial_index_reads(tmp_path, cli_home, codex_bin):
    """The real Codex CLI runs `cat integer-inputs.md` with `workdir: ralph/references`; its
    JSON item names only `/bin/bash -lc 'cat integer-inputs.md'` (no workdir), and the miss
    is still recorded. A grep whose pattern names a reference reads no reference; the index
    read through `nl | sed -n` and a glob over the folder (opens both, misses none) add
    no miss and no whole read of progress.txt."""
    progress = f"{sp.RALPH_DIR}/progress.txt"

    def peek(turns: list) -> list:
        return [
            turns[0],
            Shell(f"nl -ba {progress} | sed -n '1,8p'"),
            Shell(f"grep -n '{SUBTRACTION}' {progress}"),
            Shell("cat ralph/references/*.md | head -3"),
            Shell("cat integer-inputs.md", workdir=sp.REFS_DIR),
            *turns[1:],
        ]

    with FakeOpenAI(sp.codex_script(edit=peek), resolve_story=sp.codex_resolver) as api:
        repo = _project(tmp_path / "calc", "codex", agents={"codex": {"args": api.provider_args()}})
        env = codex_env(cli_home, codex_bin)
        code, out = run_pty(ralph_argv("run", "1"), cwd=repo, env=env, timeout=240)
    assert code == 1 and "max iterations" in out, out[-3000:]
    [rec] = iterations(read_ledger(repo))
    transcript = (repo / rec["transcript"]).read_text()
    items = [
        e["item"]
        for e in json_lines(transcript)
        if e.get("type") == "item.completed" and e["item"].get("type") == "command_execution"
    ]
    ran = next(i for i in items if "cat integer-inputs.md" in i["command"])
    assert "never coerce inputs to float" in ran["aggregated_output"]  # it ran in the folder
    assert not {"workdir", "cwd"} & set(ran), ran  # and the item does not say where
    assert rec["selected_references"] == [SUBTRACTION]
    assert rec["opened_references"] == [INTEGERS, SUBTRACTION]  # the glob, sorted
    assert rec["missed_references"] == [INTEGERS]  # the workdir read, not the glob's
    assert rec["untouched_references"] == []
    assert rec["progress_reads"] == 0


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_claude_reading_references_by_glob_and_search_opens_them_without_misses(
    tmp_path, cli_home, claude_bin
):
    """The real Claude Code CLI: `cat ralph/references/*.md` and a Grep over the folder are
    sweeps (every reference read, none missed: the agent searched rather than looked for a
    topic); the reference the story writes meanwhile is not credited to them."""
    repo = _project(tmp_path / "calc")

    def edit(story: sp.Story, turns: list) -> list:
        if story.id != "US-001":
            return turns
        glob = ToolUse("Bash", {"command": "cat ralph/references/*.md"}, text="All of them.")
        grep = ToolUse("Grep", {"pattern": "float", "path": sp.REFS_DIR}, text="Searching.")
        return [turns[0], glob, grep, *turns[1:]]

    with FakeAnthropic(sp.claude_script(repo, edit=edit), resolve_story=sp.claude_resolver) as api:
        env = claude_env(cli_home, api.base_url, claude_bin)
        code, out = run_pty(ralph_argv("run", "--tool", "claude", "1"), cwd=repo, env=env)
        results = [r.last_tool_result() for r in api.main_requests("US-001")[2:4]]
    assert code == 1 and "max iterations" in out, out[-3000:]
    assert "never coerce inputs to float" in results[0]  # the CLI ran the glob
    [rec] = iterations(read_ledger(repo))
    # The inlined reference the sweep read is listed; the other one is a count.
    assert rec["opened_references"] == [SUBTRACTION] and rec["swept_references"] == 1
    assert rec["missed_references"] == []
    assert rec["untouched_references"] == []
    code, status = run_pty(ralph_argv("status"), cwd=repo, env=env, timeout=60)
    used = "references used: opened 1 (+1 by searches of the folder) · missed: 0 · untouched 0"
    assert code == 0 and used in status, status
