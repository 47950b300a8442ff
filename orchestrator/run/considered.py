"""A prompt's row per reference (`ralph prompt --json`'s `considered`): its score, the items
and tokens taken from it, and why the rest were left out. Made only when read: a loop
iteration never reads them, and 10,000 references' rows cost a tenth of a second."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import numpy as np

Rows = Callable[[], list[dict[str, Any]]]
# What the budget did to an item of a reference: tokens taken, or why it was left out.
Event = tuple[int, int | str]

REASONS = [
    "hint: story",
    "always",
    "relevant",
    "over budget",
    "over references.max_tokens",
    "repeats an item shown",
    "below cut-off",
    "no match",
    "empty",
]


class _RefStats(TypedDict):
    """One reference's tally while the budget is spent."""

    items: int
    taken: int
    taken_tokens: int
    why: set[str]


def rows(
    sources: Sequence[Any],
    ref_scores: list[float],
    item_refs: np.ndarray,
    item_scores: np.ndarray,
    free: np.ndarray,
    passing: np.ndarray,
    events: Sequence[Event],
    tier: Mapping[int, int],
) -> list[dict[str, Any]]:
    """One row per reference, most tokens taken first. `item_refs`/`item_scores`: each
    item's reference and score; `free`: items under no hint; `passing`: items above the
    cut-off; `events`: what the budget did, in order; `tier`: 0 story hint, 1 always."""
    stats = _dropped(item_refs, item_scores, free, passing, len(sources))
    for r, what in events:
        if isinstance(what, str):
            stats[r]["why"].add(what)
        else:
            _tally(stats[r], what, tier.get(r, 2))
    return _table(sources, ref_scores, stats)


def with_prior(made: Rows, prior: Mapping[str, float]) -> Rows:
    """`made`, each reference's prior added (why a reference missed before was taken)."""

    def add() -> list[dict[str, Any]]:
        out = made()
        for row in (r for r in out if r["path"] in prior):
            row["prior"] = prior[row["path"]]
        return out

    return add


def left_out(ref: Any, reason: str) -> dict[str, Any]:
    """The row of a reference the selector never saw (a missing file, a duplicate)."""
    return {
        "path": ref.path,
        "topic": ref.topic,
        "score": 0.0,
        "tokens": 0,
        "items": 0,
        "taken_items": 0,
        "taken_tokens": 0,
        "taken": False,
        "reason": reason,
    }


def _dropped(
    refs: np.ndarray, scores: np.ndarray, free: np.ndarray, passing: np.ndarray, n_refs: int
) -> dict[int, _RefStats]:
    """Per reference: its item count and why its items were left out before the budget."""
    import numpy as np  # lazy: prompt.py imports this module on the full-mode path too

    # As lists: reading numpy arrays one element at a time is slow over 10,000 references.
    below = free & (scores > 0.0) & ~passing
    items = np.bincount(refs, minlength=n_refs).tolist()
    zero = np.bincount(refs, weights=free & (scores <= 0.0), minlength=n_refs).tolist()
    low = np.bincount(refs, weights=below, minlength=n_refs).tolist()
    stats: dict[int, _RefStats] = {}
    for r in range(n_refs):
        why = {w for w, k in (("no match", zero[r]), ("below cut-off", low[r])) if k}
        if items[r] == 0:
            why = {"empty"}
        stats[r] = {"items": int(items[r]), "taken": 0, "taken_tokens": 0, "why": why}
    return stats


def _tally(st: _RefStats, n: int, tier: int) -> None:
    st["taken"] += 1
    st["taken_tokens"] += n
    st["why"].add(("hint: story" if tier == 0 else "always") if tier < 2 else "relevant")


def _table(
    sources: Sequence[Any], ref_scores: list[float], stats: dict[int, _RefStats]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r, src in enumerate(sources):
        st = stats[r]
        why = sorted(st["why"], key=REASONS.index)
        out.append(
            {
                "path": src.path,
                "topic": src.topic,
                "score": ref_scores[r] if ref_scores else 0.0,
                "tokens": getattr(src, "tokens", None),
                "items": st["items"],
                "taken_items": st["taken"],
                "taken_tokens": st["taken_tokens"],
                "taken": st["taken"] > 0,
                "reason": ", ".join(why),
            }
        )
    out.sort(key=lambda x: (-x["taken_tokens"], -x["score"], x["path"]))
    return out
