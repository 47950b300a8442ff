"""The on-disk index of the references (run/refcache.py): a prompt is the same, byte for
byte, whether ranking computed its facts, read them from `ref-index.json`, or mixed both
after a reference changed; a damaged or stale file is ignored and rewritten."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from run_helpers import ralph

from orchestrator import tokens
from orchestrator.memory.prd import Prd
from orchestrator.memory.store import Memory
from orchestrator.project import locate
from orchestrator.run import prompt, rank, refcache, select, where

sys.path.insert(0, str(REPO / "bench"))
import synth  # noqa: E402

# Real histories with a prd.json, indexed by `ralph migrate` in the test.
CORPUS_CASES = ("Marin-Solutions__checkybot", "MiniCodeMonkey__tap__hist-aae1063d79-pre-reset")


def _cache_file(root: Path) -> Path:
    folder, _ = tokens.project_cache_dir(locate(root).logs_dir)
    return folder / refcache.FILE


def _new_process() -> None:
    """Forget what this process derived from texts, as a new `ralph` process starts."""
    refcache._OPEN.clear()
    for f in (rank.ref_index, rank.split_items, rank.profile, rank.story_order):
        f.cache_clear()
    for g in (where.note_files, where.footer_files, where.entry_files):
        g.cache_clear()
    rank._LAST.clear()


def _assemble(root: Path, story: str | None = None, *, disk: bool = True) -> tuple[str, str]:
    """(prompt text, `ralph prompt --json`) for `story`, with the project's cache or none."""
    project = locate(root)
    prd = Prd.load(project.prd_path)
    st = prd.get(story) if story else prd.next_story()
    memory = Memory.load(project)
    inp = prompt.inputs_for(project, st, memory, prd=prd)
    if not disk:
        inp.logs_dir = None
    out = prompt.build(inp, "indexed", 1)
    return out.text, json.dumps(out.to_json(), indent=2, ensure_ascii=False)


def _project(tmp_path: Path, stories: int = 60, refs: int = 40) -> Path:
    return synth.indexed_project(tmp_path / "p", stories, refs)


