"""Learning from use: what agents opened (their streams, read by their adapters), reconciled
with what the prompt inlined and the agent updated; the prior it gives the selector; its
place in status, reports, the dashboard and compaction. Streams are the real recorded
transcripts in /work/shared/fixtures (or lines derived from them)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_helpers import RALPH, env, git, iterations, make_project, ralph  # noqa: E402

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
    reads: list[FileRead] | None,
    inlined: list[str],
    updated: tuple[str, ...] = (),
    root: Path = ROOT,
) -> dict[str, Any]:
    return usage.ledger_fields(
        reads,
        inlined=inlined,
        updated=updated,
        root=root,
        refs_dir=REFS,
        progress_path="progress.txt",
    )


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A project with the references the recorded session's paths name (only existing
    references are recorded), at a path of its own: tests put it in place of ROOT."""
    root = tmp_path / "demo"
    for name in ("auth", "db", "deploy", "payments"):
        path = root / REFS / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n- [US-001] about {name}\n")
    (root / "progress.txt").write_text("# Ralph Progress Log\n## Progress Index\n")
    return root


def _at(text: str, root: Path) -> str:
    """A recorded stream with the session's project root moved to `root`."""
    return text.replace(str(ROOT), str(root))


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
        "swept_references": 0,
        "progress_reads": 1,  # the whole log, which the indexed template says not to read
    }


def test_claude_reads_of_references_in_every_form_are_one_path_each(demo: Path) -> None:
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
            _claude_read_of("/home/user/demo/ralph/references/gone.md"),  # no such reference
        ]
    )
    reads = ClaudeAgent().file_reads(_at(text, demo))
    fields = _fields(reads, inlined=["ralph/references/db.md", "ui.md"], root=demo)
    assert fields["opened_references"] == ["ralph/references/auth.md", "ralph/references/db.md"]
    assert fields["missed_references"] == ["ralph/references/auth.md"]
    # A bare index path names a file in the references folder.
    assert fields["untouched_references"] == ["ralph/references/ui.md"]
    assert fields["progress_reads"] == 1


def test_an_updated_reference_is_not_untouched() -> None:
    fields = _fields([], inlined=[f"{REFS}/a.md", f"{REFS}/b.md"], updated=(f"{REFS}/b.md",))
    assert fields["untouched_references"] == [f"{REFS}/a.md"]
    assert fields["missed_references"] == []


