"""structlog setup for a `ralph` process.

Two outputs from one event stream (stdlib logging with structlog's ProcessorFormatter):
- a JSON-lines file in the run's log folder (`ralph/logs/<run-id>/run.log`), every level,
  for after-the-fact debugging;
- readable lines on the console (stderr): `ralph: warning: <message> key=value`, warnings and
  errors only unless verbose.
Modules call `log.get_logger()`, never structlog directly: structlog (with rich, asyncio
and its traceback support) costs ~0.2 s of CPU to import, and most commands log nothing. It
is imported when the first event is logged (or a foreign stdlib record is formatted), and
`configure()` takes effect then. Before `configure()` runs, structlog's defaults print to
stdout, which is fine for tests and library use.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from structlog.typing import EventDict, Processor, WrappedLogger

if TYPE_CHECKING:
    # Generic in typeshed only: subscripting it at runtime fails before Python 3.11.
    _StreamHandler = logging.StreamHandler[TextIO]
else:
    _StreamHandler = logging.StreamHandler

_HANDLER_TAG = "_ralph_handler"
# The JSON log file of this process's last run, kept after close() so a crash that surfaces
# later in cli.main can still be recorded beside the run's other events.
_last_file: Path | None = None

# Whether structlog must get our configuration when it is first used (configure() ran
# before anything imported it).
_pending = False


def _shared() -> list[Processor]:
    import structlog  # lazy: ~0.2 s, paid only when an event is really written

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        structlog.processors.StackInfoRenderer(),
    ]


def _structlog() -> Any:
    """structlog, imported now, with our configuration applied if configure() asked for it."""
    global _pending
    import structlog

    if _pending:
        _pending = False
        structlog.configure(
            processors=[*_shared(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=False,
        )
    return structlog


# Set by configure(): from then on, an event no handler would write (a debug line when only
# the console's warnings are shown) is dropped before structlog is imported for it.
_configured = False
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}


def _dropped(*_args: Any, **_kw: Any) -> None:
    return None


def _wanted(level: int) -> bool:
    return any(h.level <= level for h in logging.getLogger().handlers)


class _Logger:
    """What `get_logger()` returns: structlog's logger, imported on the first event that
    some handler would write."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        level = _LEVELS.get(name)
        if level is not None and _configured and not _wanted(level):
            return _dropped
        return getattr(_structlog().get_logger(), name)


# C0 controls (but tab and newline), DEL and C1 controls, shown as `\x1b`: text from the
# user's files (a story title, a topic) or an agent's output must not drive the terminal
# (set its title, clear the screen, hide text). U+009B is a one-character CSI.
_UNSAFE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)] if c not in (9, 10)}


def terminal_safe(text: str, *, newlines: bool = True) -> str:
    """`text` with every terminal control character escaped as `\\xNN`; newlines are kept
    unless `newlines` is False (one-line places: a status line, a table cell)."""
    safe = text.translate(_UNSAFE)
    return safe if newlines else safe.replace("\n", "\\x0a")


def get_logger() -> Any:
    """The logger modules keep at module level (`log = get_logger()`): imports nothing."""
    return _Logger()


class _Formatter(logging.Formatter):
    """structlog's ProcessorFormatter for one of our handlers, built on the first record:
    a command that logs nothing never imports structlog."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self._inner: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._inner is None:
            self._inner = _processor_formatter(self.kind)
        return self._inner.format(record)


def _processor_formatter(kind: str) -> logging.Formatter:
    structlog = _structlog()
    pf = structlog.stdlib.ProcessorFormatter
    if kind == "console":
        processors = [pf.remove_processors_meta, _console_line]
    else:
        processors = [
            pf.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=str),
            _redact_line,
        ]
    formatter: logging.Formatter = pf(processors=processors, foreign_pre_chain=_shared())
    return formatter


class _CurrentStderr(_StreamHandler):
    """Writes to whatever `sys.stderr` is *now*: the live status line swaps it for a proxy
    that keeps log lines from tearing the status line apart."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def _console_line(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> str:
    level = event_dict.pop("level", "info")
    event = event_dict.pop("event", "")
    for k in ("ts", "timestamp", "logger", "_record", "_from_structlog"):
        event_dict.pop(k, None)
    extra = " ".join(f"{k}={v}" for k, v in event_dict.items() if v is not None)
    prefix = "ralph: " if level == "info" else f"ralph: {level}: "
    return terminal_safe(f"{prefix}{event}" + (f" ({extra})" if extra else ""))


def _redact_line(_logger: WrappedLogger, _name: str, line: str | EventDict) -> str | EventDict:
    """The JSON log file is ours, under the logs folder: no secret reaches it.

    Runs after the JSON renderer, so `line` is the rendered text; structlog's processor type
    only names the event dict.
    """
    from orchestrator.redact import redact  # lazy: keeps `import log` light

    return redact(line) if isinstance(line, str) else line


def configure(log_file: Path | None = None, *, verbose: bool = False) -> None:
    """Route structlog through stdlib logging to the console and (optionally) a JSON file.

    Safe to call more than once (e.g. once per run in tests): earlier handlers are replaced.
    """
    global _pending, _configured
    _pending = _configured = True
    if "structlog" in sys.modules:  # someone uses it already: configure it now
        _structlog()
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, _HANDLER_TAG, False)]:
        root.removeHandler(h)
        h.close()
    root.setLevel(logging.DEBUG)
    # A log line that cannot be written (disk full) must not print logging's own traceback.
    logging.raiseExceptions = False

    console = _CurrentStderr()
    console.setLevel(logging.DEBUG if verbose else logging.WARNING)
    console.setFormatter(_Formatter("console"))
    setattr(console, _HANDLER_TAG, True)
    root.addHandler(console)

    if log_file is not None:
        global _last_file
        _last_file = Path(log_file)
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(_Formatter("file"))
        setattr(fh, _HANDLER_TAG, True)
        root.addHandler(fh)


def close() -> None:
    """Detach and close our handlers (the run's log file must not stay open)."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, _HANDLER_TAG, False)]:
        root.removeHandler(h)
        h.close()


def record_crash(exc: BaseException) -> Path | None:
    """Append `exc`'s traceback, redacted, as one JSON record to the run's log file (or, with
    no run log, to a crash file in the temp folder). Returns the file, None if nothing could
    be written (then the one-line message is all the user gets; it must never raise)."""
    from orchestrator.redact import redact  # lazy: only a crash needs it

    record = {
        "ts": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "level": "critical",
        "event": "unexpected_error",
        "error": redact(f"{type(exc).__name__}: {exc}"),
        "traceback": redact("".join(traceback.format_exception(exc))),
        "argv": [redact(a) for a in sys.argv],
    }
    line = json.dumps(record, ensure_ascii=False) + "\n"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    fallback = Path(tempfile.gettempdir()) / f"ralph-crash-{stamp}-{os.getpid()}.log"
    for path in (_last_file, fallback):
        if path is None:
            continue
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)
            return path
        except OSError:
            continue
    return None
