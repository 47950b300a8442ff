"""Atomic file writes: users' prd.json, progress.txt and references are precious.

Every write goes to a temp file in the same folder, is flushed to disk, then renamed over
the target, so a crash leaves either the old file or the new one, never half of each.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import unicodedata
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator.errors import FileError

if TYPE_CHECKING:
    from importlib.abc import Traversable

# What to do about each errno we can meet on a user's file (the message names the file).
_FIXES = {
    errno.EACCES: "give the user running ralph read/write access to it (chmod/chown), "
    "or run ralph as its owner",
    errno.EPERM: "give the user running ralph access to it (chmod/chown, chattr -i)",
    errno.EISDIR: "a folder is in the way: move it aside and put the file there",
    errno.ENOTDIR: "a file is in the way of a folder on this path: move it aside",
    errno.ELOOP: "a symlink loop: point the symlink at a real file, or replace it by the file",
    errno.ENOENT: "it (or the folder it is in) does not exist: create it or fix the path "
    "(a symlink pointing nowhere?)",
    errno.ENOSPC: "the disk is full: free some space and run again",
    errno.EDQUOT: "the disk quota is used up: free some space and run again",
    errno.EFBIG: "the file size limit was reached (ulimit -f): raise it and run again",
    errno.EROFS: "the file system is read-only: remount it read-write or use a writable copy",
    errno.EIO: "an I/O error: check the disk (dmesg) and run again",
}
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def file_error(path: Path | str, exc: OSError, action: str) -> FileError:
    """One clear error for an OSError on `path`: the file, what went wrong and the fix."""
    if isinstance(exc, FileError):
        return exc
    code = exc.errno or 0
    reason = os.strerror(code) if code else str(exc)
    name = errno.errorcode.get(code, "")
    fix = _FIXES.get(code, "check the file and its folder, then run again")
    if code == errno.ENOENT and os.path.islink(path):
        fix = "it is a symlink pointing nowhere: point it at the real file or remove it"
    shown = f"{reason} ({name})" if name else reason
    return FileError(f"{path}: cannot {action} it: {shown}. Fix: {fix}", path=str(path), errno=code)


def kind_of(mode: int) -> str:
    """What a non-regular file is, for a message: "a FIFO (named pipe)", "a folder"..."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def not_regular(path: Path | str, mode: int) -> FileError:
    kind = kind_of(mode)
    return FileError(
        f"{path}: is {kind}, not a regular file; ralph reads and writes plain files only. "
        "Fix: replace it by a regular file",
        path=str(path),
        errno=errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
    )


def present(path: Path | str) -> bool:
    """True for a regular file, False when nothing is there; anything else (a folder, a FIFO,
    a dangling or looping symlink, no permission to look) is a FileError, never "absent"."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        if os.path.islink(path):
            raise file_error(path, exc, "read") from None
        return False
    except OSError as exc:
        raise file_error(path, exc, "read") from None
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    return True


def _umask() -> int:
    current = os.umask(0)  # the only portable way to read it is to set it
    os.umask(current)
    return current


def atomic_write_bytes(
    path: Path, data: bytes, *, backup: bool = False, follow: bool = True
) -> None:
    """Replace `path` with `data` atomically; with `backup`, keep the old file as `<path>.bak`.
    Any OSError (no permission, disk full...) is a FileError naming `path`; the old file stays.
    `follow=False`: a symlink (or FIFO...) at `path` is itself replaced by the regular file,
    its target never touched (a link somebody else put there must not be written through)."""
    try:
        _atomic_write_bytes(Path(path), data, backup, follow)
    except OSError as exc:
        raise file_error(path, exc, "write") from None


def write_target(path: Path) -> Path:
    """The file a write to `path` must replace: `path` itself, or, when it is a symlink, the
    file it points to (at any depth). Renaming a temp file over the link itself would turn
    it into a regular file and leave its target with the old text: two diverging copies."""
    if not os.path.islink(path):
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:  # a dangling link: the write creates the file it names
        return Path(os.path.realpath(path))


def _atomic_write_bytes(link: Path, data: bytes, backup: bool, follow: bool = True) -> None:
    path = write_target(link) if follow else link
    if path is link:
        path.parent.mkdir(parents=True, exist_ok=True)
    if backup and path.exists():
        shutil.copy2(path, link.with_name(link.name + ".bak"))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            if path.exists() and (follow or not path.is_symlink()):
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


def atomic_write_text(path: Path, text: str, *, backup: bool = False, follow: bool = True) -> None:
    """Write text as UTF-8 without newline translation (bytes in == bytes out)."""
    data = text.encode("utf-8", errors="surrogateescape")
    atomic_write_bytes(path, data, backup=backup, follow=follow)


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


def read_bytes(path: Path | str) -> bytes:
    """The bytes of a regular file. A missing file raises FileNotFoundError (callers decide
    what absent means) unless it is a dangling symlink; any other OSError, or a FIFO/device/
    folder in its place (which would block or mislead), is a FileError naming the file."""
    return read_bytes_stat(path)[0]


def read_bytes_stat(path: Path | str) -> tuple[bytes, os.stat_result]:
    """read_bytes, and the file's stat taken on the open file before reading it (what
    memory.seen keys a file by), with the same errors."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; checked just below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        if os.path.islink(path):
            raise file_error(path, exc, "read") from None
        raise
    except OSError as exc:
        raise file_error(path, exc, "read") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        # os.read, not a file object: a buffered reader per file doubled the time of
        # reading 10,000 references. O_NONBLOCK does not apply to regular files.
        chunks = []
        got = 0
        while chunk := os.read(fd, max(st.st_size + 1, 1 << 16)):
            chunks.append(chunk)
            got += len(chunk)
            if got == st.st_size:
                break  # all the bytes the stat names: no second call only to meet the end
        return b"".join(chunks), st
    except FileError:
        raise
    except OSError as exc:
        raise file_error(path, exc, "read") from None
    finally:
        os.close(fd)


def read_text(path: Path | str) -> str:
    """Read UTF-8 text exactly (no newline translation), so render(parse(x)) can equal x."""
    return read_bytes(path).decode("utf-8", errors="surrogateescape")


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ralph-index` (default `~/.cache/ralph-index`): caches that belong to
    no project folder (parsed configs, token counts of projects with no log folder yet,
    tiktoken's files)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ralph-index"


def shipped(package: str, source_folder: str) -> Traversable:
    """Data shipped with the package (`orchestrator.templates`, `orchestrator.bundled_examples`:
    pyproject maps the repository's `templates/` and `examples/` to them). Run from a
    source checkout, where `orchestrator/` shadows the installed package and those data
    packages do not exist, the repository's own folder."""
    # Imported here: importlib.resources costs ~8% of a `ralph status`, which reads no
    # shipped file.
    from importlib import resources

    try:
        return resources.files(package)
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / source_folder


def shipped_templates() -> Traversable:
    """The prompt and scaffold templates shipped with the package (templates/)."""
    return shipped("orchestrator.templates", "templates")