def test_the_recorded_codex_session_ran_no_command_and_read_nothing(demo: Path) -> None:
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
    assert _fields(reads, inlined=[], root=demo)["missed_references"] == ["ralph/references/db.md"]


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
        ("cat a.md | sort", [("a.md", True)]),
        ("head -n 20 p.txt; tail p.txt", [("p.txt", False), ("p.txt", False)]),
        ("cat >> progress.txt <<'EOF'\ncat b.md\nEOF", []),  # a write and a here-document
        ("cat a.md > b.md 2>/dev/null", [("a.md", True)]),  # the redirect target is written
        ("git add -A -- r/x.md && git commit -m 'cat y.md'", []),
        ('sh -c "grep -n foo r/x.md"', [("r/x.md", False)]),
        ("cat 'unclosed.md", [("'unclosed.md", True)]),
        # grep/rg/sed/awk: the first operand is the pattern or script, unless -e/-f gave it
        (
            "grep -n 'ralph/references/a.md' scripts/ralph/progress.txt",
            [("scripts/ralph/progress.txt", False)],
        ),
        ("grep -A 3 -m1 'r/a.md' p.txt", [("p.txt", False)]),
        ("grep -e r/a.md -e x r/b.md", [("r/b.md", False)]),
        ("rg --regexp=x r/a.md", [("r/a.md", False)]),
        ("egrep -rn '^## Progress Index$' p.txt", [("p.txt", False)]),
        (
            "sed -n '/r\\/a.md/p' p.txt; awk -f prog.awk r/b.md",
            [("p.txt", False), ("r/b.md", False)],
        ),
        # a whole-file reader piped into a filter reads part; `< x`, `tail -n +1` read all
        ("nl -ba p.txt | sed -n '1,8p'", [("p.txt", False)]),
        ("cat p.txt 2>&1 | head -12", [("p.txt", False)]),
        ("cat p.txt |& grep -c x", [("p.txt", False)]),
        ("cat < p.txt; head -5 < p.txt", [("p.txt", True), ("p.txt", False)]),
        (
            "tail -n +1 p.txt; tail -n+2 p.txt; tail -n 1 p.txt",
            [("p.txt", True), ("p.txt", False), ("p.txt", False)],
        ),
        ("bat -r 1:9 a.md; bat --style=plain a.md", [("a.md", False), ("a.md", True)]),
        # globs and braces are kept as written (memory.usage expands them)
        ("cat r/*.md r/{a,b}.md", [("r/*.md", True), ("r/{a,b}.md", True)]),
        # folders searched, wrappers, find, xargs
        ("grep -rn bcrypt ralph/references/", [("ralph/references/", False)]),
        ("rg bcrypt ralph/references; rg --files r", [("ralph/references", False)]),
        (
            "timeout 5 cat x.md; env -u A LC_ALL=C grep -n y r/a.md",
            [("x.md", True), ("r/a.md", False)],
        ),
        ("LC_ALL=C nice -n 5 nohup time cat a.md", [("a.md", True)]),
        ("command -v cat; command cat a.md", [("a.md", True)]),
        ('find r -name "*.md" -exec cat {} +', [("r/**/*.md", True)]),
        (
            "find r s -name a.md -execdir grep -l x {} \\;",
            [("r/**/a.md", False), ("s/**/a.md", False)],
        ),
        ("find r -type f | xargs -0 cat", [("r/**/*", True)]),
        ("ls r/*.md | xargs -I{} head -3 {}", [("r/*.md", False)]),
        ("grep -l x r/*.md | xargs cat; echo a.md | xargs", [("r/*.md", False), ("r/*.md", True)]),
        # a `cd` on the same command line, also inside `bash -lc` (which keeps it inside)
        ("cd ralph/references && cat deploy.md", [("ralph/references/deploy.md", True)]),
        ("cd r/s\ncat a.md; cd ../..; cat b.md", [("r/s/a.md", True), ("b.md", True)]),
        ("bash -lc 'cd r && cat a.md' && cat b.md", [("r/a.md", True), ("b.md", True)]),
        ("pushd r; cat a.md; popd; cat b.md", [("r/a.md", True), ("b.md", True)]),
        ("cd ~ && cat a.md /abs/b.md; cd /p && cat c.md", [("/abs/b.md", True), ("/p/c.md", True)]),
        # loops and variables set on the line; continued lines; compound commands
        ('for f in r/a.md r/b.md; do head -5 "$f"; done', [("r/a.md", False), ("r/b.md", False)]),
        ("F=r/a.md; cat $F ${F}", [("r/a.md", True), ("r/a.md", True)]),
        ("grep -rn \\\n  bcrypt \\\n  r", [("r", False)]),
        ("if grep -q x a.md; then cat b.md # c.md\nfi", [("a.md", False), ("b.md", True)]),
        ("# cat c.md\ncat d.md", [("d.md", True)]),
    ],
)
def test_shell_reads(command: str, expected: list[tuple[str, bool]]) -> None:
    assert shell_reads(command) == [FileRead(*e) for e in expected]


def test_tool_reads_of_grep_and_unknown_tools() -> None:
    assert tool_reads("Grep", {"pattern": "x", "path": "r/a.md"}) == [FileRead("r/a.md", False)]
    assert tool_reads("Grep", {"pattern": "x", "path": "r"}) == [FileRead("r", False)]  # a folder
    assert tool_reads("Grep", {"pattern": "x"}) == []  # the whole project: no file in particular
    assert tool_reads("Write", {"file_path": "r/a.md", "content": "x"}) == []
    assert tool_reads("Read", "not a dict") == []


