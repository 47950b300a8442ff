"""Atomic file writes: users' prd.json, progress.txt and references are precious.

Every write goes to a temp file in the same folder, is flushed to disk, then renamed over
the target, so a crash leaves either the old file or the new one, never half of each.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
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


def atomic_write_text(path: Path, text: str, *, backup: bool = False) -> None:
    """Write text as UTF-8 without newline translation (bytes in == bytes out)."""
    atomic_write_bytes(path, text.encode("utf-8", errors="surrogateescape"), backup=backup)


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
