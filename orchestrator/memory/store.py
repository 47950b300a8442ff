"""What an iteration remembers: progress.txt plus the reference files its index names.

Loading never fails on a missing file (a fresh project has no progress.txt, and an index row
may name a reference not yet written): such references come back with `exists=False`. An
index row whose path would leave the references folder is an error (PathEscapeError naming
progress.txt, the row and the rule), because silently skipping it would hide an attack or a
typo.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator import fsutil, tokens
from orchestrator.errors import PathEscapeError
from orchestrator.memory import areas
from orchestrator.memory.progress import Progress
from orchestrator.memory.seen import Seen

if TYPE_CHECKING:
    from orchestrator.memory.references import ReferenceStore


class MemorySource(Protocol):
    """What `Memory.load` reads: a project.Project, or anything with these (the encoding
    comes from `config.encoding` when there is one)."""

    @property
    def progress_path(self) -> Path: ...

    @property
    def references(self) -> ReferenceStore: ...


class PathResolver(Protocol):
    """Turns an index row's path into the file it names, refusing one that leaves the
    references folder (PathEscapeError): a ReferenceStore, or a FastStore over one."""

    def resolve(self, index_path: str) -> Path: ...


@dataclass
class Reference:
    topic: str
    path: str  # as written in the index (root-relative posix, or a bare name)
    text: str
    tokens: int
    exists: bool
    area: str = ""  # the area reference that lists this topic ("" for an index row)
    is_area: bool = False  # an area reference: a table of topics, not learnings


@dataclass
class Memory:
    progress: Progress
    progress_text: str
    references: list[Reference]
    encoding: str = field(default=tokens.DEFAULT_ENCODING)
    # Index rows whose path leads out of the references folder: left out of the memory (a
    # confused agent's row must not stop an unattended run), each as a fix-up sentence.
    refused: list[str] = field(default_factory=list)
    # The references' files as read here, by stat: the snapshot before the agent reuses
    # those still unchanged rather than read 10,000 files again.
    seen: Seen = field(default_factory=Seen, repr=False, compare=False)

    @classmethod
    def load(cls, project: MemorySource) -> Memory:
        """`project` is a project.Project, or anything with root, progress_path, references
        (a ReferenceStore) and config.encoding."""
        encoding = _encoding(project)
        seen = Seen()
        tokens.use_disk_cache(getattr(project, "logs_dir", None))
        progress_path = Path(project.progress_path)
        text = fsutil.read_text(progress_path) if fsutil.present(progress_path) else ""
        progress = Progress.parse(text)
        store = FastStore(project.references)
        refs: list[Reference] = []
        refused: list[str] = []
        for row in progress.index_rows:
            try:
                ref = _reference(store, row.topic, row.path, encoding, progress_path, seen)
            except PathEscapeError as e:
                shown = os.path.relpath(progress_path, getattr(project, "root", "."))
                where = f"{shown}:{_row_line(text, row.path)}"
                refused.append(f"{where}: {str(e).split(': ', 1)[1]}; fix or remove that row")
                continue
            refs.append(ref)
            if ref.exists and areas.is_area(ref.text):
                ref.is_area = True
                refs.extend(_nested(store, ref, encoding, progress_path, seen))
        return cls(progress, text, refs, encoding, refused, seen)

    def full_history_tokens(self, encoding: str | None = None) -> int:
        """What Ralph itself would load each iteration: all of progress.txt."""
        return tokens.count(self.progress_text, encoding or self.encoding)

    def reference(self, topic: str) -> Reference | None:
        key = topic.strip().lower()
        return next((r for r in self.references if r.topic.lower() == key), None)

    @property
    def existing(self) -> list[Reference]:
        return [r for r in self.references if r.exists]


class FastStore:
    """`store.resolve` for many paths at once: the folder's plain files (no symlink on the
    way) are listed once, and a path naming one of them is that file; any other path goes
    through `store.resolve` and its checks. Resolving each of 10,000 paths on its own took
    two realpath walks apiece."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.rel_dir = str(getattr(store, "rel_dir", "")).strip("/")
        self.plain: set[str] = set()
        folder = Path(store.dir)
        if folder.is_dir() and not folder.is_symlink():
            self.folder = folder.resolve()
            self._walk(self.folder, "")

    def _walk(self, folder: Path, prefix: str) -> None:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.is_symlink():
                    continue
                if e.is_dir():
                    self._walk(Path(e.path), f"{prefix}{e.name}/")
                elif e.is_file():
                    self.plain.add(prefix + e.name)

    def plain_rel(self, index_path: str) -> str | None:
        """The name under the folder ("a/b.md") when `index_path` names one of its plain
        files as listed, else None (then only `resolve` can tell)."""
        head = f"{self.rel_dir}/"
        if index_path.startswith(head) and ".." not in index_path and "\\" not in index_path:
            rel = index_path[len(head) :]
            if rel in self.plain:
                return rel
        return None

    def resolve(self, index_path: str) -> Path:
        rel = self.plain_rel(index_path)
        if rel is not None:
            return self.folder / rel
        return Path(self.store.resolve(index_path))

    def resolve_name(self, index_path: str) -> str | Path:
        """`resolve`, a plain file as a string (reading needs no Path object)."""
        rel = self.plain_rel(index_path)
        if rel is not None:
            return f"{self.folder}{os.sep}{rel}" if os.sep == "/" else self.folder / rel
        return Path(self.store.resolve(index_path))


