from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, PathEscapeError
from orchestrator.memory.references import ReferenceStore, slugify


@pytest.mark.parametrize(
    ("topic", "slug"),
    [
        ("Auth flow learnings", "auth-flow-learnings"),
        ("  DB -- schema__decisions!! ", "db-schema-decisions"),
        ("Café / Ünïcödé", "cafe-unicode"),
        ("API: error handling (v2)", "api-error-handling-v2"),
        ("日本語", "topic"),
        ("", "topic"),
        ("---", "topic"),
    ],
)
def test_slugify(topic: str, slug: str) -> None:
    assert slugify(topic) == slug


def test_slugify_is_capped_at_a_word_boundary() -> None:
    slug = slugify("word " * 40)
    assert len(slug) <= 60
    assert slug.endswith("word") and not slug.endswith("-")
    assert len(slugify("x" * 100)) == 60


def test_index_path_for_and_write_read(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path)
    ip = store.index_path_for("Auth flow")
    assert ip == "ralph/references/auth-flow.md"
    written = store.write(ip, "# Auth\n- use tokens\n")
    assert written == (tmp_path / "ralph/references/auth-flow.md").resolve()
    assert store.read(ip) == "# Auth\n- use tokens\n"
    assert store.read("auth-flow.md") == "# Auth\n- use tokens\n"  # bare name: in the folder
    assert store.index_path_of(written) == ip
    with pytest.raises(PathEscapeError, match="outside the folder"):
        store.index_path_of(tmp_path / "x.md")
    assert store.files() == [tmp_path / "ralph/references/auth-flow.md"]


def test_custom_rel_dir(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path, "docs/refs/")
    assert store.rel_dir == "docs/refs"
    assert store.index_path_for("X") == "docs/refs/x.md"
    assert store.resolve("docs/refs/x.md") == (tmp_path / "docs/refs/x.md").resolve()


@pytest.mark.parametrize("bad", ["/abs", "../up", "a/../../b"])
def test_bad_rel_dir_is_config_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="references.dir"):
        ReferenceStore(tmp_path, bad)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../x.md", "contains `..`"),
        ("ralph/references/../../x.md", "contains `..`"),
        ("ralph\\references\\..\\..\\x.md", "contains `..`"),
        ("/etc/passwd", "absolute"),
        ("~/secrets.md", "absolute"),
        ("C:\\Windows\\x.md", "absolute"),
        ("docs/x.md", "not under ralph/references/"),
        ("", "empty"),
        ("ralph/references", "not under"),
    ],
)
def test_escapes_are_refused(tmp_path: Path, path: str, why: str) -> None:
    store = ReferenceStore(tmp_path)
    with pytest.raises(PathEscapeError) as err:
        store.resolve(path)
    msg = str(err.value)
    assert why in msg and repr(path) in msg and "must stay inside ralph/references/" in msg
    with pytest.raises(PathEscapeError):
        store.write(path, "pwned")
    assert not (tmp_path.parent / "x.md").exists()


def test_symlink_out_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text("secret")
    store = ReferenceStore(tmp_path / "proj")
    store.dir.mkdir(parents=True)
    os.symlink(secret, store.dir / "link.md")
    os.symlink(outside, store.dir / "sub")
    for path in ("ralph/references/link.md", "link.md", "ralph/references/sub/new.md"):
        with pytest.raises(PathEscapeError, match="resolves to"):
            store.resolve(path)
    with pytest.raises(PathEscapeError):
        store.write("link.md", "overwrite")
    assert secret.read_text() == "secret"
    assert store.files() == []  # escaping links are not listed either


def test_symlink_inside_is_fine_and_archive_is_skipped(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path)
    store.write("ralph/references/a.md", "a")
    store.write("ralph/references/archive/old.md", "old")
    store.write("ralph/references/sub/b.md", "b")
    os.symlink(store.dir / "a.md", store.dir / "alias.md")
    assert store.read("alias.md") == "a"
    names = [p.relative_to(store.dir).as_posix() for p in store.files()]
    assert names == ["a.md", "alias.md", "sub/b.md"]


def test_missing_file_read_raises_file_not_found(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path)
    with pytest.raises(FileNotFoundError):
        store.read("nope.md")
    assert store.files() == []
    assert not store.exists("nope.md")


def _files_by_rglob(store: ReferenceStore) -> list[Path]:
    """`files()` as it was written before the scandir walk: the behaviour to keep."""
    if not store.dir.is_dir():
        return []
    folder = store.dir.resolve()
    out = []
    for p in sorted(store.dir.rglob("*.md")):
        rel = p.relative_to(store.dir)
        if rel.parts[0] == "archive" or not p.is_file():
            continue
        if folder in p.resolve().parents:
            out.append(p)
    return out


def test_files_walk_equals_rglob_with_symlinks_archive_and_nesting(tmp_path: Path) -> None:
    store = ReferenceStore(tmp_path)
    d = store.dir
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("x")
    for rel in (
        "a.md",
        "b.md",
        "a.b/c.md",
        "a/b.md",
        "deep/x/y.md",
        ".hidden.md",
        ".md",
        "archive/old.md",
        "x/archive/kept.md",
        "notes.txt",
        "UPPER.MD",
        "dir.md/in.md",
    ):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(rel)
    os.symlink(d / "a.md", d / "link-in.md")
    os.symlink(outside / "secret.md", d / "link-out.md")
    os.symlink(d / "archive" / "old.md", d / "to-archive.md")
    os.symlink(outside, d / "linked-dir")
    os.symlink(d / "missing.md", d / "dangling.md")
    os.symlink(d / "deep", d / "deep-link.md")
    assert store.files() == _files_by_rglob(store)
    assert [(store.index_path_of(p), p) for p in store.files()] == store.indexed_files()
    assert "ralph/references/a.md" in {i for i, _ in store.indexed_files()}


def test_files_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert ReferenceStore(tmp_path).indexed_files() == []
