"""Learning from use: what agents opened (their streams, read by their adapters), reconciled
with what the prompt inlined and the agent updated; the prior it gives the selector; its
place in status, reports, the dashboard and compaction. Streams are the real recorded
transcripts in /work/shared/fixtures (or lines derived from them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env  # noqa: E402

from orchestrator.agents.amp import AmpAgent
from orchestrator.agents.base import get_agent
from orchestrator.agents.claude import ClaudeAgent
from orchestrator.agents.codex import CodexAgent
from orchestrator.agents.reads import FileRead, shell_reads, tool_reads
from orchestrator.commands.status import use_line
from orchestrator.memory import usage
from orchestrator.reports import quality, serve
from orchestrator.run import select as sel
from orchestrator.upkeep import compact

FIXTURES = Path(os.environ.get("RALPH_FIXTURES", "/work/shared/fixtures"))
CLAUDE_STORY = FIXTURES / "claude-code" / "story-complete.stream.jsonl"
CODEX_STORY = FIXTURES / "codex" / "message-complete.exec.jsonl"
ROOT = Path("/home/user/demo")  # the recorded session's cwd
REFS = "ralph/references"


def _fixture(path: Path) -> str:
    if not path.is_file():
        pytest.skip(f"recorded transcript {path} not found (set RALPH_FIXTURES)")
    return path.read_text()


def _claude_read_of(path: str, **extra: object) -> str:
    """The recorded session's own Read line (of progress.txt), reading `path` instead."""
    line = next(ln for ln in _fixture(CLAUDE_STORY).splitlines() if "progress.txt" in ln)
    event = json.loads(line)
    event["message"]["content"][0]["input"] = {"file_path": path, **extra}
    return json.dumps(event)


def _fields(
    reads: list[FileRead] | None, inlined: list[str], updated: tuple[str, ...] = ()
) -> dict[str, Any]:
    return usage.ledger_fields(
        reads,
        inlined=inlined,
        updated=updated,
        root=ROOT,
        refs_dir=REFS,
        progress_path="progress.txt",
    )


# ---- the agents' streams ---------------------------------------------------------------------


def test_the_recorded_claude_story_reads_prd_and_the_whole_progress_log() -> None:
    reads = ClaudeAgent().file_reads(_fixture(CLAUDE_STORY))
    assert reads == [
        FileRead("/home/user/demo/prd.json", True),
        FileRead("/home/user/demo/progress.txt", True),
    ]  # Write, Edit and the `git commit` Bash call read nothing
    fields = _fields(reads, inlined=[])
    assert fields == {
        "opened_references": [],
        "missed_references": [],
        "untouched_references": [],
        "progress_reads": 1,  # the whole log, which the indexed template says not to read
    }


def test_claude_reads_of_references_in_every_form_are_one_path_each() -> None:
    text = "\n".join(
        [
            _fixture(CLAUDE_STORY),
            _claude_read_of("/home/user/demo/ralph/references/auth.md"),
            _claude_read_of("./ralph/references/../references/db.md", limit=20),
            _claude_read_of("ralph/references/auth.md", offset=5),
            _claude_read_of("/home/user/other/ralph/references/x.md"),  # another project
            _claude_read_of("../demo2/ralph/references/y.md"),  # leaves the project
            _claude_read_of("/home/user/demo/ralph/referencesx/z.md"),  # not the folder
            _claude_read_of("/home/user/demo/docs/references/w.md"),
            _claude_read_of("/home/user/demo/progress.txt", limit=12),  # the index only
        ]
    )
    fields = _fields(ClaudeAgent().file_reads(text), inlined=["ralph/references/db.md", "ui.md"])
    assert fields["opened_references"] == ["ralph/references/auth.md", "ralph/references/db.md"]
    assert fields["missed_references"] == ["ralph/references/auth.md"]
    # A bare index path names a file in the references folder.
    assert fields["untouched_references"] == ["ralph/references/ui.md"]
    assert fields["progress_reads"] == 1


def test_an_updated_reference_is_not_untouched() -> None:
    fields = _fields([], inlined=[f"{REFS}/a.md", f"{REFS}/b.md"], updated=(f"{REFS}/b.md",))
    assert fields["untouched_references"] == [f"{REFS}/a.md"]
    assert fields["missed_references"] == []


