"""Selection: ranking, items, hints, cut-off, budget and cap trimming, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator import tokens
from orchestrator.run import considered, rank, where
from orchestrator.run import select as sel

AUTH = sel.Source(
    "Auth flow",
    "ralph/references/auth-flow.md",
    "# Auth flow\n\n"
    "- [US-003] Login uses `useAuth()` from src/hooks/useAuth.ts; never read the token directly\n"
    "- [US-004] Session tokens refresh in middleware.ts before expiry\n"
    "  - refresh is skipped for /api/health\n"
    "- [US-009] Logout clears the session cookie and the auth store\n",
)
DB = sel.Source(
    "DB schema",
    "ralph/references/db-schema.md",
    "# DB schema\n\n## Migrations\n"
    "- [US-002] Migrations live in prisma/migrations; run `npx prisma migrate dev`\n"
    "- [US-005] Every table has created_at and updated_at columns\n\n## Gotchas\n"
    "- [US-006] SQLite has no enum type: use a CHECK constraint\n",
)
RELEASE = sel.Source(
    "Release",
    "ralph/references/release.md",
    "# Release\n- Bump the version in package.json and tag it\n- Changelog comes from commits\n",
)
SOURCES = [AUTH, DB, RELEASE]


def test_tokenize_splits_identifiers_paths_and_stems() -> None:
    words = sel.tokenize("useAuth in src/hooks/session_store.ts filtering Filters")
    assert "useauth" in words and "auth" in words and "hook" in words
    assert "session" in words and "store" in words
    assert words.count("filter") == 2  # "filtering" and "Filters" meet
    assert "in" not in words


def test_split_items_keeps_nested_lines_and_heading_context() -> None:
    items = sel.split_items(AUTH.text)
    assert len(items) == 3
    assert items[1][1] == (
        "- [US-004] Session tokens refresh in middleware.ts before expiry\n"
        "  - refresh is skipped for /api/health\n"
    )
    assert all(h == "" for h, _ in items)  # the "# Title" line is not a section
    db = sel.split_items(DB.text)
    assert [h for h, _ in db] == ["## Migrations", "## Migrations", "## Gotchas"]
    para = sel.split_items("Intro line one\ncontinues here.\n\nSecond paragraph.\n")
    assert [t for _, t in para] == ["Intro line one\ncontinues here.\n", "Second paragraph.\n"]


def test_ranks_the_matching_items_and_drops_the_rest() -> None:
    s = sel.select("Add a logout button that ends the session", SOURCES, budget=None)
    text = sel.render(s, SOURCES)
    assert "Logout clears the session cookie" in text
    assert "Bump the version" not in text
    rows = {r["path"]: r for r in s.considered}
    assert rows[RELEASE.path]["taken"] is False
    assert rows[RELEASE.path]["reason"] == "no match"
    assert rows[AUTH.path]["taken"] and "relevant" in rows[AUTH.path]["reason"]


def test_cutoff_drops_weak_matches_even_with_room() -> None:
    query = "prisma migrations for the session table"
    loose = sel.select(query, SOURCES, budget=None, cutoff=0.0)
    strict = sel.select(query, SOURCES, budget=None, cutoff=0.9)
    assert len(strict.chunks) < len(loose.chunks)
    assert any("below cut-off" in r["reason"] for r in strict.considered)


def test_story_hint_comes_first_even_without_a_match() -> None:
    s = sel.select(
        "Add a logout button",
        SOURCES,
        budget=None,
        story_hints=["release"],
        always=["ralph/references/db-schema.md"],
    )
    rows = {r["path"]: r for r in s.considered}
    assert rows[RELEASE.path]["reason"] == "hint: story"
    assert rows[RELEASE.path]["taken_items"] == 2
    # Hints match topic names, slugs, file names and index paths alike.
    assert sel.hinted(SOURCES, ["DB Schema", "auth-flow.md", "nope"]) == [1, 0]


def _patterns(n: int) -> sel.Source:
    """An `always` reference of n unrelated bullets (~2k tokens for n = 130) and one about
    the session cookie."""
    filler = [
        f"- Widget {i} renders its chart with the palette gradient number {i}\n" for i in range(n)
    ]
    body = (
        "".join(filler[: n // 2])
        + "- Session cookie names start with app_\n"
        + "".join(filler[n // 2 :])
    )
    return sel.Source(
        "Codebase patterns",
        "ralph/references/codebase-patterns.md",
        "# Codebase patterns\n\n" + body,
    )


def test_always_reference_takes_part_item_by_item_never_whole() -> None:
    patterns = _patterns(130)
    assert tokens.count(patterns.text) > 1900
    sources = [AUTH, patterns]
    # The cut-off is stated: what is tested is the item-by-item rule, not the default's value.
    s = sel.select(
        "Logout ends the session cookie",
        sources,
        budget=None,
        always=["Codebase patterns"],
        cutoff=0.55,
    )
    rows = {r["path"]: r for r in s.considered}
    taken = [c.text for c in s.chunks if c.ref == 1]
    assert taken == ["- Session cookie names start with app_\n"]
    assert rows[patterns.path]["reason"] == "always, below cut-off"
    assert rows[patterns.path]["taken_tokens"] < 20


def test_always_item_passes_at_a_lower_bar_than_the_rest() -> None:
    patterns = _patterns(4)
    query = "Logout ends the session cookie"
    scores, _ = sel.score_items(query, [AUTH, patterns], history="")
    weak = max(scores[3:])  # the patterns' best item
    cut = min(0.99, 1.5 * weak / max(scores))  # above the item's share, under twice it
    plain = sel.select(query, [AUTH, patterns], budget=None, cutoff=cut)
    marked = sel.select(
        query, [AUTH, patterns], budget=None, cutoff=cut, always=["Codebase patterns"]
    )
    assert not any(c.ref == 1 for c in plain.chunks)
    assert any(c.ref == 1 for c in marked.chunks)


def test_irrelevant_reference_is_not_inlined_even_with_budget_room() -> None:
    s = sel.select("Add a logout button that ends the session", SOURCES, budget=100_000)
    assert RELEASE.path not in [SOURCES[r].path for r in s.refs]
    assert s.tokens < 100  # the ceiling is far; relevance stopped the selection
    assert all(r["taken_items"] == 0 for r in s.considered if r["path"] == DB.path)


def test_budget_is_never_exceeded_and_drops_are_explained() -> None:
    query = "session auth tokens login logout middleware migrations tables"
    full = sel.select(query, SOURCES, budget=None, cutoff=0.0)
    small = sel.select(query, SOURCES, budget=40, cutoff=0.0)
    assert full.tokens > 40
    assert 0 < small.tokens <= 40
    assert sum(tokens.count(c.text) for c in small.chunks) <= 40
    assert any("over budget" in r["reason"] for r in small.considered)


def test_reference_cap_trims_one_reference() -> None:
    long_ref = sel.Source(
        "Auth flow",
        "ralph/references/auth.md",
        "".join(f"- session auth note {i}: {'detail ' * 30}\n" for i in range(10)),
    )
    s = sel.select("session auth", [long_ref], budget=None, ref_cap=200, cutoff=0.0)
    assert 0 < s.tokens <= 200
    assert "over references.max_tokens" in s.considered[0]["reason"]


def test_same_inputs_same_selection() -> None:
    a = sel.select("session login auth", SOURCES, budget=60)
    b = sel.select("session login auth", SOURCES, budget=60)
    assert a == b and sel.render(a, SOURCES) == sel.render(b, SOURCES)


def test_deterministic_across_processes_with_different_hash_seeds() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_select import SOURCES\nfrom orchestrator.run import select as sel\n"
        "s = sel.select('logout session auth tokens', SOURCES, budget=80)\n"
        "print(sel.render(s, SOURCES) + repr(s.considered))\n"
    )
    outs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(res.stdout)
    assert len(outs) == 1 and "Logout" in outs.pop()


def test_render_shows_partial_references_and_headings() -> None:
    s = sel.select("SQLite enum CHECK constraint", SOURCES, budget=None)
    text = sel.render(s, SOURCES)
    assert text.startswith("## References for this story")
    # The path is the index row's; the heading says only what the index does not.
    assert "### DB schema (1 of 3 items)\n#### Gotchas\n[US-006]\n- SQLite has no enum" in text
    assert "db-schema.md" not in text and "#### Migrations" not in text
    assert sel.render(sel.Selection([]), SOURCES) == ""


def _all_of(src: sel.Source) -> sel.Selection:
    items = sel.split_items(src.text)
    return sel.Selection([sel.Chunk(0, i, h, b) for i, (h, b) in enumerate(items)])


def test_render_shows_a_story_tag_once_per_run_of_its_items() -> None:
    src = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-010] Logout sits in the header menu\n"
        "- [US-010] Menus close on Escape\n  - nested under it\n"
        "- [US-011, US-012] Toasts stack bottom-right\n"
        "- [2026-01-05] A story without an id is tagged by its date\n"
        "1. [US-012] Numbered items lose the tag too\n"
        "\n## Later\n- [US-012] A new section shows its tag again\n",
    )
    assert sel.render(_all_of(src), [src]) == (
        "## References for this story\n\n### UI\n"
        "[US-010]\n- Logout sits in the header menu\n- Menus close on Escape\n  - nested under it\n"
        "[US-011, US-012]\n- Toasts stack bottom-right\n"
        "[2026-01-05]\n- A story without an id is tagged by its date\n"
        "[US-012]\n1. Numbered items lose the tag too\n"
        "#### Later\n[US-012]\n- A new section shows its tag again"
    )


def test_render_keeps_tags_on_their_items_where_a_section_mixes_in_untagged_ones() -> None:
    # Lifted out, "[US-1]" would head the untagged note and the task boxes below it.
    src = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-1] Logout sits in the header menu\n- An untagged note\n- [x] A task box\n"
        "- [-] A cancelled box\n- [gotcha] A word tag\n- [US-2]\n  - a tag alone stays\n",
    )
    assert sel.render(_all_of(src), [src]) == "## References for this story\n\n### UI\n" + (
        src.text.rstrip("\n")
    )


def test_the_compact_form_copied_into_a_file_reads_as_the_file_it_was_shown_from() -> None:
    # An agent that writes the block's form back (a tag line over its story's items) keeps
    # each item's story: for ranking (its group) and for the next prompt (its tag).
    src = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-010] Logout sits in the header menu\n"
        "- [US-010] Menus close on Escape\n  - nested under it\n"
        "- [US-011, US-012] Toasts stack bottom-right\n"
        "1. [US-012] Numbered items\n",
    )
    shown = sel.render(_all_of(src), [src]).split("### UI\n", 1)[1]
    copied = sel.Source("UI", src.path, "# UI\n\n" + shown)
    assert "[US-011, US-012]\n- Toasts" in copied.text
    assert [b.rstrip() for _, b in sel.split_items(copied.text)] == [
        b.rstrip() for _, b in sel.split_items(src.text)
    ]
    assert sel.render(_all_of(copied), [copied]) == sel.render(_all_of(src), [src])
    keys = [rank.tag(b) for _, b in sel.split_items(copied.text)]
    assert keys == ["[US-010]", "[US-010]", "[US-011, US-012]", "[US-012]"]


def test_a_tag_line_tags_the_bullets_after_it_until_a_heading_or_a_paragraph() -> None:
    items = sel.split_items(
        "[US-1]\n- a\n- [US-9] keeps its own\n## Next\n- b\n[US-2]\n- c\n"
        "## Build\n[2026-01-05]\nSwitched to pnpm.\n- d\n- e\n  [US-8]\n  wrapped\n"
    )
    assert [b.strip() for _, b in items] == [
        "- [US-1] a",
        "- [US-9] keeps its own",
        "- b",
        "- [US-2] c",
        # Over prose, or indented inside an item, a tag line is text: nothing is lost.
        "[2026-01-05]\nSwitched to pnpm.",
        "- d",
        "- e\n  [US-8]\n  wrapped",
    ]
    # A task box or a word alone on its line tags nothing.
    boxes = sel.split_items("[x]\n- a\n[-]\n- b\n")
    assert "".join(b for _, b in boxes) == "[x]\n- a\n[-]\n- b\n"
    assert {rank.tag(b) for _, b in boxes} == {""}


def test_a_learning_written_twice_is_shown_once() -> None:
    ui = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-1] Run `pnpm typecheck` before every commit\n"
        "- [US-1] Logout clears the sid cookie\n",
    )
    api = sel.Source(
        "API",
        "ralph/references/api.md",
        "* [US-2]  run `pnpm typecheck`  before every commit\n"
        "- [US-2] The sid cookie is httpOnly\n",
    )
    query = "logout: httpOnly sid cookie, pnpm typecheck"
    s = sel.select(query, [ui, api], budget=None, cutoff=0.0)
    text = sel.render(s, [ui, api])
    assert text.lower().count("typecheck") == 1
    assert "Logout clears" in text and "httpOnly" in text
    rows = {r["path"]: r for r in s.rows()}
    assert rows[ui.path]["taken_items"] + rows[api.path]["taken_items"] == 3
    # The first copy left out for want of room (references.max_tokens): the other is shown.
    first = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-1] Logout clears the sid cookie and the session\n"
        "- [US-1] Run `pnpm typecheck` before every commit\n",
    )
    alone = sel.Source(
        "CI", "ralph/references/ci.md", "- [US-3] Run `pnpm typecheck` before every commit\n"
    )
    for cap in range(sel.tok.count(alone.text) + 1, 30):
        got = sel.select(
            "logout clears the sid cookie and the session; pnpm",
            [first, alone],
            budget=None,
            cutoff=0.0,
            ref_cap=cap,
        )
        assert sel.render(got, [first, alone]).count("typecheck") == 1, cap


def test_render_names_the_path_of_a_reference_the_shown_index_does_not_list() -> None:
    # An area's topic (its row is in the area's file) or a row a long index leaves out: the
    # heading is then the agent's only way to the rest of the reference.
    s = sel.select("SQLite enum CHECK constraint", SOURCES, budget=None)
    listed = {AUTH.path, RELEASE.path}
    text = sel.render(s, SOURCES, listed)
    assert "### DB schema (`ralph/references/db-schema.md`, 1 of 3 items)" in text
    assert "### DB schema (1 of 3 items)" in sel.render(s, SOURCES, {DB.path})


def test_learnings_of_one_story_rank_together_across_topics() -> None:
    ui = sel.Source(
        "UI",
        "ralph/references/ui.md",
        "- [US-010] Logout button sits in the header menu\n"
        "- [US-011] Colours come from theme tokens\n",
    )
    api = sel.Source(
        "API",
        "ralph/references/api.md",
        "- [US-010] DELETE /api/session returns 204 and expires the cookie\n"
        "- [US-012] Rate limits live in src/limits.ts\n",
    )
    s = sel.select("Add a logout button", [ui, api], budget=None)
    text = sel.render(s, [ui, api])
    # The API bullet shares no word with the story, but its story (US-010) does.
    assert "DELETE /api/session" in text
    assert "theme tokens" not in text and "Rate limits" not in text


def test_a_tag_naming_no_story_does_not_pool_unrelated_items_into_one_group() -> None:
    # migrate tags the Codebase Patterns that overflow the always reference `[patterns]`;
    # ranked as one group, their pooled text matched every story and filled the ceiling.
    def ref(name: str, lines: list[str]) -> sel.Source:
        return sel.Source(name, f"ralph/references/{name}.md", f"# {name}\n\n" + "".join(lines))

    sources = [
        ref(
            "uploads",
            [
                "- [patterns] Multer keeps uploads in memory; stream them to storage\n",
                "- [US-006] Signed documents are PDFs checked by magic bytes\n",
            ],
        ),
        ref(
            "prisma",
            [
                "- [patterns] Prisma enum names are global to the schema\n",
                "- [US-008] RentalPayment rows cascade with their property\n",
            ],
        ),
        ref("email", ["- [patterns] Email templates live in src/emails as MJML\n"]),
    ]
    assert rank.group_key("x.md", "[patterns]", "## H") == "#x.md:## H"
    assert rank.group_key("x.md", "[-]", "## H") == "#x.md:## H"  # a cancelled task box
    assert rank.group_key("x.md", "[US-006]", "## H") == "[US-006]"
    assert rank.group_key("x.md", "[2026-05-07]", "") == "[2026-05-07]"
    for story in ("[entry 7]", "[CD-sux]", "[12]", "[API/006]", "[Sat Jan 10 13:30]"):
        assert rank.group_key("x.md", story, "## H") == story  # migrate's and trackers' ids
    s = sel.select("Stream multer uploads to storage", sources, budget=None)
    text = sel.render(s, sources)
    assert "Multer keeps uploads" in text
    assert "enum names" not in text and "MJML" not in text


def test_prd_story_text_links_a_tag_to_the_query() -> None:
    ref = sel.Source(
        "Misc",
        "ralph/references/misc.md",
        "- [US-020] Use the `qs` package for query strings\n"
        "- [US-021] Keep fixtures in tests/fixtures\n",
    )
    query = "Filter the invoice list by customer"
    blind = sel.select(query, [ref], budget=None)
    assert blind.chunks == []  # nothing in the bullets matches
    told = sel.select(
        query, [ref], budget=None, stories={"US-020": "Search invoices by customer name"}
    )
    assert [c.text for c in told.chunks] == ["- [US-020] Use the `qs` package for query strings\n"]


def test_bm25_scores_equal_bm25s() -> None:
    import random

    import bm25s

    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    docs = [[rng.choice(vocab) for _ in range(rng.randint(0, 30))] for _ in range(60)]
    query = ["w1", "w2", "w3", "w39", "absent"]
    ref = bm25s.BM25()  # the library's own Lucene BM25 is the oracle
    ref.index([d or [""] for d in docs], show_progress=False)
    expected = ref.get_scores([t for t in query if t in ref.vocab_dict])
    got = rank.bm25(query, docs)
    assert len(got) == len(docs)
    assert all(abs(a - float(b)) < 1e-5 for a, b in zip(got, expected, strict=True))


# ----------------------------------------------------------------------------- recency

STEPS = sel.Source(
    "Work",
    "ralph/references/work.md",
    "# Work\n\n" + "".join(f"- [US-{i:03d}] quux detail number {i}\n" for i in range(1, 11)),
)
HISTORY = "# Ralph Progress Log\n" + "".join(
    f"## 2026-01-{i:02d} - US-{i:03d}\n- done\n---\n" for i in (1, 2, 3, 4, 5, 6, 7, 8, 10, 9)
)


def test_story_order_is_the_last_mention_in_the_log() -> None:
    order = sel.story_order(HISTORY + "see US-001 again\n")
    assert order["US-001"] > order["US-009"] > order["US-010"] > order["US-002"]
    assert "US-011" not in order


def test_recency_picks_the_latest_stories_when_the_query_says_nothing() -> None:
    s = sel.select("Polish the onboarding wizard", [STEPS], budget=None, history=HISTORY)
    got = [rank.tag(c.text) for c in s.chunks]
    assert "[US-009]" in got and "[US-010]" in got  # the latest two, whatever their ids
    assert "[US-001]" not in got  # the oldest falls below the cut-off
    # Without the log (or with recency off) nothing matches, so nothing is taken.
    assert sel.select("Polish the onboarding wizard", [STEPS], budget=None).chunks == []
    assert (
        sel.select(
            "Polish the onboarding wizard", [STEPS], budget=None, history=HISTORY, recency=0.0
        ).chunks
        == []
    )


def test_a_matching_old_story_still_beats_recency() -> None:
    src = sel.Source(
        "Work",
        "ralph/references/work.md",
        STEPS.text + "- [US-000] the onboarding wizard keeps its steps in wizard.ts\n",
    )
    hist = "## US-000\n---\n" + HISTORY
    s = sel.select("Polish the onboarding wizard", [src], budget=None, history=hist)
    scores, _ = sel.score_items("Polish the onboarding wizard", [src], history=hist)
    assert scores[-1] == max(scores)  # US-000 matches the query: it ranks first
    assert "wizard.ts" in sel.render(s, [src])


def test_index_is_cached_per_reference_and_scores_do_not_change() -> None:
    q = "Log out and clear the session cookie"
    first = sel.score_items(q, SOURCES)
    rank.ref_index.cache_clear()
    assert sel.score_items(q, SOURCES) == first
    assert rank.ref_index.cache_info().misses == len(SOURCES)
    sel.score_items(q, SOURCES)
    assert rank.ref_index.cache_info().misses == len(SOURCES)  # second call: all hits


def test_story_order_knows_dates_for_stories_without_an_id() -> None:
    # `ralph migrate` tags the learnings of an entry without a story id by its date.
    order = sel.story_order("## 2026-01-30 - fix\n## 2026-02-02 - more\n## 1.2 - x\n")
    assert order["2026-02-02"] > order["2026-01-30"] and "1.2" in order
    src = sel.Source("W", "w.md", "# W\n\n- [2026-01-30] old quux\n- [2026-02-02] new quux\n")
    scores, _ = sel.score_items(
        "nothing alike", [src], history="## 2026-01-30 - a\n## 2026-02-02 - b\n"
    )
    assert scores[1] > scores[0] > 0


def test_story_order_reads_a_long_log_from_its_end() -> None:
    """Past 1 MB the log is read from the end until it names enough ids: the most recent
    stories rank exactly as a whole scan ranks them."""
    log = "".join(
        f"## 2026-01-01 - US-{n:05d}\n- did a thing for US-{n:05d}\n\n" for n in range(40_000)
    )
    assert len(log) > rank._TAIL_FROM
    order, whole = sel.story_order(log), rank._mentions(log, 0)
    assert len(order) >= rank._TAIL_IDS
    recent = sorted(order, key=lambda k: -order[k])[: rank._TAIL_IDS]
    assert recent == sorted(whole, key=lambda k: -whole[k])[: rank._TAIL_IDS]
    assert all(order[k] == whole[k] for k in order)


def test_no_references_and_an_empty_reference_select_nothing_from_them() -> None:
    assert sel.select("anything", [], budget=100).chunks == []
    srcs = [sel.Source("Empty", "empty.md", ""), *SOURCES]
    scores, ref_scores = sel.score_items("Log out and clear the session cookie", srcs)
    assert len(scores) == len(sel.chunks_of(SOURCES)) and ref_scores[0] == 0.0
    s = sel.select("Log out and clear the session cookie", srcs, budget=None)
    assert 0 not in s.refs
    assert next(r for r in s.considered if r["path"] == "empty.md")["reason"] == "empty"


LOG = """## Codebase Patterns
- Use pnpm

