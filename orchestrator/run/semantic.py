"""Optional semantic similarity: wordllama's 256-d static word embeddings (offline; the
weights ship inside its wheel). Off by default (`select.DEFAULT_SEMANTIC` is 0):
cross-validation did not show a gain worth its load time (bench/README.md). When the
package is missing, similarity is None and ranking is BM25 alone.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# Embeddings by text: references change little between prompts.
_SEEN: dict[str, np.ndarray] = {}


@functools.cache
def _model() -> Any | None:
    try:  # a heavy optional library (~1-3 s to load): imported on first use only
        import wordllama  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    # Its wheel has the tokenizer under tokenizers/, the place its cache lookup reads.
    home = Path(wordllama.__file__).parent
    try:
        return wordllama.WordLlama.load(cache_dir=home, disable_download=True)
    except (OSError, ValueError):
        return None


def available() -> bool:
    return _model() is not None


def _embed(texts: Sequence[str]) -> np.ndarray:
    model = _model()
    assert model is not None  # similarity() checked
    new = [t for t in dict.fromkeys(texts) if t not in _SEEN]
    if new:
        for t, v in zip(new, np.asarray(model.embed(new, norm=True)), strict=True):
            _SEEN[t] = v
    return np.stack([_SEEN[t] for t in texts]) if texts else np.zeros((0, 256))


def similarity(query: str, texts: Sequence[str]) -> np.ndarray | None:
    """Cosine similarity of the query with each text, clipped at 0; None without wordllama."""
    if _model() is None or not texts:
        return None
    q = _embed([query])[0]
    sims: np.ndarray = np.clip(_embed(texts) @ q, 0.0, None)
    return sims
