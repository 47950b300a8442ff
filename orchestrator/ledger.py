"""The run ledger: one JSON object per line in `ralph/logs/ledger.jsonl`.

Every iteration of `ralph run` appends one `iteration` record (schema in
docs/architecture.md); a run is bracketed by `run_start` / `run_end`, and a usage-limit wait
adds a `limit_wait` record. Lines are rendered with structlog's JSON renderer through a
dedicated logger (not the global logging config) and appended whole or not at all: one
`os.write` of the full line on an O_APPEND descriptor (so concurrent writers never
interleave inside a line), and a failed or short write (disk full) is cut back to the size
the file had before, so a torn half-record is never left for the next run to write after.
A ledger that already ends without a newline (a crash from an older version, a copy cut
short) gets one before the next record, so that record stays on its own line.

Readers (`ralph status`, `ralph report`, `ralph ab`, `ralph compact`) use `read()` and the
summary helpers below; a damaged line is skipped and counted (`Records.skipped`) instead of
failing the read, because a ledger is a record, not an input the run depends on, and one
torn line must not hide every other run's numbers. A line that is JSON but not a record
(a field readers rely on has the wrong type: `"prompt_tokens": "many"`, a list for a story
id) is damaged in the same way and skipped the same way, here and only here, so no reader
has to guard each field (`_Fields`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from orchestrator import fsutil
from orchestrator.errors import FatalError, InputError
from orchestrator.log import get_logger

if TYPE_CHECKING:
    from structlog.typing import EventDict, WrappedLogger

log = get_logger()

OUTCOMES = ("passed", "no_progress", "failed", "timeout", "interrupted", "error")
# The order keys appear in on a ledger line: identity first, then the rest as given.
_FIRST_KEYS = ("event", "ts", "run_id", "iteration", "story_id")


def new_run_id(now: float | None = None) -> str:
    """Sortable and unique: `20261130-055202-3f9a` (UTC time + 4 random hex digits)."""
    import secrets  # lazy, like Ledger's imports: reading a ledger needs none of them

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(2)}"


def _order_keys(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    ordered = {k: event_dict.pop(k) for k in _FIRST_KEYS if k in event_dict}
    ordered.update(event_dict)
    return ordered


def saved_pct(full: float, used: float, digits: int | None = 1) -> float:
    """Percent of `full` (tokens Ralph would have loaded) that `used` saved; 0.0 when full is
    0. Rounded to `digits` (1, as ledger records and reports store it; None: unrounded)."""
    pct = 100.0 * (full - used) / full if full else 0.0
    return pct if digits is None else round(pct, digits)


def optional(default: Any = None) -> Any:
    """A record field written only when it differs from `default`: a field added later
    leaves the records of runs that never set it exactly as they were."""
    return field(default=default, metadata={"omit_if": default})


@dataclass(frozen=True)
class IterationRecord:
    """What one iteration produced: the loop decides on its fields, `to_json()` is the
    ledger's `iteration` record (schema in docs/architecture.md; the keys in this order).
    A new field goes last, declared with `optional()`."""

    iteration: int
    story_id: str
    story_title: str
    mode: str
    agent: str
    model: str | None
    prompt_tokens: int
    prompt_tokens_estimated: bool
    full_history_tokens: int
    saved_tokens: int = field(init=False)
    saved_pct: float = field(init=False)
    selected_references: list[str]
    usage: dict[str, int] | None
    cost_usd: float | None
    duration_s: float
    exit_code: int | None
    outcome: str
    timed_out: str | None
    killed_processes: list[str]  # processes the agent left behind that had to be ended
    attempts: int
    completion: str | None  # "complete", "false" (claimed, stories remain), None
    committed: bool
    files_changed: bool
    error: str | None
    checks: dict[str, Any]  # checks.CheckReport.to_dict()
    updated_references: list[str]
    transcript: str
    # Which references the agent opened by name (memory.usage), and how many more a search
    # or glob over the folder read; absent when its stream hides reads.
    opened_references: list[str] | None = optional()
    missed_references: list[str] | None = optional()  # opened though not inlined
    untouched_references: list[str] | None = optional()  # inlined, never opened or updated
    progress_reads: int | None = optional()  # whole reads of progress.txt despite the rule
    swept_references: int | None = optional()

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; expected {OUTCOMES}")
        saved = self.full_history_tokens - self.prompt_tokens
        object.__setattr__(self, "saved_tokens", saved)
        object.__setattr__(
            self, "saved_pct", saved_pct(self.full_history_tokens, self.prompt_tokens)
        )

    def to_json(self) -> dict[str, Any]:
        """The record's JSON object (a deep copy: later changes to it leave the record)."""
        omit = {f.name: f.metadata["omit_if"] for f in fields(self) if "omit_if" in f.metadata}
        return {k: v for k, v in asdict(self).items() if k not in omit or v != omit[k]}


class LedgerWriteError(FatalError):
    """A record could not be appended (disk full, permissions); the ledger is left whole."""