def test_tool_reads_of_read_ranges_many_files_and_a_shell_tools_directory() -> None:
    # Amp's Read takes `read_range`: part of the file, as Claude's offset/limit are.
    assert tool_reads("Read", {"path": "/p/progress.txt", "read_range": [1, 12]}) == [
        FileRead("/p/progress.txt", False)
    ]
    assert tool_reads("Read", {"path": "/p/progress.txt"}) == [FileRead("/p/progress.txt", True)]
    # Gemini's read_many_files: paths, folders and globs, each read whole.
    many = {"paths": ["r/a.md", "r", 7], "include": ["r/*.md"], "exclude": ["r/b.md"]}
    assert tool_reads("read_many_files", many) == [
        FileRead("r/a.md", True),
        FileRead("r", True),
        FileRead("r/*.md", True),
    ]
    # A shell tool run in a directory of its own: Amp's `cwd`, Gemini's `directory`.
    assert tool_reads("Bash", {"cmd": "cat a.md", "cwd": "/p/r"}) == [FileRead("/p/r/a.md", True)]
    run = {"command": "head -3 a.md && cd .. && cat b.md", "directory": "r"}
    assert tool_reads("run_shell_command", run) == [
        FileRead("r/a.md", False),
        FileRead("b.md", True),
    ]


def test_shell_reads_stays_linear_in_the_length_of_the_command() -> None:
    """One pass over the words: a command line 8 times as long takes about 8 times as long
    (a quadratic reader would take 64 times; the bound leaves room for a busy machine)."""

    def cost(n: int) -> float:
        line = " && ".join(f"cd r{i} && timeout 5 cat a{i}.md | head -3 && cd .." for i in range(n))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            reads = shell_reads(f"bash -lc {shlex.quote(line)}")
            best = min(best, time.perf_counter() - start)
        assert len(reads) == n
        return best

    small, large = cost(125), cost(1000)  # 1,000: the most reads one line records
    assert large < 24 * small, (small, large)


# ---- what the reads name in the project ------------------------------------------------------


def _use(root: Path, *reads: tuple[str, bool], inlined: tuple[str, ...] = ()) -> dict[str, Any]:
    found = [FileRead(p, w) for p, w in reads]
    return _fields(found, inlined=list(inlined), root=root)


def test_globs_and_braces_are_the_references_they_match(demo: Path) -> None:
    """`cat r/*.md` and `cat r/{a,b}.md` are reads of the references that exist, never of a
    reference named `*` or `{a,b}`; a wildcard over several references sweeps them (counted,
    not missed; listed as opened only when inlined), a brace or a wildcard matching one names
    them (a miss when not inlined)."""
    (demo / REFS / ".hidden.md").write_text("x")
    (demo / REFS / "sub").mkdir()
    (demo / REFS / "sub" / "deep.md").write_text("# deep\n")
    refs = [f"{REFS}/{n}.md" for n in ("auth", "db", "deploy", "payments")]
    swept = _use(demo, (f"{REFS}/*.md", True), inlined=("db.md",))
    assert swept["opened_references"] == [refs[1]]  # the inlined one it read
    assert swept["swept_references"] == 3  # .hidden.md and sub/ not matched
    assert swept["missed_references"] == []
    named = _use(demo, (f"{REFS}/{{deploy,payments,gone}}.md", True), inlined=("deploy.md",))
    assert named["opened_references"] == [f"{REFS}/deploy.md", f"{REFS}/payments.md"]
    assert named["missed_references"] == [f"{REFS}/payments.md"]
    one = _use(demo, (f"{demo}/{REFS}/dep*.md", True), (f"{REFS}/**/*ee*.md", False))
    assert one["missed_references"] == [f"{REFS}/deploy.md", f"{REFS}/sub/deep.md"]
    # A miss named by a brace is one reference however the words are written.
    both = _use(demo, (f"{REFS}/{{db,db}}.md", True), (f"./{REFS}/x/../db.md", False))
    assert both["opened_references"] == both["missed_references"] == [f"{REFS}/db.md"]