def test_prompt_json_is_the_same_cold_warm_and_without_cache(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cold = ralph(root, "prompt", "--json")
    assert cold.returncode == 0, cold.stderr
    assert _cache_file(root).is_file()
    warm = ralph(root, "prompt", "--json")
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == cold.stdout
    _new_process()
    assert json.loads(_assemble(root, disk=False)[1]) == json.loads(cold.stdout)
    data = json.loads(_cache_file(root).read_text(encoding="ascii"))
    assert data["code"] == refcache._code_key() and len(data["keys"]) == 40


def test_a_reference_holding_a_secret_is_never_written_to_the_file(tmp_path: Path) -> None:
    """The file is ours, so no secret may reach it; the reference (the user's) keeps it and
    is simply computed afresh each time, without rewriting the file for it."""
    root = _project(tmp_path)
    ref = sorted((root / "ralph" / "references").glob("*.md"))[0]
    ref.write_text(ref.read_text() + "- [US-0001] deploy with password=hunter2hunter2\n")
    cold = ralph(root, "prompt", "--json")
    assert cold.returncode == 0, cold.stderr
    data = _cache_file(root).read_text(encoding="ascii")
    assert "hunter2hunter2" not in data and len(json.loads(data)["keys"]) == 39
    before = _cache_file(root).stat().st_mtime_ns
    warm = ralph(root, "prompt", "--json")
    assert warm.stdout == cold.stdout
    assert _cache_file(root).stat().st_mtime_ns == before  # not rewritten


def test_a_log_holding_a_secret_keeps_it_out_of_the_file(tmp_path: Path) -> None:
    """The log's story ids and files are kept too: a key an agent wrote into an entry
    heading or its files list read as an id and a path, and reached the file whole."""
    root = _project(tmp_path)
    key = "sk-ant-api03-Zz3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_AbCdEfGh"
    progress = locate(root).progress_path
    progress.write_text(
        progress.read_text()
        + f"\n## 2026-01-09 - {key}\n- Files changed: src/{key}.ts\n- seen {key}\n---\n"
    )
    cold = ralph(root, "prompt", "--json")
    assert cold.returncode == 0, cold.stderr
    data = _cache_file(root).read_text(encoding="ascii")
    assert "Zz3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" not in data
    _new_process()
    assert ralph(root, "prompt", "--json").stdout == cold.stdout


def test_a_warm_prompt_splits_and_tokenizes_no_reference(tmp_path: Path) -> None:
    root = _project(tmp_path)
    cold = _assemble(root)
    _new_process()
    warm = _assemble(root)
    assert warm == cold
    assert rank.ref_index.cache_info().misses == 0  # every reference came from the file
    assert rank.profile.cache_info().misses == 0  # and every story's profile
    cache = refcache._OPEN[_cache_file(root)]
    assert cache.snap is not None and not cache.dirty
    _new_process()
    assert _assemble(root, disk=False) == cold


def _edit(path: Path, old: str, new: str) -> None:
    """Replace text keeping the file's size and times: only its content says it changed."""
    st = path.stat()
    text = path.read_text(encoding="utf-8")
    assert old in text and len(old) == len(new)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_changed_reference_is_read_again(tmp_path: Path) -> None:
    root = _project(tmp_path)
    _assemble(root)
    refs = sorted((root / "ralph" / "references").glob("*.md"))
    target = refs[3]
    rel = f"ralph/references/{target.name}"
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    bullet = next(ln for ln in lines if ln.startswith("- ["))
    # One more item in the reference, and a same-size edit of another.
    with target.open("a", encoding="utf-8") as f:
        f.write("\n" + bullet)
    _edit(refs[5], "the", "THE")
    _new_process()
    text, js = _assemble(root)
    row = next(r for r in json.loads(js)["considered"] if r["path"] == rel)
    before = sum(1 for ln in lines if ln.startswith("- ["))
    assert row["items"] == before + 1
    cache = refcache._OPEN[_cache_file(root)]
    assert cache.last is not None and cache.last[2].count(None) == 2  # two read again
    _new_process()
    assert _assemble(root, disk=False) == (text, js)


def test_scores_from_the_file_and_from_the_texts_are_equal(tmp_path: Path) -> None:
    """Item scores (every item, not just the taken ones) from the file's vocabulary, mixed
    with a changed reference's own words, equal those computed from the texts alone."""
    root = _project(tmp_path)
    _assemble(root)
    target = sorted((root / "ralph" / "references").glob("*.md"))[1]
    target.write_text(target.read_text(encoding="utf-8") + "\n- [US-0002] zebra quux\n")
    _new_process()
    project = locate(root)
    memory = Memory.load(project)
    prd = Prd.load(project.prd_path)
    stories = {s.id: s.text() for s in prd.stories}
    sources = [r for r in memory.references if r.exists and not r.is_area]
    query = prd.next_story().text() + " zebra"
    cache = refcache.open_cache(project.logs_dir)
    kw = {"stories": stories, "history": memory.progress_text}
    got = select.score(query, sources, memo=cache, **kw)
    _new_process()
    want = select.score(query, sources, **kw)
    assert np.array_equal(got.scores, want.scores)
    assert np.array_equal(got.ref_scores, want.ref_scores)
    assert got.groups == want.groups


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "wrong type", "id out of range", "other code", "a folder"],
)
def test_a_damaged_or_stale_file_is_ignored_and_rebuilt(tmp_path: Path, damage: str) -> None:
    root = _project(tmp_path)
    want = _assemble(root)
    path = _cache_file(root)
    raw = path.read_bytes()
    data = json.loads(raw)
    if damage == "garbage":
        path.write_bytes(b"\x00\xffnot json")
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "wrong type":
        data["row_keys"][0] = 5
        path.write_text(json.dumps(data))
    elif damage == "id out of range":
        data["vocab"], data["terms"] = data["vocab"][:3], data["terms"][:3]
        path.write_text(json.dumps(data))
    elif damage == "other code":
        data["code"] = "0" * 32
        path.write_text(json.dumps(data))
    else:
        path.unlink()
        path.mkdir()
    _new_process()
    assert _assemble(root) == want
    if damage == "a folder":
        assert path.is_dir()  # could not be written: slower, not wrong
        return
    rebuilt = json.loads(path.read_bytes())
    assert rebuilt["code"] == refcache._code_key() and rebuilt["keys"] == data["keys"]
    _new_process()
    assert _assemble(root) == want


