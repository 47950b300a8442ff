"""One iteration of the loop in small steps: prepare, spawn (maybe several attempts), assess,
record. `loop.Loop` decides what to do with an attempt (wait out a limit, retry, go on); an
`Iteration` gets what it needs from the run as a `Context` and hands back an
`ledger.IterationRecord`.

Each file is parsed once per step: prd.json before (the loop's parse, which picked the
story) and after (`_assess`, which the post-story checks reuse); progress.txt before (the
prompt's `Memory`, which the snapshot reuses) and after (the checks).

Progress is measured from the outside, never from what the agent says: prd.json (did the
story pass), git HEAD (a commit) and a fingerprint of the working tree (a file changed),
with the ralph logs folder excluded (the ledger and transcripts change every iteration).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import fsutil, git, redact
from orchestrator.agents import limits, runner
from orchestrator.agents.base import Agent, AgentResult
from orchestrator.errors import InputError
from orchestrator.ledger import IterationRecord
from orchestrator.log import get_logger
from orchestrator.memory import usage
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.store import Memory
from orchestrator.project import Project
from orchestrator.run import check_state, checks, prompt
from orchestrator.run.check_state import PrdState
from orchestrator.run.display import Display
from orchestrator.upkeep import audit

log = get_logger()
SENTINEL = "<promise>COMPLETE</promise>"
# The agent's claim: the sentinel on a line of its own or ending the message. Mentioned
# inside a sentence ("I will not print <promise>COMPLETE</promise> yet") it claims nothing.
_CLAIM = re.compile(
    r"^[ \t>*_`-]*<promise>COMPLETE</promise>[ \t*_`.!]*$"
    r"|<promise>COMPLETE</promise>[\s*_`.!]*\Z",
    re.MULTILINE,
)


# More dirty tracked paths than this: one `git diff` of the whole tree, not a path list.
_DIFF_PATHS_MAX = 200


@dataclass(frozen=True)
class WorkState:
    """HEAD and a digest of the uncommitted changes (content, not just paths: an agent that
    edits an already-dirty file made progress too). `dirty` is every path `git status`
    showed (logs included; None outside git): the post-story checks reuse it rather than
    ask git again."""

    head: str | None
    tree: str | None
    dirty: frozenset[str] | None = field(default=None, compare=False)

    @classmethod
    def capture(cls, root: Path, exclude: list[str]) -> WorkState:
        head = git.head(root)
        entries = git.status(root)
        if entries is None:
            return cls(head=None, tree=None)
        dirty = frozenset(e.path for e in entries)
        mine = [e for e in entries if not _excluded(e.path, exclude)]
        h = hashlib.sha256()
        for e in mine:
            h.update(f"{e.code} {e.path}\0{e.orig or ''}\0".encode("utf-8", "surrogateescape"))
        h.update(b"\0" + _diff(root, head, mine, exclude).encode("utf-8", "surrogateescape"))
        # Untracked files are in the status by name only: hash their content too.
        for e in mine:
            if e.code == "??":
                p = root / e.path
                if p.is_file():
                    h.update(p.read_bytes())
        return cls(head=head.strip() if head else None, tree=h.hexdigest(), dirty=dirty)

    def git(self) -> check_state.GitState:
        """HEAD and the dirty paths as the post-story checks take them."""
        return check_state.GitState(self.head, self.dirty or frozenset())


def _excluded(path: str, exclude: list[str]) -> bool:
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in exclude)


def _diff(root: Path, head: str | None, entries: list[git.StatusEntry], exclude: list[str]) -> str:
    """`git diff HEAD` of the tracked paths the status shows changed: every other path has
    no difference to show, so a clean tree needs no diff (at 10,000 files one cost more CPU
    than the rest of an iteration's git calls together)."""
    if not head:
        return ""
    paths = sorted({p for e in entries if e.code != "??" for p in (e.path, e.orig) if p})
    if not paths:
        return ""
    base = ["diff", "HEAD", "--no-ext-diff", "--binary", "--"]
    if len(paths) > _DIFF_PATHS_MAX:
        spec = [".", *(f":(exclude){e}" for e in exclude)]
    else:
        spec = [f":(literal){p}" for p in paths]
    return git.output([*base, *spec], root) or ""


@dataclass
class Attempt:
    """One spawn of the agent and what came of it."""

    n: int
    outcome: runner.RunOutcome
    result: AgentResult
    passed: bool
    all_passed: bool
    prd_error: str | None
    before: WorkState
    after: WorkState
    transcript: Path
    prd_after: PrdState | None = None  # prd.json as read once the agent was done

    @property
    def interrupted(self) -> bool:
        return bool(self.outcome.interrupted)

    @property
    def exit_code(self) -> int | None:
        return self.outcome.exit_code

    @property
    def duration_s(self) -> float:
        return round(self.outcome.duration_s, 2)

    @property
    def error(self) -> str | None:
        return self.prd_error or (self.result.error if self.result.is_error else None)

    @property
    def committed(self) -> bool:
        return self.after.head != self.before.head

    @property
    def files_changed(self) -> bool:
        return self.after.tree != self.before.tree or self.committed

    @property
    def limit(self) -> limits.LimitSignal | None:
        if self.passed or self.interrupted or self.outcome.timed_out:
            return None
        return self.result.limit

    @property
    def transient(self) -> bool:
        """Worth a quick retry: a known transient error, or a crash that changed nothing."""
        if self.passed or self.interrupted or self.outcome.timed_out or self.limit:
            return False
        if self.known_transient:
            return True
        return self.exit_code not in (0, None) and not self.files_changed

    @property
    def known_transient(self) -> bool:
        """The failure names a passing cause (5xx, overload, network): worth backing off for.
        An unexplained crash is retried too, but after sleep_between, like ralph.sh's next
        iteration: backing off minutes for a broken agent only delays the stuck verdict."""
        return limits.is_transient(self.result, self.outcome.output)

    def reported_tokens(self) -> int | None:
        u = self.result.usage
        return u.total_tokens if u else None

    def cost_usd(self) -> float | None:
        return self.result.cost_usd

    def usage_dict(self) -> dict[str, int] | None:
        return self.result.usage.to_dict() if self.result.usage else None

    def completion(self) -> str | None:
        """ "complete" when the final message has the sentinel and prd.json agrees, "false"
        when it has it but stories remain, None when the agent did not claim completion."""
        final = self.result.final_message or ""
        if SENTINEL not in final or not _CLAIM.search(final):
            return None
        return "complete" if self.all_passed else "false"

    def outcome_name(self) -> str:
        if self.interrupted:
            return "interrupted"
        # prd.json is the truth: an agent that marked its story passed (and, say, was still
        # printing or exiting when the wall timeout fired) passed; `timed_out` still says so.
        if self.passed:
            return "passed"
        if self.outcome.timed_out:
            return "timeout"
        if self.prd_error:
            return "error"
        if self.exit_code not in (0, None) or self.result.is_error:
            return "failed"
        return "no_progress"


@dataclass(frozen=True)
class Context:
    """What an iteration needs from the run around it."""

    project: Project
    agent: Agent
    display: Display
    run_dir: Path  # transcripts and prompt copies of this run
    mode: str  # auto | indexed | full
    max_iterations: int
    notes: tuple[str, ...] = ()  # fixes for the prompt (checks: retry)


class Iteration:
    """Prepare once, spawn one or more attempts, then record the last one."""

    def __init__(self, ctx: Context, n: int, story: Story, prd: Prd) -> None:
        self.ctx = ctx
        self.project = ctx.project
        self.n = n
        self.story = story
        self.total = len(prd.stories)
        self.passed_before = prd.passed_count()
        self.attempts = 0
        self.report: checks.CheckReport | None = None
        with prompt.gc_paused():
            memory = Memory.load(self.project)
        for why in memory.refused:
            log.warning("index_row_refused", row=why)
        if n == 1:  # once per run: as `ralph status` and `ralph check` say it
            budget = self.project.config.budget.prompt_tokens
            if large := audit.index_warning(memory.progress, budget, exact=False):
                log.warning(f"{large[0]}; run `ralph compact --apply`")
        self.assembled = prompt.assemble(
            self.project,
            story,
            memory,
            mode=ctx.mode,
            notes=ctx.notes,
            tool=ctx.agent.name,
            prd=prd,
        )
        self.prompt_file = ctx.run_dir / f"iteration-{n}.prompt.md"
        # The copy kept in the logs is redacted; the agent gets the exact prompt only while
        # it runs (spawn), so a key an agent wrote into a reference stays out of our logs.
        redact.write_text(self.prompt_file, self.assembled.text)
        # Progress is judged against the state before the first attempt, so a retry that
        # follows a partial attempt still sees that attempt's changes.
        self.start = self._state()
        with prompt.gc_paused():  # git's answers above reused, not asked again
            self.snapshot = checks.snapshot(
                self.project, prd=prd, memory=memory, git_state=self.start.git()
            )

    # ---- spawn ------------------------------------------------------------------------------
    def _exclude(self) -> list[str]:
        logs = self.project.rel(Path(self.project.logs_dir))
        return [logs] if logs and not logs.startswith("/") else []

    def _state(self) -> WorkState:
        return WorkState.capture(Path(self.project.root), self._exclude())

    def spawn(self) -> Attempt:
        self.attempts += 1
        suffix = "" if self.attempts == 1 else f".attempt-{self.attempts}"
        transcript = self.ctx.run_dir / f"iteration-{self.n}{suffix}.log"
        display = self.ctx.display
        st = display.status
        st.story, st.iteration, st.max_iterations = (
            self.story.id,
            self.n,
            self.ctx.max_iterations,
        )
        st.passed, st.total = self.passed_before, self.total
        st.note = "" if self.attempts == 1 else f"attempt {self.attempts}"
        timeouts = self.project.config.timeouts
        fsutil.atomic_write_text(self.prompt_file, self.assembled.text)
        try:
            with display.live():
                outcome, result = runner.run_agent(
                    self.ctx.agent,
                    self.prompt_file,
                    cwd=Path(self.project.root),
                    transcript_path=transcript,
                    on_line=display.agent,
                    wall_timeout=timeouts.iteration,
                    idle_timeout=timeouts.idle,
                )
        finally:
            self._redact_prompt_copy()
        return self._assess(outcome, result, self.start, transcript)

    def _redact_prompt_copy(self) -> None:
        """Put the redacted copy back; if that cannot be written (disk full), remove the
        exact one rather than leave secrets in the logs. Never masks the agent's outcome."""
        try:
            redact.write_text(self.prompt_file, self.assembled.text)
        except OSError as exc:
            self.prompt_file.unlink(missing_ok=True)
            log.warning("prompt_copy_removed", error=str(exc))

    def _assess(
        self,
        outcome: runner.RunOutcome,
        result: AgentResult,
        before: WorkState,
        transcript: Path,
    ) -> Attempt:
        passed = all_passed = False
        # Unchanged (an attempt that did not get as far as its story): the snapshot's parse.
        after = PrdState.read(Path(self.project.prd_path), before=self.snapshot.prd_state)
        problem = after.error  # set whenever prd.json did not parse
        if after.prd is not None:
            try:
                passed = after.prd.get(self.story.id).passes
                all_passed = after.prd.all_passed()
            except InputError as exc:  # the story is gone from prd.json
                problem = str(exc)
        prd_error = None
        if problem is not None:
            # The agent broke prd.json: not a pass; checks.verify reports/restores it.
            prd_error = f"prd.json unreadable after the agent ran: {problem}"
            log.warning("prd.json unreadable after iteration", error=problem)
        return Attempt(
            n=self.attempts,
            outcome=outcome,
            result=result,
            passed=passed,
            all_passed=all_passed,
            prd_error=prd_error,
            before=before,
            after=self._state(),
            transcript=transcript,
            prd_after=after,
        )

    # ---- record -----------------------------------------------------------------------------
    def verify(self, attempt: Attempt) -> checks.CheckReport:
        """Post-story checks (they repair lost history); `all_passed` follows prd.json as
        the checks leave it, since a repair may have restored it."""
        with prompt.gc_paused():  # the index and every reference whose stat changed
            self.report = checks.verify(
                self.snapshot,
                self.project,
                self.story,
                after=attempt.prd_after,
                git_after=attempt.after.git(),
            )
        attempt.passed = bool(self.report.story_passed)
        attempt.all_passed = self.report.prd is not None and self.report.prd.all_passed()
        return self.report

    def record(self, attempt: Attempt) -> IterationRecord:
        """The ledger's iteration record (call after verify)."""
        assert self.report is not None, "record() needs verify() first"
        a = self.assembled
        return IterationRecord(
            iteration=self.n,
            story_id=self.story.id,
            story_title=self.story.title,
            mode=a.mode,
            agent=self.ctx.agent.name,
            model=attempt.result.model or self.ctx.agent.model,
            prompt_tokens=a.tokens,
            prompt_tokens_estimated=True,
            full_history_tokens=a.full_history_tokens,
            selected_references=list(a.selected),
            usage=attempt.usage_dict(),
            cost_usd=attempt.cost_usd(),
            duration_s=attempt.duration_s,
            exit_code=attempt.exit_code,
            outcome=attempt.outcome_name(),
            timed_out=attempt.outcome.timed_out,
            killed_processes=list(attempt.outcome.killed),
            attempts=attempt.n,
            completion=attempt.completion(),
            committed=attempt.committed,
            files_changed=attempt.files_changed,
            error=attempt.error,
            checks=self.report.to_dict(),
            updated_references=list(self.report.updated_references),
            transcript=self.project.rel(attempt.transcript),
            **self.reference_use(attempt),
        )

    def reference_use(self, attempt: Attempt) -> dict[str, Any]:
        """Which references the agent opened, missed and left untouched (memory.usage):
        optional record keys, absent when the agent's stream does not show its reads."""
        assert self.report is not None, "reference_use() needs verify() first"
        try:
            return usage.ledger_fields(
                self.ctx.agent.file_reads(attempt.outcome.output),
                inlined=self.assembled.selected,
                updated=self.report.updated_references,
                root=Path(self.project.root),
                refs_dir=self.project.references.rel_dir,
                progress_path=self.project.rel(Path(self.project.progress_path)),
            )
        except (OSError, ValueError, RuntimeError) as exc:  # a statistic: never lose the record
            log.warning("reference_use_unknown", error=str(exc))
            return {}
