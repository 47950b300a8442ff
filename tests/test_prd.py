from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import corpus_cases

from orchestrator import fsutil
from orchestrator.errors import InputError
from orchestrator.memory.prd import Prd, Story, json_spans


def story(sid: str, **kw: object) -> dict:
    return {"id": sid, "title": f"title {sid}", "passes": False, **kw}


def write(tmp_path: Path, data: object, **dump: object) -> Path:
    p = tmp_path / "prd.json"
    dump.setdefault("indent", 2)
    p.write_text(json.dumps(data, **dump) + "\n")
    return p


# -- choosing stories -----------------------------------------------------------------------


def test_next_story_order(tmp_path: Path) -> None:
    stories = [
        story("NONE-1"),
        story("P2-a", priority=2),
        story("P1-a", priority=1, passes=True),
        story("P2-b", priority="2"),  # numeric string: accepted
        story("P1-b", priority=1),
        story("NONE-2", priority=None),
        story("P1.5", priority=1.5),  # a story inserted between 1 and 2
        story("P1.7", priority="1.7"),
        story("BIG", priority="9" * 400),  # exact, and no overflow on the way
    ]
    prd = Prd.load(write(tmp_path, {"userStories": stories}))
    order = []
    while (nxt := prd.next_story()) is not None:
        order.append(nxt.id)
        prd.mark_passed(nxt.id)
    assert order == ["P1-b", "P1.5", "P1.7", "P2-a", "P2-b", "BIG", "NONE-1", "NONE-2"]
    assert prd.all_passed() and prd.passed_count() == 9


def test_fields_and_text(tmp_path: Path) -> None:
    data = {
        "project": "Demo",
        "branchName": "ralph/demo",
        "description": "d",
        "userStories": [
            story(
                "US-001",
                description="Desc",
                acceptanceCriteria=["AC1", "AC2"],
                notes="N",
                references=["Auth flow", "ralph/references/db.md"],
                priority=1,
                dependsOn=["X"],
            )
        ],
    }
    prd = Prd.load(write(tmp_path, data))
    assert (prd.project, prd.branch_name, prd.description) == ("Demo", "ralph/demo", "d")
    s = prd.get("US-001")
    assert s == Story(
        id="US-001",
        title="title US-001",
        description="Desc",
        acceptance_criteria=["AC1", "AC2"],
        priority=1,
        passes=False,
        notes="N",
        references=["Auth flow", "ralph/references/db.md"],
        position=0,
    )
    assert s.text() == "title US-001\nDesc\nAC1\nAC2\nN"
    with pytest.raises(InputError, match="no story with id 'US-999'. Known ids: US-001"):
        prd.get("US-999")


def test_top_level_array_numeric_ids_and_snake_case(tmp_path: Path) -> None:
    data = [{"id": 7, "title": "t", "acceptance_criteria": "one criterion", "priority": 1.0}]
    prd = Prd.load(write(tmp_path, data))
    s = prd.stories[0]
    assert (s.id, s.acceptance_criteria, s.priority, s.passes) == ("7", ["one criterion"], 1, False)
    assert prd.project is None and prd.get("7") is s  # ids compare as strings
    assert prd.all_passed() is False and prd.passed_count() == 0


# -- saving keeps the user's file -----------------------------------------------------------