def test_the_file_keeps_the_profiles_in_use_and_a_bounded_rest() -> None:
    found = {f"k{i}": i for i in range(10)}
    kept = refcache._bounded(found, {"k0", "k5"})
    assert list(kept) == ["k0", "k5"] + [f"k{i}" for i in (1, 2, 3, 4, 6, 7, 8, 9)]
    small = refcache._KEEP_UNUSED
    try:
        refcache._KEEP_UNUSED = 2
        assert list(refcache._bounded(found, {"k0"})) == ["k0", "k8", "k9"]
    finally:
        refcache._KEEP_UNUSED = small


def _corpus_project(src: Path, root: Path) -> Path:
    (root / "ralph" / "references").mkdir(parents=True)
    for name in ("prd.json", "progress.txt"):
        shutil.copyfile(src / name, root / name)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    done = ralph(root, "migrate", timeout=300)
    assert done.returncode == 0, done.stderr
    return root


@pytest.mark.parametrize("case", CORPUS_CASES)
def test_corpus_history_prompts_are_the_same_cold_and_warm(
    corpus: Path, tmp_path: Path, case: str
) -> None:
    if not (corpus / case / "prd.json").is_file():
        pytest.skip(f"{case} is not in the corpus")
    root = _corpus_project(corpus / case, tmp_path / case)
    ids = [s.id for s in Prd.load(root / "prd.json").stories]
    picks = [ids[0], ids[len(ids) // 2], ids[-1]]
    _new_process()
    cold = [_assemble(root, sid) for sid in picks]
    assert _cache_file(root).is_file()
    _new_process()
    warm = [_assemble(root, sid) for sid in picks]
    assert rank.ref_index.cache_info().misses == 0
    _new_process()
    plain = [_assemble(root, sid, disk=False) for sid in picks]
    assert cold == warm == plain
    assert any(json.loads(js)["selected"] for _, js in cold)


def test_the_post_story_check_finds_nested_topics_without_reading_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_refs takes an area's listed topics from the bytes it already read; a topic
    edited through an area still counts as indexed."""
    from orchestrator.memory import areas
    from orchestrator.memory.progress import Progress
    from orchestrator.run import check_refs, checks
    from orchestrator.upkeep import migrate

    root = synth.flat_project(tmp_path / "p", 80)
    (root / "ralph.yaml").write_text("references:\n  max_topics: 6\n")
    project = locate(root)
    migrate.apply(project, migrate.prepare(project))
    log = root / "scripts/ralph/progress.txt"
    rows = Progress.parse(log.read_text()).index_rows
    area = next(r for r in rows if areas.is_area((root / r.path).read_text()))
    _topic, leaf = areas.nested_rows((root / area.path).read_text())[0]
    snap = checks.snapshot(project)
    with (root / leaf).open("a") as f:
        f.write("- [US-0081] A new learning in a nested topic.\n")
    with log.open("a") as f:
        f.write("\n## 2026-02-01 - US-0081\n- Did it\n---\n")

    def read_again(path: Path) -> str:
        raise AssertionError(f"{path} read a second time")

    monkeypatch.setattr(check_refs, "read_or_none", read_again)
    report = checks.verify(snap, project, "US-0081")
    assert leaf in report.updated_references
    assert not [f for f in report.findings if f.kind == "reference_unindexed"]


def test_odd_bytes_and_non_ascii_text_survive_the_file(tmp_path: Path) -> None:
    root = _project(tmp_path, refs=12)
    target = sorted((root / "ralph" / "references").glob("*.md"))[2]
    with target.open("ab") as f:
        f.write("\n- [US-0003] Café naïve 日本語 résumé parser\n".encode())
        f.write(b"- [US-0003] a byte \xff\xfe that is not UTF-8 \x00 in the parser\n")
    want = _assemble(root, disk=False)
    _new_process()
    assert _assemble(root) == want  # cold: computed and written
    _new_process()
    assert _assemble(root) == want  # warm: read back
    assert rank.ref_index.cache_info().misses == 0
