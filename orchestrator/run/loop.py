"""The Ralph loop as a library: `run(project, options) -> RunSummary`.

Per iteration (see docs/architecture.md): read prd.json and pick the story (stop with success
when none is left); assemble the prompt; snapshot; spawn the agent through its adapter
(runner.run_agent shows its readable lines live and keeps the transcript); assess (prd.json
is the truth for completion, checks.verify for the post-story checks); record one ledger line
and print the one-line summary.

Around that: usage limits wait for their reset and retry the same story (not an iteration);
transient failures retry with backoff; a circuit breaker stops a loop that makes no progress;
run budgets stop before an iteration that would overrun them; Ctrl-C records the iteration as
interrupted and leaves every file as it was. The CLI (commands/run.py) only parses arguments.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator import ledger, lock, stopsignals
from orchestrator import log as runlog
from orchestrator.agents import get_agent, runner
from orchestrator.errors import (
    EXIT_ITERATIONS_EXHAUSTED,
    EXIT_OK,
    EXIT_STUCK,
    BudgetExhausted,
    FatalError,
    Interrupted,
    Stuck,
)
from orchestrator.ledger import IterationRecord
from orchestrator.log import get_logger
from orchestrator.memory.prd import Prd, Story
from orchestrator.project import Project, ensure_logs_dir
from orchestrator.run import archive, notify
from orchestrator.run.budget import Budget
from orchestrator.run.checks import CheckReport
from orchestrator.run.display import Display, summary_line
from orchestrator.run.iteration import SENTINEL, Attempt, Context, Iteration

log = get_logger()
RETRY_DELAY_CAP = 3600.0  # the longest backoff between two retries of a failing agent


@dataclass
class RunOptions:
    """Per-run choices; None means "from ralph.yaml" (flags are merged there by the CLI)."""

    tool: str | None = None
    max_iterations: int | None = None
    mode: str | None = None
    quiet: bool = False  # no agent lines (summaries still print)
    verbose: bool = False  # debug log lines on the console
    display: Display | None = None
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))


@dataclass
class RunSummary:
    run_id: str
    exit_code: int
    status: str  # complete | exhausted
    iterations: int
    passed: int
    total: int
    totals: ledger.Totals
    message: str


def run(project: Project, options: RunOptions | None = None) -> RunSummary:
    """Run the loop on `project`. Raises FatalError subclasses for budget (3), stuck (4),
    interrupted (128 + signal) and input/config problems (2)."""
    options = options or RunOptions()
    try:
        with lock.project_lock(project, command="ralph run"), runner.stop_signals_interrupt():
            return Loop(project, options).run()
    finally:
        # The command ends here: what the run made is put out of the cyclic collector's
        # reach, so the collections at exit do not walk it (with 10,000 references that
        # walk cost 0.4 s of CPU). Objects are still freed by their reference counts.
        gc.freeze()


def _crashed(rec: IterationRecord) -> bool:
    """The agent exited with an error and changed nothing (a timeout is not a crash)."""
    return rec.outcome == "failed" and not rec.committed and not rec.files_changed


class ChecksFailed(FatalError):
    """`checks: fail` and a post-story check found an error: the run stops (exit 4, like a
    stuck loop: the loop cannot safely go on by itself)."""

    exit_code = EXIT_STUCK


class Loop:
    def __init__(self, project: Project, options: RunOptions) -> None:
        self.project = project
        self.cfg = project.config
        self.options = options
        self.tool = options.tool or self.cfg.tool
        self.max_iterations = options.max_iterations or self.cfg.max_iterations
        self.mode = options.mode or self.cfg.mode
        # Fails here (exit 2) for an unknown tool or a missing binary, before any file changes.
        self.agent = get_agent(self.tool, self.cfg.agent(self.tool))
        self.compat = self.cfg.compat
        self.display = options.display or Display(quiet=options.quiet, compat=self.compat)
        if Path(project.ledger_path).parent == Path(project.logs_dir):
            ensure_logs_dir(project)  # git-ignored before the first file lands in it
        self.display.root = str(project.root)
        self.ledger = ledger.Ledger(project.ledger_path)
        self.run_dir = Path(project.logs_dir) / self.ledger.run_id
        self.notify = notify.for_loop(project, self.ledger.run_id)
        self.budget = Budget(
            self.cfg.budget.run_tokens, self.cfg.budget.run_cost_usd, self.cfg.budget.warn_at
        )
        self.records: list[IterationRecord] = []
        self.notes: list[str] = []  # fix notes for the next prompt (checks: retry)
        self.no_progress: list[IterationRecord] = []
        self.iteration = 0
        self.calls = 0  # agent calls that count against max_iterations (retries included)
        self.retries = 0
        self.rechecks = 0  # waits in a row on a limit message whose reset already passed
        # prd.json as last read or left by the checks, for the loop's next look at it: each
        # file is parsed once before the agent and once after (3,000 stories: 0.1 s each).
        self.prd: Prd | None = None
        self._last_prd: Prd | None = None

    # ---- the run --------------------------------------------------------------------------
    def run(self) -> RunSummary:
        runlog.configure(self.run_dir / "run.log", verbose=self.options.verbose)
        try:
            self._prepare_files()
        except BaseException:
            self.ledger.close()
            runlog.close()
            raise
        cfg = self.cfg
        self.ledger.event(
            "run_start",
            agent=self.agent.name,
            model=self.agent.model,
            mode=self.mode,
            max_iterations=self.max_iterations,
            root=str(self.project.root),
            checks=cfg.checks,
            budget=cfg.budget.model_dump(),
            timeouts=cfg.timeouts.model_dump(),
            stuck_after=cfg.stuck_after,
        )
        status, exit_code, message = "error", 2, ""
        try:
            status, exit_code, message = self._loop()
            return self._summary(status, exit_code, message)
        except FatalError as exc:
            status, exit_code, message = type(exc).__name__.lower(), exc.exit_code, str(exc)
            raise
        except KeyboardInterrupt:
            # Ctrl-C between agent runs (sleep, limit wait): nothing is half-written.
            status, exit_code = "interrupted", stopsignals.exit_code()
            message = (
                f"interrupted after iteration {self.iteration}; run `ralph run` again to continue"
            )
            raise Interrupted(message) from None
        finally:
            self._finish(status, exit_code, message)

    def _prepare_files(self) -> None:
        p = self.project
        # A missing or invalid prd.json stops here, nothing changed; archiving copies it,
        # never edits it, so this parse is the one the first pass picks its story from.
        self.prd = Prd.load(Path(p.prd_path))
        result = archive.archive_on_branch_change(
            Path(p.ralph_dir),
            Path(p.progress_path),
            Path(p.references.dir),
            date=archive.ralph_date(),
        )
        if result:
            self.display.line(f"Archiving previous run: {result.last_branch}")
            self.display.line(f"   Archived to: {result.folder} ({', '.join(result.copied)})")
        archive.ensure_progress(Path(p.progress_path), archive.ralph_date())

    def _loop(self) -> tuple[str, int, str]:
        memory = "" if self.compat else f" - Memory: {self.mode}"
        self.display.line(
            f"Starting Ralph - Tool: {self.agent.name} - Max iterations: "
            f"{self.max_iterations}{memory}"
        )
        while True:
            prd = self._current_prd()
            story = prd.next_story()
            if story is None:
                return (
                    "complete",
                    EXIT_OK,
                    (
                        f"Ralph completed all tasks! ({prd.passed_count()}/{len(prd.stories)} "
                        f"stories pass, {self.iteration} iteration(s) this run)"
                    ),
                )
            if self.calls >= self.max_iterations:
                return self._exhausted(prd)
            self.budget.check_next()
            if self.iteration:
                self.options.sleep(self.cfg.sleep_between)
            self.iteration += 1
            rec, all_passed = self._one_iteration(prd, story)
            if self.compat and not all_passed:
                self.display.line(f"Iteration {self.iteration} complete. Continuing...")
            if rec.completion == "complete":
                continue  # prd.json agrees: the next pass returns success
            self._check_stuck(rec)

    def _current_prd(self) -> Prd:
        """prd.json now: the parse the last step made (before the first pass, or the checks
        right after the agent; nothing writes it in between), else read from disk."""
        prd, self.prd = self.prd, None
        if prd is None:
            prd = Prd.load(Path(self.project.prd_path))
        self._last_prd = prd
        return prd

    def _calls_text(self) -> str:
        retries = f", {self.retries} of them retries" if self.retries else ""
        return f"{self.calls} agent call(s) in {self.iteration} iteration(s){retries}"

    def _exhausted(self, prd: Prd) -> tuple[str, int, str]:
        """The cap on agent calls is used up. If every call of the run failed, say so with
        exit 4 (the agent is broken, more calls will not help) rather than exit 1."""
        if self.records and all(_crashed(r) for r in self.records):
            last = self.records[-1]
            raise Stuck(
                f"the agent failed on every call of this run ({self._calls_text()}; cap "
                f"{self.max_iterations}); last: {last.outcome}"
                + (f" (exit {last.exit_code})" if last.exit_code is not None else "")
                + (f" {last.error[:120]}" if last.error else "")
                + f". Look at the transcripts in {self.run_dir}, fix the agent, then run "
                "`ralph run` again."
            )
        return (
            "exhausted",
            EXIT_ITERATIONS_EXHAUSTED,
            (
                f"Ralph reached max iterations ({self.max_iterations}) without completing "
                f"all tasks: {prd.passed_count()}/{len(prd.stories)} stories pass "
                f"({self._calls_text()}). Check {self.project.progress_path} for status."
            ),
        )

    def _compat_lines(self, status: str) -> list[str]:
        """ralph.sh's closing lines for a finished run (`compat`)."""
        n = self.max_iterations
        if status == "complete":
            return ["Ralph completed all tasks!", f"Completed at iteration {self.iteration} of {n}"]
        return [
            f"Ralph reached max iterations ({n}) without completing all tasks.",
            f"Check {self.project.progress_path} for status.",
        ]

    def _context(self) -> Context:
        return Context(
            project=self.project,
            agent=self.agent,
            display=self.display,
            run_dir=self.run_dir,
            mode=self.mode,
            max_iterations=self.max_iterations,
            notes=tuple(self.notes),
        )

    def _one_iteration(self, prd: Prd, story: Story) -> tuple[IterationRecord, bool]:
        """Run one iteration; its record, and whether prd.json now has every story passing."""
        it = Iteration(self._context(), self.iteration, story, prd)
        # For watchers (`ralph status --follow`, `ralph serve`): which story is running now.
        self.ledger.event(
            "iteration_start",
            iteration=self.iteration,
            story_id=story.id,
            story_title=story.title,
            max_iterations=self.max_iterations,
        )
        self.display.banner(self.iteration, self.max_iterations, self.agent.name, story.id)
        attempt = self._attempt_until_done(it)
        report = it.verify(attempt)
        self.prd = report.prd  # None (unreadable): the next pass reads it and says why
        rec = it.record(attempt)
        self.ledger.iteration(rec)
        self.records.append(rec)
        self.budget.add(
            reported_tokens=attempt.reported_tokens(),
            estimated_tokens=it.assembled.tokens,
            cost_usd=attempt.cost_usd(),
        )
        st = self.display.status
        st.tokens, st.cost_usd = self.budget.spent_tokens, self.budget.spent_cost or None
        self._after(rec, report)
        if rec.outcome == "interrupted":
            raise Interrupted(
                f"interrupted during iteration {self.iteration} ({story.id}); the agent was "
                "stopped and the iteration recorded. Run `ralph run` again to continue."
            )
        return rec, attempt.all_passed

    def _rows(self) -> list[dict[str, Any]]:
        """This run's iteration records as the ledger has them (for totals and the table)."""
        return [
            {"event": "iteration", "run_id": self.ledger.run_id, **r.to_json()}
            for r in self.records
        ]

    def _attempt_until_done(self, it: Iteration) -> Attempt:
        """Spawn the agent; wait out usage limits and retry transient failures.

        Every call counts against the run's cap (`ralph run N` caps agent calls, as in
        ralph.sh), retries included; a call turned away by a usage limit does no work and is
        not counted (it is recorded as a `limit_wait`)."""
        waited = 0.0
        retries = self.rechecks = 0
        while True:
            attempt = it.spawn()
            if attempt.limit is not None:
                waited += self._wait_for_limit(it, attempt, waited)
                continue
            self.calls += 1
            if attempt.interrupted or attempt.passed or not attempt.transient:
                return attempt
            if retries >= self.cfg.retries.transient:
                return attempt
            if self.calls >= self.max_iterations:
                self.display.warn(
                    f"agent failed ({attempt.error or 'no progress'}); no retry: the run's cap "
                    f"of {self.max_iterations} agent call(s) is used up"
                )
                return attempt
            retries += 1
            self.retries += 1
            self._retry_transient(it, attempt, retries)

    def _limit_wait(self, attempt: Attempt) -> tuple[float, str]:
        """(seconds to wait, why) for the attempt's limit signal; counts rechecks of a stale
        one (a reset already passed)."""
        sig = attempt.limit
        assert sig is not None
        lim = self.cfg.limits
        now = self.options.now()
        if sig.reset_at is None:
            return float(lim.fallback_wait), "no reset time: fallback_wait"
        if sig.just_passed(now):
            # The message outlives its reset: look again soon, then less and less often.
            cap = max(lim.recheck, lim.fallback_wait)
            secs = min(float(cap), lim.recheck * 2.0 ** min(self.rechecks, 40))
            self.rechecks += 1
            stated = sig.reset_at.astimezone(now.tzinfo).strftime("%H:%M %Z").strip()
            return secs, f"stated reset {stated} has passed: recheck {self.rechecks}"
        self.rechecks = 0
        # A little after the stated reset, not on it.
        return (sig.wait_seconds(now) or 0.0) + 2, "reset time stated"

    def _wait_for_limit(self, it: Iteration, attempt: Attempt, waited: float) -> float:
        sig = attempt.limit
        assert sig is not None
        secs, source = self._limit_wait(attempt)
        if waited + secs > self.cfg.limits.max_wait:
            already = f" after waiting {waited / 60:.0f} min" if waited else ""
            raise BudgetExhausted(
                f"usage limit ({sig.raw[:120]!r}) resets in {secs / 60:.0f} min{already}, "
                f"beyond limits.max_wait ({self.cfg.limits.max_wait}s) for this iteration. Run "
                "`ralph run` again after the reset, or raise limits.max_wait in ralph.yaml."
            )
        self.budget.spend(attempt.reported_tokens(), attempt.cost_usd())
        self.ledger.event(
            "limit_wait",
            iteration=it.n,
            story_id=it.story.id,
            kind=sig.kind,
            raw=sig.raw[:300],
            reset_at=sig.reset_at.isoformat() if sig.reset_at else None,
            waited_s=round(secs, 1),
            source=source,
            usage=attempt.usage_dict(),
            cost_usd=attempt.cost_usd(),
        )
        self.notify.limit_wait(it.story.id, secs, sig.reset_at, sig.kind)
        self.display.countdown(secs, f"usage limit ({sig.kind}, {source})", self.options.sleep)
        return secs

    def _retry_transient(self, it: Iteration, attempt: Attempt, retry: int) -> None:
        # Capped: a large retries.backoff doubled many times must not overflow time.sleep.
        delay = min(RETRY_DELAY_CAP, self.cfg.retries.backoff * 2.0 ** min(retry - 1, 40))
        if not attempt.known_transient:
            delay = min(delay, float(self.cfg.sleep_between))  # see Attempt.known_transient
        self.budget.spend(attempt.reported_tokens(), attempt.cost_usd())
        self.ledger.event(
            "transient_retry",
            iteration=it.n,
            story_id=it.story.id,
            retry=retry,
            exit_code=attempt.exit_code,
            error=attempt.error,
            delay_s=delay,
            usage=attempt.usage_dict(),
            cost_usd=attempt.cost_usd(),
            duration_s=attempt.duration_s,
        )
        self.display.warn(
            f"transient agent failure ({attempt.error or 'no progress'}); "
            f"retry {retry}/{self.cfg.retries.transient} (agent call "
            f"{self.calls + 1} of at most {self.max_iterations})"
        )
        self.display.countdown(delay, "backoff", self.options.sleep)

    def _after(self, rec: IterationRecord, report: CheckReport) -> None:
        self.display.line(
            summary_line(rec.to_json()), style="bold green" if rec.outcome == "passed" else "bold"
        )
        if rec.completion == "false":
            self.display.warn(
                f"the agent said {SENTINEL} but prd.json still has stories with passes "
                "false: ignored (false completion); continuing"
            )
        for f in report.findings:
            if f.severity != "info":
                self.display.warn(
                    f"check ({f.kind}): {f.message.rstrip('.')}"
                    + (f". Fix: {f.fix}" if f.fix else "")
                )
        if not report.ok:
            self.notify.check_failed(rec.story_id, [f.message for f in report.errors()])
        policy = self.cfg.checks
        self.notes = report.fix_notes() if policy == "retry" and not report.ok else []
        if policy == "fail" and not report.ok:
            raise ChecksFailed(
                f"post-story checks failed for {rec.story_id} (checks: fail): "
                + "; ".join(f.message for f in report.errors())
                + f". Details in the ledger ({self.project.ledger_path}); fix them, then "
                "run `ralph run` again."
            )
        for w in self.budget.warnings():
            self.display.warn(w)
            self.notify.budget_warning(w)

    def _check_stuck(self, rec: IterationRecord) -> None:
        if rec.outcome == "passed" or rec.committed or rec.files_changed:
            self.no_progress = []
            return
        self.no_progress.append(rec)
        n = self.cfg.stuck_after
        if len(self.no_progress) >= n:
            seen = "; ".join(
                f"#{r.iteration} {r.story_id}: {r.outcome}"
                + (f" (exit {r.exit_code})" if r.exit_code not in (0, None) else "")
                + (f" {r.error[:80]}" if r.error else "")
                for r in self.no_progress[-n:]
            )
            raise Stuck(
                f"stuck: {n} iterations in a row with no story passed, no commit and no file "
                f"changed ({seen}). Look at the transcripts in {self.run_dir}, fix the cause "
                "(story too big? agent failing?), then run `ralph run` again."
            )

    # ---- the end ----------------------------------------------------------------------------
    def _summary(self, status: str, exit_code: int, message: str) -> RunSummary:
        # The loop returns right after its last look at prd.json: that parse is current.
        prd = self._last_prd or Prd.load(Path(self.project.prd_path))
        return RunSummary(
            run_id=self.ledger.run_id,
            exit_code=exit_code,
            status=status,
            iterations=self.iteration,
            passed=prd.passed_count(),
            total=len(prd.stories),
            totals=ledger.totals(self._rows()),
            message=message,
        )

    def _finish(self, status: str, exit_code: int, message: str) -> None:
        rows = self._rows()
        tot = ledger.totals(rows)
        with contextlib.suppress(Exception):
            self.ledger.event(
                "run_end",
                status=status,
                exit_code=exit_code,
                iterations=self.iteration,
                agent_calls=self.calls,
                retries=self.retries,
                message=message,
                totals=tot.as_dict(),
            )
        self.ledger.close()
        if self.records:
            self.display.line("")
            self.display.print_table(rows)
            if tot.usage_reported < tot.iterations:
                self.display.line(
                    f"note: {tot.iterations - tot.usage_reported} iteration(s) without "
                    "agent-reported usage; prompt figures are tiktoken estimates",
                    style="dim",
                )
        if self.calls:
            self.display.line(
                f"{self._calls_text()} (cap: {self.max_iterations} agent calls, "
                f"retries.transient: {self.cfg.retries.transient})",
                style="dim",
            )
        where = f"ledger: {self.project.ledger_path} · transcripts: {self.run_dir}"
        if self.compat:  # ralph.sh's closing lines come last, where scripts look for them
            self.display.line(where)
        if message and exit_code in (EXIT_OK, EXIT_ITERATIONS_EXHAUSTED):
            self.display.line("")
            for text in self._compat_lines(status) if self.compat else [message]:
                self.display.line(text, style="bold green" if exit_code == 0 else "bold yellow")
        if not self.compat:
            self.display.line(where, style="dim")
        self.notify.finished(status, exit_code, message, tot)
        runlog.close()
