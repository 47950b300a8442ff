"""bench/cv.py: the fold split by repository and a choice that never sees the held-out fold."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import cv  # noqa: E402
import cv_data  # noqa: E402

NAMES = [
    "acme__shop",
    "acme__shop__2026-01-02-branch",
    "acme__shop__hist-abc-pre-reset",
    "acme__api",
    "bob__tool",
    "bob__tool__ralph-dir",
    "carol__site",
    "dan__game",
    "erin__cli",
    "frank__lib",
]


def test_forks_of_one_repository_fall_in_the_same_fold() -> None:
    counts = {n: 3 + i for i, n in enumerate(NAMES)}
    folds = cv.fold_of(NAMES, counts)
    assert set(folds) == set(NAMES)
    assert folds["acme__shop"] == folds["acme__shop__2026-01-02-branch"]
    assert folds["acme__shop"] == folds["acme__shop__hist-abc-pre-reset"]
    assert folds["bob__tool"] == folds["bob__tool__ralph-dir"]
    # Another repository of the same owner is a different project: it may go elsewhere.
    assert cv_data.owner_repo("acme__shop__x") == "acme__shop" != cv_data.owner_repo("acme__api")
    assert len(set(folds.values())) == cv.FOLDS  # 8 repositories spread over 5 folds
    assert cv.fold_of(list(reversed(NAMES)), counts) == folds  # deterministic


def _table(n_cases: int) -> np.ndarray:
    """[case, setting, cut-off, (memory, recall, prompt)]: 2 settings x 3 cut-offs, where
    a lower cut-off costs more memory and finds more."""
    t = np.zeros((n_cases, 2, 3, 3))
    for m, (mem, rec) in enumerate([(0.5, 1.0), (0.3, 0.95), (0.1, 0.5)]):
        t[:, :, m, 0], t[:, :, m, 1] = mem, rec
    t[:, 1, :, 0] += 0.05  # setting 1 costs more for the same recall
    return t


def test_choice_takes_the_widest_margin_to_both_targets() -> None:
    t = _table(10)
    assert cv.choose(t, np.arange(10)) == (0, 1)  # the least bad: memory 0.3 at recall 0.95
    t[:, :, :, 1] = 0.5  # recall missed everywhere by as much: the least memory
    assert cv.choose(t, np.arange(10)) == (0, 2)
    # Memory 0.12 at recall 0.90 is the cheapest that keeps recall, right at its edge;
    # 0.13 at 0.96 has room on both sides and is chosen.
    for m, (mem, rec) in enumerate([(0.149, 0.91), (0.13, 0.96), (0.12, 0.90)]):
        t[:, :, m, 0], t[:, :, m, 1] = mem, rec
    assert cv.choose(t, np.arange(10)) == (0, 1)


def test_thresholds_never_see_the_held_out_fold() -> None:
    class Case:
        def __init__(self, history: str) -> None:
            self.history = history

    cases = [Case(n) for n in NAMES for _ in range(3)]
    folds = cv.fold_of(NAMES, dict.fromkeys(NAMES, 3))
    t = _table(len(cases))
    held = [i for i, c in enumerate(cases) if folds[c.history] == 0]
    # Poison the held-out fold: were it used for choosing, cut-off 2 would win there.
    t[held, :, 2, 1] = 1.0
    t[held, :, :2, 1] = 0.0
    runs = cv.cross_validate(cases, t, folds)  # type: ignore[arg-type]
    fold0 = next(r for r in runs if r["fold"] == 0)
    assert set(fold0["train"].tolist()).isdisjoint(held)
    assert sorted(fold0["test"].tolist()) == held
    assert (fold0["setting"], fold0["cutoff"]) == (0, 1)  # chosen as on untouched data
