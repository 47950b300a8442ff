from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import corpus_cases
from run_helpers import opened_files

from orchestrator import fsutil
from orchestrator.memory import progress as progress_mod
from orchestrator.memory import seen as seen_mod
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.memory.store import Memory
from orchestrator.project import Project, locate
from orchestrator.run.checks import merge_history, snapshot, verify

PROGRESS = """# Ralph Progress Log
Started: Mon Nov 30 05:00:00 UTC 2026
---

## Progress Index
| Topic | Reference Path |
|---|---|
| Auth flow | ralph/references/auth-flow.md |

## Codebase Patterns
- Use the service layer for DB access

## 2026-11-30 05:10 - US-001
- Implemented login
- **Learnings for future iterations:**
  - Sessions live in Redis
---
"""

PRD = {
    "project": "Demo",
    "branchName": "ralph/demo",
    "userStories": [
        {
            "id": f"US-00{i}",
            "title": f"Story {i}",
            "description": "",
            "acceptanceCriteria": [],
            "priority": i,
            "passes": i == 1,
            "notes": "",
        }
        for i in (1, 2, 3)
    ],
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "app"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "T")
    (root / "prd.json").write_text(json.dumps(PRD, indent=2) + "\n")
    (root / "progress.txt").write_text(PROGRESS)
    refs = root / "ralph" / "references"
    refs.mkdir(parents=True)
    (refs / "auth-flow.md").write_text("# Auth flow\n- tokens expire after 1h\n")
    (root / ".gitignore").write_text("/ralph/logs/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return locate(root)


def agent(project: Project, script: str) -> None:
    """Run the 'agent' as a real separate process in the project root."""
    code = "import json, pathlib, subprocess\nP = pathlib.Path\n" + textwrap.dedent(script)
    subprocess.run([sys.executable, "-c", code], cwd=project.root, check=True, timeout=60)


MARK_PASSED = """
prd = json.loads(P('prd.json').read_text())
prd['userStories'][1]['passes'] = True
P('prd.json').write_text(json.dumps(prd, indent=2) + '\\n')
"""
APPEND_ENTRY = """
with open('progress.txt', 'a') as f:
    f.write('\\n## 2026-11-30 06:00 - US-002\\n- Did story 2\\n---\\n')
"""
COMMIT = """
subprocess.run(['git', 'add', '-A'], check=True)
subprocess.run(['git', 'commit', '-q', '-m', 'feat: US-002 - Story 2'], check=True)
"""


def test_a_good_iteration_passes_every_check(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED
        + APPEND_ENTRY
        + """
P('ralph/references/db.md').write_text('# DB\\n- migrations run on start\\n')
t = P('progress.txt').read_text()
t = t.replace('| Auth flow | ralph/references/auth-flow.md |\\n',
              '| Auth flow | ralph/references/auth-flow.md |\\n| DB | ralph/references/db.md |\\n')
P('progress.txt').write_text(t)
"""
        + COMMIT,
    )
    story = Prd.load(project.prd_path).get("US-002")
    report = verify(snap, project, story)
    assert report.ok, report.findings
    assert [f for f in report.findings if f.severity != "info"] == []
    assert report.story_passed and report.flipped == ["US-002"]
    assert report.updated_references == ["ralph/references/db.md"]
    assert report.new_entries == 1 and not report.restored
    assert report.head_after != report.head_before
    data = report.to_dict()
    assert json.loads(json.dumps(data))["ok"] is True
    assert report.fix_notes() == []


def test_a_fence_the_agent_left_open_is_a_warning(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED
        + """
with open('progress.txt', 'a') as f:
    f.write('\\n## 2026-11-30 06:00 - US-002\\n- ran\\n```bash\\nnpm test\\n')
"""
        + COMMIT,
    )
    report = verify(snap, project, Prd.load(project.prd_path).get("US-002"))
    (fence,) = [f for f in report.findings if f.kind == "unclosed_fence"]
    line = project.progress_path.read_text().splitlines().index("```bash") + 1
    assert fence.severity == "warning" and f"line {line} " in fence.message
    assert report.ok and report.new_entries == 1


def test_lost_history_is_restored_keeping_the_agents_additions(project: Project) -> None:
    snap = snapshot(project)
    # The agent rewrites progress.txt from scratch: old entry gone, its own entry added.
    agent(
        project,
        MARK_PASSED
        + """
P('progress.txt').write_text('# Ralph Progress Log\\nStarted: Mon Nov 30 05:00:00 UTC 2026\\n'
    '---\\n\\n## 2026-11-30 06:00 - US-002\\n- Did story 2\\n---\\n')
"""
        + COMMIT,
    )
    agents_version = fsutil.read_text(project.progress_path)
    report = verify(snap, project, "US-002")
    assert report.restored and report.restored_files == ["progress.txt"]
    kinds = {f.kind: f for f in report.findings}
    assert kinds["history_lost"].severity == "error" and not report.ok
    text = fsutil.read_text(project.progress_path)
    # every old line is back, in order, and the agent's entry is kept at the end
    assert text.startswith(PROGRESS)
    assert text.endswith("## 2026-11-30 06:00 - US-002\n- Did story 2\n---\n")
    assert Progress.parse(text).index_rows[0].path == "ralph/references/auth-flow.md"
    # the agent's version is kept in the logs, and the restore left no temp files
    (backup,) = report.backups
    assert (project.root / backup).read_text() == agents_version
    assert backup.startswith("ralph/logs/backups/")
    assert sorted(p.name for p in project.root.iterdir() if p.name.startswith(".progress")) == []
    assert any("only append to progress.txt" in n for n in report.fix_notes())
    # a second verify against the same snapshot finds nothing more to restore
    again = verify(snap, project, "US-002")
    assert not again.restored


def test_index_edits_and_pattern_additions_are_not_history_loss(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED
        + APPEND_ENTRY
        + """
t = P('progress.txt').read_text()
t = t.replace('| Auth flow | ralph/references/auth-flow.md |',
              '| Auth and sessions | ralph/references/auth-flow.md |')
t = t.replace('- Use the service layer for DB access\\n',
              '- Use the service layer for DB access\\n- New pattern\\n')
P('progress.txt').write_text(t)
"""
        + COMMIT,
    )
    report = verify(snap, project, "US-002")
    assert report.ok, report.findings
    assert not report.restored


def test_several_flipped_stories_warn(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        """
prd = json.loads(P('prd.json').read_text())
for s in prd['userStories']: s['passes'] = True
P('prd.json').write_text(json.dumps(prd, indent=2))
"""
        + APPEND_ENTRY
        + COMMIT,
    )
    report = verify(snap, project, "US-002")
    assert report.flipped == ["US-002", "US-003"]
    (w,) = [f for f in report.findings if f.kind == "several_passed"]
    assert w.severity == "warning" and "US-003" in w.message
    assert report.ok


def test_broken_prd_is_restored(project: Project) -> None:
    snap = snapshot(project)
    agent(project, "P('prd.json').write_text('{\"userStories\": [')\n")
    report = verify(snap, project, "US-002")
    assert [f.kind for f in report.errors()] == ["prd_invalid"]
    assert fsutil.read_text(project.prd_path) == snap.prd_text
    assert report.restored and not report.story_passed
    assert (project.root / report.backups[0]).read_text() == '{"userStories": ['


def test_removed_stories_are_restored_with_the_pass_kept(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        """
prd = json.loads(P('prd.json').read_text())
prd['userStories'] = prd['userStories'][:2]
prd['userStories'][1]['passes'] = True
P('prd.json').write_text(json.dumps(prd, indent=2) + '\\n')
"""
        + APPEND_ENTRY
        + COMMIT,
    )
    report = verify(snap, project, "US-002")
    assert "stories_removed" in [f.kind for f in report.errors()]
    stories = json.loads(project.prd_path.read_text())["userStories"]
    assert [s["id"] for s in stories] == ["US-001", "US-002", "US-003"]
    assert [s["passes"] for s in stories] == [True, True, False]


def test_index_rows_must_point_inside_the_folder_to_real_files(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED
        + APPEND_ENTRY
        + """
P('ralph/references/orphan.md').write_text('# no row for me\\n')
t = P('progress.txt').read_text()
t = t.replace('|---|---|\\n', '|---|---|\\n| Ghost | ralph/references/ghost.md |\\n'
              '| Secrets | ../../etc/passwd |\\n| Broken | ralph/references/x.md\\n')
P('progress.txt').write_text(t)
"""
        + COMMIT,
    )
    report = verify(snap, project, "US-002")
    kinds = sorted(f.kind for f in report.errors())
    assert kinds == [
        "index_malformed",
        "index_missing_file",
        "index_path_escapes",
        "reference_unindexed",
    ]
    notes = report.fix_notes()
    assert any("ralph/references/orphan.md" in n and "add '| <Topic> |" in n for n in notes)


def test_deleted_reference_is_restored(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED + APPEND_ENTRY + "P('ralph/references/auth-flow.md').unlink()\n" + COMMIT,
    )
    report = verify(snap, project, "US-002")
    assert "reference_deleted" in [f.kind for f in report.warnings()]
    assert (project.references.dir / "auth-flow.md").read_text().startswith("# Auth flow")
    assert report.restored_files == ["ralph/references/auth-flow.md"]


def test_checks_reuse_unchanged_references_but_see_an_edit_that_kept_size_and_mtime(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot reuses the prompt's reads and the checks the snapshot's, file by file
    while the stat is unchanged: an agent that rewrites a reference to the same size and
    puts its mtime back still changed its ctime, so the edit is seen."""
    monkeypatch.setattr(seen_mod, "RACY_NS", 0)  # the fixture's files are milliseconds old
    refs = project.references.dir
    (refs / "other.md").write_text("# Other\n- stays as it is\n")
    time.sleep(0.05)
    memory = Memory.load(project)
    snap = snapshot(project, memory=memory)
    assert snap.references["ralph/references/other.md"] == b"# Other\n- stays as it is\n"
    time.sleep(0.05)
    agent(
        project,
        """
import os
p = P('ralph/references/auth-flow.md')
st = p.stat()
p.write_text('x' * st.st_size)
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
""",
    )
    opened = opened_files(monkeypatch)
    report = verify(snap, project, "US-002")
    assert report.updated_references == ["ralph/references/auth-flow.md"]
    assert "other.md" not in opened and "auth-flow.md" in opened


def test_an_appended_log_has_its_index_rows_read_once(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent appends its entry: the checks parse the new progress.txt but take the
    index rows already read for the prompt (same table text), for its rows and for its
    malformed lines alike; a table it edited is read."""
    parsed: list[str] = []
    real = progress_mod._read_table

    def spy(index_text: str) -> progress_mod._Table:
        parsed.append(index_text)
        return real(index_text)

    monkeypatch.setattr(progress_mod, "_read_table", spy)
    snap = snapshot(project, memory=Memory.load(project))
    agent(project, MARK_PASSED + APPEND_ENTRY + COMMIT)
    report = verify(snap, project, "US-002")
    assert report.ok and report.new_entries == 1 and len(parsed) == 1
    snap = snapshot(project, memory=Memory.load(project))
    agent(
        project,
        "p = P('progress.txt'); t = p.read_text()\n"
        "p.write_text(t.replace('auth-flow.md |', 'auth-flow.md |\\n| Gone | "
        "ralph/references/gone.md |'))\n",
    )
    report = verify(snap, project, "US-003")
    assert "index_missing_file" in [f.kind for f in report.errors()] and len(parsed) == 3


def test_deleted_files_and_folders_are_restored(project: Project) -> None:
    snap = snapshot(project)
    agent(
        project,
        "import shutil\nP('progress.txt').unlink()\nP('prd.json').unlink()\n"
        "shutil.rmtree('ralph/references')\n",
    )
    report = verify(snap, project, "US-002")
    assert {"progress_deleted", "prd_deleted"} <= {f.kind for f in report.errors()}
    assert "reference_deleted" in {f.kind for f in report.warnings()}
    assert fsutil.read_text(project.progress_path) == PROGRESS
    assert fsutil.read_text(project.prd_path) == snap.prd_text
    assert (project.references.dir / "auth-flow.md").read_bytes() == snap.references[
        "ralph/references/auth-flow.md"
    ]
    assert sorted(report.restored_files) == [
        "prd.json",
        "progress.txt",
        "ralph/references/auth-flow.md",
    ]
    assert report.backups == []  # nothing of the agent's to keep: it deleted them


def test_passed_story_needs_a_commit_entry_and_clean_tree(project: Project) -> None:
    snap = snapshot(project)
    agent(project, MARK_PASSED + "P('src.py').write_text('x = 1\\n')\n")
    report = verify(snap, project, "US-002")
    assert sorted(f.kind for f in report.errors()) == ["no_commit", "no_progress_entry"]
    assert any("git commit -m 'feat: US-002 - <title>'" in n for n in report.fix_notes())
    # committed now, with a stray file left behind and a vague message
    agent(
        project,
        APPEND_ENTRY
        + """
subprocess.run(['git', 'add', 'prd.json', 'progress.txt'], check=True)
subprocess.run(['git', 'commit', '-q', '-m', 'wip'], check=True)
""",
    )
    report = verify(snap, project, "US-002")
    assert report.ok
    assert sorted(f.kind for f in report.warnings()) == ["commit_message", "uncommitted"]
    assert "src.py" in next(f.message for f in report.warnings() if f.kind == "uncommitted")


def test_pre_existing_dirt_is_not_blamed_on_the_agent(project: Project) -> None:
    (project.root / "notes-by-user.txt").write_text("mine\n")
    snap = snapshot(project)
    agent(
        project,
        MARK_PASSED
        + APPEND_ENTRY
        + """
subprocess.run(['git', 'add', 'prd.json', 'progress.txt'], check=True)
subprocess.run(['git', 'commit', '-q', '-m', 'feat: US-002 - Story 2'], check=True)
""",
    )
    report = verify(snap, project, "US-002")
    assert report.ok and report.warnings() == []


def test_not_passed_story_outside_git(tmp_path: Path) -> None:
    (tmp_path / "prd.json").write_text(json.dumps(PRD))
    (tmp_path / "progress.txt").write_text(PROGRESS)
    project = locate(tmp_path)
    snap = snapshot(project)
    report = verify(snap, project, "US-002")
    assert report.ok and not report.story_passed
    assert {f.kind for f in report.findings} == {"not_passed", "no_git", "index_missing_file"}


# --------------------------------------------------------------------------- merge_history


def test_merge_appends_and_insertions_lose_nothing() -> None:
    old = "a\nb\nc\n"
    assert merge_history(old, old + "d\n") == (old + "d\n", [])
    assert merge_history(old, "a\nnew\nb\nc\n") == ("a\nnew\nb\nc\n", [])
    assert merge_history("a\nb", "a\nb\nc\n") == ("a\nb\nc\n", [])  # no final newline
    assert merge_history(old, "a  \nb\nc\nd\n")[1] == []  # trailing spaces
    assert merge_history("A\n---\nB\n", "A\nX\n---\nY\nB\n")[1] == []  # separators


def test_merge_puts_back_deleted_and_replaced_lines() -> None:
    merged, lost = merge_history("a\nb\nc\n", "a\nX\nc\nd\n")
    assert merged == "a\nb\nX\nc\nd\n" and lost == ["b\n"]
    merged, lost = merge_history("h\n## one\n- x\n## two\n- y\n", "h\n## two\n- y\n## three\n")
    assert merged == "h\n## one\n- x\n## two\n- y\n## three\n"
    assert lost == ["## one\n", "- x\n"]
    merged, lost = merge_history("a\r\nb\r\n", "a\r\nc\r\n")
    assert merged == "a\r\nb\r\nc\r\n"


def test_merge_never_splices_a_new_entry_into_an_old_one() -> None:
    learn = "- **Learnings for future iterations:**\n  - notes live in out/\n---\n"
    old = (
        "# Log\n---\n\n## Progress Index\n| T | ralph/references/a.md |\n\n"
        "## 2026 - US-001\n- did one\n" + learn
    )
    # the agent kept only the header and wrote its own entry, reusing a learning line
    new = "# Log\n---\n\n## 2026 - US-002\n- did two\n" + learn
    merged, lost = merge_history(old, new)
    assert merged == old + "## 2026 - US-002\n- did two\n" + learn
    assert "- did one\n" in lost and "| T | ralph/references/a.md |\n" in lost


def test_merge_keeps_the_agents_index_and_pattern_edits() -> None:
    old = (
        "# Log\n\n## Progress Index\n| A | ralph/references/a.md |\n\n"
        "## Codebase Patterns\n- one\n- two\n\n## 2026 - US-001\n- x\n"
    )
    new = (
        "# Log\n\n## Progress Index\n| A2 | ralph/references/a.md |\n| B | "
        "ralph/references/b.md |\n\n## Codebase Patterns\n- one\n- 1.5\n\n"
        "## 2026 - US-002\n- y\n"
    )
    merged, lost = merge_history(old, new)
    assert lost == ["- two\n", "## 2026 - US-001\n", "- x\n"]
    assert merged == (
        "# Log\n\n## Progress Index\n| A2 | ralph/references/a.md |\n| B | "
        "ralph/references/b.md |\n\n## Codebase Patterns\n- one\n- two\n- 1.5\n"
        "\n## 2026 - US-001\n- x\n## 2026 - US-002\n- y\n"
    )


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_merge_on_real_histories(path: Path) -> None:
    old = fsutil.read_text(path)
    entries = Progress.parse(old).entries
    added = "## 2099-01-01 - ZZ-999\n- appended\n---\n"
    sep = "" if old.endswith("\n") or not old else "\n"
    assert merge_history(old, old + sep + added) == (old + sep + added, [])
    if not entries:
        return
    # the agent keeps only the header and its own entry: all of the history comes back
    header = Progress.parse(old).header
    truncated = header + ("" if header.endswith("\n") or not header else "\n") + added
    assert merge_history(old, truncated)[0] == old + sep + added
    # the agent drops an early entry while appending its own: the entry comes back
    victim = entries[0].text
    damaged = old.replace(victim, "", 1) + sep + added
    merged, lost = merge_history(old, damaged)
    assert lost
    assert merged == old + sep + added


# --------------------------------------------------------------------------- through the loop


def _loop_with_fault(tmp_path: Path, fault: str) -> tuple[Path, dict]:
    from run_helpers import iterations, make_project, ralph

    root = make_project(
        tmp_path / "p",
        2,
        config={"mode": "indexed"},
        sim_env={"RALPH_SIM_FAULT": fault, "RALPH_SIM_FAULT_STORY": "US-002"},
    )
    out = ralph(root, "run", "--tool", "sim", "5", timeout=240)
    assert out.returncode == 0, out.stderr
    record = next(r for r in iterations(root) if r["story_id"] == "US-002")
    return root, record["checks"]


def test_loop_restores_a_truncated_progress_txt(tmp_path: Path) -> None:
    root, checks = _loop_with_fault(tmp_path, "truncate-progress")
    assert checks["restored"] is True and checks["ok"] is False
    assert "history_lost" in {f["kind"] for f in checks["findings"]}
    text = fsutil.read_text(root / "scripts" / "ralph" / "progress.txt")
    progress = Progress.parse(text)
    assert [e.story_ids for e in progress.entries] == [["US-001"], ["US-002"]]
    assert progress.has_index
    (backup,) = checks["backups"]
    agents = Progress.parse(fsutil.read_text(root / backup))
    assert [e.story_ids for e in agents.entries] == [["US-002"]]


def test_loop_restores_a_deleted_reference(tmp_path: Path) -> None:
    root, checks = _loop_with_fault(tmp_path, "delete-reference")
    kinds = {f["kind"] for f in checks["findings"]}
    assert "reference_deleted" in kinds and checks["restored"] is True
    for row in Progress.load(root / "scripts" / "ralph" / "progress.txt").index_rows:
        assert (root / row.path).is_file(), row


# --------------------------------------------------------------------------- swapped files

SWAP_AGENT = """
import glob, os, sys
sys.stdin.read()
refs = sorted(glob.glob("ralph/references/*.md"))
for path, how in (a.split("=") for a in sys.argv[1:]):
    if path.startswith("ref:"):  # the n-th reference the project has
        path = refs[int(path[4:])]
    os.remove(path)
    if how == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(how, path)
print("done", flush=True)
"""


def _loop_with_swap(tmp_path: Path, *swaps: str) -> tuple[Path, dict, subprocess.CompletedProcess]:
    """Two sim iterations (a history to lose), then one by an agent that replaces files."""
    from run_helpers import iterations, make_project, ralph

    script = tmp_path / "swap_agent.py"
    script.write_text(SWAP_AGENT)
    command = [sys.executable, str(script), *swaps]
    config = {"mode": "indexed", "agents": {"swap": {"command": command}}}
    root = make_project(tmp_path / "p", 3, config=config)
    assert ralph(root, "run", "--tool", "sim", "2").returncode == 1  # two references
    out = ralph(root, "run", "--tool", "swap", "1", timeout=120)
    assert "Traceback" not in out.stdout + out.stderr
    return root, iterations(root)[-1]["checks"], out


def test_loop_never_writes_through_a_symlink_the_agent_put_in_place(tmp_path: Path) -> None:
    victims = {name: tmp_path / f"victim-{name}" for name in ("prd.json", "progress.txt")}
    for victim in victims.values():
        victim.write_text("outside file, not the project's\n")
    rd = tmp_path / "p" / "scripts" / "ralph"
    root, checks, out = _loop_with_swap(
        tmp_path, *(f"scripts/ralph/{n}={v}" for n, v in victims.items())
    )
    assert out.returncode == 1, out.stderr
    for name, victim in victims.items():
        assert victim.read_text() == "outside file, not the project's\n"  # untouched
        assert not (rd / name).is_symlink() and (rd / name).is_file()
    assert json.loads((rd / "prd.json").read_text())["userStories"][0]["passes"] is True
    assert Progress.parse((rd / "progress.txt").read_text()).entries[0].story_ids == ["US-001"]
    kinds = {f["kind"]: f for f in checks["findings"]}
    assert {"prd_replaced", "progress_replaced"} <= set(kinds) and checks["ok"] is False
    assert str(victims["prd.json"]) in kinds["prd_replaced"]["message"]
    notes = [(root / b).read_text() for b in checks["backups"]]
    assert sorted(notes) == sorted(
        f"scripts/ralph/{n}: a symlink to {v}\n" for n, v in victims.items()
    )
    assert sorted(checks["restored_files"]) == [
        "scripts/ralph/prd.json",
        "scripts/ralph/progress.txt",
    ]


def test_loop_puts_back_a_progress_txt_replaced_by_a_fifo(tmp_path: Path) -> None:
    rd = tmp_path / "p" / "scripts" / "ralph"
    root, checks, out = _loop_with_swap(tmp_path, "scripts/ralph/progress.txt=fifo")
    assert out.returncode == 1, out.stderr  # a story not passed, not a crash (exit 2)
    assert (rd / "progress.txt").is_file()
    assert Progress.parse((rd / "progress.txt").read_text()).entries[0].story_ids == ["US-001"]
    (finding,) = [f for f in checks["findings"] if f["kind"] == "progress_replaced"]
    assert "FIFO" in finding["message"] and checks["restored"] is True
    assert ralph_status_ok(root)


def ralph_status_ok(root: Path) -> bool:
    from run_helpers import ralph

    return ralph(root, "status").returncode == 0


def test_the_users_own_symlink_is_kept_and_put_back_when_re_pointed(
    project: Project, tmp_path: Path
) -> None:
    shared = tmp_path / "shared-progress.txt"
    shared.write_text(PROGRESS)
    project.progress_path.unlink()
    project.progress_path.symlink_to(shared)
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("other\n")
    snap = snapshot(project)
    agent(
        project,
        f"import os\nos.remove('progress.txt')\nos.symlink({str(elsewhere)!r}, 'progress.txt')\n",
    )
    report = verify(snap, project, "US-002")
    assert "progress_replaced" in {f.kind for f in report.errors()}
    assert project.progress_path.resolve() == shared and shared.read_text() == PROGRESS
    assert elsewhere.read_text() == "other\n"
    # Untouched, the user's link is no finding at all.
    report = verify(snapshot(project), project, "US-002")
    assert "progress_replaced" not in {f.kind for f in report.findings}


def test_loop_puts_back_references_replaced_by_an_outside_symlink_or_a_fifo(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("outside file\n")
    root, checks, out = _loop_with_swap(tmp_path, f"ref:0={victim}", "ref:1=fifo")
    assert out.returncode == 1, out.stderr
    assert victim.read_text() == "outside file\n"
    replaced = {f["message"] for f in checks["findings"] if f["kind"] == "reference_replaced"}
    assert len(replaced) == 2 and any(f"symlink to {victim}" in m for m in replaced)
    assert any("FIFO" in m for m in replaced)
    assert "reference_unrestorable" not in {f["kind"] for f in checks["findings"]}
    assert len(checks["restored_files"]) == 2
    for index_path in checks["restored_files"]:
        path = root / index_path
        assert path.is_file() and not path.is_symlink() and path.read_text().startswith("#")