class _LineWriter:
    """structlog's logger interface (`msg`) over whole-line appends; see the module doc."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._lead = b"\n" if _ends_torn(path) else b""

    def msg(self, message: str) -> None:
        if self._fd is None:
            raise LedgerWriteError(f"{self.path}: the ledger is closed")
        data = self._lead + message.encode("utf-8", errors="surrogateescape") + b"\n"
        before = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write ({written} of {len(data)} bytes; disk full?)")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, before)
            raise LedgerWriteError(
                f"{self.path}: could not append a ledger record ({exc}); nothing was "
                "written. Free disk space (or fix the folder's permissions) and run again"
            ) from None
        self._lead = b""

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _ends_torn(path: Path) -> bool:
    """True when the file's last byte is not a newline (a record cut short)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


class Ledger:
    """Appends records for one run to a ledger file."""

    def __init__(self, path: Path, run_id: str | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id or new_run_id()
        # lazy: the redaction patterns take ~5 ms to compile, and only a run writes a ledger
        from orchestrator.redact import Redactor

        self._redact = Redactor()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _LineWriter(self.path)
        import structlog  # lazy: ~0.2 s to import, and only a run writes a ledger

        self._log = structlog.wrap_logger(
            self._file,
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
                _order_keys,
                structlog.processors.JSONRenderer(default=str, ensure_ascii=False),
                self._redact_line,
            ],
            # Explicit, so the app's logging setup (log.configure) never reroutes the ledger.
            wrapper_class=structlog.BoundLogger,
            context_class=dict,
        ).bind(run_id=self.run_id)

    def _redact_line(
        self, _logger: WrappedLogger, _name: str, line: str | EventDict
    ) -> str | EventDict:
        """Error texts and argv end up here: the rendered line is redacted whole.

        Runs after the JSON renderer, so `line` is the rendered text; structlog's processor
        type only names the event dict.
        """
        return self._redact(line) if isinstance(line, str) else line

    def event(self, event: str, **fields: Any) -> None:
        """Append one record (`event` names its kind): a whole line or nothing."""
        self._log.msg(event, **fields)

    def iteration(self, record: IterationRecord | Mapping[str, Any]) -> None:
        if isinstance(record, IterationRecord):
            record = record.to_json()
        if record.get("outcome") not in OUTCOMES:
            raise ValueError(f"unknown outcome {record.get('outcome')!r}; expected {OUTCOMES}")
        self.event("iteration", **record)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Records(list[dict[str, Any]]):
    """The records of a ledger, in file order; `skipped` holds the line numbers of damaged
    lines that were left out (a torn record, a line that is not a JSON object)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.skipped: list[int] = []

    def skipped_note(self) -> str:
        """'' when nothing was skipped, else one line for the user."""
        if not self.skipped:
            return ""
        shown = ", ".join(map(str, self.skipped[:10])) + (" ..." if len(self.skipped) > 10 else "")
        return (
            f"{self.path}: skipped {len(self.skipped)} damaged line(s) (line {shown}); "
            "the other records are used"
        )


def read(path: Path, *, strict: bool = False) -> Records:
    """All records in file order; empty when the ledger does not exist yet.

    A damaged line (a torn record from a crash or a full disk, or two records run together
    on one line) is skipped and counted in `skipped`, so status, compaction and reports keep
    working on every other line. `strict` (reports) makes a missing ledger an InputError."""
    path = Path(path)
    records = Records(path)
    if not fsutil.present(path):  # a FIFO or folder in its place is an error, not a hang
        if strict:
            raise InputError(f"{path}: no such ledger (run `ralph run` first, or check the path)")
        return records
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = parse_line(line)
            if obj is not None:
                records.append(obj)
                continue
            records.skipped.append(lineno)
            # debug: callers report the count once (Records.skipped_note), not line by line.
            log.debug("ledger line skipped", file=str(path), line=lineno)
            tail = _tail_record(line)
            if tail is not None:  # the next run's record written after a torn one
                records.append(tail)
    return records


# Numbers of a sane size: an `1e400` (infinity) would turn sums into inf or nan and an
# int() into OverflowError; a 400-digit integer overflows the float of a percentage.
_Num = Annotated[float, msgspec.Meta(ge=-1e18, le=1e18)]
_Int = Annotated[int, msgspec.Meta(ge=-(10**18), le=10**18)]
_Paths = list[str] | None


class _Fields(msgspec.Struct, kw_only=True):
    """The fields `ledger.read`'s callers rely on, with the types they need (null allowed
    where a reader falls back). Only checked: a record stays the dict it was, and keys not
    named here pass as they are. Strict, so `"7"` is not an integer and `true` not 1."""

    event: str
    ts: str | None = None
    run_id: str | None = None
    iteration: _Int | None = None
    story_id: str | None = None
    story_title: str | None = None
    mode: str | None = None
    agent: str | None = None
    model: str | None = None
    outcome: str | None = None
    status: str | None = None
    completion: str | None = None
    transcript: str | None = None
    kind: str | None = None
    reset_at: str | None = None
    max_iterations: _Int | None = None
    exit_code: _Int | None = None
    prompt_tokens: _Int | None = None
    full_history_tokens: _Int | None = None
    saved_tokens: _Int | None = None
    progress_reads: _Int | None = None
    swept_references: _Int | None = None
    saved_pct: _Num | None = None
    cost_usd: _Num | None = None
    duration_s: _Num | None = None
    waited_s: _Num | None = None
    delay_s: _Num | None = None
    usage: dict[str, _Num | None] | None = None
    budget: dict[str, _Num | None] | None = None
    totals: dict[str, Any] | None = None
    selected_references: _Paths = None
    updated_references: _Paths = None
    opened_references: _Paths = None
    missed_references: _Paths = None
    untouched_references: _Paths = None
    killed_processes: _Paths = None


def parse_line(line: str | bytes) -> dict[str, Any] | None:
    """The record on a line, or None when the line is not one (see _Fields)."""
    try:
        # msgspec's decoder: twice as fast as json.loads on a long ledger, and strict JSON
        # (no NaN), which is what our writer produces.
        obj = msgspec.json.decode(line)
        msgspec.convert(obj, _Fields)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return obj if isinstance(obj, dict) else None


def _tail_record(line: str) -> dict[str, Any] | None:
    """A whole record at the end of a torn line (`{"event": ...}` after a cut-off one)."""
    start = line.rfind('{"event"')
    if start <= 0:
        return None
    return parse_line(line[start:])


def iterations(
    records: Iterable[dict[str, Any]], run_id: str | None = None
) -> list[dict[str, Any]]:
    """The `iteration` records, of one run if `run_id` is given."""
    return [
        r
        for r in records
        if r.get("event") == "iteration" and (run_id is None or r.get("run_id") == run_id)
    ]


def run_ids(records: Iterable[dict[str, Any]]) -> list[str]:
    """Run ids in the order they first appear."""
    seen: dict[str, None] = {}
    for r in records:
        if r.get("run_id"):
            seen.setdefault(r["run_id"], None)
    return list(seen)


def last_run_id(records: list[dict[str, Any]]) -> str | None:
    ids = run_ids(records)
    return ids[-1] if ids else None


@dataclass
class Totals:
    """What a set of iterations cost and saved. Agent figures count only where reported."""

    iterations: int = 0
    passed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    full_history_tokens: int = 0
    input_tokens: int = 0  # prompt side as the agent counts it: input + cache read/write
    output_tokens: int = 0
    cost_usd: float = 0.0
    usage_reported: int = 0  # iterations whose agent reported usage
    cost_reported: int = 0
    duration_s: float = 0.0
    limit_waits: int = 0
    limit_wait_s: float = 0.0

    @property
    def saved_tokens(self) -> int:
        return self.full_history_tokens - self.prompt_tokens

    @property
    def saved_pct(self) -> float:
        return saved_pct(self.full_history_tokens, self.prompt_tokens, digits=None)

    @property
    def agent_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.update(
            saved_tokens=self.saved_tokens,
            saved_pct=saved_pct(self.full_history_tokens, self.prompt_tokens),
        )
        return d


def usage_in(usage: dict[str, Any] | None) -> int:
    """Prompt-side tokens the agent reported: input excludes cache, so add cache read/write."""
    if not usage:
        return 0
    return sum(
        int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
    )


def totals(records: Iterable[dict[str, Any]]) -> Totals:
    """Sum the `iteration` (and `limit_wait`) records given."""
    t = Totals()
    for r in records:
        if r.get("event") == "limit_wait":
            t.limit_waits += 1
            t.limit_wait_s += float(r.get("waited_s") or 0)
            continue
        if r.get("event") != "iteration":
            continue
        t.iterations += 1
        outcome = r.get("outcome") or "error"
        t.outcomes[outcome] = t.outcomes.get(outcome, 0) + 1
        t.passed += outcome == "passed"
        t.prompt_tokens += int(r.get("prompt_tokens") or 0)
        t.full_history_tokens += int(r.get("full_history_tokens") or 0)
        if r.get("usage"):
            t.usage_reported += 1
            t.input_tokens += usage_in(r["usage"])
            t.output_tokens += int(r["usage"].get("output_tokens") or 0)
        if r.get("cost_usd") is not None:
            t.cost_reported += 1
            t.cost_usd += float(r["cost_usd"])
        t.duration_s += float(r.get("duration_s") or 0)
    return t


def run_totals(records: list[dict[str, Any]], run_id: str | None = None) -> Totals:
    """Totals of one run (the last one by default), limit waits included."""
    run_id = run_id or last_run_id(records)
    return totals(r for r in records if run_id and r.get("run_id") == run_id)


def by_story(records: Iterable[dict[str, Any]]) -> dict[str, Totals]:
    """Totals per story id over all iterations given (for reports)."""
    out: dict[str, Totals] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in iterations(records):
        groups.setdefault(str(r.get("story_id")), []).append(r)
    for sid, rs in groups.items():
        out[sid] = totals(rs)
    return out
