"""ralph migrate: lossless, idempotent, deterministic, check-clean on every corpus history."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import corpus_cases

from orchestrator import cli, fsutil, tokens
from orchestrator.errors import InputError
from orchestrator.memory import areas, entries
from orchestrator.memory.entries import Item
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.upkeep import audit, migrate, naming, topics
from orchestrator.upkeep.audit import SimilarIndex

CAP = 800  # config default references.max_tokens


def _prd(progress: Path) -> Prd | None:
    path = progress.with_name("prd.json")
    if not path.is_file():
        return None
    try:
        return Prd.load(path)
    except InputError:
        return None  # a prd.json shape Prd refuses: migrate works without titles


def _keys(refs: dict[str, str]) -> set[str]:
    keys: set[str] = set()
    for text in refs.values():
        keys |= migrate.line_keys(text)
    return keys


def _norm(line: str) -> str:
    """Content of a line; rules (---) separate entries and carry nothing to keep."""
    key = entries.bullet_key(line)
    return "" if set(key) <= set("-*_ ") else key


@pytest.mark.parametrize("progress", corpus_cases("progress.txt"))
def test_build_memory_is_lossless_and_bounded(progress: Path) -> None:
    text = fsutil.read_text(progress)
    plan = migrate.build_plan(text, _prd(progress), max_tokens=CAP)
    keys = _keys(plan.references)
    everything = "\n".join(plan.references.values())
    parsed = Progress.parse(text)
    # Independent oracle: progress.py's own reading of the learnings and patterns (it strips
    # labels such as "**Learning:**", so its lines are looked up as substrings).
    missing = [
        ln
        for e in parsed.entries
        for learning in e.learnings
        for ln in learning.split("\n")
        if _norm(ln) and _norm(ln) not in everything
    ]
    assert not missing, f"learnings not in any reference: {missing[:5]}"
    patterns = parsed.codebase_patterns or ""
    lost = [ln for ln in patterns.split("\n") if _norm(ln) and _norm(ln) not in keys]
    assert not lost, f"Codebase Patterns lines lost: {lost[:5]}"
    # Bounded: every reference of learnings within the cap (an area reference only lists
    # topics, and never goes into a prompt), the index within max_topics rows, topics
    # distinct for `ralph check`.
    for path, ref in plan.references.items():
        assert areas.is_area(ref) or tokens.count(ref) <= CAP, path
        assert path.startswith("ralph/references/") and ".." not in path
    rows = Progress.parse(plan.progress_text).index_rows
    assert len(rows) <= migrate.DEFAULT_MAX_TOPICS
    assert {r.path for r in rows} == {t.path for t in plan.topics if not t.area}
    names = [t.name for t in plan.topics]
    assert not [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if audit.similar(a, b)]
    assert plan.tokens_after < plan.tokens_before
    # Each topic's reference carries the paths of the files its learnings concern.
    for t in plan.topics:
        files = {f for it in t.items for f in it.files}
        if files and not t.always:
            assert "Files: " in plan.references[t.path]


@pytest.mark.parametrize("progress", corpus_cases("progress.txt"))
def test_build_memory_is_idempotent_and_deterministic(progress: Path) -> None:
    text = fsutil.read_text(progress)
    prd = _prd(progress)
    first = migrate.build_memory(text, prd)
    assert migrate.build_memory(text, prd) == first
    again_text, again_refs = migrate.build_memory(first[0], prd)
    assert (again_text, again_refs) == (first[0], {})
    after = Progress.parse(first[0])
    assert after.has_index
    # The index names every reference but the topics that area references list.
    nested = {p for ref in first[1].values() for _t, p in areas.nested_rows(ref)}
    assert [r.path for r in after.index_rows] == [p for p in first[1] if p not in nested]


def test_summary_line_per_story_and_provenance() -> None:
    text = (
        "# Ralph Progress Log\nStarted: today\n---\n\n## Codebase Patterns\n- Use pnpm\n\n"
        "## 2026-01-01 - US-001\n- Added login\n- Files changed: src/auth/login.ts\n"
        "- **Learnings for future iterations:**\n  - Sessions live in `src/auth/session.ts`\n"
        "    with a 30 min expiry\n  - Run `pnpm test` before commit\n---\n\n"
        "## 2026-01-02 - US-002\n- Added logout\n- Files changed: src/auth/logout.ts\n"
        "- **Learnings for future iterations:**\n  - Logout clears `src/auth/session.ts` state\n"
        "---\n"
    )
    new, refs = migrate.build_memory(text, None, rel_dir="ralph/references")
    assert "- US-001 (2026-01-01): Added login" in new
    assert "- US-002 (2026-01-02): Added logout" in new
    assert "# Ralph Progress Log\nStarted: today\n---\n" in new
    assert refs["ralph/references/codebase-patterns.md"] == "# Codebase patterns\n\n- Use pnpm\n"
    learned = "".join(v for k, v in refs.items() if "codebase" not in k)
    assert "- [US-001] Sessions live in `src/auth/session.ts`\n    with a 30 min expiry" in learned
    assert "- [US-002] Logout clears `src/auth/session.ts` state" in learned
    assert "src/auth" in learned  # the area travels with the text, for BM25
    assert "Added login" not in learned  # what was implemented is summary, not a learning


def _project(tmp_path: Path, corpus_folder: Path) -> Path:
    root = tmp_path / "proj"
    rdir = root / "scripts" / "ralph"
    rdir.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for name in ("progress.txt", "prd.json"):
        if (corpus_folder / name).is_file():
            (rdir / name).write_bytes((corpus_folder / name).read_bytes())
    return root


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


@pytest.mark.parametrize("progress", corpus_cases("progress.txt"))
def test_cli_migrate_then_check_clean_and_rerun_noop(
    progress: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    root = _project(tmp_path, progress.parent)
    monkeypatch.chdir(root)
    original = (root / "scripts/ralph/progress.txt").read_bytes()
    before = _tree(root)
    assert cli.main(["migrate", "--dir", "scripts/ralph", "--dry-run"]) == 0
    assert _tree(root) == before  # a dry run writes nothing
    assert "tokens" in capsys.readouterr().out
    assert cli.main(["migrate", "--dir", "scripts/ralph"]) == 0
    archived = list((root / "scripts/ralph/archive").glob("progress-before-migrate-*.txt"))
    assert len(archived) == 1 and archived[0].read_bytes() == original  # nothing ever lost
    assert cli.main(["check", "--dir", "scripts/ralph"]) == 0, capsys.readouterr().out
    after = _tree(root)
    assert cli.main(["migrate", "--dir", "scripts/ralph"]) == 0
    assert _tree(root) == after  # the second run changes nothing
    if (root / "ralph.yaml").exists():
        assert "Codebase patterns" in (root / "ralph.yaml").read_text()


def test_real_subprocess_migrate(tmp_path: Path, corpus: Path) -> None:
    root = _project(tmp_path, corpus / "RicardoZambon__GeekVault")
    ralph = [sys.executable, "-m", "orchestrator"]
    out = subprocess.run([*ralph, "migrate"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "always selected" in out.stdout and "original kept whole" in out.stdout
    chk = subprocess.run([*ralph, "check"], cwd=root, capture_output=True, text=True)
    assert chk.returncode == 0 and "ralph check: OK" in chk.stdout
    yaml_text = (root / "ralph.yaml").read_text()
    assert "Codebase patterns" in yaml_text


def test_existing_different_reference_blocks_and_changes_nothing(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path, corpus / "IgaoGuru__carnamapa")
    (root / "ralph/references").mkdir(parents=True)
    (root / "ralph/references/codebase-patterns.md").write_text("mine\n")
    before = _tree(root)
    monkeypatch.chdir(root)
    assert cli.main(["migrate"]) == 2
    assert _tree(root) == before


def test_missing_progress_is_an_input_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert cli.main(["migrate"]) == 2


def test_with_always_edits_yaml_minimally() -> None:
    assert migrate._with_always("") == 'references:\n  always: ["Codebase patterns"]\n'
    old = "# mine\ntool: claude\nreferences:\n  max_tokens: 900\n"
    new = migrate._with_always(old)
    assert new.startswith("# mine\ntool: claude\nreferences:\n  always: [")
    assert "max_tokens: 900" in new
    assert migrate._with_always("references:\n  always: [Auth]\n").endswith(
        'always: [Auth, "Codebase patterns"]\n'
    )


def test_crlf_and_header_only_logs() -> None:
    text = (
        "# Ralph Progress Log\r\n---\r\n\r\n## 2026-01-01 - US-001\r\n- done\r\n"
        "- **Learnings for future iterations:**\r\n  - keep `src/a.ts` pure\r\n---\r\n"
    )
    new, refs = migrate.build_memory(text)
    assert "\n" not in new.replace("\r\n", "")
    assert any("keep `src/a.ts` pure" in r for r in refs.values())
    assert migrate.build_memory(new) == (new, {})
    bare, bare_refs = migrate.build_memory("# Ralph Progress Log\nStarted: x\n---\n")
    assert bare_refs == {} and "## Progress Index" in bare and bare.startswith("# Ralph Progress")


def test_killed_migrate_is_completed_or_rolled_back(tmp_path: Path, corpus: Path) -> None:
    import os
    import signal

    ralph = [sys.executable, "-m", "orchestrator"]
    twin = _project(tmp_path / "twin", corpus / "MiniCodeMonkey__tap")
    assert subprocess.run([*ralph, "migrate"], cwd=twin, capture_output=True).returncode == 0
    expected = _tree(twin)
    for mode in ("--recover", "--rollback"):
        root = _project(tmp_path / mode.strip("-"), corpus / "MiniCodeMonkey__tap")
        before = _tree(root)
        env = dict(os.environ, RALPH_TEST_KILL_AFTER_RENAMES="3")
        res = subprocess.run([*ralph, "migrate"], cwd=root, env=env, capture_output=True)
        assert res.returncode == -signal.SIGKILL
        again = subprocess.run([*ralph, "migrate"], cwd=root, capture_output=True, text=True)
        # refuses to stack: exit 2 (an input error, README), naming both ways out
        assert again.returncode == 2 and "--recover" in again.stderr, again.stderr
        assert "--rollback" in again.stderr and "Traceback" not in again.stderr
        done = subprocess.run([*ralph, "compact", mode], cwd=root, capture_output=True)
        assert done.returncode == 0
        assert _tree(root) == (expected if mode == "--recover" else before)


def test_heading_inside_a_code_fence_is_not_a_section() -> None:
    text = (
        "# Ralph Progress Log\n---\n\n## 2026-01-01 - US-001\n- did it\n"
        "- **Learnings for future iterations:**\n  - the template looks like:\n"
        "    ```md\n    ## Not a section\n    ```\n---\n"
    )
    new, refs = migrate.build_memory(text)
    assert new.count("\n- US-001") == 1 and "Not a section" not in new
    assert any("    ## Not a section\n    ```" in r for r in refs.values())
    top = (
        "# Log\n\n## 2026-01-01 - US-001\nNotes:\n```md\n## Pasted heading\n```\n"
        "## 2026-01-02 - US-002\n- more\n"
    )
    new, refs = migrate.build_memory(top)
    assert "- US-001 (2026-01-01)" in new and "- US-002 (2026-01-02)" in new
    assert "## Pasted" not in new and any("## Pasted heading" in r for r in refs.values())


def test_code_blocks_among_learnings_keep_the_learnings_after_them(tmp_path: Path) -> None:
    """A column-0 fence (blank line inside) between learnings once ended the learnings: the
    bullets after it reached no reference, though the log said they had moved."""
    root = tmp_path / "p"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "prd.json").write_text('{"userStories": [{"id": "US-003", "passes": true}]}')
    (root / "progress.txt").write_text(
        "# Ralph Progress Log\n---\n\n## 2026-01-03 - US-003\n- What was implemented: refresh\n"
        "- Files changed: src/auth/refresh.ts\n- **Learnings for future iterations:**\n"
        "- Refresh tokens rotate on every use\n```\ncurl -X POST /refresh\n\n"
        "curl -X POST /logout\n```\n- Refresh endpoint is rate limited to 5/min\n---\n"
    )
    ralph = [sys.executable, "-m", "orchestrator"]
    out = subprocess.run([*ralph, "migrate"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    refs = "".join(p.read_text() for p in (root / "ralph" / "references").rglob("*.md"))
    assert "curl -X POST /refresh" in refs and "curl -X POST /logout" in refs
    assert "rate limited to 5/min" in refs
    chk = subprocess.run([*ralph, "check"], cwd=root, capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout


@pytest.mark.parametrize("progress", corpus_cases("progress.txt"))
def test_every_story_heading_keeps_a_summary_line(progress: Path) -> None:
    """One summary line per past story: every id progress.py reads in a `## ` heading."""
    text = fsutil.read_text(progress)
    new, _refs = migrate.build_memory(text, _prd(progress))
    summaries = new.split(migrate.HISTORY_HEADING, 1)[1]
    for e in Progress.parse(text).entries:
        if e.heading.startswith("## "):
            for sid in e.story_ids:
                assert f"- {sid}" in summaries or f",{sid}" in summaries, (sid, e.heading)


# ---------------------------------------------------------------- topics a person would write

_CATCH_ALL = re.compile(
    r"(?i)\b(general|misc|other|module notes|top-level files)\b|part \d+ of|\(\d+\)$"
)


def _log(entries: list[tuple[str, list[str], list[str]]]) -> str:
    """A flat log: (story id, files changed, learnings) per entry."""
    out = ["# Ralph Progress Log", "Started: today", "---", ""]
    for n, (sid, files, learnings) in enumerate(entries, 1):
        out += [f"## 2026-01-{n % 28 + 1:02d} - {sid}", "- Did the story"]
        if files:
            out.append("- Files changed: " + ", ".join(files))
        out.append("- **Learnings for future iterations:**")
        out += [f"  - {ln}" for ln in learnings]
        out += ["---", ""]
    return "\n".join(out)


def _themed_log(n: int) -> str:
    """Learnings that name no path, about three themes in varied words."""
    import random

    rnd = random.Random(5)
    themes = {
        "session": ("cookie", "refresh token", "expiry", "middleware", "logout", "CSRF header"),
        "prisma": ("migration", "schema", "seed", "generate step", "column rename", "index"),
        "recharts": ("tooltip", "legend", "axis format", "resize", "series key", "palette"),
    }
    verbs = ("breaks when", "must follow", "is checked before", "needs a reset after")
    entries = []
    for k in range(1, n + 1):
        theme = list(themes)[k % 3]
        picked = [
            f"The {theme} {rnd.choice(themes[theme])} {rnd.choice(verbs)} "
            f"the {rnd.choice(themes[theme])}"
            for _ in range(2)
        ]
        entries.append((f"US-{k:03d}", [], picked))
    return _log(entries)


def test_topics_are_named_by_what_they_say_not_catch_alls() -> None:
    plan = migrate.build_plan(_themed_log(60), max_tokens=CAP)
    names = [t.name for t in plan.topics if not t.always]
    assert names and not [n for n in names if _CATCH_ALL.search(n)], names
    said = " ".join(names).lower()
    for theme in ("session", "prisma", "recharts"):
        assert theme in said, (theme, names)
    # Every topic keeps to one theme: the split follows meaning, not size.
    for t in plan.topics:
        text = " ".join(" ".join(it.lines) for it in t.items).lower()
        hits = [w for w in ("session", "prisma", "recharts") if w in text]
        assert len(hits) <= 2, (t.name, hits)


def test_topic_names_are_stable_and_distinct() -> None:
    text = _themed_log(45)
    first = [t.name for t in migrate.build_plan(text, max_tokens=CAP).topics]
    assert first == [t.name for t in migrate.build_plan(text, max_tokens=CAP).topics]
    assert not [(a, b) for i, a in enumerate(first) for b in first[i + 1 :] if audit.similar(a, b)]


def test_words_cut_short_or_split_at_an_apostrophe_never_name_a_topic() -> None:
    # Pasted test output cuts names short ("control api disabl…"); "doesn't" splits into
    # "doesn": both were frequent, rare elsewhere, and so named topics.
    noise = "FAILED Tests > control api disabl… and projec… (the flag doesn't persist...)"
    log = _log(
        [
            (f"US-{k:03d}", [], [f"The ledger export {noise}", "Retry the ledger export"])
            for k in range(1, 9)
        ]
    )
    plan = migrate.build_plan(log, max_tokens=CAP)
    said = " ".join(t.name for t in plan.topics).lower()
    assert "ledger" in said or "export" in said, said
    for cut in ("disabl", "projec", "doesn", "persist"):
        assert cut not in said, (cut, said)
    assert naming.words("ledger disabl… doesn't isn’t projec... real") == {"ledger", "real"}
    assert naming.words("else elif const self this async await") == set()  # keywords


@pytest.mark.parametrize("target", [6, 12, 60])
def test_topic_count_stays_within_the_target(target: int) -> None:
    text = fsutil.read_text(_synth_log(400))
    plan = migrate.build_plan(text, max_tokens=CAP, max_topics=target)
    rows = Progress.parse(plan.progress_text).index_rows
    assert len(rows) <= target
    assert not [t.name for t in plan.topics if _CATCH_ALL.search(t.name)]


def _synth_log(n: int) -> Path:
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import synth

    root = synth.flat_project(Path(tempfile.mkdtemp()), n)
    return root / "scripts/ralph/progress.txt"


def test_near_duplicate_pieces_of_a_group_merge() -> None:
    def item(text: str, n: int) -> Item:
        return Item([f"- {text}"], f"US-{n}", [], n, tokens=20)

    same = "tokenizer boosts ranking query"
    drafts = [
        topics._Draft([item(f"{same} rule {n}", n)], [], "src/search", "Search") for n in range(3)
    ]
    drafts.append(topics._Draft([item("prisma schema seed", 9)], [], "src/search", "Search"))
    drafts.append(topics._Draft([item(f"{same} again", 10)], [], "src/db", "DB"))  # other group
    vocab = naming.Vocabulary([it for d in drafts for it in d.items])
    merged = topics._merge_near_duplicates(drafts, vocab, fill=600)
    sizes = sorted(len(d.items) for d in merged)
    assert sizes == [1, 1, 3], sizes
    assert topics._merge_near_duplicates(drafts[:3], vocab, fill=30) != []  # cap respected
    assert (
        len(
            topics._merge_near_duplicates(
                [topics._Draft([item(same, n)], [], "k", "") for n in range(3)], vocab, fill=30
            )
        )
        == 3
    )


def test_area_heads_read_as_words() -> None:
    taken = SimilarIndex()
    assert naming.area_head("src/db/migrations", taken) == "DB migrations"
    assert naming.area_head("src-tauri/src/services", taken) == "Tauri services"
    assert naming.area_head("src/lib", taken) == ""  # says nothing: the learnings name it
    taken.add("Components forms")
    assert naming.area_head("web/components/forms", taken) == "Web components forms"


# ---------------------------------------------------------------- where a learning applies


def test_learnings_carry_their_story_and_files() -> None:
    text = _log(
        [
            (
                "US-003",
                ["src/api/user.ts", "src/db/user.sql"],
                [
                    "Validate the payload before the handler runs",
                    "Return 404, not 500, when the row is missing",
                    "The `src/api/errors.ts` mapper owns status codes",
                ],
            ),
            ("US-004", [], ["Keep handlers thin"]),
        ]
    )
    _new, refs = migrate.build_memory(text)
    ref = "".join(refs.values())
    bullets = [ln for ln in ref.splitlines() if ln.startswith("- [")]
    assert bullets == [
        "- [US-003] Validate the payload before the handler runs",
        "- [US-003] Return 404, not 500, when the row is missing",
        "- [US-003] The `src/api/errors.ts` mapper owns status codes",
        "- [US-004] Keep handlers thin",
    ]
    assert "codes\n\n## Files by story\n- US-003: src/api/user.ts\n" in ref
    assert entries.files_by_story(ref) == {"US-003": ["src/api/user.ts"]}  # not US-004
    # The form the agent's template asks for, read by the same vocabulary.
    agent = "- [US-005] Cache the token (files: src/auth/token.ts, src/auth/store.ts)"
    assert entries.learning_files(agent) == ["src/auth/token.ts", "src/auth/store.ts"]
    assert entries.learning_files(bullets[2]) == ["src/api/errors.ts"]
    assert migrate.line_keys(agent) >= {"Cache the token"}


def test_real_ralph_migrate_names_topics_and_records_files(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "scripts/ralph").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    log = _themed_log(30).replace(
        "- Did the story", "- Did the story\n- Files changed: src/app/main.ts"
    )
    (root / "scripts/ralph/progress.txt").write_text(log)
    ralph = [sys.executable, "-m", "orchestrator"]
    out = subprocess.run([*ralph, "migrate"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = Progress.parse((root / "scripts/ralph/progress.txt").read_text()).index_rows
    assert rows and not [r.topic for r in rows if _CATCH_ALL.search(r.topic)]
    refs = "".join((root / r.path).read_text() for r in rows)
    assert "## Files by story\n- US-001: src/app/main.ts\n" in refs
    chk = subprocess.run([*ralph, "check"], cwd=root, capture_output=True, text=True)
    assert chk.returncode == 0 and "ralph check: OK" in chk.stdout, chk.stdout


def test_files_changed_read_as_the_model_reads_them() -> None:
    """A label with a list under it and a "### Files Changed" heading name files too."""
    assert entries.files_changed(["**Files changed:**", "- backend/a/B.java", "- src/x.ts"]) == [
        "backend/a/B.java",
        "src/x.ts",
    ]
    assert entries.files_changed(["### Files Changed", "- src/lib/a.ts"]) == ["src/lib/a.ts"]
    assert entries.files_changed(["- **Files changed:** src/a.ts, src/b.ts"]) == [
        "src/a.ts",
        "src/b.ts",
    ]


def test_a_files_list_and_colour_codes_are_not_learnings() -> None:
    body = [
        "Did the thing.",
        "**Files:**",
        "- src/lib/profileGames.ts",
        "- `src/a.tsx` (new)",
        "",
        "- Always validate bodies with \x1b[1mzod\x1b[0m",
        "- \x1b[32mtests/Api/SyncTest.php\x1b[0m must run with --seed",
    ]
    lines, explicit = entries.learning_lines(body)
    assert not explicit
    assert lines == [
        "Did the thing.",
        "- Always validate bodies with zod",
        "- tests/Api/SyncTest.php must run with --seed",
    ]
    assert entries.paths_in(body[-1]) == ["tests/Api/SyncTest.php"]


def test_known_ids_with_a_slash_are_read_whole_and_in_parts() -> None:
    known = {"API/006": 0, "US-001": 1, "US-002": 2}
    assert entries.known_in("2026-01-01 - API/006", known) == ["API/006"]
    assert entries.known_in("US-001/US-002: both", known) == ["US-001", "US-002"]
    assert entries.known_in("see src/api/US-001.ts", known) == ["US-001"]
