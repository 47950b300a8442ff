from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from conftest import corpus_cases

from orchestrator import fsutil
from orchestrator.memory.progress import (
    HEADER,
    IndexRow,
    Progress,
    new_progress_text,
)
from orchestrator.memory.vocab import extract_date, extract_story_ids
from orchestrator.upkeep.migrate import build_memory

STANDARD = """# Ralph Progress Log
Started: Tue Jan 13 23:40:01 CET 2026
---

## Codebase Patterns
- Use `pnpm` not npm
- Migrations live in db/migrations

## 2026-01-13 23:48 - US-001
- Implemented the country table
- Files changed:
  - `backend/src/Country.java`
  - backend/src/CountryRepo.java (new)
- **Learnings for future iterations:**
  - Flyway needs V-prefixed names
  - Run `./gradlew check` before committing
---

## 2026-01-14 - US-002, US-003
- Did two stories
- Files changed: a/b.ts, c.ts
- **Learnings for future iterations:**
  - One | with a pipe
---
"""


def is_subsequence(old: list[str], new: list[str]) -> bool:
    it = iter(new)
    return all(any(o == n for n in it) for o in old)


def added_and_removed(old: str, new: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(old.splitlines(keepends=True), new.splitlines(keepends=True)))
    return [d[2:] for d in diff if d.startswith("+ ")], [d[2:] for d in diff if d.startswith("- ")]


# -- the corpus: real files, every one ----------------------------------------------------


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_corpus_round_trips_byte_for_byte(path: Path) -> None:
    text = fsutil.read_text(path)
    progress = Progress.parse(text)
    assert progress.render() == text
    # The parts partition the text: every entry's raw block is in the file, in order.
    pos = 0
    for entry in progress.entries:
        found = text.find(entry.text, pos)
        assert found >= 0
        pos = found + len(entry.text)


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_corpus_index_row_touches_nothing_else(path: Path) -> None:
    text = fsutil.read_text(path)
    before = Progress.parse(text)
    after = before.with_index_row("Auth | flow", "ralph/references/auth-flow.md")
    new = after.render()
    added, removed = added_and_removed(text, new)
    assert removed == []
    assert [a for a in added if a.strip()] == [
        a for a in after.index_text.splitlines(keepends=True) if a.strip()
    ]
    assert after.index_rows == [IndexRow("Auth | flow", "ralph/references/auth-flow.md")]
    assert [e.text for e in after.entries] == [e.text for e in before.entries]
    assert after.codebase_patterns == before.codebase_patterns
    # Idempotent, and an update changes exactly one line.
    assert after.with_index_row("auth | FLOW", "ralph/references/auth-flow.md").render() == new
    updated = after.with_index_row("Auth | flow", "ralph/references/auth.md").render()
    added, removed = added_and_removed(new, updated)
    assert len(added) == len(removed) == 1 and "auth.md" in added[0]
    # Removing the row leaves only the empty table added.
    assert after.without_index_row("Auth | flow").index_rows == []


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_corpus_append_never_rewrites(path: Path) -> None:
    text = fsutil.read_text(path)
    block = "## 2026-02-01 - US-900\n- appended\n---\n"
    new = Progress.parse(text).append_entry(block).render()
    assert new.startswith(text)
    nl = "\r\n" if "\r\n" in text else "\n"
    assert new.endswith(block.replace("\n", nl))
    assert len(new) - len(text) - len(block.replace("\n", nl)) in (0, len(nl))
    assert Progress.parse(new).entries[-1].story_ids == ["US-900"]


def test_corpus_entries_are_read(corpus: Path) -> None:
    """Spot checks on real files of each style."""

    def entries(name: str) -> list:
        return Progress.load(corpus / name / "progress.txt").entries

    std = entries("HenryJobst__resulter")
    assert len(std) == 12 and std[0].story_ids == ["US-001"] and std[0].date == "2026-01-13 23:48"
    assert all(e.learnings for e in std)
    multi = entries("Jensderond__ultra-gitlab")[0]
    assert multi.story_ids == ["T006", "T007", "T008"]
    beads = entries("JDaws-Dev__CARD-APP")[0]
    assert beads.story_ids == ["CD-sux"]
    assert beads.files_changed == [
        "src/components/collection/CardDetailModal.tsx",
        "src/components/collection/CollectionView.tsx",
    ]
    iteration = entries("MichaelVessia__subq")[0]
    assert iteration.heading.startswith("## Iteration 1") and iteration.date == "2026-01-14 22:12"
    oneline = entries("cmbaldwin__oroshi")  # "[date] Story: US-001 - ..." blocks, no "##"
    assert len(oneline) == 40 and oneline[0].story_ids == ["US-001"]
    assert oneline[0].files_changed[0] == "app/controllers/oroshi/dashboard_controller.rb"
    assert oneline[0].learnings[0].startswith("Dashboard controller had missing methods")
    newest_first = entries("LJNljn2__moneybook-ai-")
    assert [e.story_ids[0] for e in newest_first[:3]] == ["US-002", "US-003", "US-001"]
    crlf = Progress.load(corpus / "SpatariuRares__obsidian-workout-plugin" / "progress.txt")
    assert crlf.newline == "\r\n" and crlf.entries[0].story_ids == ["US-010"]


