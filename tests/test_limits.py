from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from orchestrator.agents import limits
from orchestrator.agents.base import AgentResult
from orchestrator.agents.limits import LimitSignal, detect, is_transient

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
from install import fixtures_dir  # noqa: E402

UTC = timezone.utc
LA = ZoneInfo("America/Los_Angeles")
# Monday 30 Nov 2026, 14:00 UTC (06:00 in Los Angeles).
NOW = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
FIX = fixtures_dir()
needs_fixtures = pytest.mark.skipif(FIX is None, reason="shared/fixtures not found")


def test_rate_limit_event_rejected_uses_resets_at_epoch():
    line = json.dumps(
        {
            "type": "rate_limit_event",
            "rate_limit_info": {
                "status": "rejected",
                "resetsAt": 1796083200,
                "rateLimitType": "five_hour",
            },
        }
    )
    sig = detect("noise\n" + line + "\n", now=NOW)
    assert sig is not None and sig.kind == "usage"
    assert sig.reset_at == datetime.fromtimestamp(1796083200, UTC)
    assert "rate_limit_event" in sig.raw


def test_rate_limit_event_allowed_is_no_limit():
    line = json.dumps(
        {
            "type": "rate_limit_event",
            "rate_limit_info": {"status": "allowed_warning", "resetsAt": 1796083200},
        }
    )
    assert detect(line, now=NOW) is None


def test_claude_pipe_epoch_seconds_and_millis():
    sig = detect("Claude AI usage limit reached|1796083200", now=NOW)
    assert sig.reset_at == datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    sig_ms = detect("Claude AI usage limit reached|1796083200000", now=NOW)
    assert sig_ms.reset_at == sig.reset_at


def test_five_hour_limit_resets_later_today_in_local_zone_of_now():
    sig = detect("5-hour limit reached ∙ resets 9pm", now=NOW)
    assert sig.reset_at == datetime(2026, 11, 30, 21, 0, tzinfo=UTC)


def test_five_hour_limit_time_just_passed_is_not_tomorrow():
    # Claude Code keeps printing the message after its reset: 1pm read at 13:42 just passed.
    late = datetime(2026, 11, 30, 13, 42, tzinfo=UTC)
    sig = detect("You've hit your limit · resets 1pm (UTC)", now=late)
    assert sig.reset_at == datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    assert sig.just_passed(late) and sig.wait_seconds(late) == 0


def test_a_reset_just_before_midnight_read_just_after_it_passed_yesterday():
    # The stale message crosses midnight: 11:50pm read at 00:20 is half an hour ago, not
    # 23.5 hours ahead (which a run would refuse as beyond max_wait).
    early = datetime(2026, 12, 1, 0, 20, tzinfo=UTC)
    sig = detect("You've hit your limit · resets 11:50pm (UTC)", now=early)
    assert sig.reset_at == datetime(2026, 11, 30, 23, 50, tzinfo=UTC)
    assert sig.just_passed(early) and sig.wait_seconds(early) == 0


def test_just_passed_is_measured_in_elapsed_time_across_a_dst_change():
    # 8 Mar 2026 New York springs forward at 2am: 9pm EST (02:00 UTC) read at 3am EDT
    # (07:00 UTC) passed 5 hours ago, though the wall clock moved 6; it is not tomorrow's.
    ny = ZoneInfo("America/New_York")
    read = datetime(2026, 3, 8, 3, 0, tzinfo=ny)
    sig = detect("You've hit your limit · resets 9pm (America/New_York)", now=read)
    assert sig.reset_at == datetime(2026, 3, 7, 21, 0, tzinfo=ny)
    assert sig.just_passed(read) and sig.wait_seconds(read) == 0


def test_five_hour_limit_time_long_past_means_tomorrow():
    late = datetime(2026, 11, 30, 22, 30, tzinfo=UTC)
    sig = detect("5-hour limit reached ∙ resets 9am", now=late)  # 13.5 h ago: not stale
    assert sig.reset_at == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert not sig.just_passed(late)


def test_hit_your_limit_with_named_zone():
    sig = detect("You've hit your limit · resets 7pm (America/Los_Angeles)", now=NOW)
    assert sig.reset_at == datetime(2026, 11, 30, 19, 0, tzinfo=LA)
    assert sig.reset_at.astimezone(UTC) == datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    assert sig.wait_seconds(NOW) == 13 * 3600


def test_typographic_apostrophe_and_minutes():
    sig = detect("You\u2019ve hit your limit · resets 7:30am (America/Los_Angeles)", now=NOW)
    # 06:00 in LA now, so 07:30 is today.
    assert sig.reset_at == datetime(2026, 11, 30, 7, 30, tzinfo=LA)


def test_out_of_extra_usage():
    sig = detect("You're out of extra usage · resets 3am (UTC)", now=NOW)
    assert sig.reset_at == datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


def test_old_claude_wording_will_reset_at():
    sig = detect("Claude usage limit reached. Your limit will reset at 5pm (UTC).", now=NOW)
    assert sig.reset_at == datetime(2026, 11, 30, 17, 0, tzinfo=UTC)


