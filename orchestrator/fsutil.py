"""Atomic file writes: users' prd.json, progress.txt and references are precious.

Every write goes to a temp file in the same folder, is flushed to disk, then renamed over
the target, so a crash leaves either the old file or the new one, never half of each.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import unicodedata
from pathlib import Path, PurePosixPath


def _umask() -> int:
    current = os.umask(0)  # the only portable way to read it is to set it
    os.umask(current)
    return current


def atomic_write_bytes(path: Path, data: bytes, *, backup: bool = False) -> None:
    """Replace `path` with `data` atomically; with `backup`, keep the old file as `<path>.bak`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if backup and path.exists():
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            if path.exists():
                # Keep the user's file mode (e.g. an executable script stays executable).
                shutil.copymode(path, tmp)
            else:
                # mkstemp makes 0600 files; a new file gets the usual mode (0666 minus umask).
                os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# The `.gitignore` put inside every folder ralph-index owns: git then ignores the folder's
# whole content (this file included) without any edit of the user's own .gitignore, so an
# agent told to "commit all changes" cannot commit our ledger, lock or transcripts.
IGNORE_ALL = "# Written by ralph-index: git ignores this folder (run logs, locks, backups).\n*\n"


def make_owned_dir(folder: Path) -> Path:
    """Create `folder` (and its parents) as a folder git ignores, and return it.

    A new folder appears with its `.gitignore` already inside: it is built under a temporary
    name and renamed into place, so no `git add -A` can ever catch it bare. An existing folder
    without a `.gitignore` (made by an older version) gets one, atomically; an existing
    `.gitignore` is the user's and is left as it is.
    """
    folder = Path(folder)
    marker = folder / ".gitignore"
    if marker.is_file():
        return folder
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".new", dir=folder.parent))
        try:
            (tmp / ".gitignore").write_text(IGNORE_ALL, encoding="utf-8")
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700 folders
            os.rename(tmp, folder)  # fails if another process made `folder` meanwhile
            return folder
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not folder.is_dir():
                raise
    if not marker.exists():
        atomic_write_text(marker, IGNORE_ALL)
    return folder


def atomic_write_text(path: Path, text: str, *, backup: bool = False) -> None:
    """Write text as UTF-8 without newline translation (bytes in == bytes out)."""
    atomic_write_bytes(path, text.encode("utf-8", errors="surrogateescape"), backup=backup)


NAME_MAX = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_name(text: str, *, max_len: int = NAME_MAX) -> str:
    """One file or folder name made from user text (a story id, a branch, a topic, a run
    name): the only way such text becomes part of a path.

    Letters are folded to ASCII, every other run of characters outside `A-Z a-z 0-9 . _ + -`
    (separators `/` and `\\`, `..`, spaces, control characters) becomes one `-`, leading
    dots and dashes go (no hidden file, no option-looking name), and the result is at most
    `max_len` characters, so it always fits the 255-byte name limit. Text with nothing
    usable left gets `x-<hash>`, so two such ids still get different names. Already-safe
    names are returned unchanged (`US-001`, `feat-x`)."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    name = _UNSAFE.sub("-", folded).lstrip(".-")
    name = re.sub(r"\.{2,}", ".", name)[:max_len].rstrip(".-")
    if not name:
        digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
        name = f"x-{digest[:8]}"
    return name


def relative_inside(path: str) -> PurePosixPath | None:
    """`path` (either slash) as a posix path that stays inside the folder it is taken in;
    None when it is blank, absolute or has a `..`. Lexical only: symlinks are the caller's."""
    p = PurePosixPath(path.replace("\\", "/"))
    if not path.strip() or p.is_absolute() or ".." in p.parts:
        return None
    return p


def read_text(path: Path) -> str:
    """Read UTF-8 text exactly (no newline translation), so render(parse(x)) can equal x."""
    return Path(path).read_bytes().decode("utf-8", errors="surrogateescape")
