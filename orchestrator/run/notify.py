"""Telling the user when a run needs them: `notify:` in ralph.yaml.

Events (config.NOTIFY_EVENTS): `run_finished` (with the run's summary; a run that ends stuck
or out of budget sends `stuck` / `budget_exhausted` instead, so each end sends one message),
`budget_warning` (budget.warn_at reached), `limit_wait` (with the reset time) and
`check_failed` (a post-story check found an error). Each goes to every Apprise URL (one
library for desktop, Slack, Telegram, email, webhooks ...) and to the optional command (an
argv list, never a shell).

A notification is a courtesy: a failing or slow one is logged and never breaks the run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.config import NotifyConfig
from orchestrator.log import get_logger
from orchestrator.project import Project
from orchestrator.redact import Redactor
from orchestrator.run.display import duration, money
from orchestrator.tokens import fmt

log = get_logger()

# How a run's end (run_end status) is announced.
_END_EVENT = {"stuck": "stuck", "budgetexhausted": "budget_exhausted"}
_LEVEL = {
    "run_finished": "info",
    "budget_warning": "warning",
    "limit_wait": "warning",
    "check_failed": "warning",
    "stuck": "failure",
    "budget_exhausted": "failure",
}


@dataclass(frozen=True)
class Event:
    kind: str  # one of config.NOTIFY_EVENTS
    title: str
    body: str
    project: str
    run_id: str

    @property
    def level(self) -> str:
        """Apprise's notify type: info, warning or failure."""
        return _LEVEL.get(self.kind, "info")


class Notifier:
    """Sends events to the configured URLs and command; does nothing when none is set."""

    def __init__(self, cfg: NotifyConfig, project: str, run_id: str) -> None:
        self.cfg = cfg
        self.project = project
        self.run_id = run_id
        # URLs carry tokens: keep them out of every log line.
        self._redact = Redactor(dict(os.environ))

    @property
    def enabled(self) -> bool:
        return bool(self.cfg.urls or self.cfg.command)

    # ---- the loop's events -------------------------------------------------------------------
    def finished(self, status: str, exit_code: int, message: str, totals: Any) -> None:
        kind = _END_EVENT.get(status, "run_finished")
        what = {"complete": "complete", "exhausted": "reached max iterations"}.get(status, status)
        body = f"{message}\n{summary(totals)}" if message else summary(totals)
        self.send(kind, f"run {what} (exit {exit_code})", body)

    def budget_warning(self, text: str) -> None:
        self.send("budget_warning", "budget warning", text)

    def limit_wait(self, story_id: str, seconds: float, reset_at: Any, kind: str) -> None:
        reset = f"resets at {reset_at:%Y-%m-%d %H:%M %Z}" if reset_at else "reset time not stated"
        self.send(
            "limit_wait",
            f"waiting for a usage limit ({reset})",
            f"{story_id}: {kind} usage limit; waiting {duration(seconds)} ({reset}), then the "
            "same story is retried.",
        )

    def check_failed(self, story_id: str, messages: list[str]) -> None:
        self.send("check_failed", f"checks failed for {story_id}", "\n".join(messages))

    # ---- delivery ------------------------------------------------------------------------------
    def send(self, kind: str, title: str, body: str) -> None:
        """Deliver one event; never raises (a notification must not stop the loop)."""
        if not self.enabled or kind not in self.cfg.events:
            return
        event = Event(kind, f"ralph · {self.project}: {title}", body, self.project, self.run_id)
        if self.cfg.urls:
            self._guard("apprise", self._apprise, event)
        if self.cfg.command:
            self._guard("command", self._command, event)

    def _guard(self, channel: str, deliver: Any, event: Event) -> None:
        try:
            problem = deliver(event)
        except Exception as exc:  # any failure of a courtesy channel is only logged
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            log.warning(
                "notification failed",
                channel=channel,
                kind=event.kind,
                error=self._redact(problem),
            )

    def _apprise(self, event: Event) -> str | None:
        import apprise  # imported only when URLs are configured (it loads many plugins)

        # Apprise logs its own failures; keep them off the console and into our one warning.
        logging.getLogger("apprise").propagate = False
        sender = apprise.Apprise()
        for i, url in enumerate(self.cfg.urls):
            if not sender.add(os.path.expandvars(url)):
                # The URL itself may hold a token: name it by position only.
                return f"notify.urls[{i}] is not a valid Apprise URL"
        with apprise.LogCapture(level=logging.WARNING) as captured:  # type: ignore[no-untyped-call]
            ok = sender.notify(title=event.title, body=event.body, notify_type=event.level)
        if ok:
            return None
        said = " ".join(captured.getvalue().split())[:300]
        return "an Apprise URL did not accept the notification" + (f": {said}" if said else "")

    def _command(self, event: Event) -> str | None:
        assert self.cfg.command is not None
        fields = {"{event}": event.kind, "{title}": event.title, "{body}": event.body}
        argv = [_fill(arg, fields) for arg in self.cfg.command]
        env = {
            **os.environ,
            "RALPH_EVENT": event.kind,
            "RALPH_TITLE": event.title,
            "RALPH_BODY": event.body,
            "RALPH_RUN_ID": event.run_id,
        }
        try:
            res = subprocess.run(
                argv,
                input=json.dumps({**asdict(event), "level": event.level}),
                env=env,
                capture_output=True,
                text=True,
                timeout=self.cfg.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"{argv[0]} took longer than notify.timeout ({self.cfg.timeout:g}s)"
        except OSError as exc:
            return f"cannot run {argv[0]}: {exc.strerror or exc}"
        if res.returncode != 0:
            return f"{argv[0]} exited with {res.returncode}: {res.stderr.strip()[-200:]}"
        return None


def _fill(arg: str, fields: dict[str, str]) -> str:
    for key, value in fields.items():
        arg = arg.replace(key, value)
    return arg


def summary(t: Any) -> str:
    """One line on what the run did, like `ralph status`'s last-run line."""
    cost = money(t.cost_usd) if t.cost_reported else "cost not reported"
    saved = f" (full history {fmt(t.full_history_tokens)}: saved {t.saved_pct:.0f}%)"
    return (
        f"{t.iterations} iteration(s), {t.passed} passed · prompts {fmt(t.prompt_tokens)} tok"
        f"{saved if t.full_history_tokens else ''} · agent {fmt(t.input_tokens)} in / "
        f"{fmt(t.output_tokens)} out · {cost} · {duration(t.duration_s)}"
    )


def for_loop(project: Project, run_id: str) -> Notifier:
    """The notifier of one run of `project` (named after its folder)."""
    return Notifier(project.config.notify, project.root.name, run_id)
