"""Replicated A/B figures: mean and 95% bootstrap interval per arm, and the paired difference.

Replicate i of both arms starts from the same files with the same seed, so arms are compared
replicate by replicate (paired): the difference of each pair, then the mean of those
differences with a percentile bootstrap interval. An interval that contains zero means the
A/B cannot tell the arms apart at this number of replicates, and the words say so. With one
replicate there is no interval (the figure is shown alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.95
RESAMPLES = 10_000
SEED = 20261201  # fixed: the same ledgers always give the same report


@dataclass(frozen=True)
class Estimate:
    mean: float | None
    low: float | None  # None with fewer than two values
    high: float | None
    n: int
    values: list[float]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def excludes_zero(self) -> bool:
        if self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0


def estimate(values: Sequence[float | None]) -> Estimate:
    """Mean and percentile-bootstrap interval of the mean (values that are None are left out)."""
    import numpy as np  # heavy: only when a report is computed

    xs = np.array([float(v) for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return Estimate(None, None, None, 0, [])
    mean = float(xs.mean())
    if xs.size < 2:
        return Estimate(mean, None, None, 1, xs.tolist())
    rng = np.random.default_rng(SEED)
    means = xs[rng.integers(0, xs.size, size=(RESAMPLES, xs.size))].mean(axis=1)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(mean, float(low), float(high), int(xs.size), xs.tolist())


def paired_difference(a: Sequence[float | None], b: Sequence[float | None]) -> Estimate:
    """a - b, replicate by replicate (pairs with a missing side are left out)."""
    return estimate([x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None])


# What "more" means for each figure, for the sentence: +1 more is better, -1 less is better.
BETTER = {
    "stories_passed": +1,
    "iterations_per_passed_story": -1,
    "check_failures": -1,
    "restores": -1,
    "retries": -1,
    "false_completions": -1,
    "memory_misses": -1,
    "wall_time_s": -1,
    "prompt_tokens": -1,
    "input_tokens": -1,
    "output_tokens": -1,
    "cost_usd": -1,
    "stories_per_usd": +1,
}


def _fmt(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x / 1000:.1f}k"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def sentence(label: str, key: str, diff: Estimate, a: str, b: str) -> str:
    """One plain sentence about `a - b` for a figure."""
    n = diff.n
    if diff.mean is None:
        return f"{label}: not measured."
    if n < 2:
        return f"{label}: {a} minus {b} = {_fmt(diff.mean)} (one replicate: no interval)."
    if not diff.excludes_zero:
        return f"No measurable difference in {label} at N={n}."
    bigger = diff.mean > 0
    direction = "higher" if bigger else "lower"
    better = BETTER.get(key)
    verdict = ""
    if better is not None:
        verdict = ", better" if (better > 0) == bigger else ", worse"
    return (
        f"{label}: {a} is {direction} than {b}{verdict}: {a} - {b} = {_fmt(diff.mean)} "
        f"(95% CI {_fmt(diff.low or 0)} to {_fmt(diff.high or 0)}, N={n})."
    )