def test_the_recorded_codex_session_ran_no_command_and_read_nothing() -> None:
    text = _fixture(CODEX_STORY)
    assert CodexAgent().file_reads(text) == []  # known: none (not unknown)
    # The same stream with a command item of the shape codex exec prints.
    item = {
        "id": "item_1",
        "type": "command_execution",
        "command": "/bin/bash -lc 'cat ralph/references/db.md && sed -n 1,40p progress.txt'",
        "aggregated_output": "",
        "exit_code": 0,
        "status": "completed",
    }
    started = json.dumps({"type": "item.started", "item": {**item, "status": "in_progress"}})
    done = json.dumps({"type": "item.completed", "item": item})
    reads = CodexAgent().file_reads("\n".join([text, started, done]))
    assert reads == [FileRead("ralph/references/db.md", True), FileRead("progress.txt", False)]
    assert _fields(reads, inlined=[])["missed_references"] == ["ralph/references/db.md"]


def test_amp_streams_claude_shapes_with_its_own_bash_input() -> None:
    block = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "cat ./x/../a.md"}}
    line = json.dumps({"type": "assistant", "message": {"id": "m", "content": [block]}})
    assert AmpAgent().file_reads(line) == [FileRead("./x/../a.md", True)]


def test_gemini_and_opencode_tool_events() -> None:
    gemini = [
        {"type": "init", "session_id": "s1", "model": "gemini-2.5-pro"},
        {
            "type": "tool_use",
            "tool_name": "read_file",
            "tool_id": "t1",
            "parameters": {"absolute_path": "/p/ralph/references/a.md"},
        },
        {
            "type": "tool_use",
            "tool_name": "run_shell_command",
            "tool_id": "t2",
            "parameters": {"command": "head -n 5 progress.txt"},
        },
    ]
    text = "\n".join(json.dumps(e) for e in gemini)
    assert get_agent("gemini", check=False).file_reads(text) == [
        FileRead("/p/ralph/references/a.md", True),
        FileRead("progress.txt", False),
    ]
    # `--output-format json` (one object, no events): nothing is known.
    assert get_agent("gemini", check=False).file_reads('{"response": "hi"}') is None
    part = {"tool": "read", "state": {"status": "completed", "input": {"filePath": "r/a.md"}}}
    bash = {"tool": "bash", "state": {"input": {"command": "cat r/b.md"}}}
    opencode = "\n".join(json.dumps({"type": "tool_use", "part": p}) for p in (part, bash))
    assert get_agent("opencode", check=False).file_reads(opencode) == [
        FileRead("r/a.md", True),
        FileRead("r/b.md", True),
    ]


def test_agents_whose_output_shows_no_tool_calls_know_nothing() -> None:
    agent = get_agent("command", {"command": ["aider", "--yes-always"]}, check=False)
    assert agent.file_reads("cat ralph/references/a.md\n") is None
    assert _fields(agent.file_reads(""), inlined=[f"{REFS}/a.md"]) == {}  # no keys at all


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat a.md | head -3", [("a.md", True)]),
        ("head -n 20 p.txt; tail p.txt", [("p.txt", False), ("p.txt", False)]),
        ("cat >> progress.txt <<'EOF'\ncat b.md\nEOF", []),  # a write and a here-document
        ("cat a.md > b.md 2>/dev/null", [("a.md", True)]),  # the redirect target is written
        ("git add -A -- r/x.md && git commit -m 'cat y.md'", []),
        ('sh -c "grep -n foo r/x.md"', [("r/x.md", False)]),
        ("cat 'unclosed.md", [("'unclosed.md", True)]),
    ],
)
def test_shell_reads(command: str, expected: list[tuple[str, bool]]) -> None:
    assert shell_reads(command) == [FileRead(*e) for e in expected]


def test_tool_reads_of_grep_and_unknown_tools() -> None:
    assert tool_reads("Grep", {"pattern": "x", "path": "r/a.md"}) == [FileRead("r/a.md", False)]
    assert tool_reads("Write", {"file_path": "r/a.md", "content": "x"}) == []
    assert tool_reads("Read", "not a dict") == []


# ---- paths and reconciliation ----------------------------------------------------------------


def test_paths_are_normalised_and_never_leave_the_project() -> None:
    root = Path("/p")
    assert usage.agent_path("/p/ralph/references/a.md", root) == "ralph/references/a.md"
    assert usage.agent_path("./ralph//references/./a.md", root) == "ralph/references/a.md"
    assert usage.agent_path("`ralph\\references\\a.md`", root) == "ralph/references/a.md"
    assert usage.agent_path("ralph/../../etc/passwd", root) is None
    assert usage.agent_path("/p2/ralph/references/a.md", root) is None
    assert usage.agent_path("", root) is None
    assert usage.is_reference("ralph/references/sub/a.md", REFS)
    assert not usage.is_reference("ralph/references/a.txt", REFS)
    assert not usage.is_reference("ralph/references.md", REFS)
    assert not usage.is_reference(None, REFS)


