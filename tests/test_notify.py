"""Notifications (`notify:` in ralph.yaml) from real sim runs: Apprise's JSON webhook to a local
HTTP server, and a notification command; a dead URL never breaks the run."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from run_helpers import make_project, ralph

from orchestrator.config import NotifyConfig
from orchestrator.run.notify import Notifier


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append((self.path, json.loads(body)))  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list]]:
    """A webhook on 127.0.0.1: (Apprise json:// URL, list of (path, payload) received)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"json://127.0.0.1:{server.server_port}/hook", server.received  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RECORDER = (
    "import json, sys; "
    "e = {'argv': sys.argv[2:], 'stdin': json.load(sys.stdin)}; "
    "open(sys.argv[1], 'a').write(json.dumps(e) + '\\n')"
)


def _recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_budget_warning_and_exhausted_reach_the_webhook(tmp_path: Path, hook) -> None:
    url, received = hook
    root = make_project(
        tmp_path / "p",
        3,
        config={"budget": {"run_tokens": 1500, "warn_at": 0.5}, "notify": {"urls": [url]}},
    )
    res = ralph(root, "run", "--tool", "sim")
    assert res.returncode == 3, res.stdout + res.stderr  # budget exhausted after iteration 1
    assert [p for p, _ in received] == ["/hook", "/hook"]
    warn, end = (payload for _, payload in received)
    assert warn["type"] == "warning" and "budget warning" in warn["title"]
    assert "of the token budget (1.5k) used" in warn["message"]
    assert end["type"] == "failure" and "run budgetexhausted (exit 3)" in end["title"]
    assert "token budget:" in end["message"] and "1 iteration(s), 1 passed" in end["message"]


def test_limit_wait_then_run_finished_with_the_summary(tmp_path: Path, hook) -> None:
    url, received = hook
    root = make_project(
        tmp_path / "p",
        1,
        config={"notify": {"urls": [url]}, "limits": {"max_wait": 60}},
        sim_args=["--fault", "limit-event", "--fault-times", "1", "--limit-reset", "1"],
    )
    res = ralph(root, "run", "--tool", "sim")
    assert res.returncode == 0, res.stdout + res.stderr
    titles = [p["title"] for _, p in received]
    assert len(titles) == 2, titles
    assert "waiting for a usage limit (resets at " in titles[0]
    assert (
        "US-001" in received[0][1]["message"]
        and "then the same story is retried" in (received[0][1]["message"])
    )
    assert "run complete (exit 0)" in titles[1]
    body = received[1][1]["message"]
    assert "Ralph completed all tasks!" in body and "1 iteration(s), 1 passed" in body


def test_command_and_events_filter_and_a_dead_url_never_break_the_run(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    root = make_project(
        tmp_path / "p",
        2,
        config={
            "stuck_after": 1,
            "notify": {
                "urls": [f"json://127.0.0.1:{_dead_port()}/x"],
                "command": [sys.executable, "-c", RECORDER, str(out), "{event}", "{title}"],
                "events": ["stuck", "check_failed"],
                "timeout": 20,
            },
        },
        sim_args=["--fault", "noop"],
    )
    res = ralph(root, "run", "--tool", "sim")
    assert res.returncode == 4, res.stdout + res.stderr  # stuck, as without notifications
    assert "notification failed" in res.stderr and "channel=apprise" in res.stderr
    (ev,) = _recorded(out)
    assert ev["argv"][0] == "stuck" and "run stuck (exit 4)" in ev["argv"][1]
    assert ev["stdin"]["kind"] == "stuck" and ev["stdin"]["level"] == "failure"
    assert "no story passed" in ev["stdin"]["body"]


def test_check_failure_is_notified_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    root = make_project(
        tmp_path / "p",
        2,
        config={"notify": {"command": [sys.executable, "-c", RECORDER, str(out), "{event}"]}},
        sim_args=["--fault", "truncate-progress", "--fault-story", "US-002"],
    )
    res = ralph(root, "run", "--tool", "sim")
    assert res.returncode == 0, res.stdout + res.stderr
    events = [e["argv"][0] for e in _recorded(out)]
    assert events == ["check_failed", "run_finished"]
    assert "US-002" in _recorded(out)[0]["stdin"]["title"]


def test_a_failing_command_is_logged_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    n = Notifier(NotifyConfig(command=["/nonexistent/notifier"]), "demo", "r1")
    n.budget_warning("80% used")  # must not raise
    n = Notifier(NotifyConfig(command=[sys.executable, "-c", "import sys; sys.exit(3)"]), "d", "r")
    n.finished("complete", 0, "done", _Totals())
    err = capsys.readouterr()
    assert "cannot run /nonexistent/notifier" in err.out + err.err
    assert "exited with 3" in err.out + err.err


class _Totals:
    iterations = passed = prompt_tokens = full_history_tokens = 0
    input_tokens = output_tokens = cost_reported = 0
    cost_usd = duration_s = saved_pct = 0.0
