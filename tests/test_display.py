"""What `ralph run` prints: the one-line summary, the end-of-run table, plain output off a tty."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.run.display import Display, Status, duration, money, summary_line

REC = {
    "event": "iteration",
    "iteration": 4,
    "story_id": "US-004",
    "outcome": "passed",
    "prompt_tokens": 3100,
    "full_history_tokens": 27400,
    "saved_pct": 88.7,
    "usage": {
        "input_tokens": 1000,
        "output_tokens": 2300,
        "cache_read_tokens": 130000,
        "cache_write_tokens": 10000,
    },
    "cost_usd": 0.41,
    "duration_s": 192,
}


def test_summary_line_matches_the_documented_shape() -> None:
    assert summary_line(REC) == (
        "US-004 passed · prompt 3.1k tok (full history 27.4k: saved "
        "89%) · agent 141k in / 2.3k out · $0.41 · 3m12s"
    )


def test_summary_without_usage_or_cost_says_so() -> None:
    rec = dict(
        REC, usage=None, cost_usd=None, outcome="no_progress", checks={"errors": 1, "warnings": 2}
    )
    line = summary_line(rec)
    assert "agent usage not reported" in line and "$" not in line
    assert line.startswith("US-004 no progress") and "checks: 1 error(s), 2 warning(s)" in line


def test_formatting_helpers() -> None:
    assert [duration(s) for s in (5, 192, 3720)] == ["5s", "3m12s", "1h02m"]
    assert [money(x) for x in (0.41, 0.0071, 0, None)] == ["$0.41", "$0.0071", "$0.00", "-"]


def test_table_and_plain_output_off_a_tty() -> None:
    buf = io.StringIO()
    d = Display(Console(file=buf, width=100))
    assert not d.live_enabled
    with d.live() as status:  # no status line without a terminal
        status.story = "US-004"
        d.agent("⏺ Read app.py")
    d.print_table(
        [
            REC,
            dict(REC, iteration=5, story_id="US-005", outcome="failed", usage=None, cost_usd=None),
        ]
    )
    out = buf.getvalue()
    assert "\x1b[" not in out and "⏺ Read app.py" in out
    assert "US-005" in out and "failed" in out and "1 pass" in out and "$0.41" in out


def test_quiet_hides_agent_lines_only() -> None:
    buf = io.StringIO()
    d = Display(Console(file=buf, width=100), quiet=True)
    d.agent("⏺ Read app.py")
    d.line(summary_line(REC))
    assert "Read app.py" not in buf.getvalue() and "US-004 passed" in buf.getvalue()


def test_countdown_off_a_tty_sleeps_once_and_says_why() -> None:
    buf = io.StringIO()
    slept = []
    Display(Console(file=buf, width=100)).countdown(42, "usage limit", slept.append)
    assert slept == [42] and "usage limit: waiting 42s" in buf.getvalue()


def test_early_negative_saving_reads_as_such() -> None:
    rec = dict(REC, prompt_tokens=1500, full_history_tokens=1200, saved_pct=-25.0)
    line = summary_line(rec)
    assert "saved -" not in line
    assert "(full history 1.2k is still shorter: +25% until it grows)" in line


def test_status_line_shows_run_time_tokens_and_cost() -> None:
    now = time.monotonic()
    st = Status(story="US-002", iteration=2, max_iterations=10, passed=1, total=3)
    st.started, st.run_started = now - 63, now - 312
    st.tokens, st.cost_usd = 12_345, 0.41
    text = st.__rich__().plain
    assert "1m03s (run 5m12s)" in text and "12.3k tok" in text and "$0.41" in text


def test_terminal_safe_escapes_every_control_but_tab_and_newline() -> None:
    from orchestrator.log import terminal_safe

    assert terminal_safe("API\x1b]0;PWNED\x07\x1b[2J") == "API\\x1b]0;PWNED\\x07\\x1b[2J"
    assert terminal_safe("a\tb\nc\rd\x00\x7f\x9b\x85é·…") == "a\tb\nc\\x0dd\\x00\\x7f\\x9b\\x85é·…"
    assert terminal_safe("a\nb", newlines=False) == "a\\x0ab"
    assert all(len(terminal_safe(chr(c))) == 4 for c in [*range(9), *range(11, 32), 127])