def test_a_search_of_the_references_folder_opens_each_and_misses_none(demo: Path) -> None:
    """`grep -rn x ralph/references/` (or a Grep tool on the folder, `find ... -exec cat`):
    every reference searched is read (an inlined one is opened, so not `untouched`; the
    others are counted), none is a miss; a search of the project (`.`, `ralph/`) names no
    reference in particular and is not recorded."""
    fields = _use(
        demo,
        *shell_reads("grep -rn bcrypt ralph/references/ . ralph"),
        inlined=("auth.md", "ui.md"),
    )
    assert fields["opened_references"] == [f"{REFS}/auth.md"]
    assert fields["swept_references"] == 3
    assert fields["missed_references"] == []
    assert fields["untouched_references"] == [f"{REFS}/ui.md"]
    # Aged references in the archive are swept only by a search of the archive itself.
    (demo / REFS / "archive").mkdir()
    (demo / REFS / "archive" / "old.md").write_text("# old\n")
    assert _use(demo, (REFS, False), (f"{REFS}/**/*.md", True))["swept_references"] == 4
    aged = _use(demo, (f"{REFS}/archive", False), (f"{REFS}/archive/*.md", True))
    assert aged["opened_references"] == [f"{REFS}/archive/old.md"]  # the one the glob names
    # A search, then a read of one of them: that read is a miss.
    later = _use(demo, (REFS, False), (f"{REFS}/db.md", False))
    assert later["missed_references"] == [f"{REFS}/db.md"]
    found = shell_reads("find ralph/references -name '*.md' -exec cat {} +")
    assert _use(demo, *found)["missed_references"] == []
    assert _use(demo, *found)["swept_references"] == 4


def test_a_sweep_does_not_open_a_reference_the_agent_wrote(demo: Path) -> None:
    """The folder is matched as it is after the iteration: a reference the agent updated
    (perhaps created after its `cat r/*.md`) is not credited to the sweep; a read naming it
    still counts."""
    fields = _fields(
        [FileRead(f"{REFS}/*.md", True)],
        inlined=[],
        updated=(f"{REFS}/db.md", "deploy.md"),
        root=demo,
    )
    assert fields["opened_references"] == [] and fields["swept_references"] == 2
    named = _fields(
        [FileRead(REFS, False), FileRead(f"{REFS}/db.md", True)],
        inlined=[],
        updated=(f"{REFS}/db.md",),
        root=demo,
    )
    assert named["missed_references"] == [f"{REFS}/db.md"]


def test_only_existing_references_are_recorded(demo: Path) -> None:
    fields = _use(
        demo,
        (f"{REFS}/gone.md", True),  # no such file
        (f"{REFS}/*.txt", True),  # matches nothing
        (f"{REFS}", True),  # a folder read as a file: swept, not missed
        ("README.md", True),
        (f"{REFS}/auth.md/x", True),
    )
    assert fields["missed_references"] == [] == fields["opened_references"]
    assert fields["swept_references"] == 4


def test_a_relative_path_not_found_from_the_root_is_read_in_the_references_folder(
    demo: Path,
) -> None:
    """Codex's `exec_command` runs in a `workdir` its JSON does not report (seen with codex
    0.171: the item has `command`, `aggregated_output`, `exit_code`, `status`), and Claude's
    Bash keeps a `cd` from an earlier call: `cat deploy.md` ran in the references folder
    when there is no deploy.md at the root. One that is at the root is read there."""
    (demo / "payments.md").write_text("the root's own\n")
    (demo / "ralph" / "notes.md").write_text("not a reference\n")
    fields = _use(
        demo,
        ("deploy.md", True),
        ("references/db.md", False),  # from ralph/
        ("payments.md", True),  # the root's file
        ("notes.md", True),  # ralph/notes.md is no reference
        ("/elsewhere/auth.md", True),  # absolute: read where it says
    )
    assert fields["opened_references"] == [f"{REFS}/deploy.md", f"{REFS}/db.md"]
    item = {"id": "item_1", "type": "command_execution", "command": "/bin/bash -lc 'cat deploy.md'"}
    reads = CodexAgent().file_reads(json.dumps({"type": "item.completed", "item": item}))
    assert _fields(reads, inlined=[], root=demo)["missed_references"] == [f"{REFS}/deploy.md"]


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("nl -ba progress.txt | sed -n '1,8p'", 0),
        ("cat progress.txt | head -12", 0),
        ("grep -n 'progress.txt' prd.json", 0),  # a pattern naming the log
        ("cat < progress.txt", 1),
        ("tail -n +1 progress.txt", 1),
        ("cat ./prog*.txt", 1),
        ("cat {prd.json,progress.txt}", 1),
        ("cd ralph && cat ../progress.txt && cd .. && cat progress.txt | wc -l", 1),
    ],
)
def test_progress_reads_count_whole_reads_only(demo: Path, command: str, reads: int) -> None:
    assert _fields(shell_reads(command), inlined=[], root=demo)["progress_reads"] == reads


