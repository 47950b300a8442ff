"""Spawn an agent on a real pty, stream its output, enforce timeouts, end its process group.

This is the only module that knows about ptys. Why a pty: coding-agent CLIs behave as in a
terminal (line-buffered output, no "not a TTY" refusals), and the pty child is a session
leader, so the agent and everything it starts share one process group that we can end as a
whole. The prompt reaches stdin as a FILE (through `stdin_exec.py`, never a shell), so the
agent sees EOF after the prompt instead of waiting on an open pipe.

Lifecycle of `run`: spawn -> read lines (\r stripped) -> each line is redacted whole, then goes
to the transcript and to `on_line` (a live display shortens only redacted text, so a secret is
never cut in half before redaction could see it) -> on exit, wall/idle timeout or Ctrl-C, end
the agent's whole process tree (`proctree.Tree`: its cgroup, recorded descendants, group,
session and env marker, so `setsid` and double-forked children are ended too): SIGTERM, a grace
period, then SIGKILL.
The tree is also ended after a normal exit, so a dev server the agent left in the background
cannot hold ports or the pty into the next iteration; what had to be killed is reported in
`RunOutcome.killed`.
KeyboardInterrupt is not re-raised: the outcome says `interrupted=True` and the caller records
the iteration, then exits 130. SIGTERM/SIGHUP to ralph during a run are treated the same way.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal, TextIO

import pexpect

from orchestrator import fsutil, stopsignals
from orchestrator.agents import proctree, stdin_exec
from orchestrator.log import get_logger
from orchestrator.redact import Redactor

if TYPE_CHECKING:
    from orchestrator.agents.base import Agent, AgentResult

log = get_logger()

PTY_COLUMNS = 500  # wide, so JSON lines are never wrapped by the terminal
PTY_ROWS = 50
GRACE_S = 5.0  # between SIGTERM and SIGKILL
POLL_S = 0.2
DRAIN_S = 1.0  # after the agent exits, how long background holders of the pty may keep talking
EXIT_WAIT_S = 5.0  # after EOF, how long the agent may take to exit before we end it

TimedOut = Literal["wall", "idle"]


@dataclass
class RunOutcome:
    exit_code: int | None  # negative = killed by that signal (subprocess convention)
    output: str  # every line, \r stripped, unredacted (adapters parse it)
    timed_out: TimedOut | None
    interrupted: bool
    duration_s: float
    dropped_bytes: int = 0  # the middles of over-long lines, not kept (see _LongLine)
    killed: list[str] = field(default_factory=list)  # leftovers of the agent that we ended


def run(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    stdin_file: Path | str | None = None,
    transcript_path: Path | str | None = None,
    on_line: Callable[[str], None] | None = None,
    wall_timeout: float | None = None,
    idle_timeout: float | None = None,
    grace: float = GRACE_S,
    redactor: Redactor | None = None,
) -> RunOutcome:
    """Run argv (a list, never a shell string) on a pty; see the module docstring.
    `on_line` gets each line redacted (by `redactor`, default: one for the agent's env)."""
    if isinstance(argv, str) or not argv:
        raise ValueError("argv must be a non-empty list of words (no shell strings)")
    if not Path(cwd).is_dir():
        # pexpect would report a bad cwd as the child's output with exit code 0.
        raise FileNotFoundError(f"cannot run {argv[0]}: folder {cwd} does not exist")
    # PWD must name the agent's folder: some CLIs (opencode) trust $PWD over getcwd().
    tree = proctree.Tree()
    full_env = {**os.environ, **(env or {}), "PWD": os.path.abspath(cwd), **tree.env()}
    redactor = redactor or Redactor(full_env)
    start = time.monotonic()
    child = _spawn(argv, cwd, full_env, stdin_file, tree)
    log.debug("agent_spawned", pid=child.pid, argv=[redactor.text(a)[:200] for a in argv])
    with _open_transcript(transcript_path) as transcript:
        reader = _LineReader(on_line, transcript, redactor)
        with stop_signals_interrupt():
            timed_out, interrupted, killed = _supervise(
                child, tree, reader, start, wall_timeout, idle_timeout, grace
            )
    outcome = RunOutcome(
        _exit_code(child),
        "\n".join(reader.lines),
        timed_out,
        interrupted,
        round(time.monotonic() - start, 3),
        reader.dropped,
        [str(k) for k in killed],
    )
    log.debug(
        "agent_finished",
        exit_code=outcome.exit_code,
        timed_out=timed_out,
        interrupted=interrupted,
        duration_s=outcome.duration_s,
        dropped_bytes=outcome.dropped_bytes,
        killed=outcome.killed,
    )
    return outcome


def _spawn(
    argv: Sequence[str],
    cwd: Path | str,
    env: dict[str, str],
    stdin_file: Path | str | None,
    tree: proctree.Tree,
) -> pexpect.spawn:
    """Start argv on a pty through the stdin trampoline, its pid recorded in `tree` (closed
    when the spawn fails)."""
    trampoline = [
        sys.executable,
        "-I",
        "-S",
        stdin_exec.__file__,
        str(stdin_file) if stdin_file is not None else "-",
        "--",
        *map(str, argv),
    ]
    try:
        child = pexpect.spawn(
            trampoline[0],
            trampoline[1:],
            cwd=str(cwd),
            env=env,
            echo=False,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(PTY_ROWS, PTY_COLUMNS),
        )
    except BaseException:
        tree.close()
        raise
    tree.attach(child.pid)
    child.delayafterclose = child.delayafterterminate = 0.05  # pexpect's 0.1 s sleeps
    return child


def run_agent(
    agent: Agent,
    prompt_file: Path,
    *,
    cwd: Path | str,
    transcript_path: Path | str | None = None,
    on_line: Callable[[str], None] | None = None,
    wall_timeout: float | None = None,
    idle_timeout: float | None = None,
    grace: float = GRACE_S,
) -> tuple[RunOutcome, AgentResult]:
    """Run one agent on one prompt file; `on_line` gets the agent's readable display lines."""
    agent.check_available()
    # One redactor for everything this run writes: the transcript, the live lines (terminals,
    # CI logs) and the error texts (ledger, console) all mask what any of them learned.
    redactor = Redactor({**os.environ, **agent.env()})

    def show(line: str) -> None:
        # `line` is already redacted whole; the display is built (and shortened) from it,
        # and redacted once more for what only its decoded JSON strings show.
        shown = agent.display(line)
        if shown is not None and on_line is not None:
            on_line(redactor.text(shown))

    outcome = run(
        agent.argv(Path(prompt_file)),
        cwd=cwd,
        env=agent.env(),
        stdin_file=agent.stdin_file(Path(prompt_file)),
        transcript_path=transcript_path,
        on_line=show,
        wall_timeout=wall_timeout,
        idle_timeout=idle_timeout,
        grace=grace,
        redactor=redactor,
    )
    result = agent.parse(outcome.output, outcome.exit_code)
    # Error texts go to the ledger and the terminal: redact them (the final message stays
    # as printed: the loop reads the sentinel from it and logs only its verdict). Each on
    # its own: a private-key block the stream left open must not blank them.
    result.error = redactor.text(result.error) if result.error else result.error
    if result.limit is not None:
        result.limit.raw = redactor.text(result.limit.raw)
    if outcome.timed_out or outcome.interrupted:
        result.is_error = True
        why = f"{outcome.timed_out} timeout" if outcome.timed_out else "interrupted"
        result.error = f"{agent.name} stopped: {why}" + (
            f"; {result.error}" if result.error else ""
        )
    return outcome, result


# Terminal control sequences: CLIs that see a tty reset modes, move the cursor, set titles.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (window title ...)
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor, modes)
    r"|\x1b[()*+][ -~]"  # character-set designation
    r"|\x1b[ -~]"  # other two-character escapes (ESC 7, ESC 8 ...)
    r"|[\x00-\x08\x0b-\x1f\x7f]"  # remaining control characters (tab and newline stay)
)


