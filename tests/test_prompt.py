"""Prompt assembly in all three modes, through real projects on disk and the `ralph` CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli, project, tokens
from orchestrator.errors import EXIT_BUDGET, ConfigError
from orchestrator.memory.markdown import unclosed_fence
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.store import Memory
from orchestrator.run import prompt

PRD = {
    "project": "Notes",
    "branchName": "ralph/notes",
    "userStories": [
        {
            "id": "US-001",
            "title": "Add a note",
            "priority": 1,
            "passes": True,
            "description": "Store a note",
            "acceptanceCriteria": ["notes.json written"],
        },
        {
            "id": "US-002",
            "title": "Log out of the web app",
            "priority": 2,
            "passes": False,
            "description": "As a user I can log out so my session ends.",
            "acceptanceCriteria": ["Logout clears the session cookie", "Tests pass"],
            "notes": "See the auth middleware",
        },
        {
            "id": "US-003",
            "title": "Release 1.0",
            "priority": 3,
            "passes": False,
            "description": "Tag a release",
            "acceptanceCriteria": ["Version bumped"],
            "references": ["release"],
        },
    ],
}
LOG_ENTRY = (
    "## 2026-01-02 10:00 - US-001\n- Added notes storage\n- Files changed: notes.py\n"
    "- **Learnings for future iterations:**\n  - NARRATIVE-ONLY detail from the log\n---\n"
)
HEADER = "# Ralph Progress Log\nStarted: 2026-01-01\n---\n"
INDEX = (
    "\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    "| Auth flow | ralph/references/auth-flow.md |\n"
    "| Release | ralph/references/release.md |\n"
)
AUTH = (
    "# Auth flow\n\n- [US-001] Session cookie is named `sid`; logout must clear it and the "
    "auth store\n- [US-001] The auth middleware lives in src/middleware.ts\n"
)
RELEASE = "# Release\n\n- Bump the version in package.json, then tag vX.Y.Z\n"


def make_project(root: Path, *, indexed: bool = True, log: str = LOG_ENTRY) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    ralph = root / "scripts" / "ralph"
    ralph.mkdir(parents=True)
    (ralph / "prd.json").write_text(json.dumps(PRD, indent=2) + "\n")
    (ralph / "progress.txt").write_text(HEADER + (INDEX if indexed else "") + "\n" + log)
    refs = root / "ralph" / "references"
    refs.mkdir(parents=True)
    (refs / "auth-flow.md").write_text(AUTH)
    (refs / "release.md").write_text(RELEASE)
    return root


def assemble(root: Path, story_id: str = "US-002", **kw) -> prompt.Assembled:
    proj = project.locate(root)
    story = Prd.load(proj.prd_path).get(story_id)
    return prompt.assemble(proj, story, Memory.load(proj), **kw)


def test_indexed_prompt_has_index_selected_references_and_not_the_log(tmp_path: Path) -> None:
    out = assemble(make_project(tmp_path))
    assert out.mode == "indexed"
    assert "## Progress Index" in out.text
    assert "| Release | ralph/references/release.md |" in out.text
    assert "logout must clear it" in out.text  # the relevant reference, inlined
    assert "Bump the version" not in out.text  # the irrelevant one, only listed in the index
    assert "NARRATIVE-ONLY" not in out.text  # the narrative log is not loaded
    assert "Do not read the narrative log" in out.text
    assert "`feat: US-002 - Log out of the web app`" in out.text
    assert "ralph/notes" in out.text and "scripts/ralph/prd.json" in out.text
    assert out.selected == ["ralph/references/auth-flow.md"]
    assert out.tokens == tokens.count(out.text)
    assert set(out.parts) == {"template", "story", "index", "references", "notes"}
    assert abs(sum(out.parts.values()) - out.tokens) <= 5
    # Counterfactual: Ralph's full prompt plus every reference (they would be in the log).
    full = assemble(tmp_path, mode="full")
    assert out.full_history_tokens == full.tokens + tokens.count(AUTH) + tokens.count(RELEASE)


def test_story_hint_selects_a_reference_without_a_word_in_common(tmp_path: Path) -> None:
    out = assemble(make_project(tmp_path), "US-003")
    assert "Bump the version" in out.text
    row = next(r for r in out.considered if r["path"] == "ralph/references/release.md")
    assert row["reason"] == "hint: story"


def test_always_topics_from_ralph_yaml_take_part_item_by_item(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    (root / "ralph.yaml").write_text("references:\n  always: [Release]\n")
    out = assemble(root)
    # The budget is a ceiling: an `always` reference that says nothing about this story
    # (logging out) stays out, however much room is left.
    assert "logout must clear it" in out.text and "Bump the version" not in out.text
    row = next(r for r in out.considered if r["path"] == "ralph/references/release.md")
    assert row["reason"] == "no match" and not row["taken"]


def test_fix_up_notes_come_first(tmp_path: Path) -> None:
    out = assemble(make_project(tmp_path), notes=["prd.json: US-002 passes is still false"])
    assert "## Fix first" in out.text
    assert out.text.index("Fix first") < out.text.index("## Your story")
    assert out.parts["notes"] > 0


def test_auto_falls_back_to_full_without_index_rows(tmp_path: Path) -> None:
    out = assemble(make_project(tmp_path, indexed=False))
    assert out.mode == "full"
    assert "NARRATIVE-ONLY detail" in out.text  # the whole log, inlined
    assert "read in full" in out.text
    assert out.full_history_tokens == out.tokens


def test_auto_is_indexed_on_a_fresh_project_with_an_empty_index(tmp_path: Path) -> None:
    # `ralph init` writes an empty index and no history: nothing to lose, start indexing.
    empty_index = "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    root = make_project(tmp_path, indexed=False, log="")
    progress = root / "scripts" / "ralph" / "progress.txt"
    progress.write_text(HEADER + empty_index)
    assert assemble(root).mode == "indexed"
    # The same empty index over an existing flat log stays full: the log is the memory.
    progress.write_text(HEADER + empty_index + "\n" + LOG_ENTRY)
    assert assemble(root).mode == "full"


def test_full_mode_sends_the_users_prompt_file_bytes_unchanged(tmp_path: Path) -> None:
    root = make_project(tmp_path, indexed=False)
    ralph = root / "scripts" / "ralph"
    amp_bytes = b"# My Amp prompt\r\nRead prd.json \xe2\x9c\x93\r\nno newline at end"
    (ralph / "prompt.md").write_bytes(amp_bytes)
    (ralph / "CLAUDE.md").write_bytes(b"# Claude instructions\n")
    amp = assemble(root, tool="amp")
    assert amp.text.encode("utf-8", "surrogateescape") == amp_bytes
    assert amp.source.endswith("prompt.md")
    claude = assemble(root, tool="claude")
    assert claude.text == "# Claude instructions\n"
    codex = assemble(root, tool="codex")
    assert codex.text.encode() == amp_bytes
    # The agent reads progress.txt itself: the counterfactual counts it.
    log_tokens = tokens.count((ralph / "progress.txt").read_text())
    assert amp.full_history_tokens == amp.tokens + log_tokens


def test_forced_modes(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    assert assemble(root, mode="full").mode == "full"
    plain = make_project(tmp_path / "plain", indexed=False)
    forced = assemble(plain, mode="indexed")
    assert forced.mode == "indexed" and "NARRATIVE-ONLY" not in forced.text


def test_budget_trims_references_and_never_exceeds(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    many = "".join(
        f"- session logout cookie rule {i}: {'keep the auth store in sync ' * 6}\n"
        for i in range(40)
    )
    (root / "ralph" / "references" / "auth-flow.md").write_text("# Auth flow\n\n" + many)
    (root / "ralph.yaml").write_text("references:\n  max_tokens: 100000\n")
    loose = assemble(root, budget=100_000)
    assert loose.parts["references"] > 1000
    tight_budget = loose.tokens - loose.parts["references"] + 300
    tight = assemble(root, budget=tight_budget)
    assert tight.tokens <= tight_budget
    assert 0 < tight.parts["references"] < loose.parts["references"]
    assert any("over budget" in r["reason"] for r in tight.considered)
    # References never take more than a quarter of the budget, even with room left.
    share = assemble(root, budget=4000)
    assert share.tokens < 4000 - 1000 and share.parts["references"] <= 1000 + 40
    # references.max_tokens caps one reference even when the budget has room.
    (root / "ralph.yaml").write_text("references:\n  max_tokens: 400\n")
    capped = assemble(root, budget=100_000)
    assert capped.parts["references"] < 400 + 40  # + the reference's heading line
    assert any("over references.max_tokens" in r["reason"] for r in capped.considered)


def test_over_budget_fails_with_how_much_and_the_fix(tmp_path: Path, capsys, monkeypatch) -> None:
    root = make_project(tmp_path)
    with pytest.raises(prompt.PromptOverBudget) as err:
        assemble(root, budget=200)
    msg = str(err.value)
    assert "over budget.prompt_tokens (200)" in msg and "ralph compact" in msg
    base = int(msg.split("without any reference is ")[1].split(" ")[0])
    assert f"{base - 200} over" in msg
    assert err.value.exit_code == EXIT_BUDGET
    monkeypatch.chdir(root)
    assert cli.main(["prompt", "--budget", "200"]) == EXIT_BUDGET
    assert "ralph compact" in capsys.readouterr().err


def test_same_inputs_same_prompt(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    assert assemble(root).text == assemble(root).text


def test_template_overrides(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    local = root / "scripts" / "ralph" / "prompt.template.md"
    local.write_text("LOCAL {{story_id}}\n{{references}}\n")
    out = assemble(root)
    assert out.text.startswith("LOCAL US-002\n## References for this story")
    (root / "custom.md").write_text("CONFIGURED {{story_title}} {{branch}}\n{{notes}}\n")
    (root / "ralph.yaml").write_text("template: custom.md\n")
    assert assemble(root).text == "CONFIGURED Log out of the web app ralph/notes\n"
    (root / "custom.md").write_text("{{storyy}}\n")
    with pytest.raises(ConfigError, match=r"custom.md: unknown placeholder\(s\) \{\{storyy\}\}"):
        assemble(root)


def test_cli_prints_exactly_the_prompt_and_json_accounting(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    expected = assemble(root).text
    run = [sys.executable, "-m", "orchestrator", "prompt"]
    text = subprocess.run(run, cwd=root, capture_output=True, check=True).stdout
    assert text.decode() == expected
    res = subprocess.run(
        run + ["--json", "--story", "US-003", "--mode", "indexed"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(res.stdout)
    assert data["mode"] == "indexed" and data["story_id"] == "US-003"
    assert data["full_history_tokens"] > 0 and data["parts"]["index"] > 0
    assert {r["path"] for r in data["considered"]} == {
        "ralph/references/auth-flow.md",
        "ralph/references/release.md",
    }
    assert all({"score", "tokens", "reason", "taken"} <= set(r) for r in data["considered"])
    bad = subprocess.run(run + ["--story", "US-404"], cwd=root, capture_output=True, text=True)
    assert bad.returncode == 2 and "US-404" in bad.stderr


def test_indexed_prompt_prefers_the_latest_stories_learnings_for_a_bare_story(
    tmp_path: Path,
) -> None:
    """A story whose text shares no word with the learnings: the log's order (US-001 then
    US-004) says which learnings are the most recent, and those are the ones inlined."""
    log = (
        LOG_ENTRY
        + "## 2026-01-03 10:00 - US-004\n- Reworked the importer\n- Files changed: notes.py\n---\n"
    )
    root = make_project(tmp_path, log=log)
    (root / "ralph" / "references" / "misc.md").write_text(
        "# Misc\n\n" + "".join(f"- [US-{i:03d}] zzq note {i}\n" for i in (4, 1, 5, 6, 7, 8))
    )
    prd = root / "scripts" / "ralph" / "prd.json"
    data = json.loads(prd.read_text())
    data["userStories"].append(
        {"id": "US-009", "title": "Polish the onboarding wizard", "priority": 9, "passes": False}
    )
    prd.write_text(json.dumps(data))
    progress = root / "scripts" / "ralph" / "progress.txt"
    progress.write_text(
        progress.read_text().replace(
            "| Release |", "| Misc | ralph/references/misc.md |\n| Release |"
        )
    )
    out = assemble(root, "US-009")
    assert "zzq note 4" in out.text  # US-004 is the latest story the log names
    assert "zzq note 5" not in out.text  # stories the log never names get no recency
    assert "zzq note 1" in out.text  # and the story before it (half-life of 5 stories)


def test_an_earlier_story_with_the_same_id_is_not_ranked_by_this_storys_text(
    tmp_path: Path,
) -> None:
    """Ids are reused across PRDs: learnings tagged with this story's id came from another
    story (or a failed try of this one, which recency finds). Giving them this story's
    prd.json text would make them match perfectly whatever they say."""
    root = make_project(tmp_path)
    (root / "ralph" / "references" / "widgets.md").write_text(
        "# Widgets\n\n- [US-002] qqz widget detail\n- [US-001] other widget detail\n"
    )
    progress = root / "scripts" / "ralph" / "progress.txt"
    progress.write_text(
        progress.read_text().replace(
            "| Release |", "| Widgets | ralph/references/widgets.md |\n| Release |"
        )
    )
    out = assemble(root)
    assert "logout must clear it" in out.text and "qqz" not in out.text


def test_ranking_query_leaves_out_the_story_id() -> None:
    # "US-008" would match an "SC-008" learning by its number; an id says nothing of content.
    query = prompt._query(Story(id="US-008", title="US-008 theme toggle"))
    assert "US-008" not in query and "theme toggle" in query


def test_odd_reference_text_cannot_break_the_prompt_around_it(tmp_path: Path) -> None:
    """A topic holding `|` stays one two-cell row in the story's index rows, and an item
    whose code fence is never closed is closed where it ends, so the template's
    instructions after it are not read as code."""
    root = make_project(tmp_path)
    refs = root / "ralph" / "references"
    (refs / "auth-flow.md").write_text(
        AUTH + "- [US-001] The logout handler:\n  ```ts\n  res.clearCookie('sid')\n"
    )
    rows = "".join(f"| Gardening {n} | ralph/references/garden-{n}.md |\n" for n in range(300))
    for n in range(300):
        (refs / f"garden-{n}.md").write_text(f"# Gardening {n}\n\n- [US-001] tulips {n}\n")
    progress = root / "scripts" / "ralph" / "progress.txt"
    text = progress.read_text().replace("| Auth flow |", "| Auth a \\| b |") + "\n"
    progress.write_text(text.replace("| Release |", rows + "| Release |"))
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator", "prompt"], cwd=root, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "| Auth a \\| b | ralph/references/auth-flow.md |" in out.stdout
    assert "more topics are not shown here" in out.stdout  # the rows for this story only
    assert "res.clearCookie('sid')" in out.stdout
    assert unclosed_fence(out.stdout) is None


def test_json_accounting_is_the_json_modules_text_and_survives_odd_bytes() -> None:
    """`ralph prompt --json` is made by msgspec for speed: the same text as json.dumps for
    what the accounting holds, and json.dumps for text msgspec refuses (lone surrogates)."""
    from orchestrator.commands.prompt import _json

    data = {"tokens": 6497, "parts": {"index": 816}, "saved_pct": 99.5, "selected": []}
    data["considered"] = [{"path": "ralph/références/a.md", "score": 0.857766, "n": {}}]
    assert _json(data) == json.dumps(data, indent=2, ensure_ascii=False)
    odd = {"topic": "caf\udce9"}
    assert _json(odd) == json.dumps(odd, indent=2, ensure_ascii=False)


def test_gc_paused_restores_the_collector_and_puts_what_it_made_out_of_its_reach() -> None:
    import gc
    import weakref

    class Node:
        pass

    gc.collect()
    frozen_before = gc.get_freeze_count()
    try:
        with prompt.gc_paused():
            assert not gc.isenabled()
            made = [Node() for _ in range(1000)]
        assert gc.isenabled()
        # Frozen: the collections after the block never walk them again...
        assert gc.get_freeze_count() >= frozen_before + 1000
        # ...yet they are freed by reference counting once dropped.
        ref = weakref.ref(made[0])
        del made
        assert ref() is None
    finally:
        gc.unfreeze()


def test_two_rows_naming_one_file_show_the_row_of_the_topic_taken(tmp_path: Path) -> None:
    """When the index is too long to inline, the prompt lists the taken topics' rows. Two
    rows naming one file (a confused agent's alias): the row shown is the one whose topic
    ranked, not the last row naming that file (which the prompt may not have taken at all)."""
    root = make_project(tmp_path)
    refs = root / "ralph" / "references"
    filler = ""
    for n in range(60):
        (refs / f"garden-{n:02}.md").write_text(f"# Garden {n}\n\n- Water the tomatoes {n}\n")
        filler += f"| Garden watering {n:02} | ralph/references/garden-{n:02}.md |\n"
    progress = root / "scripts" / "ralph" / "progress.txt"
    alias = "| Zebra crossing | ralph/references/auth-flow.md |\n"
    text = progress.read_text().replace("| Release |", filler + alias + "| Release |")
    progress.write_text(text)
    run = [sys.executable, "-m", "orchestrator", "prompt", "--story", "US-002"]
    out = subprocess.run([*run, "--budget", "3000"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "## Progress Index (the rows for this story)" in out.stdout
    rows = [
        ln for ln in out.stdout.splitlines() if ln.endswith("| ralph/references/auth-flow.md |")
    ]
    assert rows == ["| Auth flow | ralph/references/auth-flow.md |"]


def test_two_rows_naming_one_file_put_its_learnings_in_once(tmp_path: Path) -> None:
    """An agent's alias row (`| Logout | auth-flow.md |`) names a file already indexed: the
    prompt carries its learnings once, and `--json` says why the alias was left out."""
    root = make_project(tmp_path)
    progress = root / "scripts" / "ralph" / "progress.txt"
    alias = "| Logout session | auth-flow.md |\n"
    progress.write_text(progress.read_text().replace("| Release |", alias + "| Release |"))
    run = [sys.executable, "-m", "orchestrator", "prompt", "--story", "US-002"]
    out = subprocess.run(run, cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("logout must clear it") == 1
    js = subprocess.run([*run, "--json"], cwd=root, capture_output=True, text=True)
    rows = {r["topic"]: r for r in json.loads(js.stdout)["considered"]}
    assert rows["Logout session"]["reason"] == "same text as ralph/references/auth-flow.md"
    assert rows["Auth flow"]["taken"] is True


def test_a_reference_written_in_the_prompts_compact_form_gives_the_same_prompt(
    tmp_path: Path,
) -> None:
    """An agent that copies the block's form into the file (the story tag once, on its own
    line, over its items) loses no story: `ralph prompt` shows the same block as for the
    file with the tag on every bullet."""
    root = make_project(tmp_path)
    run = [sys.executable, "-m", "orchestrator", "prompt", "--story", "US-002"]
    tagged = subprocess.run(run, cwd=root, capture_output=True, text=True)
    assert tagged.returncode == 0, tagged.stderr
    assert "[US-001]\n- Session cookie is named `sid`" in tagged.stdout
    compact = AUTH.replace("- [US-001] ", "- ").replace("\n\n- ", "\n\n[US-001]\n- ", 1)
    (root / "ralph" / "references" / "auth-flow.md").write_text(compact)
    copied = subprocess.run(run, cwd=root, capture_output=True, text=True)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout == tagged.stdout


def test_a_learning_two_references_hold_is_in_the_prompt_once(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    said = "Session cookie is named `sid`; logout must clear it and the auth store"
    (root / "ralph" / "references" / "sessions.md").write_text(
        f"# Sessions\n\n- [US-004] {said}\n"
        "- [US-004] Log out of the web app ends the session: clear the session cookie\n"
    )
    progress = root / "scripts" / "ralph" / "progress.txt"
    row = "| Sessions | ralph/references/sessions.md |\n"
    progress.write_text(progress.read_text().replace("| Release |", row + "| Release |"))
    run = [sys.executable, "-m", "orchestrator", "prompt", "--story", "US-002"]
    out = subprocess.run(run, cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(said) == 1
    assert "### Sessions (1 of 2 items)\n[US-004]\n- Log out of the web app" in out.stdout


@pytest.mark.parametrize("budget", ["-1", "0", "10000001"])
def test_prompt_budget_flag_is_checked_like_the_setting(tmp_path: Path, budget: str) -> None:
    from run_helpers import RALPH, env, make_project

    root = make_project(tmp_path / "p", 1)
    proc = subprocess.run(
        [*RALPH, "prompt", "--budget", budget], cwd=root, env=env(), capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("ralph: error: command line: budget.prompt_tokens must be at")
    assert f"got {budget}" in proc.stderr and "allowed: an integer, 1 to 10000000" in proc.stderr
    assert proc.stdout == ""
    ok = subprocess.run(
        [*RALPH, "prompt", "--budget", "4000"], cwd=root, env=env(), capture_output=True, text=True
    )
    assert ok.returncode == 0 and "US-001" in ok.stdout