# -- the standard format --------------------------------------------------------------------


def test_standard_file_is_read() -> None:
    p = Progress.parse(STANDARD)
    assert p.header == "# Ralph Progress Log\nStarted: Tue Jan 13 23:40:01 CET 2026\n---\n\n"
    assert p.codebase_patterns == "- Use `pnpm` not npm\n- Migrations live in db/migrations\n\n"
    assert not p.has_index and p.index_rows == [] and p.index_text == ""
    first, second = p.entries
    assert first.heading == "## 2026-01-13 23:48 - US-001"
    assert first.story_ids == ["US-001"] and first.date == "2026-01-13 23:48"
    assert first.files_changed == ["backend/src/Country.java", "backend/src/CountryRepo.java"]
    assert first.learnings == [
        "Flyway needs V-prefixed names",
        "Run `./gradlew check` before committing",
    ]
    assert first.text.startswith("## 2026-01-13") and first.text.endswith("---\n\n")
    assert second.story_ids == ["US-002", "US-003"] and second.files_changed == ["a/b.ts", "c.ts"]
    assert second.learnings == ["One | with a pipe"]


def test_index_goes_after_header_before_patterns() -> None:
    p = Progress.parse(STANDARD).with_index_row("DB schema", "ralph/references/db-schema.md")
    text = p.render()
    assert text.startswith(
        "# Ralph Progress Log\nStarted: Tue Jan 13 23:40:01 CET 2026\n---\n\n"
        "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
        "| DB schema | ralph/references/db-schema.md |\n\n## Codebase Patterns\n"
    )
    assert text.endswith(STANDARD[STANDARD.index("## Codebase Patterns") :])
    assert p.has_index and p.index_rows == [IndexRow("DB schema", "ralph/references/db-schema.md")]
    # Parsing the rendered text gives the same model.
    again = Progress.parse(text)
    assert again.index_rows == p.index_rows and len(again.entries) == 2


def test_rows_append_after_the_last_row_and_update_in_place() -> None:
    p = Progress.parse(new_progress_text("X", with_index=True))
    p = p.with_index_row("A", "ralph/references/a.md").with_index_row("B", "b.md")
    p = p.append_entry("## 2026-01-01 - US-001\n- x\n---\n")
    p = p.with_index_row("C", "c.md").with_index_row("a", "ralph/references/a2.md")
    assert [(r.topic, r.path) for r in p.index_rows] == [
        ("A", "ralph/references/a2.md"),
        ("B", "b.md"),
        ("C", "c.md"),
    ]  # keeps "A"
    assert p.render() == (
        "# Ralph Progress Log\nStarted: X\n---\n\n## Progress Index\n"
        "| Topic | Reference Path |\n|---|---|\n| A | ralph/references/a2.md |\n"
        "| B | b.md |\n| C | c.md |\n## 2026-01-01 - US-001\n- x\n---\n"
    )
    assert p.without_index_row("b").without_index_row("nope").index_rows == [
        IndexRow("A", "ralph/references/a2.md"),
        IndexRow("C", "c.md"),
    ]
    assert p.without_index_row("topic").render() == p.render()  # the header row is not a row


def test_existing_index_in_other_table_shape() -> None:
    text = (
        "# Ralph Progress Log\nStarted: X\n---\n## Progress Index\n\n| Topic | Path |\n"
        "|:---|---:|\n| `Auth` | `ralph/references/auth.md` |\n\nSome note.\n\n"
        "## Codebase Patterns\n"
    )
    p = Progress.parse(text)
    assert p.index_rows == [IndexRow("`Auth`", "ralph/references/auth.md")]
    q = p.with_index_row("New", "ralph/references/new.md")
    added, removed = added_and_removed(text, q.render())
    assert removed == [] and added == ["| New | ralph/references/new.md |\n"]
    assert q.render().index("| New |") < q.render().index("Some note.")