STYLES = {
    "2 spaces": {"indent": 2},
    "4 spaces": {"indent": 4},
    "tabs": {"indent": "\t"},
    "compact": {"separators": (",", ":")},
    "one line spaced": {},
    "ascii escapes": {"indent": 2, "ensure_ascii": True},
    "raw unicode": {"indent": 2, "ensure_ascii": False},
}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("newline", ["\n", "\r\n", ""])
def test_mark_passed_changes_one_token_in_any_style(
    tmp_path: Path, style: str, newline: str
) -> None:
    data = {
        "project": "Café ☕",
        "zExtra": {"keep": [1, 2.50, None]},
        "userStories": [
            story("US-001", priority=1, passes=True),
            {"passes": False, "title": "Ünïcode", "id": "US-002", "custom": "x", "priority": 2},
        ],
    }
    text = json.dumps(data, **STYLES[style])
    if newline:
        text = text.replace("\n", newline) + newline
    path = tmp_path / "prd.json"
    path.write_bytes(text.encode())
    prd = Prd.load(path)
    assert prd.render() == text  # nothing changed: same text
    prd.save()
    assert path.read_bytes() == text.encode()
    prd.mark_passed("US-002")
    prd.save()
    new = path.read_bytes().decode()
    start, end = json_spans(text)[("userStories", 1, "passes")]
    assert new == text[:start] + "true" + text[end:]
    assert Prd.load(path).get("US-002").passes


def test_save_without_change_does_not_touch_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"userStories": [story("US-001", passes=True), story("US-002")]})
    before = path.stat()
    prd = Prd.load(path)
    prd.mark_passed("US-001")  # already passed: no change
    prd.save()
    after = path.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_missing_passes_is_added_in_the_files_style(tmp_path: Path) -> None:
    data = [{"id": "US-001", "title": "t", "tags": ["a"]}, {"id": "US-002", "title": "u"}]
    path = tmp_path / "prd.json"
    path.write_text(json.dumps(data, indent="\t"))  # tabs, no trailing newline
    prd = Prd.load(path)
    prd.mark_passed("US-002")
    prd.save()
    data[1]["passes"] = True
    assert path.read_text() == json.dumps(data, indent="\t")
    assert list(json.loads(path.read_text())[0]) == ["id", "title", "tags"]


def test_bom_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    text = "\ufeff" + json.dumps({"userStories": [story("US-001")]}, indent=2) + "\n"
    fsutil.atomic_write_text(path, text)
    prd = Prd.load(path)
    prd.mark_passed("US-001")
    prd.save()
    assert fsutil.read_text(path) == text.replace('"passes": false', '"passes": true')