def test_weekly_limit_with_date():
    sig = detect("Opus weekly limit reached ∙ resets Dec 3, 10am", now=NOW)
    assert sig.reset_at == datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def test_codex_usage_limit_try_again_at():
    text = (
        "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing), "
        "visit https://chatgpt.com/codex/settings/usage to purchase more credits or try "
        "again at 12:16 PM."
    )
    sig = detect(text, now=NOW)  # 1h44 ago: a stale message, the reset just passed
    assert sig.reset_at == datetime(2026, 11, 30, 12, 16, tzinfo=UTC) and sig.just_passed(NOW)
    evening = datetime(2026, 11, 30, 18, 0, tzinfo=UTC)  # 5h44 ago: tomorrow's 12:16
    sig = detect(text, now=evening)
    assert sig.reset_at == datetime(2026, 11, 30, 12, 16, tzinfo=UTC) + timedelta(days=1)
    sig2 = detect(text, now=datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
    assert sig2.reset_at == datetime(2026, 11, 30, 12, 16, tzinfo=UTC)


def test_codex_usage_limit_try_again_in_span():
    sig = detect("You've hit your usage limit. Try again in 2 days 3 hours 5 minutes.", now=NOW)
    assert sig.reset_at == NOW + timedelta(days=2, hours=3, minutes=5)


def test_codex_usage_limit_without_time():
    sig = detect("■ You've hit your usage limit.", now=NOW)
    assert sig is not None and sig.reset_at is None


@needs_fixtures
def test_recorded_claude_429_is_a_limit_with_unknown_reset():
    text = (FIX / "claude-code" / "rate-limited-429.stream.jsonl").read_text()
    sig = detect(text, now=NOW)
    assert sig is not None and sig.kind == "rate" and sig.reset_at is None
    assert "429" in sig.raw


def test_http_status_429_on_result():
    result = AgentResult(is_error=True, error="boom", http_status=429)
    sig = detect("", now=NOW, result=result)
    assert sig is not None and sig.reset_at is None and sig.kind == "rate"


def test_gemini_resource_exhausted_with_retry_delay():
    text = (
        '[API Error: {"error":{"code":429,"message":"Quota exceeded for quota metric '
        '\'Gemini 2.5 Pro Requests\'","status":"RESOURCE_EXHAUSTED","details":'
        '[{"retryDelay": "37s"}]}}]'
    )
    sig = detect(text, now=NOW)
    assert sig.kind == "quota" and sig.reset_at == NOW + timedelta(seconds=37)


def test_amp_out_of_credits():
    sig = detect("Error: You are out of credits. Add credits at ampcode.com/settings", now=NOW)
    assert sig is not None and sig.reset_at is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Fixed the rate limiter; all tests pass. <promise>COMPLETE</promise>",
        "The token bucket resets at 9pm in the docs",
        '{"type":"result","is_error":false,"result":"done"}',
    ],
)
def test_ordinary_text_is_no_limit(text):
    assert detect(text, now=NOW) is None


def test_signal_serialises_for_the_ledger():
    sig = detect("5-hour limit reached ∙ resets 9pm", now=NOW)
    d = sig.to_dict()
    assert d["reset_at"] == "2026-11-30T21:00:00+00:00" and d["kind"] == "usage"
    assert isinstance(LimitSignal(None, "x").to_dict()["raw"], str)


def test_now_default_is_aware():
    # A reset two hours ahead of the real clock: a fixed "9pm" is "just passed" (wait 0)
    # whenever the test runs within 5 hours after 21:00 UTC.
    hour = (datetime.now(timezone.utc).hour + 2) % 24
    clock = f"{hour % 12 or 12}{'am' if hour < 12 else 'pm'}"
    sig = detect(f"5-hour limit reached ∙ resets {clock}")
    assert sig.reset_at.tzinfo is not None
    assert 3600 < sig.wait_seconds() <= 2 * 3600


@pytest.mark.parametrize(
    ("result", "output", "expected"),
    [
        (AgentResult(is_error=True, final_message="No messages returned"), "", True),
        (AgentResult(is_error=True, error="API Error: 529 overloaded_error"), "", True),
        (AgentResult(is_error=True, http_status=500), "", True),
        (None, "Error: API Error: 503 Service Unavailable", True),
        (
            AgentResult(is_error=True),
            "Error: Couldn't connect to the Amp server at https://x/.",
            True,
        ),
        (AgentResult(is_error=True), "TypeError: fetch failed", True),
        (AgentResult(is_error=True, http_status=429, error="Request rejected (429)"), "", False),
        (AgentResult(final_message="No messages returned"), "", False),  # not an error
        (AgentResult(), '{"type":"user","content":"Overloaded servers are a topic"}', False),
    ],
)
def test_is_transient(result, output, expected):
    assert is_transient(result, output) is expected


def test_notice_reads_only_a_text_that_is_the_clis_limit_notice() -> None:
    assert limits.notice("5-hour limit reached ∙ resets 9pm", now=NOW) is not None
    assert limits.notice("Claude AI usage limit reached|1796083200") is not None
    assert limits.notice("You've hit your usage limit. Upgrade to Pro.", now=NOW) is not None
    assert limits.notice("The wallet shows credit limit exceeded; story not done.") is None
    said = "Added the banner: 5-hour limit reached ∙ resets 9pm, shown when the API says so."
    assert limits.notice(said * 2, now=NOW) is None


def test_limit_text_is_read_in_linear_time_on_a_huge_line() -> None:
    # The patterns opened with `[^\n]*` or `(?:[\w-]+ )*`: 20 kB took 45 s, 200 kB hours.
    code = (
        "from orchestrator.agents.limits import detect\n"
        "for t in ['API Error: ' + 'x' * 200_000, 'a-' * 100_000, 'word ' * 40_000]:\n"
        "    detect(t)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