def test_heading_only_index_gets_a_table() -> None:
    p = Progress.parse("## Progress Index\n").with_index_row("A", "a.md")
    assert p.render() == "## Progress Index\n| Topic | Reference Path |\n|---|---|\n| A | a.md |\n"


def test_crlf_file_stays_crlf() -> None:
    text = STANDARD.replace("\n", "\r\n")
    p = Progress.parse(text)
    assert p.render() == text and p.entries[0].learnings[0] == "Flyway needs V-prefixed names"
    q = p.with_index_row("T", "t.md").append_entry("## 2026-02-02 - US-004\n- y\n")
    out = q.render()
    assert "\n" not in out.replace("\r\n", "")
    assert out.endswith("## 2026-02-02 - US-004\r\n- y\r\n")


def test_append_adds_newline_only_when_needed() -> None:
    assert Progress.parse("a").append_entry("b").render() == "a\nb\n"
    assert Progress.parse("a\n").append_entry("b\n").render() == "a\nb\n"
    assert Progress.parse("").append_entry("b").render() == "b\n"


def test_empty_and_missing(tmp_path: Path) -> None:
    p = Progress.load(tmp_path / "missing.txt")
    assert p.render() == "" and p.entries == [] and p.header == ""
    q = p.with_index_row("A", "a.md")
    assert q.render() == "## Progress Index\n| Topic | Reference Path |\n|---|---|\n| A | a.md |\n"


def test_pipes_and_newlines_in_cells_are_escaped() -> None:
    p = Progress.parse(new_progress_text("X")).with_index_row("a | b\nc", "x.md")
    assert "| a \\| b c | x.md |" in p.render()
    assert p.index_rows == [IndexRow("a | b c", "x.md")]
    assert p.with_index_row("A | B  C", "x.md").render() == p.render()


def test_empty_topic_is_refused() -> None:
    with pytest.raises(ValueError):
        Progress.parse("").with_index_row(" ", "x.md")


def test_headings_in_code_fences_are_not_sections() -> None:
    text = (
        "# Log\n---\n## 2026-01-01 - US-001\n```md\n## Progress Index\n| A | a.md |\n```\n"
        "```` ```json ``` ```` not a fence\n## 2026-01-02 - US-002\n"
    )
    p = Progress.parse(text)
    assert not p.has_index and [e.story_ids for e in p.entries] == [["US-001"], ["US-002"]]
    assert p.render() == text


def test_unclosed_fence_does_not_swallow_the_log() -> None:
    text = "# Log\n## 2026-01-01 - US-001\n```\nno close\n## 2026-01-02 - US-002\n"
    assert [e.story_ids for e in Progress.parse(text).entries] == [["US-001"], ["US-002"]]


