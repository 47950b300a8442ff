"""history.sections cuts progress.txt exactly where the progress parser does (merge tests live in
test_checks.py, through checks.verify)."""

from __future__ import annotations

from orchestrator.memory.history import merge_history, sections
from orchestrator.memory.progress import Progress

# A "```" inside a ~~~ block does not open a fence, and an unclosed fence is not structure:
# both must leave "## US-002" a section of its own, for the parser and for the repair alike.
LOG = (
    "# Ralph Progress Log\n---\n"
    "## US-001 - one\n~~~\n```\n~~~\n- a\n"
    "## US-002 - two\n```\n- b\n"
    "## US-003 - three\n- c\n"
)


def test_sections_match_the_parsers_entries() -> None:
    headings = [s[0].strip() for s in sections(LOG)[1:]]
    assert headings == [e.heading.strip() for e in Progress.parse(LOG).entries]
    assert headings == ["## US-001 - one", "## US-002 - two", "## US-003 - three"]


def test_a_deleted_entry_after_fences_comes_back_whole_and_in_place() -> None:
    new = LOG.replace("## US-002 - two\n```\n- b\n", "") + "## US-004 - four\n- d\n"
    merged, lost = merge_history(LOG, new)
    assert lost == ["## US-002 - two\n", "```\n", "- b\n"]
    assert merged == LOG + "## US-004 - four\n- d\n"