def clean_line(raw: str) -> str:
    """One pty line as a log should keep it: no CR, no terminal control sequences."""
    line = raw.rstrip("\r")
    if "\r" in line:  # a progress bar redrawn in place: keep what a terminal would show
        line = line.rsplit("\r", 1)[1]
    return _ESCAPES.sub("", line) if ("\x1b" in line or not line.isprintable()) else line


def _supervise(
    child: pexpect.spawn,
    tree: proctree.Tree,
    reader: _LineReader,
    start: float,
    wall_timeout: float | None,
    idle_timeout: float | None,
    grace: float,
) -> tuple[TimedOut | None, bool, list[proctree.Killed]]:
    """Pump output until exit/timeout/Ctrl-C, then end the tree; (timed_out, interrupted,
    leftovers killed)."""
    timed_out, interrupted = None, False
    killed: list[proctree.Killed] = []
    try:
        timed_out = _pump(child, tree, reader, start, wall_timeout, idle_timeout)
        if timed_out is None:
            _await_exit(child, EXIT_WAIT_S)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # Also on errors in on_line: never leave an agent or its children running behind us.
        try:
            killed = tree.end(grace, reap=child.isalive)
        except KeyboardInterrupt:  # a second Ctrl-C: no more grace
            with stopsignals.deferred():
                killed = tree.end(0.0, reap=child.isalive)
            interrupted = True
        _drain(child, reader)
        reader.flush()
    return timed_out, interrupted, killed


