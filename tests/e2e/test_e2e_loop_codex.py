"""`ralph run --tool codex` end to end: our loop, the real Codex CLI on a real pty, the scripted
Responses API on loopback (a custom model provider set through ralph.yaml agents.codex.args),
a real git repo."""

from __future__ import annotations

import json
from pathlib import Path

import story_project as sp
from e2e_support import (
    codex_env,
    commit_subjects,
    iterations,
    json_lines,
    processes_in,
    ralph_argv,
    read_ledger,
    run_pty,
)
from fake_openai import Fail, FailFirst, FakeOpenAI, Hang


def _project(tmp_path: Path, api: FakeOpenAI, stories: list[sp.Story], **extra) -> Path:
    # The provider flags live in ralph.yaml, where a user would put them.
    return sp.make_project(
        tmp_path / "calc",
        "codex",
        stories=stories,
        agents={"codex": {"args": api.provider_args()}},
        **extra,
    )


def _run(repo: Path, cli_home: Path, codex_bin: str, *args: str) -> tuple[int, str]:
    return run_pty(
        ralph_argv("run", *args), cwd=repo, env=codex_env(cli_home, codex_bin), timeout=240
    )


def _prd_passes(repo: Path) -> list[bool]:
    prd = json.loads((repo / sp.RALPH_DIR / "prd.json").read_text())
    return [s["passes"] for s in prd["userStories"]]


def test_codex_stories_end_to_end(tmp_path, cli_home, codex_bin):
    stories = sp.STORIES[:2]
    with FakeOpenAI(
        sp.codex_script(stories), resolve_story=sp.codex_resolver, cached_ratio=0.5
    ) as api:
        repo = _project(tmp_path, api, stories)
        code, out = _run(repo, cli_home, codex_bin, "--tool", "codex", "4")
    assert code == 0, out[-3000:]
    assert commit_subjects(repo) == [
        "feat: US-002 - Add subtraction",
        "feat: US-001 - Add addition",
        "initial",
    ]
    assert _prd_passes(repo) == [True, True]
    assert "def add(a, b):" in (repo / "calc.py").read_text()
    progress = (repo / sp.RALPH_DIR / "progress.txt").read_text()
    for story in stories:
        assert (repo / sp.ref_path(story)).is_file()
        assert f"| {story.topic} | {sp.ref_path(story)} |" in progress
        assert sp.entry(story) in progress

    recs = iterations(read_ledger(repo))
    assert [(r["story_id"], r["outcome"], r["agent"]) for r in recs] == [
        ("US-001", "passed", "codex"),
        ("US-002", "passed", "codex"),
    ]
    for rec in recs:
        reqs = api.main_requests(rec["story_id"])
        total = sum(r.usage["input_tokens"] for r in reqs)
        cached = sum(r.usage["input_tokens_details"]["cached_tokens"] for r in reqs)
        output = sum(r.usage["output_tokens"] for r in reqs)
        # From the real turn.completed event: OpenAI counts cached tokens inside input.
        done = [
            e
            for e in json_lines((repo / rec["transcript"]).read_text())
            if e.get("type") == "turn.completed"
        ]
        assert done[-1]["usage"]["input_tokens"] == total
        assert rec["usage"] == {
            "input_tokens": total - cached,
            "output_tokens": output,
            "cache_read_tokens": cached,
            "cache_write_tokens": 0,
        }
        assert cached > 0 and rec["cost_usd"] is None  # codex reports no cost
        assert rec["checks"]["ok"] is True and rec["checks"]["findings"] == []
    assert recs[-1]["completion"] == "complete"


def test_codex_usage_limit_waits_and_retries(tmp_path, cli_home, codex_bin):
    stories = sp.STORIES[:1]

    def limit_first(turns: list) -> list:
        # "You've hit your usage limit. Try again later." once, then the story as planned.
        return [FailFirst(1, turns[0], Fail()), *turns[1:]]

    script = sp.codex_script(stories, edit=limit_first)
    with FakeOpenAI(script, resolve_story=sp.codex_resolver) as api:
        repo = _project(tmp_path, api, stories)
        code, out = _run(repo, cli_home, codex_bin, "3")
    assert code == 0, out[-3000:]
    ledger = read_ledger(repo)
    waits = [r for r in ledger if r["event"] == "limit_wait"]
    assert len(waits) == 1 and "usage limit" in waits[0]["raw"]
    assert waits[0]["source"].startswith("no reset time")  # limits.fallback_wait (1 s)
    recs = iterations(ledger)
    assert [(r["story_id"], r["outcome"], r["attempts"]) for r in recs] == [("US-001", "passed", 2)]
    assert [r.status for r in api.main_requests()][0] == 429
    assert _prd_passes(repo) == [True]


def test_codex_usage_limit_beyond_max_wait_stops_the_run(tmp_path, cli_home, codex_bin):
    stories = sp.STORIES[:1]
    with FakeOpenAI({"US-001": [Fail(resets_in=7200)]}, resolve_story=sp.codex_resolver) as api:
        repo = _project(tmp_path, api, stories)
        code, out = _run(repo, cli_home, codex_bin, "3")
    assert code == 3, out[-3000:]  # budget/limit exit code
    assert "limits.max_wait" in out
    assert len(api.main_requests()) == 1
    assert _prd_passes(repo) == [False] and commit_subjects(repo) == ["initial"]


def test_codex_hung_api_hits_the_idle_timeout(tmp_path, cli_home, codex_bin):
    stories = sp.STORIES[:1]

    def hang_first(turns: list) -> list:
        return [FailFirst(1, turns[0], Hang(120)), *turns[1:]]

    with FakeOpenAI(
        sp.codex_script(stories, edit=hang_first), resolve_story=sp.codex_resolver
    ) as api:
        repo = _project(tmp_path, api, stories, timeouts={"idle": 8})
        code, out = _run(repo, cli_home, codex_bin, "3")
        # codex is a node launcher plus a native binary: the whole group must be gone.
        assert processes_in(repo) == []
    assert code == 0, out[-3000:]
    recs = iterations(read_ledger(repo))
    assert [(r["outcome"], r["timed_out"]) for r in recs] == [("timeout", "idle"), ("passed", None)]
    assert 8 <= recs[0]["duration_s"] < 40
    assert _prd_passes(repo) == [True]
