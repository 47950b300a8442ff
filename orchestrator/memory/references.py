"""The references folder (default `ralph/references/`): one small markdown file per topic.

Index rows in progress.txt name these files, and the rows are written by an agent, so every
path is confined before use. The rule (also in the README):

- a path is either root-relative and starts with the folder (`ralph/references/auth.md`),
  or a bare file name taken inside the folder (`auth.md`);
- it must not be absolute (`/etc/passwd`, `C:\\x`, `~/x`), must not contain `..`, and must
  not resolve, through symlinks too, outside the folder;
- anything else (e.g. `docs/auth.md`, a project file outside the folder) is refused.

Refusals raise `PathEscapeError` naming the path and the rule.
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from pathlib import Path, PurePosixPath

from orchestrator import fsutil
from orchestrator.errors import ConfigError, PathEscapeError

SLUG_MAX = 60
ARCHIVE = "archive"
_RULE = (
    "reference paths must stay inside {dir}/: give `{dir}/<name>.md` or `<name>.md`, "
    "never an absolute path, `..`, or a symlink that leads out"
)


def slugify(topic: str) -> str:
    """'Auth flow learnings' -> 'auth-flow-learnings'; 'Café / API' -> 'cafe-api'."""
    ascii_text = unicodedata.normalize("NFKD", topic).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    if len(slug) > SLUG_MAX:
        # Cut at a word boundary when there is one in the last third, for readable names.
        cut = slug[:SLUG_MAX]
        dash = cut.rfind("-")
        slug = cut[:dash] if dash >= SLUG_MAX * 2 // 3 else cut
        slug = slug.strip("-")
    return fsutil.safe_name(slug) if slug else "topic"


def _resolve(path: Path) -> Path:
    """`path.resolve()`, with a symlink loop (RuntimeError before Python 3.13) as a FileError
    naming the file instead of a crash."""
    try:
        return path.resolve()
    except RuntimeError:
        raise fsutil.file_error(
            path, OSError(errno.ELOOP, os.strerror(errno.ELOOP)), "read"
        ) from None


class ReferenceStore:
    def __init__(self, project_root: Path, rel_dir: str = "ralph/references") -> None:
        clean = fsutil.relative_inside(rel_dir.strip())
        if clean is None:
            raise ConfigError(
                f"references.dir {rel_dir!r}: must be a relative folder inside the project. "
                "Fix: set it to e.g. ralph/references"
            )
        parts = [p for p in clean.parts if p != "."]
        if not parts:
            # The project root as the folder: every file of the project would read as an
            # unindexed reference (`ralph check` would suggest deleting the README).
            raise ConfigError(
                f"references.dir {rel_dir!r}: is the project root, not a folder of its own. "
                "Fix: set it to e.g. ralph/references"
            )
        self.root = Path(project_root)
        self.rel_dir = PurePosixPath(*parts).as_posix()
        self.dir = self.root / self.rel_dir

    def __repr__(self) -> str:
        return f"ReferenceStore({str(self.root)!r}, {self.rel_dir!r})"

    def index_path_for(self, topic: str) -> str:
        """Where a topic's file goes, as written in the index: root-relative, posix."""
        return f"{self.rel_dir}/{slugify(topic)}.md"

    def index_path_of(self, path: Path) -> str:
        """The index form of a file inside the folder (inverse of resolve)."""
        try:
            rel = Path(path).resolve().relative_to(self.dir.resolve())
        except ValueError:
            raise self._escape(str(path), "it is outside the folder") from None
        return f"{self.rel_dir}/{rel.as_posix()}"

    def resolve(self, index_path: str) -> Path:
        """The file an index path names, or PathEscapeError if it could leave the folder."""
        rel = self._inside_parts(index_path)
        folder = self.dir.resolve()
        target = _resolve(folder.joinpath(*rel))
        if target != folder and folder not in target.parents:
            raise self._escape(index_path, f"it resolves to {target}")
        if target == folder:
            raise self._escape(index_path, "it names the folder itself, not a file")
        return target

    def read(self, index_path: str) -> str:
        """The file's text; FileNotFoundError if it does not exist (callers decide)."""
        return fsutil.read_text(self.resolve(index_path))

    def exists(self, index_path: str) -> bool:
        return self.resolve(index_path).is_file()

    def write(self, index_path: str, text: str) -> Path:
        """Write atomically (creating the folder); returns the file written."""
        path = self.resolve(index_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Re-check after mkdir: a folder created meanwhile could be a symlink out.
        path = self.resolve(index_path)
        fsutil.atomic_write_text(path, text)
        return path

    def files(self) -> list[Path]:
        """Every *.md under the folder (sorted), except the compaction archive/ and any file
        that a symlink leads out of the folder."""
        return [p for _, p in self.indexed_files()]

    def indexed_files(self) -> list[tuple[str, Path]]:
        """(index path, file) for each of `files()`: `index_path_of(file)`, in its order.

        One scandir walk: a file reached through no symlink is inside the folder by
        construction, so only symlinks are resolved (10,000 references took 20,000
        realpath walks here, three times per iteration). Like `Path.rglob` (Python 3.11),
        the walk does not enter symlinked folders and skips folders it may not list."""
        return [(index_path, Path(path)) for index_path, path in self.indexed_names()]

    def indexed_names(self) -> list[tuple[str, str]]:
        """`indexed_files` with each file as a string (10,000 Path objects cost 0.1 s, and
        the iteration's checks walk the folder twice)."""
        if not self.dir.is_dir():
            return []
        folder = _resolve(self.dir)
        found: list[tuple[tuple[str, ...], str, str]] = []
        self._walk(str(self.dir), (), folder, found)
        found.sort(key=lambda f: f[0])  # Path order: by parts (all share self.dir)
        return [(index_path, path) for _, index_path, path in found]

    def _walk(
        self,
        where: str,
        rel: tuple[str, ...],
        folder: Path,
        out: list[tuple[tuple[str, ...], str, str]],
    ) -> None:
        try:
            with os.scandir(where) as it:
                entries = list(it)
        except PermissionError:
            return
        for e in entries:
            link = e.is_symlink()
            if not link and e.is_dir():
                if rel or e.name != ARCHIVE:
                    self._walk(e.path, (*rel, e.name), folder, out)
                continue
            if not e.name.endswith(".md") or not e.is_file():
                continue
            path = e.path
            parts = (*rel, e.name)
            if not link:
                out.append((parts, "/".join((self.rel_dir, *parts)), path))
                continue
            real = _resolve(Path(path))
            if folder in real.parents:
                index_path = f"{self.rel_dir}/{real.relative_to(folder).as_posix()}"
                out.append((parts, index_path, path))

    # -- internals -------------------------------------------------------------------------

    def _inside_parts(self, index_path: str) -> tuple[str, ...]:
        raw = index_path.strip().strip("`").strip()
        text = raw.replace("\\", "/")
        if not text:
            raise self._escape(index_path, "it is empty")
        if text.startswith(("/", "~")) or re.match(r"[A-Za-z]:", text):
            raise self._escape(index_path, "it is absolute")
        parts = tuple(p for p in PurePosixPath(text).parts if p != ".")
        if ".." in parts:
            raise self._escape(index_path, "it contains `..`")
        if "\0" in text:
            raise self._escape(index_path, "it contains a NUL byte")
        prefix = tuple(PurePosixPath(self.rel_dir).parts)
        if parts[: len(prefix)] == prefix and len(parts) > len(prefix):
            return parts[len(prefix) :]
        if len(parts) == 1:
            return parts
        raise self._escape(index_path, f"it is not under {self.rel_dir}/")

    def _escape(self, index_path: str, why: str) -> PathEscapeError:
        return PathEscapeError(
            f"reference path {index_path!r} refused: {why}. Rule: " + _RULE.format(dir=self.rel_dir)
        )