## 2026-01-02 - US-001
Implemented the task list.
### Files Changed
- src/components/TaskList.tsx
- src/api/tasks.ts
### Learnings for Future Iterations
- Rows are virtualised

## 2026-01-03 - US-002
Settings page.
Files changed:
- src/pages/Settings.tsx
"""


def test_entry_files_follow_the_entry_heading_over_sub_headings() -> None:
    files = where.entry_files(LOG)
    assert files["US-001"] == ("src/components/TaskList.tsx", "src/api/tasks.ts")
    assert files["US-002"] == ("src/pages/Settings.tsx",)
    assert where.entry_files("no headings at all") == {}


def test_predicted_files_rank_the_learnings_of_the_story_that_touched_them() -> None:
    refs = [
        sel.Source("UI", "ralph/references/ui.md", "# UI\n\n- [US-001] Rows are virtualised\n"),
        sel.Source("Pages", "ralph/references/pages.md", "# Pages\n\n- [US-002] Forms autosave\n"),
    ]
    query = "Add a due-date column to the TaskList"
    plain, _ = sel.score_items(query, refs, history=LOG, recency=0.0, files=0.0)
    with_files, _ = sel.score_items(query, refs, history=LOG, recency=0.0, files=0.5)
    assert plain == [0.0, 0.0]  # no word in common with either learning
    assert with_files[0] > 0.0 == with_files[1]  # TaskList.tsx was US-001's file
    # A `files:` note on the item itself counts as well, without the log.
    noted = [
        sel.Source(
            "UI", "ui.md", "# UI\n\n- [US-7] Rows are virtualised (files: src/TaskList.tsx)\n"
        )
    ]
    got, _ = sel.score_items(query, noted, recency=0.0, files=0.5)
    assert got[0] > 0.0


def test_repository_tree_lets_a_story_name_a_new_file_in_a_known_folder() -> None:
    # The story names a file no earlier story touched; the tree (`git ls-files`) knows it,
    # and its folder is where US-001 worked: that group gets the area's share.
    files = [("src/components/TaskList.tsx",), ("src/pages/Settings.tsx",)]
    query = frozenset(sel.tokenize("Add a DueDatePicker"))
    prior = np.zeros(2)
    assert where.scores(query, files, prior).tolist() == [0.0, 0.0]
    got = where.scores(query, files, prior, tree=["src/components/DueDatePicker.tsx"])
    assert got[0] == 1.0 and got[1] == 0.0


def test_migrate_header_and_footer_are_never_items() -> None:
    """`Areas:`/`Files:` under the title and the `## Files by story` footer say where the
    learnings apply; inlined alone they would cost tokens and hold no learning."""
    text = (
        "# Api\n\nAreas: `src/api/`\nFiles: src/api/a.ts, src/api/b.ts\n\n"
        "- [US-001] validate bodies with zod\n- [US-002] retry 3 times\n\n"
        "## Files by story\n- US-001: src/api/a.ts\n"
    )
    items = [body for _heading, body in rank.split_items(text)]
    assert items == ["- [US-001] validate bodies with zod\n", "- [US-002] retry 3 times\n"]
    # A paragraph that merely starts so, in a section, is still an item.
    later = text.replace(
        "## Files by story", "## Storage\n\nFiles: are kept in S3\n\n## Files by story"
    )
    assert "Files: are kept in S3\n" in [b for _h, b in rank.split_items(later)]


def test_the_reasons_per_reference_are_made_only_when_asked_for(monkeypatch: Any) -> None:
    """A loop iteration reads the chunks and the references taken, never every reference's
    row (10,000 rows cost a tenth of a second): those are made on first use, the same."""
    made: list[int] = []
    real = considered.rows

    def spy(*args: Any) -> list[dict[str, Any]]:
        made.append(1)
        return real(*args)

    monkeypatch.setattr(considered, "rows", spy)
    s = sel.select("Log in, refresh the session and log out", SOURCES, budget=None)
    assert s.chunks and s.ranked and made == []
    taken = [r["path"] for r in s.considered if r["taken"]]
    assert made == [1] and taken == [SOURCES[r].path for r in s.ranked]
    assert s.considered is s.considered and made == [1]


def test_listed_in_reads_the_paths_an_index_names_however_its_cells_are_written() -> None:
    index = (
        "## Progress Index\n| Topic | Reference Path |\n|---|---|\n"
        "| Auth | ralph/references/auth-flow.md |\n| DB | `./ralph/references/db-schema.md` |\n"
        "|Web|ralph/references/web.md|\n"
    )
    nested = sel.Source("Sessions", "ralph/references/web/sessions.md", "- x\n")
    assert sel.listed_in(index, [*SOURCES, nested]) == {AUTH.path, DB.path}