def test_reconcile_is_opened_vs_inlined_vs_updated() -> None:
    use = usage.reconcile(inlined=["a", "b", "c", "a"], opened=["d", "a", "d"], updated=["c", "e"])
    assert use.inlined == ["a", "b", "c"]
    assert use.opened == ["d", "a"]
    assert use.missed == ["d"]
    assert use.untouched == ["b"]


# ---- the prior -------------------------------------------------------------------------------


def _it(story: str, missed: list[str] | None = None, **extra: object) -> dict[str, Any]:
    rec: dict[str, Any] = {"event": "iteration", "story_id": story, "outcome": "passed", **extra}
    if missed is not None:
        rec |= {"opened_references": missed, "missed_references": missed}
    return rec


def test_prior_decays_with_the_stories_since_the_miss() -> None:
    records = [
        _it("US-001", ["r/old.md"]),
        _it("US-002", ["r/a.md"]),
        _it("US-002", ["r/a.md"]),  # a retry of the same story: two misses, one age
        {"event": "limit_wait"},
        _it("US-003", []),
        _it("US-004", ["r/b.md"]),
        _it("US-005"),  # an older ledger's record (no keys): counts as a story, no miss
    ]
    prior = usage.prior_from_ledger(records)
    assert prior["r/b.md"] == pytest.approx(0.5 ** (1 / 3))
    assert prior["r/a.md"] == pytest.approx(min(1.0, 2 * 0.5 ** (3 / 3)))
    assert prior["r/old.md"] == pytest.approx(0.5 ** (4 / 3))
    assert usage.prior_from_ledger(records, horizon=3) == {"r/b.md": prior["r/b.md"]}
    assert usage.prior_from_ledger([_it("US-001"), _it("US-002")]) == {}
    assert usage.prior_of(None) == {}