def test_new_progress_text_is_ralph_header() -> None:
    assert (
        new_progress_text("X")
        == "# Ralph Progress Log\nStarted: X\n---\n"
        == HEADER.format(date="X")
    )
    assert new_progress_text("X", with_index=True).endswith(
        "---\n\n## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    )
    assert Progress.parse(new_progress_text("X", with_index=True)).has_index
    assert new_progress_text().startswith("# Ralph Progress Log\nStarted: ")


@pytest.mark.parametrize(
    ("heading", "ids", "date"),
    [
        ("## 2026-01-13 23:48 - US-001", ["US-001"], "2026-01-13 23:48"),
        ("## 2026-01-30 - T009, T010, T011", ["T009", "T010", "T011"], "2026-01-30"),
        ("## CD-sux - Collection Modal", ["CD-sux"], None),
        ("## scorched-earth-x47.2 - Implement HUD", ["scorched-earth-x47.2"], None),
        ("## Iteration 2 - task-002 & task-005: Cache", ["task-002", "task-005"], None),
        ("## Sun May 24 01:35:00 CST 2026 - US-002", ["US-002"], "Sun May 24 01:35:00 CST 2026"),
        ("## [Sat Jan 10 13:30] - US-001", ["US-001"], "Sat Jan 10 13:30"),
        ("## TASK-001: Init project (2026-03-24)", ["TASK-001"], "2026-03-24"),
        ("## 2026-01-14 - US-001.1: Import button", ["US-001.1"], "2026-01-14"),
        ("## 2026-01-27 18:47 CST - US-001", ["US-001"], "2026-01-27 18:47 CST"),
        ("## Iteration 1 - 2026-01-14 22:12", [], "2026-01-14 22:12"),
    ],
)
def test_heading_ids_and_dates(heading: str, ids: list[str], date: str | None) -> None:
    assert extract_story_ids(heading) == ids
    assert extract_date(heading) == date


def test_save_through_fsutil_is_byte_exact(tmp_path: Path) -> None:
    path = tmp_path / "progress.txt"
    raw = STANDARD.replace("\n", "\r\n").encode() + "ünï\r\n".encode()
    path.write_bytes(raw)
    p = Progress.load(path).with_index_row("A", "a.md")
    fsutil.atomic_write_text(path, p.render())
    written = path.read_bytes()
    assert written.endswith("ünï\r\n".encode()) and b"| A | a.md |\r\n" in written
    added, removed = added_and_removed(raw.decode(), written.decode())
    assert removed == [] and "| A | a.md |\r\n" in added
    assert Progress.load(path).render().encode() == written


@pytest.mark.parametrize(
    ("block", "files"),
    [
        ("**Files:** a.ts, b/c.tsx\n\n- other.ts is not a file entry\n", ["a.ts", "b/c.tsx"]),
        ("### Files Changed\n\n- x/a.ts\n- b.ts (new)\n\n### Next\n- c.ts\n", ["x/a.ts", "b.ts"]),
        (
            "- Files changed:\n  - package.json: add `tailwindcss@4.2.4`\n  - `src/x.ts` - y\n",
            ["package.json", "src/x.ts"],
        ),
        ("- Files changed: `a/b.ts`, `c.md`\n", ["a/b.ts", "c.md"]),
        ("- Files modified:\n  1. Modified src/foo.ts to add x\n", ["src/foo.ts"]),
        ("- Files changed: none (just PRD update)\n", []),
        ("- Files changed: API service, scheduled/manual jobs\n", []),
        (
            "Files:\n  - app/x.rb\n  - config/y.yml\nTests: PASSING\n- z.rb\n",
            ["app/x.rb", "config/y.yml"],
        ),
        ("- File structure:\n  - src/not-this.ts\n", []),
        ("- Files changed:\n  - `backend/alembic/`\n", ["backend/alembic/"]),
    ],
)
def test_files_changed_extraction(block: str, files: list[str]) -> None:
    entry = Progress.parse("## 2026-01-01 - US-001\n" + block).entries[0]
    assert entry.files_changed == files


@pytest.mark.parametrize(
    ("block", "learnings"),
    [
        (
            "- **Learnings for future iterations:**\n  - A\n  - B\n    wrapped\n---\n",
            ["A", "B\nwrapped"],
        ),
        ("Learnings:\n- A\n- B\n\n[next]\n", ["A", "B"]),
        ("### Learnings for Future Iterations\n\n- A\n\n- B\n\n## not reached\n", ["A", "B"]),
        ("**Notes for next developer:**\n- Use X\n", ["Use X"]),
        ("- **Learning:** The classifier was fine\n", ["The classifier was fine"]),
        ("- Learnings are great but this is prose\n", []),
        (
            "- **Learnings:**\n  - `cmd --flag` works | with pipes\n- Files changed: a.ts\n",
            ["`cmd --flag` works | with pipes"],
        ),
    ],
)
def test_learnings_extraction(block: str, learnings: list[str]) -> None:
    assert Progress.parse("## 2026-01-01 - US-001\n" + block).entries[0].learnings == learnings


def test_fallback_entries_in_logs_without_story_headings(corpus: Path) -> None:
    shock = Progress.load(corpus / "Little-Shock__OpenShock" / "progress.txt")
    assert [e.story_ids for e in shock.entries[:2]] == [["US-001"], ["US-002"]]
    assert shock.entries[0].text.startswith("- US-001: Complete.")
    subq = Progress.load(corpus / "MichaelVessia__subq" / "progress.txt")
    assert subq.entries[0].story_ids == ["1.1.0"]  # from "**Story**: 1.1.0 - ..."


def test_random_text_never_breaks_the_model() -> None:
    """Arbitrary mixes of the constructs real logs contain: always lossless, never raises."""
    import random

    pieces = [
        "## 2026-01-01 - US-001\n",
        "## Progress Index\n",
        "| a | b.md |\n",
        "|---|---|\n",
        "## Codebase Patterns\n",
        "```\n",
        "````\n",
        "~~~md\n",
        "- Files changed:\n",
        "  - `x/y.ts`\n",
        "**Learnings:**\n",
        "- item\n",
        "---\n",
        "\n",
        "\r\n",
        "text",
        "[2026-01-02 10:00] Story: US-002 - t\n",
        "- US-003: done\n",
        "| \\| |\n",
        "# Ralph Progress Log\n",
        "\udcff",
        "é",
        "\t",
        "##\n",
        "### Sub\n",
        "Started: x\n",
        "| Topic | Path |\n",
    ]
    rng = random.Random(1234)
    for _ in range(1500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        p = Progress.parse(text)
        assert p.render() == text
        for e in p.entries:
            assert e.text in text
        q = p.with_index_row("Topic | x", "ralph/references/t.md")
        assert q.with_index_row("topic | X", "ralph/references/t.md").render() == q.render()
        assert IndexRow("Topic | x", "ralph/references/t.md") in q.index_rows
        # Nothing removed or altered: the old lines are a subsequence of the new ones (a
        # newline may be added after a last unterminated line).
        old, new = text.split("\n"), q.render().split("\n")
        assert is_subsequence(old[:-1], new)
        assert is_subsequence(old, new) or is_subsequence([*old[:-1], old[-1] + "\r"], new)
        assert q.without_index_row("TOPIC | x").index_rows == p.index_rows
        assert q.append_entry("## x\n").render().startswith(q.render())


def test_index_section_is_just_the_table() -> None:
    text = (
        "# Log\n---\n## Progress Index\nRead only what you need.\n| Topic | Reference Path |\n"
        "|---|---|\n| A | a.md |\n\nProject: X\n| not | index |\n## 2026-01-01 - US-001\n"
    )
    p = Progress.parse(text)
    assert p.index_text == (
        "## Progress Index\nRead only what you need.\n"
        "| Topic | Reference Path |\n|---|---|\n| A | a.md |\n\n"
    )
    assert p.index_rows == [IndexRow("A", "a.md")]
    q = p.with_index_row("B", "b.md")
    assert q.render() == text.replace("| A | a.md |\n", "| A | a.md |\n| B | b.md |\n")
    assert Progress.parse("## Progress Index\nnote\n").with_index_row("A", "a.md").render() == (
        "## Progress Index\n| Topic | Reference Path |\n|---|---|\n| A | a.md |\nnote\n"
    )


# -- the index read from the top of the log equals the one the whole split finds ----------

_INDEX = (
    "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
    "| Auth | ralph/references/auth.md |\n\n"
)
_ENTRY = "## 2026-01-02 - US-001\n- did it\n---\n"
PREFIX_CASES = {
    "index then entries": HEADER.format(date="d") + "\n" + _INDEX + _ENTRY * 3,
    "patterns between": HEADER.format(date="d") + _INDEX + "## Codebase Patterns\n- x\n" + _ENTRY,
    "entries first": HEADER.format(date="d") + _ENTRY + _INDEX + _ENTRY,
    "no entries": HEADER.format(date="d") + _INDEX + "[2026-01-08 12:42] Story: US-001 - a\n",
    "closed fence above": "```\n## Progress Index\n| A | a.md |\n```\n" + _INDEX + _ENTRY,
    "unclosed fence after": _INDEX + "```\n" + _ENTRY + "## Progress Index\n| B | b.md |\n",
    "unclosed fence above": "~~~\n" + _INDEX + _ENTRY,
    "fence in index": "## Progress Index\n```\n| A | a.md |\n```\n| B | b.md |\n" + _ENTRY,
    "no index": HEADER.format(date="d") + _ENTRY * 2,
    "crlf": (HEADER.format(date="d") + _INDEX + _ENTRY).replace("\n", "\r\n"),
    "index at the end": _ENTRY + _INDEX,
    "prose after table": "## Progress Index\n| A | a.md |\n\nnotes\n" + _ENTRY,
    "prose and a table after the index": "## Progress Index\n| A | a.md |\n\nn\n| x | y |\n"
    + _ENTRY,
    "crlf notes": ("## Progress Index\n| A | a.md |\n\nnotes\n\n" + _ENTRY).replace("\n", "\r\n"),
}


def test_the_index_section_of_a_long_log_is_read_from_its_top_only() -> None:
    """A run's first iteration asks for the index section's size: a log of thousands of
    entries is not split into them for that."""
    p = Progress.parse(HEADER.format(date="d") + _INDEX + "notes\n" + _ENTRY * 3000)
    assert p.index_section() == (_INDEX + "notes", 4)
    assert "_segments" not in p.__dict__


def _whole(text: str) -> Progress:
    from orchestrator.memory.progress import _split

    return Progress(_split(text), text)


@pytest.mark.parametrize("text", list(PREFIX_CASES.values()), ids=list(PREFIX_CASES))
def test_index_from_the_top_equals_the_whole_split(text: str) -> None:
    fast, whole = Progress.parse(text), _whole(text)
    assert (fast.has_index, fast.index_text, fast.index_rows) == (
        whole.has_index,
        whole.index_text,
        whole.index_rows,
    )
    assert fast.index_section() == whole.index_section()
    assert fast.render() == text and fast.entries == whole.entries


@pytest.mark.parametrize("path", corpus_cases("progress.txt"))
def test_index_from_the_top_equals_the_whole_split_on_the_corpus(path: Path) -> None:
    log = fsutil.read_text(path)
    head, _, rest = log.partition("\n## ")
    for text in (log, f"{head}\n{_INDEX}## {rest}", _INDEX + log):
        fast, whole = Progress.parse(text), _whole(text)
        assert fast.index_text == whole.index_text
        assert fast.index_section() == whole.index_section()
        assert fast.entry_count == whole.entry_count


@pytest.mark.parametrize(
    "text", ["", "a", "a\n", "\n\n", "a\nb", "a\r\nb\x0c c\n\n", "x\u2028y\n", "## h\n```\n"]
)
def test_split_lines_cuts_after_each_newline_only(text: str) -> None:
    import re

    from orchestrator.memory.markdown import split_lines

    assert split_lines(text) == re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    assert "".join(split_lines(text)) == text


def test_fenced_lines_and_section_starts_on_a_long_log_with_fences() -> None:
    from orchestrator.memory.markdown import SECTION_START, fenced_lines, section_starts

    block = "## 2026-01-01 - US-1\n```md\n## not a section\n```\n~~~\n## inside\n~~~~\n"
    lines = (block * 50 + "```\n## after an unclosed fence\n").splitlines(keepends=True)
    fenced = fenced_lines(lines)
    assert section_starts(lines) == [
        i for i, line in enumerate(lines) if i not in fenced and SECTION_START.match(line)
    ]
    assert len(section_starts(lines)) == 51  # 50 entries + the heading after the stray ```


def test_table_cells_are_the_same_with_and_without_escaped_bars() -> None:
    from orchestrator.memory.markdown import split_row

    assert split_row("| Auth flow | ralph/references/auth.md |\n") == [
        "Auth flow",
        "ralph/references/auth.md",
    ]
    assert split_row("| a \\| b | ralph/references/ab.md |") == ["a | b", "ralph/references/ab.md"]
    assert split_row("|  | x |") == ["", "x"] and split_row("| lone") is None
    assert split_row("| C:\\path | `p.md` |") == ["C:\\path", "`p.md`"]


def test_migrated_history_lines_are_no_entries() -> None:
    """`ralph migrate` leaves one summary line per story under "## Migrated History"
    ("- US-001: Title" when the log gave no date): a summary is not a log entry, whether or
    not the agent has appended one since (status counted them only before it had)."""
    log = (
        "# Ralph Progress Log\n---\n\n## US-001 - Set up\n- Files changed: a.py\n"
        "- **Learnings:**\n  - Use x\n\n## US-002 - Add y\n- **Learnings:**\n  - Use z\n"
    )
    migrated, _refs = build_memory(log)
    assert "\n- US-001: Set up\n" in migrated
    assert Progress.parse(migrated).entry_count == 0
    appended = Progress.parse(migrated).append_entry("## 2026-01-02 - US-003\n- did w\n")
    assert [e.story_ids for e in appended.entries] == [["US-003"]]
    # A log whose entries have no "## " heading keeps counting the ones appended after.
    dated = Progress.parse(migrated + "\n[2026-01-10 10:00] Story: US-003 - Add w\n- did w\n")
    assert [e.story_ids for e in dated.entries] == [["US-003"]]
