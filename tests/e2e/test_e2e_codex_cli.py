"""The real Codex CLI (`codex exec --json`), driven offline by the scripted Responses API.

Codex 0.171 gives the model one freeform `exec` tool (JavaScript calling
`tools.exec_command` / `tools.apply_patch`); the scripted server answers with those calls,
codex runs them for real in a real git repo, and `turn.completed` reports the usage we sent."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_support import codex_env, commit_subjects, init_repo, json_lines, run_pty
from fake_openai import Fail, FakeOpenAI, Patch, Shell, Text

PRD = {
    "project": "Demo",
    "branchName": "ralph/demo",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add greeting module",
            "description": "greet()",
            "acceptanceCriteria": ["greet() returns Hello"],
            "priority": 1,
            "passes": False,
            "notes": "",
        },
    ],
}
HEADER = "# Ralph Progress Log\nStarted: Mon Nov 30 2026\n---\n"
# Git writes under .git, which codex's workspace-write sandbox mounts read-only, so Ralph-style
# runs (the agent commits) need the bypass flag, as with Claude's skip-permissions.
CODEX_ARGS = [
    "exec",
    "--json",
    "--skip-git-repo-check",
    "--dangerously-bypass-approvals-and-sandbox",
]


def _story_script() -> list:
    return [
        Shell("cat prd.json progress.txt"),
        Patch(
            "*** Begin Patch\n*** Add File: greet.py\n+def greet():\n+    return 'Hello'\n"
            "*** End Patch\n"
        ),
        Shell(
            "git add -A && git commit -q -m 'feat: US-001 - Add greeting module' "
            "&& git log --oneline | head -1"
        ),
        Patch(
            '*** Begin Patch\n*** Update File: prd.json\n@@\n-      "passes": false,\n'
            '+      "passes": true,\n*** End Patch\n'
        ),
        Shell("printf '## 2026-11-30 - US-001\\n- Added greet.py\\n---\\n' >> progress.txt"),
        Text("US-001 done. <promise>COMPLETE</promise>"),
    ]


def _repo(tmp_path: Path) -> Path:
    return init_repo(
        tmp_path / "demo", {"prd.json": json.dumps(PRD, indent=2) + "\n", "progress.txt": HEADER}
    )


def test_codex_runs_a_story_against_the_scripted_api(tmp_path, cli_home, codex_bin):
    repo = _repo(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001 from prd.json.\n")
    with FakeOpenAI({"US-001": _story_script()}, cached_ratio=0.5) as api:
        code, out = run_pty(
            [codex_bin, *CODEX_ARGS, *api.provider_args(), "-"],
            cwd=repo,
            stdin_path=prompt,
            env=codex_env(cli_home, codex_bin),
        )
    events = json_lines(out)
    assert code == 0, out[-2000:]
    assert [e["type"] for e in events][:2] == ["thread.started", "turn.started"]
    done = events[-1]
    assert done["type"] == "turn.completed"
    messages = [
        e["item"]["text"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    assert messages == ["US-001 done. <promise>COMPLETE</promise>"]
    commands = [
        e["item"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"
    ]
    assert len(commands) == 3 and all(c["exit_code"] == 0 for c in commands)

    assert (repo / "greet.py").read_text() == "def greet():\n    return 'Hello'\n"
    assert commit_subjects(repo) == ["feat: US-001 - Add greeting module", "initial"]
    assert json.loads((repo / "prd.json").read_text())["userStories"][0]["passes"] is True
    assert (
        (repo / "progress.txt")
        .read_text()
        .endswith("## 2026-11-30 - US-001\n- Added greet.py\n---\n")
    )

    reqs = api.main_requests()
    assert [r.turn for r in reqs] == list(range(6)) and all(r.story_id == "US-001" for r in reqs)
    assert '"passes": false' in reqs[1].last_output()  # the real `cat` output came back
    usage = done["usage"]
    assert usage["input_tokens"] == sum(r.usage["input_tokens"] for r in reqs)
    assert usage["cached_input_tokens"] == sum(
        r.usage["input_tokens_details"]["cached_tokens"] for r in reqs
    )
    assert usage["cached_input_tokens"] > 0
    assert usage["output_tokens"] == sum(r.usage["output_tokens"] for r in reqs)


def test_codex_reports_a_usage_limit(tmp_path, cli_home, codex_bin):
    repo = _repo(tmp_path)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Implement story US-001.\n")
    with FakeOpenAI({"US-001": [Fail(resets_in=3600)]}) as api:
        code, out = run_pty(
            [codex_bin, *CODEX_ARGS, *api.provider_args(), "-"],
            cwd=repo,
            stdin_path=prompt,
            env=codex_env(cli_home, codex_bin),
        )
    events = json_lines(out)
    assert code == 1
    failed = events[-1]
    assert failed["type"] == "turn.failed"
    assert "hit your usage limit" in failed["error"]["message"]
    assert "Try again at" in failed["error"]["message"]
    assert [r.status for r in api.main_requests()] == [429]  # a usage limit is not retried