def test_glob_match_and_brace_expansion() -> None:
    assert usage.glob_match("r/*.md", "r/a.md") and not usage.glob_match("r/*.md", "r/s/a.md")
    assert usage.glob_match("r/**/a.md", "r/a.md") and usage.glob_match("r/**/a.md", "r/s/t/a.md")
    assert usage.glob_match("r/[ab]?.md", "r/b1.md") and not usage.glob_match("r/[!ab]*", "r/a")
    assert not usage.glob_match("r/*", "r/.hidden.md") and usage.glob_match("r/.h*", "r/.hidden.md")
    assert not usage.glob_match("r/*.md", "r")
    assert usage.expand_braces("r/{a,b{1,2}}.{md,txt}") == [
        "r/a.md",
        "r/a.txt",
        "r/b1.md",
        "r/b1.txt",
        "r/b2.md",
        "r/b2.txt",
    ]
    assert usage.expand_braces("${HOME}/{}/{x}/a.md") == ["${HOME}/{}/{x}/a.md"]
    assert usage.expand_braces("{a,b}{") == ["a{", "b{"]
    assert len(usage.expand_braces("{a,b}" * 12)) == usage.MAX_BRACE_WORDS  # bounded
    long = "{" * 5000 + "a,b"
    assert usage.expand_braces(long) == [long]


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
        "swept": 0,
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


# ---- through `ralph run` ---------------------------------------------------------------------

# What an agent ran, and what it opened (only the braces' and the `cd`'s references were read
# for a topic; the glob over the folder and the search of it open all, miss none).
_RUN_COMMANDS = [
    "grep -n 'ralph/references/auth.md' scripts/ralph/progress.txt",  # a pattern, not a read
    "nl -ba scripts/ralph/progress.txt | sed -n '1,8p'",  # the index: a partial read
    "cat scripts/ralph/progress.txt | head -12",
    "cat ralph/references/{deploy,payments}.md",
    "cat ralph/references/*.md | head -40",
    "grep -rn bcrypt ralph/references/",
    "timeout 5 cat ralph/references/gone.md",  # no such reference
    "cd ralph/references && cat db.md",
    "cat < scripts/ralph/progress.txt",  # the whole log: against the indexed template's rule
]


def _claude_stream(commands: list[str]) -> str:
    def call(n: int, name: str, tool_input: dict[str, Any]) -> list[dict[str, Any]]:
        block = {"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": tool_input}
        done = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "ok"}
        return [
            {"type": "assistant", "message": {"id": f"msg_{n}", "content": [block]}},
            {"type": "user", "message": {"role": "user", "content": [done]}},
        ]

    events: list[dict[str, Any]] = [{"type": "system", "subtype": "init", "session_id": "s"}]
    for n, command in enumerate(commands):
        events += call(n, "Bash", {"command": command})
    events += call(len(commands), "Grep", {"pattern": "bcrypt", "path": "ralph/references"})
    events += call(
        len(commands) + 1, "Read", {"file_path": "scripts/ralph/progress.txt", "limit": 12}
    )
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "Done."}
    usage_ = {"input_tokens": 100, "output_tokens": 10}
    return "\n".join(json.dumps(e) for e in [*events, {**result, "usage": usage_}]) + "\n"


