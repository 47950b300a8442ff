"""Memory at scale: bounded topics (area references), the index rows a prompt carries, the
index-size warning, and the indexes that keep the memory commands near-linear."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from run_helpers import git, iterations, make_project, ralph

from orchestrator import tokens
from orchestrator.memory import areas, entries
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.memory.store import Memory
from orchestrator.project import locate
from orchestrator.run import prompt
from orchestrator.run.status import collect
from orchestrator.upkeep import audit, migrate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import synth  # noqa: E402


def _rows(root: Path) -> list:
    return Progress.parse((root / "scripts/ralph/progress.txt").read_text()).index_rows


def test_similar_index_finds_exactly_the_similar_pairs() -> None:
    words = [
        "auth",
        "flow",
        "flows",
        "session",
        "billing",
        "invoice",
        "invoices",
        "invoce",
        "pipeline",
        "pipelin",
        "migration",
        "migrtion",
        "Cache",
        "api",
        "routes",
    ]
    rnd = random.Random(3)
    names = [" ".join(rnd.choice(words) for _ in range(rnd.choice((1, 2, 3)))) for _ in range(300)]
    names += ["Auth, US-001 to US-009", "Auth, US-010 to US-020"]  # parts: not duplicates
    rows = [audit.Row(n, f"p{i}.md", i) for i, n in enumerate(names)]
    brute = [
        (a, b) for i, a in enumerate(rows) for b in rows[i + 1 :] if audit.similar(a.topic, b.topic)
    ]
    assert audit.near_duplicate_pairs(rows) == brute and brute


def test_migrate_keeps_the_index_within_max_topics(tmp_path: Path) -> None:
    """A long log with a low target: the index has at most max_topics rows, areas list
    their topics, nothing is lost, no numbered parts, and `ralph check` is clean."""
    root = synth.flat_project(tmp_path / "p", 150)
    (root / "ralph.yaml").write_text("references:\n  max_topics: 8\n")
    out = ralph(root, "migrate")
    assert out.returncode == 0, out.stderr
    rows = _rows(root)
    assert 2 <= len(rows) <= 8
    listed = [n for r in rows for n in areas.nested_rows((root / r.path).read_text())]
    assert listed, "no area reference: the test does not exercise nesting"
    assert not [t for t, _p in listed if "part " in t]
    for _topic, path in listed:
        text = (root / path).read_text()
        assert tokens.count(text) <= 800 and "- [US-" in text
    check = ralph(root, "check")
    assert check.returncode == 0 and "ralph check: OK" in check.stdout, check.stdout
    # Every learning of the log is in a reference the memory loads.
    memory = Memory.load(locate(root))
    everything = "\n".join(r.text for r in memory.references)
    for story in synth.stories(150):
        for learning in story.learnings:
            assert learning in everything
    assert sum(1 for r in memory.references if r.area) == len(listed)


def test_prompt_carries_only_the_rows_for_the_story_and_never_refuses(tmp_path: Path) -> None:
    root = synth.indexed_project(tmp_path / "p", 60, 400)
    project = locate(root)
    prd = Prd.load(project.prd_path)
    memory = Memory.load(project)
    index = memory.progress.index_text
    budget = 6000
    assert tokens.count(index) > budget  # the whole table alone is over the budget
    out = prompt.assemble(project, prd.next_story(), memory, budget=budget)
    assert out.mode == "indexed" and out.tokens <= budget
    assert out.parts["index"] <= prompt.INDEX_INLINE_SHARE * budget + 60
    assert "more topics are not shown here" in out.text
    assert "`## Progress Index` table in `scripts/ralph/progress.txt`" in out.text
    shown = [ln for ln in out.text.splitlines() if ln.startswith("| ") and "references/" in ln]
    assert 0 < len(shown) < 400
    # The rows shown are those of references the prompt inlines.
    assert all(any(p in ln for p in out.selected) for ln in shown)
    # A small index is still inlined whole.
    small = synth.indexed_project(tmp_path / "q", 20, 6)
    proj = locate(small)
    mem = Memory.load(proj)
    whole = prompt.assemble(proj, Prd.load(proj.prd_path).next_story(), mem)
    assert mem.progress.index_text.strip() in whole.text


def test_check_and_status_warn_when_the_index_passes_a_quarter_of_the_budget(
    tmp_path: Path,
) -> None:
    root = synth.indexed_project(tmp_path / "p", 10, 150)
    (root / "ralph.yaml").write_text("budget:\n  prompt_tokens: 4000\n")
    check = ralph(root, "check")
    assert check.returncode == 1 and "[index-large]" in check.stdout
    assert "ralph compact" in check.stdout
    status = ralph(root, "status")
    assert status.returncode == 0 and "warning: the Progress Index is" in status.stdout
    st = collect(locate(root))
    assert st["index_tokens"] > 1000 and "ralph compact" in st["warnings"][0]


def test_the_runs_index_warning_encodes_only_a_table_its_bytes_do_not_settle(
    tmp_path: Path, monkeypatch
) -> None:
    big = Progress.parse(_index_of(400))
    small = Progress.parse(_index_of(3))
    middle = Progress.parse(_index_of(100))  # 4.5k bytes, 1.5k tokens: counted
    exact = audit.index_warning(middle, 4000)
    assert exact is not None and audit.index_warning(middle, 4000, exact=False) == exact

    def no_count(*_a: object, **_k: object) -> int:
        raise AssertionError("encoded a table whose size settles it")

    monkeypatch.setattr(tokens, "count", no_count)
    assert audit.index_warning(small, 4000, exact=False) is None
    warned = audit.index_warning(big, 4000, exact=False)
    assert warned is not None and "is at least " in warned[0] and "ralph" not in warned[0]


def test_an_aligned_tables_padding_is_not_taken_for_tokens(tmp_path: Path) -> None:
    # A formatter pads every row to the widest cell: 400 rows of 200 spaces each are 170k
    # bytes but 6.4k tokens, under a quarter of 40k; no "at least 21,000 tokens" warning.
    pad = " " * 200
    rows = "".join(f"| t{i}{pad} | ralph/references/t{i}.md{pad} |\n" for i in range(400))
    table = Progress.parse(f"# Progress\n\n## Progress Index\n\n| Topic | Reference Path |\n{rows}")
    assert audit.index_warning(table, 40000) is None
    assert audit.index_warning(table, 40000, exact=False) is None
    exact = audit.index_warning(table, 20000)
    assert exact is not None and audit.index_warning(table, 20000, exact=False) == exact


def _index_of(n: int) -> str:
    rows = "".join(f"| Topic {i} | ralph/references/topic-{i}.md |\n" for i in range(n))
    return f"# Progress\n\n## Progress Index\n\n| Topic | Reference Path |\n|---|---|\n{rows}"


def test_a_run_warns_once_when_the_index_passes_a_quarter_of_the_budget(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 2, config={"budget": {"prompt_tokens": 4000}})
    big = synth.indexed_project(tmp_path / "big", 10, 150)
    for name in ("scripts/ralph/progress.txt", "ralph/references"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (big / name).rename(root / name)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "memory")
    out = ralph(root, "run", "--tool", "sim", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    warned = [ln for ln in out.stderr.splitlines() if "the Progress Index is" in ln]
    assert len(warned) == 1 and "ralph compact --apply" in warned[0], out.stderr
    assert len(iterations(root)) == 2
    # A small index says nothing.
    quiet = make_project(tmp_path / "q", 1)
    out = ralph(quiet, "run", "--tool", "sim", "1")
    assert out.returncode == 0 and "Progress Index is" not in out.stderr


def test_compact_groups_topics_under_areas_past_max_topics(tmp_path: Path) -> None:
    root = synth.indexed_project(tmp_path / "p", 30, 90)
    (root / "ralph.yaml").write_text("references:\n  max_topics: 12\n")
    before = {r.path for r in _rows(root)}
    dry = ralph(root, "compact")
    assert dry.returncode == 0 and "group:" in dry.stdout, dry.stdout
    assert {r.path for r in _rows(root)} == before  # a dry run writes nothing
    done = ralph(root, "compact", "--apply")
    assert done.returncode == 0, done.stderr
    rows = _rows(root)
    assert len(rows) <= 12
    nested = {p for r in rows for _t, p in areas.nested_rows((root / r.path).read_text())}
    assert before <= nested | {r.path for r in rows}  # every topic still reachable
    check = ralph(root, "check")
    assert "ralph check: OK" in check.stdout, check.stdout
    project = locate(root)
    out = prompt.assemble(project, Prd.load(project.prd_path).next_story(), Memory.load(project))
    assert out.selected and any("/" in p for p in out.selected)
    # An area's topic has no row in the index the prompt shows: its heading names its path.
    index, block = out.text.split("## References for this story", 1)
    assert any(p not in index for p in out.selected), out.selected
    for path in out.selected:
        assert path in index or f"`{path}`" in block, path


def test_migrate_names_story_ids_per_token() -> None:
    known = {"US-1": 0, "US-12": 1, "US-1.2": 2}
    assert entries.known_in("## 2026 - US-12: fix US-1. Then US-1.2", known) == [
        "US-1",
        "US-12",
        "US-1.2",
    ]
    assert entries.known_in("xUS-1 US-123 US-1-b", known) == []


def test_an_agent_editing_a_topic_an_area_lists_is_not_unindexed(tmp_path: Path) -> None:
    """After the loop's checks, a topic reached through an area reference counts as indexed."""
    from orchestrator.run import checks

    root = synth.flat_project(tmp_path / "p", 80)
    (root / "ralph.yaml").write_text("references:\n  max_topics: 6\n")
    project = locate(root)
    migrate.apply(project, migrate.prepare(project))
    area = next(r for r in _rows(root) if areas.is_area((root / r.path).read_text()))
    _topic, leaf = areas.nested_rows((root / area.path).read_text())[0]
    snap = checks.snapshot(project)
    with (root / leaf).open("a") as f:
        f.write("- [US-0081] A new learning in a nested topic.\n")
    with (root / "scripts/ralph/progress.txt").open("a") as f:
        f.write("\n## 2026-02-01 - US-0081\n- Did it\n---\n")
    report = checks.verify(snap, project, "US-0081")
    assert leaf in report.updated_references
    assert not [f for f in report.findings if f.kind == "reference_unindexed"], report.findings