def test_prior_of_a_ledger_names_references_as_the_index_does(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(json.dumps(_it("US-001", [f"{REFS}/a.md"])) + "\n{torn\n")
    prior = usage.prior_of(ledger, ["a.md", f"./{REFS}/a.md", f"{REFS}/b.md"], REFS)
    assert prior == {f"{REFS}/a.md": 1.0, "a.md": 1.0, f"./{REFS}/a.md": 1.0}
    assert usage.prior_of(tmp_path / "none.jsonl") == {}


def test_the_prior_reads_only_the_ledger_tail_it_needs(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    records = [_it(f"US-{n:03}", [f"{REFS}/r{n}.md"]) for n in range(1, 21)]
    records.insert(18, {"event": "limit_wait", "run_id": "r"})
    ledger.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"event": "iter')
    tail = usage.recent_iterations(ledger, 3)
    assert [r["story_id"] for r in tail] == ["US-018", "US-019", "US-020"]
    # The same prior as from the whole ledger.
    assert usage.prior_of(ledger) == usage.prior_from_ledger(records)


AUTH = sel.Source(
    "Auth flow",
    "ralph/references/auth-flow.md",
    "# Auth flow\n\n"
    "- [US-003] Login uses `useAuth()` from src/hooks/useAuth.ts\n"
    "- [US-004] Session tokens refresh in middleware.ts before expiry\n"
    "- [US-009] Logout clears the session cookie and the auth store\n",
)
DB = sel.Source(
    "DB schema",
    "ralph/references/db-schema.md",
    "# DB schema\n\n- [US-005] Every table has created_at and updated_at columns\n"
    "- [US-006] SQLite has no enum type: use a CHECK constraint\n",
)
RELEASE = sel.Source("Release", "ralph/references/release.md", "# Release\n- Tag versions\n")


def test_a_missed_reference_is_inlined_next_time_only_where_relevant() -> None:
    query = "Add a created_at column to the sessions table"

    def paths(s: sel.Selection) -> list[str]:
        return [[AUTH, DB, RELEASE][r].path for r in s.refs]

    plain = sel.select(query, [AUTH, DB, RELEASE], budget=None)
    assert paths(plain) == [DB.path]  # the session items are under the cut-off
    prior = {AUTH.path: 1.0, RELEASE.path: 1.0}
    lifted = sel.select(query, [AUTH, DB, RELEASE], budget=None, prior=prior)
    assert paths(lifted) == [AUTH.path, DB.path]
    # Only the auth items that match the story are given; Release matches nothing: left out.
    taken = [c.text for c in lifted.chunks if c.ref == 0]
    assert taken == [
        "- [US-004] Session tokens refresh in middleware.ts before expiry\n",
        "- [US-009] Logout clears the session cookie and the auth store\n",
    ]
    # A small prior lifts less: the same story without the session items.
    assert paths(sel.select(query, [AUTH, DB, RELEASE], budget=None, prior={AUTH.path: 0.1})) == [
        DB.path
    ]


# ---- where misses show -----------------------------------------------------------------------


def test_summary_status_line_and_old_records() -> None:
    records = [
        _it("US-001", ["r/a.md"], untouched_references=["r/c.md"], progress_reads=2),
        _it("US-002", ["r/a.md", "r/b.md"], mode="full", progress_reads=1),
        _it("US-003"),  # an older ledger: not counted as known
    ]
    s = usage.summarize(records).as_dict()
    assert s == {
        "known": 2,
        "opened": 3,
        "missed": 3,
        "missed_paths": {"r/a.md": 2, "r/b.md": 1},
        "untouched": 1,
        "progress_reads": 2,  # full mode inlines the log: its reads break no rule
    }
    line = use_line({**s, "missed_topics": ["Auth", "b"]})
    assert line == (
        "references used: opened 3 · missed: 3 (Auth, b) · untouched 1 · "
        "progress.txt read in full 2x "
        "(times, over 2 iteration(s) whose agent stream shows its reads)"
    )


def test_report_and_dashboard_use_the_recorded_fields(tmp_path: Path) -> None:
    rec = _it("US-001", ["ralph/references/a.md"], mode="indexed", progress_reads=1)
    rec |= {"selected_references": ["ralph/references/b.md"], "transcript": "gone/it-1.log"}
    rec["updated_references"] = []
    # No transcript on disk: the ledger's own fields answer.
    assert quality.iteration_misses(rec, tmp_path / "ledger.jsonl") == {
        "references_not_inlined": 1,
        "progress_reads": 1,
    }
    use = serve.reference_use([rec])
    assert use["ralph/references/a.md"]["missed"] == 1
    assert use["ralph/references/b.md"] == {"inlined": 1, "opened": 0, "missed": 0, "updated": 0}


def test_compact_does_not_age_a_reference_opened_recently() -> None:
    records = [_it(f"US-{n:03}") for n in range(1, 5)] + [_it("US-005", ["ralph/references/q.md"])]
    used, n = compact.recent_usage(records, 3)
    assert n == 5 and "ralph/references/q.md" in used and "q" in used
    assert "ralph/references/q.md" not in compact.recent_usage(records[:4], 3)[0]


def _compact_project(root: Path, opened_last: list[str]) -> Path:
    topics = {"Auth flow": "auth.md", "Legacy payments": "payments.md", "DB": "db.md"}
    rows = "".join(f"| {t} | ralph/references/{f} |\n" for t, f in topics.items())
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "prd.json").write_text('{"userStories": []}')
    (root / "ralph.yaml").write_text("references:\n  stale_after: 3\n")
    (root / "progress.txt").write_text(
        "# Ralph Progress Log\nStarted: today\n---\n\n## Progress Index\n"
        f"| Topic | Reference Path |\n|---|---|\n{rows}"
    )
    for topic, name in topics.items():
        path = root / REFS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {topic}\n\n- [US-001] something about {topic.lower()}\n")
    records = [
        _it("US-001", selected_references=[f"{REFS}/payments.md"]),
        _it("US-002", selected_references=[f"{REFS}/auth.md"]),
        _it("US-003", selected_references=[f"{REFS}/db.md"]),
        _it("US-004", opened_last),  # the last story only opened what it missed
    ]
    ledger = root / "ralph/logs/ledger.jsonl"
    ledger.parent.mkdir(parents=True)
    ledger.write_text("".join(json.dumps({**r, "run_id": "r1"}) + "\n" for r in records))
    return root


def test_ralph_compact_keeps_a_reference_missed_recently(tmp_path: Path) -> None:
    """`ralph compact` (dry run, a real subprocess): a reference no recent story selected
    ages out, unless a recent agent opened it."""
    outs = []
    for name, opened in (("unused", []), ("missed", [f"{REFS}/payments.md"])):
        root = _compact_project(tmp_path / name, opened)
        res = subprocess.run(
            [*RALPH, "compact"], cwd=root, env=env(), capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stdout + res.stderr
        outs.append(res.stdout)
    assert "archive (stale): Legacy payments" in outs[0]
    assert "Legacy payments" not in outs[1]