def test_duplicate_key_edit_hits_the_value_json_uses(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    text = '{"userStories": [{"id": "A", "title": "t", "passes": true, "passes": false}]}'
    path.write_text(text)
    prd = Prd.load(path)
    assert prd.next_story().id == "A"
    prd.mark_passed("A")
    prd.save()
    assert path.read_text() == text.replace('"passes": false', '"passes": true')


# -- bad input: one clear error, file untouched ---------------------------------------------

GOOD = '{\n  "userStories": [\n    {"id": "US-001", "title": "t", "passes": false}\n  ]\n}\n'
BAD = {
    "syntax": (
        '{\n  "userStories": [\n    {"id": "US-001" "title": "t"}\n  ]\n}\n',
        r"prd.json:3:21: invalid JSON: Expecting ',' delimiter",
    ),
    "trailing comma": (
        '{"userStories": [{"id": "A", "title": "t"},]}',
        r"prd.json:1:44: invalid JSON: .*Fix: remove the trailing comma",
    ),
    "empty file": ("", r"prd.json: is empty"),
    "latin-1 bytes": (
        '[{"id": "A",\n "title": "caf\udce9"}]',
        r"prd.json:2:15: is not valid UTF-8",
    ),
    "top-level string": ('"hello"', r"prd.json:1:1: the top level must be an object"),
    "foreign list key": ('{"tasks": [{"id": 1}]}', r'has no "userStories" list \(found "tasks"'),
    "no stories key": ('{"project": "x"}', r'has no "userStories" list\. Fix: add'),
    "stories not a list": (
        '{"userStories": {"id": "A"}}',
        r"prd.json:1:17: userStories must be a list of stories, got an object",
    ),
    "no stories": ('{"userStories": []}', r"userStories is empty"),
    "story not object": (
        '{"userStories": ["US-001"]}',
        r"userStories\[0\] must be an object \(a story\), got a string",
    ),
    "missing id": (
        '{"userStories": [\n {"title": "t"}]}',
        r"prd.json:2:2: userStories\[0\]\.id is missing. Fix: give the story a "
        r'unique "id"',
    ),
    "empty id": (
        '{"userStories": [{"id": " ", "title": "t"}]}',
        r'userStories\[0\]\.id must be a non-empty string, got " "',
    ),
    "bool id": ('{"userStories": [{"id": true, "title": "t"}]}', r"\.id must be .* got true"),
    "missing title": ('[{"id": "A"}]', r"prd.json:1:2: \[0\]\.title is missing"),
    "passes yes": (
        '{"userStories": [\n  {"id": "A", "title": "t",\n   "passes": "yes"}]}',
        r'prd.json:3:14: userStories\[0\]\.passes must be true or false, got "yes"',
    ),
    "passes 1": ('[{"id": "A", "title": "t", "passes": 1}]', r"passes must be true or false"),
    "priority word": (
        '[{"id": "A", "title": "t", "priority": "high"}]',
        r'\[0\]\.priority must be a number such as 1 or 31\.1 \(1 runs first\), got "high"',
    ),
    "priority not finite": ('[{"id": "A", "title": "t", "priority": NaN}]', r"got NaN"),
    "priority infinite": ('[{"id": "A", "title": "t", "priority": 1E400}]', r"got Infinity"),
    "priority half a number": ('[{"id": "A", "title": "t", "priority": "1."}]', r'got "1\."'),
    "criteria number": (
        '[{"id": "A", "title": "t", "acceptanceCriteria": 3}]',
        r"\[0\]\.acceptanceCriteria must be a list of strings, got a number",
    ),
    "criterion object": (
        '[{"id": "A", "title": "t", "acceptanceCriteria": ["ok", {}]}]',
        r"\[0\]\.acceptanceCriteria\[1\] must be a string, got \{\}",
    ),
    "description list": (
        '[{"id": "A", "title": "t", "description": ["x"]}]',
        r'\[0\]\.description must be a string, got \["x"\]',
    ),
    "references string list": (
        '[{"id": "A", "title": "t", "references": [1]}]',
        r"\[0\]\.references\[0\] must be a string",
    ),
    "duplicate ids": (
        '{"userStories": [{"id": "A", "title": "t"},\n{"id": "A", "title": "u"}]}',
        r"prd.json:2:8: userStories\[1\]\.id duplicates the id 'A' of "
        r"userStories\[0\]",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_prd_gives_one_clear_error_and_changes_nothing(tmp_path: Path, case: str) -> None:
    text, pattern = BAD[case]
    path = tmp_path / "prd.json"
    raw = text.encode("utf-8", errors="surrogateescape")
    path.write_bytes(raw)
    with pytest.raises(InputError, match=pattern) as err:
        Prd.load(path)
    assert str(err.value).startswith(str(path))
    assert "Fix:" in str(err.value)
    assert path.read_bytes() == raw
    assert sorted(os.listdir(tmp_path)) == ["prd.json"]  # no temp or backup left behind


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"prd.json: not found. Fix: create it"):
        Prd.load(tmp_path / "prd.json")


def test_good_reference_text_loads(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    path.write_text(GOOD)
    assert Prd.load(path).next_story().id == "US-001"


# -- real files -----------------------------------------------------------------------------

# Corpus files that are not Ralph prd.json files and must be refused with this message.
NOT_RALPH = {
    "Ic3b3rg__Hotel-CRM": r"\[0\]\.id is missing",  # feature list: category/steps, no ids
    "TRocket-Labs__vectorlint": r"\[0\]\.id is missing",
    "MichaelVessia__subq": r'no "userStories" list \(found "stories"',
    "MuslimSoftware__JournAi": r'no "userStories" list \(found "features"',
    "davidturnbull__dotdeps": r'no "userStories" list \(found "tasks"',
    "davidturnbull__dotdeps__hist-851838e671-pre-reset": r'no "userStories" list \(found "tasks"',
    "edgecdec__DiscordAlternative": r'no "userStories" list \(found "tasks"',
}


@pytest.mark.parametrize("path", corpus_cases("prd.json"))
def test_corpus_prd(path: Path, tmp_path: Path) -> None:
    name = path.parent.name
    if name in NOT_RALPH:
        with pytest.raises(InputError, match=NOT_RALPH[name]):
            Prd.load(path)
        return
    text = fsutil.read_text(path)
    prd = Prd.load(path)
    assert prd.render() == text
    raw = json.loads(text)
    items = raw if isinstance(raw, list) else raw["userStories"]
    assert [s.id for s in prd.stories] == [str(i["id"]) for i in items]
    # Mark everything passed on a copy: the result is valid and differs only in passes.
    copy = tmp_path / "prd.json"
    copy.write_bytes(path.read_bytes())
    work = Prd.load(copy)
    for s in list(work.stories):
        work.mark_passed(s.id)
    work.save()
    after = json.loads(copy.read_text())
    after_items = after if isinstance(after, list) else after["userStories"]
    for old, new in zip(items, after_items, strict=True):
        assert new.pop("passes") is True
        old.pop("passes", None)
        assert new == old
    assert Prd.load(copy).all_passed()


# -- through the real CLI -------------------------------------------------------------------


def ralph(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_status_reads_prd_and_reports_bad_one(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    path = tmp_path / "prd.json"
    path.write_text(
        json.dumps(
            {
                "project": "P",
                "userStories": [story("US-002", priority=2), story("US-001", priority=1)],
            },
            indent=2,
        )
    )
    out = ralph(tmp_path, "status", "--json")
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert st["stories"]["next"]["id"] == "US-001" and st["stories"]["total"] == 2
    bad = '{"userStories": [{"id": "US-001", "title": "t", "passes": "yes"}]}'
    path.write_text(bad)
    out = ralph(tmp_path, "status")
    assert out.returncode == 2
    assert 'userStories[0].passes must be true or false, got "yes"' in out.stderr
    assert path.read_text() == bad


def test_save_keeps_edits_made_on_disk_since_load(tmp_path: Path) -> None:
    path = write(tmp_path, {"userStories": [story("US-001"), story("US-002")]})
    prd = Prd.load(path)
    prd.mark_passed("US-001")
    # Meanwhile the agent edits the file: a note on US-002 and a new story.
    edited = json.loads(path.read_text())
    edited["userStories"][1]["notes"] = "agent note"
    edited["userStories"].append(story("US-003"))
    path.write_text(json.dumps(edited, indent=2) + "\n")
    prd.save()
    saved = json.loads(path.read_text())
    assert [s["passes"] for s in saved["userStories"]] == [True, False, False]
    assert saved["userStories"][1]["notes"] == "agent note"
    assert [s.id for s in prd.stories] == ["US-001", "US-002", "US-003"]
    assert prd.next_story().id == "US-002"
    assert not (tmp_path / "prd.json.bak").exists()  # one-token edit: no backup needed


def test_broken_file_on_disk_is_not_overwritten(tmp_path: Path) -> None:
    path = write(tmp_path, {"userStories": [story("US-001")]})
    prd = Prd.load(path)
    prd.mark_passed("US-001")
    path.write_text("{ broken")
    with pytest.raises(InputError, match="invalid JSON"):
        prd.save()
    assert path.read_text() == "{ broken"


def test_reserialising_keeps_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "prd.json"
    original = '[{"id": "A", "title": "t"}]'
    path.write_text(original)
    prd = Prd.load(path)
    prd.mark_passed("A")
    prd.save()
    assert (tmp_path / "prd.json.bak").read_text() == original
    assert json.loads(path.read_text()) == [{"id": "A", "title": "t", "passes": True}]