def _drain(child: pexpect.spawn, reader: _LineReader, limit: float = 1.0) -> None:
    """Keep what the group printed while it was being ended (last words, partial lines)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            reader.feed(child.read_nonblocking(65536, timeout=0.05))
        except (pexpect.TIMEOUT, pexpect.EOF, OSError, ValueError):
            return


def stop_signals_interrupt() -> contextlib.AbstractContextManager[None]:
    """SIGTERM/SIGHUP to us (a supervisor, a CI timeout, a closed terminal) act like Ctrl-C:
    the agent's tree is ended and the iteration recorded, never orphaned. Used around one
    agent run here, around a whole `ralph run` by the loop (so the lock is released too) and
    around `ralph ab`/`demo`. The exit code names the signal (stopsignals.exit_code)."""
    return stopsignals.interrupt_on_stop_signals()


# Characters kept from the start and from the end of one output line; the middle of a longer
# line is dropped (and counted). 512 + 512 KiB keeps real stream-json events whole (the CLIs
# cut tool results far below that) while redaction, which scans each kept line with a dozen
# patterns, stays around a second for the worst line.
LINE_HEAD = 512 * 1024
LINE_TAIL = 512 * 1024


class _LongLine:
    """One unfinished output line, bounded: its first LINE_HEAD and last LINE_TAIL characters
    and a count of the bytes dropped in between. Each chunk is touched a bounded number of
    times, so a 100 MB line costs linear time and a few MB of memory."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.head: list[str] = []
        self.head_len = 0
        self.tail: collections.deque[str] = collections.deque()
        self.tail_len = 0
        self.dropped = 0  # bytes (UTF-8) of the line that were not kept

    def __bool__(self) -> bool:
        return bool(self.head_len or self.tail_len)

    def add(self, piece: str) -> None:
        if self.head_len < LINE_HEAD:
            take = piece[: LINE_HEAD - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            piece = piece[len(take) :]
        if not piece:
            return
        self.tail.append(piece)
        self.tail_len += len(piece)
        # Drop whole pieces from the front while the rest still covers LINE_TAIL.
        while self.tail and self.tail_len - len(self.tail[0]) >= LINE_TAIL:
            gone = self.tail.popleft()
            self.tail_len -= len(gone)
            self.dropped += _utf8_len(gone)

    def text(self) -> tuple[str, int]:
        """(the kept line, bytes dropped); resets the line."""
        tail = "".join(self.tail)
        dropped = self.dropped
        if len(tail) > LINE_TAIL:
            dropped += _utf8_len(tail[: len(tail) - LINE_TAIL])
            tail = tail[len(tail) - LINE_TAIL :]
        head = "".join(self.head)
        self._reset()
        if dropped:
            return _joined(head, tail, dropped)
        return head + tail, 0


def _joined(head: str, tail: str, dropped: int) -> tuple[str, int]:
    """The cut line, `[... n bytes ...]` between head and tail, as readable JSON as the
    whole line was: mended at the cut (`_cut_between_escapes`) only when the plain join is
    no JSON and the mended one is (a cut that fell between two strings needs no mending)."""

    def join(h: str, t: str, n: int) -> str:
        return f"{h} [... {n} bytes of this line dropped ...] {t}"

    line = join(head, tail, dropped)
    if head.lstrip().startswith("{") and not _is_json(line):
        cut_head, cut_tail, more = _cut_between_escapes(head, tail)
        mended = join(cut_head, cut_tail, dropped + more)
        if _is_json(mended):
            return mended, dropped + more
    return line, dropped


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


_OPEN_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)(\\(?:u[0-9a-fA-F]{0,3})?)\Z")


