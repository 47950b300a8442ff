"""The index and log edits `ralph compact` makes, as methods of Progress, and the table
problems `ralph check` reads from the same model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator import project
from orchestrator.errors import InputError
from orchestrator.memory.markdown import AFTER_TABLE, NOT_A_ROW
from orchestrator.memory.progress import Progress
from orchestrator.memory.tables import SECOND_INDEX
from orchestrator.upkeep import audit, compact

LOG = (
    "# Ralph Progress Log\nStarted: today\n---\n\n"
    "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    "| Auth \\| flow | ralph/references/auth.md |\n"
    "| Build | `ralph/references/build.md` |\n"
    "| Old | ralph/references/old.md |\n\n"
    "## 2026-01-01 - US-001\n- one\n---\n\n"
    "## 2026-01-02 - US-002\n- two\n---\n"
)


def rows(p: Progress) -> list[tuple[str, str]]:
    return [(r.topic, r.path) for r in p.index_rows]


def test_without_rows_drops_exactly_those_rows() -> None:
    p = Progress.parse(LOG)
    q = p.without_rows([("Build", "ralph/references/build.md")])
    assert rows(q) == [
        ("Auth | flow", "ralph/references/auth.md"),
        ("Old", "ralph/references/old.md"),
    ]
    assert q.render() == LOG.replace("| Build | `ralph/references/build.md` |\n", "")
    with pytest.raises(InputError, match="'Nope'"):
        p.without_rows([("Nope", "x.md")])
    assert p.render() == LOG  # a Progress never changes


def test_an_emptied_index_keeps_its_header_so_a_stray_table_stays_stray() -> None:
    text = "## Progress Index\n| A | a.md |\n\n| Stray | s.md |\n"
    p = Progress.parse(text)
    assert rows(p) == [("A", "a.md")]
    q = p.without_rows([("A", "a.md")])
    assert rows(q) == [] and "| Stray | s.md |" in q.render()


def test_archived_rows_create_the_table_after_the_index_then_append() -> None:
    p = Progress.parse(LOG).with_archived_rows([("Old", "ralph/references/archive/old.md")])
    text = p.render()
    index_end = text.index("| Old | ralph/references/old.md |\n") + len(
        "| Old | ralph/references/old.md |\n"
    )
    assert text[index_end:].startswith(
        "\n## Archived\n| Topic | Reference Path |\n|---|---|\n"
        "| Old | ralph/references/archive/old.md |\n\n## 2026-01-01"
    )
    q = p.with_archived_rows([("A | b", "ralph/references/archive/a.md")])
    assert (
        "| Old | ralph/references/archive/old.md |\n| A \\| b | ralph/references/archive/a.md |\n"
        in (q.render())
    )
    archived = [r for r in q.tables().rows if r.archived]
    assert [(r.topic, r.path) for r in archived] == [
        ("Old", "ralph/references/archive/old.md"),
        ("A | b", "ralph/references/archive/a.md"),
    ]
    assert rows(q) == rows(Progress.parse(LOG))  # the index is untouched


def test_rows_replaced_by_their_area_in_one_pass() -> None:
    p = Progress.parse(LOG)
    area = ("Area", "ralph/references/area.md")
    q = p.with_rows_replaced({"ralph/references/auth.md": area, "ralph/references/old.md": area})
    assert rows(q) == [area, ("Build", "ralph/references/build.md")]


def test_rotation_moves_the_oldest_entries_verbatim() -> None:
    p = Progress.parse(LOG)
    q, moved = p.rotated(1)
    assert moved == ["## 2026-01-01 - US-001\n- one\n---\n\n"]
    assert [e.story_ids for e in q.entries] == [["US-002"]]
    assert p.rotated(2) == (p, [])


def test_crlf_edits_keep_crlf() -> None:
    p = Progress.parse(LOG.replace("\n", "\r\n"))
    q = p.without_rows([("Old", "ralph/references/old.md")])
    q = q.with_archived_rows([("Old", "ralph/references/archive/old.md")])
    q = q.with_rows_replaced({"ralph/references/build.md": ("B", "ralph/references/b.md")})
    q, _moved = q.rotated(0)
    assert "\n" not in q.render().replace("\r\n", "")


# ---------------------------------------------------------------- ralph check's problems


def problems(text: str) -> list[tuple[int, str]]:
    return audit.parse_tables(text)[1]


def test_rows_after_the_table_end_are_reported_not_read() -> None:
    text = LOG.replace(
        "| Old | ralph/references/old.md |\n", "\n| Old | ralph/references/old.md |\n"
    )
    assert ("Old", "ralph/references/old.md") not in rows(Progress.parse(text))
    line = text.split("\n").index("| Old | ralph/references/old.md |") + 1
    assert problems(text) == [(line, AFTER_TABLE)]


def test_a_prose_line_ends_the_table_and_check_says_so() -> None:
    text = LOG.replace("| Build |", "Build -> build.md\n| Build |")
    lines = text.split("\n")
    n = lines.index("Build -> build.md") + 1
    assert problems(text) == [(n, NOT_A_ROW), (n + 1, AFTER_TABLE), (n + 2, AFTER_TABLE)]
    assert rows(Progress.parse(text)) == [("Auth | flow", "ralph/references/auth.md")]


def test_a_second_index_heading_is_one_problem() -> None:
    text = LOG + "\n## Progress Index\n| X | ralph/references/x.md |\n"
    line = text.split("\n").index("## Progress Index", 5) + 1
    assert problems(text) == [(line, SECOND_INDEX)]
    assert ("X", "ralph/references/x.md") not in [
        (r.topic, r.path) for r in audit.parse_tables(text)[0]
    ]


@pytest.mark.parametrize("sep", ["|-|-|", "|:--|--:|", "| - | - |"])
def test_short_separators_are_separators_not_rows(sep: str) -> None:
    text = LOG.replace("|---|---|", sep)
    assert problems(text) == []
    assert [r.topic for r in audit.parse_tables(text)[0]] == ["Auth | flow", "Build", "Old"]


def test_a_header_without_separator_is_not_a_row() -> None:
    text = LOG.replace("|---|---|\n", "")
    assert ("Topic", "Reference Path") not in rows(Progress.parse(text))
    line = text.split("\n").index("| Auth \\| flow | ralph/references/auth.md |") + 1
    assert problems(text) == [(line, "the table has no header separator line (|---|---|)")]


def test_a_row_without_its_closing_bar_is_not_read_and_check_says_so() -> None:
    text = LOG.replace("| Old | ralph/references/old.md |", "| Old | ralph/references/old.md")
    assert ("Old", "ralph/references/old.md") not in rows(Progress.parse(text))
    assert [why for _n, why in problems(text)] == [NOT_A_ROW]


def test_compact_on_a_crlf_log_writes_crlf(tmp_path: Path) -> None:
    """The archived table compact adds is written with the file's own line ends."""
    root = tmp_path / "p"
    (root / "ralph/references").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "prd.json").write_text('{"userStories": []}')
    (root / "ralph.yaml").write_text("references:\n  stale_after: 1\nlog:\n  keep_entries: 1\n")
    (root / "progress.txt").write_bytes(LOG.replace("\n", "\r\n").encode())
    for name in ("auth", "build", "old"):
        (root / f"ralph/references/{name}.md").write_text(f"# {name}\n- a fact\n")
    ledger = root / "ralph/logs/ledger.jsonl"
    ledger.parent.mkdir(parents=True)
    ledger.write_text(
        '{"event": "iteration", "story_id": "US-009", "selected_references": '
        '["ralph/references/auth.md", "ralph/references/build.md"]}\n'
    )
    proj = project.locate(root)
    plan = compact.plan(proj)
    assert [r.topic for r in plan.stale] == ["Old"] and plan.rotated == 1
    compact.apply(proj, plan)
    text = (root / "progress.txt").read_bytes().decode()
    assert "\n" not in text.replace("\r\n", "")
    assert "## Archived\r\n| Topic | Reference Path |\r\n|---|---|\r\n| Old |" in text
    assert audit.check(project.locate(root)) == []


def test_sections_when_the_text_after_the_index_table_starts_in_a_code_fence() -> None:
    text = "## Progress Index\n```\n| A | a.md |\n## fenced\n```\n## 2026-01-01 - US-001\n- x\n"
    p = Progress.parse(text)
    assert p.section_headings() == [("## Progress Index", 1), ("## 2026-01-01 - US-001", 6)]
    assert p.index_section() == ("## Progress Index\n```\n| A | a.md |\n## fenced\n```", 1)
