"""Recognise usage-limit and rate-limit signals in agent output, and when they reset.

The texts below are the ones real CLIs print (see shared/notes/agent-clis.md):

- Claude Code stream-json `{"type":"rate_limit_event","rate_limit_info":{"status":"rejected",
  "resetsAt":<epoch>}}` (subscription users; status "allowed"/"allowed_warning" is no limit);
- `Claude AI usage limit reached|<epoch>` (older Claude Code);
- `5-hour limit reached ∙ resets 9pm`, `You've hit your limit · resets 7pm (America/Los_Angeles)`,
  `Opus weekly limit reached ∙ resets Oct 9, 10am`;
- Codex `You've hit your usage limit. Upgrade to Pro ... or try again at 12:16 PM.`
  (also `try again in 2 hours 5 minutes`);
- HTTP 429 (`api_error_status: 429`, `Request rejected (429)`, `429 Too Many Requests`):
  a limit whose reset time is unknown (the loop then waits `limits.fallback_wait`);
- Gemini `RESOURCE_EXHAUSTED` / `Quota exceeded ...` (with `retry in 37s` when given);
- Amp `out of credits` / `usage limit reached` texts.

`reset_at` is always an aware datetime: the next occurrence of a clock time, in the zone the
message names or else the local zone, except for a clock time less than `JUST_PASSED` ago.
Claude Code keeps printing its limit message for a while after the reset it names, so "resets
1pm" read at 13:42 means the reset just passed (retry soon, with growing waits while the
message persists), not 1pm tomorrow. Why five hours: Claude's and Codex's session windows are
five hours long, so a clock-only reset is never more than five hours ahead; a time up to five
hours behind the clock can only be a stale message, whereas reading it as tomorrow would turn
a reset that already happened into a wait of 19 hours or more (beyond any sane max_wait).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from orchestrator.agents.base import AgentResult


JUST_PASSED = timedelta(hours=5)


@dataclass
class LimitSignal:
    reset_at: datetime | None  # aware; None when the message gives no reset time
    raw: str  # the text that matched (for logs and the ledger)
    kind: str = "usage"  # usage | rate | quota

    def wait_seconds(self, now: datetime | None = None) -> float | None:
        if self.reset_at is None:
            return None
        now = now or datetime.now(timezone.utc)
        return max(0.0, (self.reset_at - now).total_seconds())

    def just_passed(self, now: datetime | None = None) -> bool:
        """The stated reset is already behind us: the message is stale (see module doc)."""
        if self.reset_at is None:
            return False
        return self.reset_at <= (now or datetime.now(timezone.utc))

    def to_dict(self) -> dict[str, Any]:
        return {
            "reset_at": self.reset_at.isoformat() if self.reset_at else None,
            "raw": self.raw,
            "kind": self.kind,
        }


_APOS = "['\u2019]"  # ASCII or typographic apostrophe
_CLOCK = r"(?P<clock>\d{1,2}(?::\d{2})?\s*(?:[ap]\.?m\.?)?)"
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

_CLAUDE_PIPE = re.compile(r"Claude AI usage limit reached\|(?P<epoch>\d{9,13})")
_RESETS = re.compile(
    r"(?P<head>limit reached|You" + _APOS + r"ve hit your (?:\w+ )?limit"
    r"|You" + _APOS + r"re out of (?:extra )?usage)"
    r"[^\n]{0,60}?(?:resets|will reset)\s+(?:at\s+)?"
    r"(?:(?P<mon>[A-Za-z]{3})[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:at\s+)?)?"
    + _CLOCK
    + r"(?:\s*\((?P<tz>[A-Za-z_]+(?:/[A-Za-z_+-]+)*|UTC)\))?",
    re.IGNORECASE,
)
_CODEX = re.compile(
    r"You" + _APOS + r"ve hit your usage limit\.[^\n]*?try again "
    r"(?:at\s+(?:(?P<mon>[A-Za-z]{3})[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+"
    r"(?:\d{4}\s+)?)?" + _CLOCK + r"|in\s+(?P<span>(?:\d+\s*[a-z]+[,\s]*(?:and\s+)?)+))",
    re.IGNORECASE,
)
_CODEX_BARE = re.compile(r"You" + _APOS + r"ve hit your usage limit[^\n]*", re.IGNORECASE)
_HTTP_429 = re.compile(
    r"Request rejected \(429\)|\b429 Too Many Requests|\"?api_error_status\"?:\s*429"
    r"|rate_limit_error|API Error: 429",
    re.IGNORECASE,
)
# The notices alone, without the rest of their line (the signal's `raw` is a snippet around
# them): a pattern that opened with `[^\n]*` or `(?:[\w-]+ )*` was tried from every
# character of a line and took seconds on a 20 kB one.
_GEMINI = re.compile(
    r"RESOURCE_EXHAUSTED|Quota exceeded|exhausted your (?:daily )?quota"
    r"|Resource has been exhausted",
    re.IGNORECASE,
)
_RETRY_IN = re.compile(r"retry (?:in|after)\s+(?P<secs>\d+(?:\.\d+)?)\s*s", re.IGNORECASE)
_RETRY_DELAY = re.compile(r"\"retryDelay\"\s*:\s*\"(?P<secs>\d+(?:\.\d+)?)s\"")
_AMP = re.compile(
    r"out of (?:free )?credits|insufficient (?:credits|balance)"
    r"|(?:daily|usage|credit) limit (?:reached|exceeded)",
    re.IGNORECASE,
)
_SPAN_UNITS = {"day": 86400, "hour": 3600, "hr": 3600, "minute": 60, "min": 60, "second": 1}


def detect(
    text: str = "", *, now: datetime | None = None, result: AgentResult | None = None
) -> LimitSignal | None:
    """The first limit signal in `text` (and in `result`'s error fields), or None."""
    now = _aware(now)
    text = text or ""
    if result is not None:
        extra = [result.error or ""]
        if result.is_error and result.final_message:
            extra.append(result.final_message)
        text = "\n".join([text, *extra])
    for finder in (_rate_limit_event, _claude_pipe, _resets, _codex, _gemini, _amp):
        signal = finder(text, now)
        if signal is not None:
            return signal
    if result is not None and result.http_status == 429:
        return LimitSignal(None, f"api_error_status: 429 {result.error or ''}".strip(), "rate")
    match = _HTTP_429.search(text)
    if match:
        return LimitSignal(None, _snippet(text, match), "rate")
    return None


def notice(text: str, *, now: datetime | None = None) -> LimitSignal | None:
    """The limit notice `text` is, or None: Claude's and Codex's own notices only, and only
    when they are most of the text. A run that ended "successfully" is read with this, since
    a final message may well talk about limits ("the wallet shows credit limit exceeded")."""
    text = text.strip()
    now = _aware(now)
    for finder, pattern in ((_claude_pipe, _CLAUDE_PIPE), (_resets, _RESETS), (_codex, _CODEX)):
        match = pattern.search(text)
        if match and 2 * (match.end() - match.start()) >= len(text):
            return finder(text, now)
    bare = _CODEX_BARE.search(text)
    if bare and 2 * len(bare.group(0)) >= len(text):
        return _codex(text, now)
    return None


def _snippet(text: str, match: re.Match[str], before: int = 40, after: int = 160) -> str:
    """The match with some context from its own line (for logs; whole JSON lines are long)."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    line_end = text.find("\n", match.end())
    line_end = len(text) if line_end == -1 else line_end
    start = max(line_start, match.start() - before)
    return text[start : min(line_end, match.end() + after)].strip()


def _aware(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now().astimezone()
    return now if now.tzinfo else now.astimezone()


def _from_epoch(value: float) -> datetime:
    if value > 1e12:  # milliseconds
        value /= 1000
    return datetime.fromtimestamp(value, timezone.utc)


def _rate_limit_event(text: str, now: datetime) -> LimitSignal | None:
    for line in text.splitlines():
        if '"rate_limit_event"' not in line:
            continue
        try:
            event = json.loads(line.strip())
        except ValueError:
            continue
        info = event.get("rate_limit_info") or {}
        if not isinstance(info, dict) or info.get("status") != "rejected":
            continue
        resets = info.get("resetsAt")
        reset_at = _from_epoch(float(resets)) if isinstance(resets, (int, float)) else None
        return LimitSignal(reset_at, line.strip()[:300], "usage")
    return None


def _claude_pipe(text: str, now: datetime) -> LimitSignal | None:
    match = _CLAUDE_PIPE.search(text)
    if not match:
        return None
    return LimitSignal(_from_epoch(float(match.group("epoch"))), match.group(0), "usage")


def _resets(text: str, now: datetime) -> LimitSignal | None:
    match = _RESETS.search(text)
    if not match:
        return None
    reset = _next_clock(
        match.group("clock"), match.group("tz"), now, match.group("mon"), match.group("day")
    )
    return LimitSignal(reset, _snippet(text, match), "usage")


def _codex(text: str, now: datetime) -> LimitSignal | None:
    match = _CODEX.search(text)
    if match:
        if match.group("span"):
            reset = _after_span(match.group("span"), now)
        else:
            reset = _next_clock(
                match.group("clock"), None, now, match.group("mon"), match.group("day")
            )
        return LimitSignal(reset, match.group(0).strip(), "usage")
    bare = _CODEX_BARE.search(text)
    return LimitSignal(None, bare.group(0).strip()[:300], "usage") if bare else None


def _gemini(text: str, now: datetime) -> LimitSignal | None:
    match = _GEMINI.search(text)
    if not match:
        return None
    delay = _RETRY_DELAY.search(text) or _RETRY_IN.search(text)
    reset = now + timedelta(seconds=float(delay.group("secs"))) if delay else None
    return LimitSignal(reset, _snippet(text, match), "quota")


def _amp(text: str, now: datetime) -> LimitSignal | None:
    match = _AMP.search(text)
    return LimitSignal(None, _snippet(text, match), "usage") if match else None


def _zone(name: str | None, now: datetime) -> tzinfo | None:
    if not name:
        return now.tzinfo
    if name.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return now.tzinfo


def _parse_clock(clock: str) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*(?:([ap])\.?m\.?)?", clock.strip(), re.I)
    if not m:
        return None
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    ampm = (m.group(3) or "").lower()
    if ampm == "p" and hour != 12:
        hour += 12
    elif ampm == "a" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        return None
    return hour, minute


def _next_clock(
    clock: str, tz: str | None, now: datetime, mon: str | None = None, day: str | None = None
) -> datetime | None:
    """The next moment at `clock` (in zone `tz`, else now's zone) at or after `now`, or the
    past one when it is less than JUST_PASSED ago (a stale message: the reset just passed)."""
    hm = _parse_clock(clock)
    if hm is None:
        return None
    zone = _zone(tz, now)
    local_now = now.astimezone(zone)
    if mon and day and mon.lower()[:3] in _MONTHS:
        month = _MONTHS.index(mon.lower()[:3]) + 1
        try:
            cand = local_now.replace(
                month=month, day=int(day), hour=hm[0], minute=hm[1], second=0, microsecond=0
            )
        except ValueError:
            return None
        if cand < local_now - timedelta(days=1):  # a date early next year
            cand = cand.replace(year=cand.year + 1)
        return cand
    # The latest moment at that clock time not after now: today's, or yesterday's when
    # today's is still ahead (a "resets 11:50pm" read at 00:20 passed half an hour ago).
    cand = local_now.replace(hour=hm[0], minute=hm[1], second=0, microsecond=0)
    if cand > local_now:
        cand -= timedelta(days=1)
    # Elapsed time, not wall-clock difference (which is what subtracting two times of one
    # zone gives): on a DST day they differ by an hour.
    if _utc(local_now) - _utc(cand) <= JUST_PASSED:
        return cand  # a stale message: the reset just passed
    cand += timedelta(days=1)
    # Re-resolve through the zone so a DST change between now and then keeps the wall time.
    return cand.replace(tzinfo=None).replace(tzinfo=zone) if isinstance(zone, ZoneInfo) else cand


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc)


def _after_span(span: str, now: datetime) -> datetime | None:
    total = 0
    for num, unit in re.findall(r"(\d+)\s*([a-z]+)", span.lower()):
        for key, secs in _SPAN_UNITS.items():
            if unit.startswith(key):
                total += int(num) * secs
                break
    return now + timedelta(seconds=total) if total else None


_TRANSIENT = re.compile(
    r"No messages returned|overloaded_error|\bOverloaded\b|API Error: 5\d\d|\(5\d\d\)"
    r"|\b529\b|Internal server error|api_error_status\"?:\s*5\d\d|ECONNRESET|socket hang up"
    r"|stream disconnected before completion|Couldn.t connect to|ECONNREFUSED|ETIMEDOUT"
    r"|fetch failed",
    re.IGNORECASE,
)


def is_transient(result: AgentResult | None, output: str = "") -> bool:
    """True for failures worth retrying soon: empty API replies, 5xx/529, overloads.

    Only error fields and the plain tail of the output are searched, never the whole
    transcript (the prompt or the agent's own work may mention these words).
    """
    if result is not None and (result.limit is not None or result.http_status == 429):
        return False  # a limit is waited out until its reset, not retried with backoff
    if result is not None and result.http_status is not None and result.http_status >= 500:
        return True
    parts: list[str] = []
    if result is not None:
        parts.append(result.error or "")
        if result.is_error and result.final_message:
            parts.append(result.final_message)
    lines = output.splitlines()[-30:]
    parts.extend(ln for ln in lines if not ln.lstrip().startswith("{"))
    return bool(_TRANSIENT.search("\n".join(parts)))