def _codex_stream(commands: list[str]) -> str:
    """Codex exec's items, as codex 0.171 prints them: the command wrapped in `bash -lc`,
    and no workdir (the last command ran in the references folder: `cat deploy.md`)."""
    events: list[dict[str, Any]] = [{"type": "thread.started", "thread_id": "t"}]
    for n, command in enumerate([*commands, "cat deploy.md"]):
        item = {
            "id": f"item_{n}",
            "type": "command_execution",
            "command": f"/bin/bash -lc {shlex.quote(command)}",
            "aggregated_output": "",
            "exit_code": 0,
            "status": "completed",
        }
        events += [
            {"type": "item.started", "item": {**item, "status": "in_progress"}},
            {"type": "item.completed", "item": item},
        ]
    events += [
        {"type": "item.completed", "item": {"id": "m", "type": "agent_message", "text": "Done."}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "output_tokens": 10}},
    ]
    return "\n".join(json.dumps(e) for e in events) + "\n"


@pytest.mark.parametrize("tool", ["claude", "codex"])
def test_ralph_run_records_the_references_an_agent_read(tmp_path: Path, tool: str) -> None:
    """A real `ralph run` with a stand-in CLI replaying a stream of the agent's shape: the
    ledger's record names the references read for a topic as misses, the folder's sweeps
    as opened only, nothing for a grep pattern or a missing file, and one whole read of
    progress.txt (the `cat <`), not the index reads piped into sed/head."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
    from install import install

    root = make_project(tmp_path / "p", n=1, config={"tool": tool, "mode": "indexed"})
    topics = {"Auth": "auth", "Database": "db", "Deployment": "deploy", "Payments": "payments"}
    rows = "".join(f"| {t} | ralph/references/{f}.md |\n" for t, f in topics.items())
    (root / "scripts/ralph/progress.txt").write_text(
        "# Ralph Progress Log\nStarted: today\n---\n\n## Progress Index\n"
        f"| Topic | Reference Path |\n|---|---|\n{rows}"
    )
    for topic, name in topics.items():
        path = root / REFS / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {topic}\n\n- [US-000] {topic.lower()} notes\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "memory")
    stream = tmp_path / "stream.jsonl"
    stream.write_text((_claude_stream if tool == "claude" else _codex_stream)(_RUN_COMMANDS))
    bin_dir = install(tmp_path / "bin", tool).parent

    res = ralph(
        root,
        "run",
        "1",
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        FAKE_TRANSCRIPT=str(stream),
    )
    [rec] = iterations(root)
    assert rec["agent"] == tool, res.stdout + res.stderr
    refs = {name: f"{REFS}/{name}.md" for name in topics.values()}
    named = [refs["deploy"], refs["payments"], refs["db"]]
    # auth.md only by a sweep: listed when the prompt gave it, else counted.
    given = refs["auth"] in rec["selected_references"]
    assert rec["opened_references"] == [*named[:2], *([refs["auth"]] if given else []), refs["db"]]
    assert rec["swept_references"] == (0 if given else 1)
    assert rec["missed_references"] == [p for p in named if p not in rec["selected_references"]]
    assert rec["untouched_references"] == []
    assert rec["progress_reads"] == 1


def test_xargs_after_a_cd_reads_in_that_folder_once() -> None:
    # The listing was joined to the folder, then again when fed to the reader.
    refs = "ralph/references"
    assert shell_reads(f"cd {refs} && ls | xargs cat") == [FileRead(f"{refs}/.", True)]
    got = shell_reads(f"cd {refs} && grep -l foo *.md | xargs cat")
    assert {r.path for r in got} == {f"{refs}/*.md"}


def test_a_generated_script_is_read_in_bounded_time_and_reads() -> None:
    # 40,000 assignments before a command, and 100,000 `cat $f` over 64 globs: seconds
    # each (quadratic slicing; millions of reads), now bounded.
    globs = " ".join(f"r/{i}*.md" for i in range(64))
    code = (
        "from orchestrator.agents.reads import shell_reads\n"
        "assert len(shell_reads('A=1 ' * 40000 + 'cat x.md')) == 1\n"
        f"assert len(shell_reads('for f in {globs}; do ' + 'cat $f; ' * 100000 + 'done')) == 1000\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
