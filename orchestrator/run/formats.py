"""How durations, amounts, savings and paths read in every view (`ralph run`, `status`,
`--follow`, serve, notifications).

Plain functions with no rendering library: `ralph status` and the other read-only views
import them without loading rich (see run/display.py for what draws).
"""

from __future__ import annotations

from orchestrator.tokens import fmt


def duration(seconds: float | None) -> str:
    """3m12s, 45s, 1h02m."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def money(usd: float | None) -> str:
    """$0.41; small amounts keep their significant digits ($0.0071)."""
    if usd is None:
        return "-"
    return f"${usd:.2f}" if usd >= 0.1 or usd == 0 else f"${usd:.4f}"


def relative(line: str, root: str | None) -> str:
    """Paths under the project root shown relative to it (`⏺ Write app/models.py`): shorter,
    and what the user would type."""
    if not root:
        return line
    return line.replace(root.rstrip("/") + "/", "")


def saving(full_history_tokens: int, saved_pct: float | None) -> str:
    """`(full history 27.4k: saved 88%)`. Early on the whole history is shorter than the
    index template: that is said plainly rather than as a negative saving."""
    pct, full = float(saved_pct or 0), fmt(full_history_tokens)
    if pct < 0:
        return f"(full history {full} is still shorter: +{-pct:.0f}% until it grows)"
    return f"(full history {full}: saved {pct:.0f}%)"