class NamedFiles:
    """The files index rows name, to find the folder's files no row names: a plain file of
    the folder by its index path, any other (a symlink, another spelling) by its resolved
    path. Resolving 10,000 rows and files one by one took 20,000 realpath walks."""

    def __init__(self, fast: FastStore) -> None:
        self.fast = fast
        self.paths: set[str] = set()
        self.resolved: set[str] = set()

    def file(self, index_path: str) -> Path:
        """The file a row's path names, now counted as named (PathEscapeError when the path
        leaves the folder)."""
        rel = self.fast.plain_rel(index_path)
        if rel is not None:
            self.paths.add(f"{self.fast.rel_dir}/{rel}")
            return self.fast.folder / rel
        target = self.fast.resolve(index_path).resolve()
        self.resolved.add(target.as_posix())
        return target

    def unnamed(self) -> Iterator[tuple[str, str]]:
        """(index path, file) of each reference file of the folder no row names."""
        for index_path, file in self.fast.store.indexed_names():
            if index_path in self.paths:
                continue
            if not self.resolved or Path(file).resolve().as_posix() not in self.resolved:
                yield index_path, file


def _row_line(text: str, path: str) -> int:
    """1-based line of the first table row naming `path` (only asked for a refused row)."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("|") and path in line:
            return n
    return 0


def _nested(
    store: PathResolver, area: Reference, encoding: str, progress: Path, seen: Seen | None = None
) -> list[Reference]:
    """The topics an area reference lists (one level: they are never areas themselves)."""
    out = []
    for topic, path in areas.nested_rows(area.text):
        try:
            ref = _reference(store, topic, path, encoding, progress, seen)
        except PathEscapeError:
            continue  # `ralph check` reports it against the area file; a prompt goes on
        ref.area = area.topic
        out.append(ref)
    return out


def _encoding(project: MemorySource) -> str:
    config = getattr(project, "config", None)
    return getattr(config, "encoding", None) or tokens.DEFAULT_ENCODING


def _reference(
    store: PathResolver,
    topic: str,
    path: str,
    encoding: str,
    progress: Path,
    seen: Seen | None = None,
) -> Reference:
    try:
        file = store.resolve_name(path) if isinstance(store, FastStore) else store.resolve(path)
    except PathEscapeError as e:
        raise PathEscapeError(f"{progress}: Progress Index row {topic!r}: {e}") from None
    # An unreadable reference (permissions, a folder or FIFO in its place) is an error that
    # names it (read_text raises the FileError `fsutil.present` would), never a silently
    # empty memory. One open per file, no stat before it: 10,000 references are read here.
    try:
        data, st = fsutil.read_bytes_stat(file)
    except FileNotFoundError:
        return Reference(topic=topic, path=path, text="", tokens=0, exists=False)
    text = data.decode("utf-8", errors="surrogateescape")  # as fsutil.read_text
    if seen is not None:
        seen.add(st, data)  # bytes, as the checks compare them (no encoding the text back)
    return Reference(
        topic=topic, path=path, text=text, tokens=tokens.count(text, encoding), exists=True
    )