def _cut_between_escapes(head: str, tail: str) -> tuple[str, str, int]:
    """`head` and `tail` of a cut line with no JSON escape split between them: the line is
    mostly a stream event whose one long string was cut, and `\\` or `\\u00` at the end of
    the head, or a quote whose backslash was dropped at the start of the tail, made the whole
    event unreadable (its usage and cost lost). The head drops an escape it leaves open, the
    tail its leading backslashes and quotes. Returns the bytes they dropped."""
    m = _OPEN_ESCAPE.search(head[-64:])
    cut_head = head[: len(head) - len(m.group(2))] if m else head
    start = len(tail) - len(tail.lstrip('\\"'))
    gone = head[len(cut_head) :] + tail[:start]
    return cut_head, tail[start:], _utf8_len(gone)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


class _LineReader:
    """Turns pty chunks into lines; each line, redacted, goes to on_line and the transcript.

    Lines are bounded (see _LongLine): what is kept, written and parsed of one line is at
    most LINE_HEAD + LINE_TAIL characters; `dropped` counts the bytes left out."""

    def __init__(
        self, on_line: Callable[[str], None] | None, transcript: IO[str] | None, redactor: Redactor
    ) -> None:
        self.on_line, self.transcript, self.redactor = on_line, transcript, redactor
        self.path = getattr(transcript, "name", "the transcript")
        self.lines: list[str] = []
        self.partial = _LongLine()
        self.dropped = 0

    def feed(self, chunk: str) -> None:
        if not chunk:
            return
        if "\n" not in chunk:
            self.partial.add(chunk)
            return
        first, *rest = chunk.split("\n")
        self.partial.add(first)
        self._emit_partial()
        *complete, last = rest
        for line in complete:
            if len(line) > LINE_HEAD + LINE_TAIL:
                self.partial.add(line)
                self._emit_partial()
            else:
                self._emit(line)
        if last:
            self.partial.add(last)

    def flush(self) -> None:
        if self.partial:
            self._emit_partial()

    def _emit_partial(self) -> None:
        line, dropped = self.partial.text()
        self.dropped += dropped
        self._emit(line)

    def _emit(self, raw: str) -> None:
        line = clean_line(raw)
        self.lines.append(line)
        if self.transcript is None and self.on_line is None:
            return
        masked = self.redactor(line)  # once per line: the redactor follows key blocks
        if self.transcript is not None:
            try:
                self.transcript.write(masked + "\n")
                self.transcript.flush()
            except OSError as exc:
                # Disk full (or gone): the agent's work matters more than its log. Stop
                # writing the transcript and say so once; the run goes on.
                self.transcript = None
                log.warning(
                    "transcript_stopped", error=str(fsutil.file_error(self.path, exc, "write"))
                )
        if self.on_line is not None:
            try:
                self.on_line(masked)
            except Exception:  # a display bug must not kill the agent run
                log.exception("on_line_failed")


@contextlib.contextmanager
def _open_transcript(path: Path | str | None) -> Iterator[TextIO | None]:
    if path is None:
        yield None
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed below
    try:
        yield f
    finally:
        # Lines are flushed one by one; what close() may still fail on (disk full) was
        # already reported by the reader as "transcript_stopped".
        with contextlib.suppress(OSError):
            f.close()


def _pump(
    child: pexpect.spawn,
    tree: proctree.Tree,
    reader: _LineReader,
    start: float,
    wall_timeout: float | None,
    idle_timeout: float | None,
) -> TimedOut | None:
    """Read until EOF or a timeout; returns which timeout fired, if any."""
    last_output = time.monotonic()
    exited_at: float | None = None
    while True:
        tree.poll()  # record descendants while they are ours to find (rate-limited)
        now = time.monotonic()
        if wall_timeout is not None and now - start >= wall_timeout:
            return "wall"
        if idle_timeout is not None and now - last_output >= idle_timeout:
            return "idle"
        if exited_at is None and not child.isalive():
            exited_at = now
        if exited_at is not None and now - exited_at >= DRAIN_S and now - last_output >= DRAIN_S:
            return None  # the agent is gone; something it left behind holds the pty open
        try:
            chunk = child.read_nonblocking(65536, timeout=POLL_S)
        except pexpect.TIMEOUT:
            continue
        except pexpect.EOF:
            return None
        last_output = time.monotonic()
        reader.feed(chunk)


def _await_exit(child: pexpect.spawn, limit: float) -> None:
    """After EOF the agent usually exits at once; give it a moment before ending the group."""
    deadline = time.monotonic() + limit
    while child.isalive() and time.monotonic() < deadline:
        time.sleep(0.02)


def _exit_code(child: pexpect.spawn) -> int | None:
    with contextlib.suppress(Exception):
        child.close(force=True)
    if child.signalstatus is not None:
        return -int(child.signalstatus)
    return None if child.exitstatus is None else int(child.exitstatus)
