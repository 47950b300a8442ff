"""Where a story applies: the predicted files and folders, and recency for every id format."""

from __future__ import annotations

import numpy as np

from orchestrator.run import rank, where
from orchestrator.run import select as sel

SPECKIT_LOG = "".join(
    f"## 2026-01-30 - T{n:03d}, T{n + 1:03d}\n### Files Changed\n- src/db/m{n}.rs\n"
    f"- specs/001/tasks.md\n### Learnings for Future Iterations\n- note {n}\n\n---\n"
    for n in range(6, 40, 2)
)


def test_story_order_knows_ids_without_a_hyphen() -> None:
    # Speckit logs name tasks "T006"; their groups had no recency at all before.
    order = sel.story_order(SPECKIT_LOG)
    assert order["T038"] > order["T020"] > order["T006"]
    assert "T039" in order and "2026-01-30" in order
    rec = rank.recency_scores(["[T006,T007]", "[T038,T039]"], order, 5.0)
    assert rec[1] == 1.0 and 0.0 < rec[0] < rec[1]
    # Words that only look like ids in lower case stay out (`h1`, `v2`).
    assert "v2" not in sel.story_order("## US-001\n- bump to v2 and h1\n")


def test_recent_stories_lend_their_files_when_the_best_group_has_none() -> None:
    # The story says nothing the learnings say; the best group by recency has no known
    # files. The next ones do, and their files still make the prediction.
    files = [(), ("src/db/pool.rs", "specs/tasks.md"), ("src/db/mod.rs",), ("web/app.tsx",)]
    prior = np.array([1.0, 0.8, 0.6, 0.0])
    got = where.scores(frozenset(), files, prior, feedback=2)
    assert got[0] == 0.0  # no files: no overlap
    assert got[1] == 1.0 and got[2] > 0.0  # the lenders themselves
    assert got[3] == 0.0  # another folder entirely
    # With one lender only the best group with files lends (its folder lends at the area share).
    one = where.scores(frozenset(), files, prior, feedback=1)
    assert one[1] == 1.0 and one[2] == where.AREA_SHARE


def test_a_folder_the_story_names_predicts_its_files() -> None:
    files = [("app/views/onboarding/steps/_buyer.html.erb",), ("app/models/buyer_price.rb",)]
    query = frozenset(sel.tokenize("Convert all step titles to the locale file"))
    got = where.scores(query, files, np.zeros(2))
    assert got[0] == 1.0 and got[1] == 0.0
    assert where.mentioned_areas(query, [f for fs in files for f in fs]) == {"steps": 1.0}


def test_a_group_scores_by_its_best_predicted_file() -> None:
    # One predicted file is the evidence; touching ten other files neither adds nor dilutes.
    many = ("src/TaskList.tsx", *(f"lib/x{i}/other{i}.go" for i in range(10)))
    files = [("src/TaskList.tsx",), many, ("lib/x1/other1.go",)]
    query = frozenset(sel.tokenize("Add a due-date column to the TaskList"))
    got = where.scores(query, files, np.zeros(3))
    assert got[0] == got[1] == 1.0 and got[2] == 0.0


def test_feedback_is_a_weight_select_passes_down() -> None:
    refs = [
        sel.Source("A", "a.md", "# A\n\n" + "".join(f"- [T{n:03d}] note {n}\n" for n in (6, 38))),
    ]
    q = "Wire the quickstart check"
    few = sel.score(q, refs, sel.Weights(feedback=1), history=SPECKIT_LOG)
    many = sel.score(q, refs, sel.Weights(feedback=8), history=SPECKIT_LOG)
    assert sel.Weights().feedback == sel.DEFAULT_FEEDBACK
    # Both groups share specs/001/tasks.md with the recent stories that lend their files.
    assert few.scores[1] >= few.scores[0] > 0.0 and many.scores[0] > 0.0


def test_a_file_many_lenders_share_does_not_dwarf_the_best_groups_own_file() -> None:
    # The best group by text and recency touched `billing.ts` alone; three weaker ones each
    # touched the router. Summed and scaled, the router weighed 1.8 and the best group's
    # own file 1.0: its learnings scored 0.56 of the file signal, below every router group.
    files = [("src/billing.ts",), ("src/router.ts",), ("src/router.ts",), ("src/router.ts",)]
    prior = np.array([1.0, 0.6, 0.6, 0.6])
    got = where.scores(frozenset(), files, prior, feedback=4)
    assert got[0] == 1.0
    # Shared evidence still adds up (1 - 0.4 ** 3), but never beyond certain.
    assert 0.6 < got[1] == got[2] == got[3] < 1.0
    assert round(float(got[1]), 3) == 0.936
    # A mention in the story's text is evidence as well, combined the same way.
    named = where.scores(frozenset(rank.tokenize("the router")), files, prior, feedback=4)
    assert named[1] == 1.0 and named[0] == 1.0


def test_a_file_uri_in_a_learning_is_not_a_files_note() -> None:
    # "file://" read as a `files:` note made "//" the group's only file, hiding the files
    # its log entry changed (`ralph/prd.json`, a doc) from the file signal.
    uri = "- [US-017] Evidence URIs use stable patterns: repo://, artifact://, file://, http://"
    assert where.note_files(uri) == ()
    assert where.note_files("- [US-003] Pool it (files: src/db/pool.rs, `web/app.tsx`)") == (
        "src/db/pool.rs",
        "web/app.tsx",
    )
    logged = {"US-017": ("docs/runner.md", "ralph/prd.json")}
    notes = {"[US-017]": where.note_files(uri)}
    got = where.group_files(["[US-017]"], notes, "", {"[US-017]": ("US-017",)}, None, logged)
    assert got == [("docs/runner.md", "ralph/prd.json")]
