"""structlog setup for a `ralph` process.

Two outputs from one event stream (stdlib logging with structlog's ProcessorFormatter):
- a JSON-lines file in the run's log folder (`ralph/logs/<run-id>/run.log`), every level,
  for after-the-fact debugging;
- readable lines on the console (stderr): `ralph: warning: <message> key=value`, warnings and
  errors only unless verbose.
Modules just call `structlog.get_logger()`; before `configure()` runs, structlog's defaults
print to stdout, which is fine for tests and library use.
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
from typing import Any

import structlog

_HANDLER_TAG = "_ralph_handler"
# The JSON log file of this process's last run, kept after close() so a crash that surfaces
# later in cli.main can still be recorded beside the run's other events.
_last_file: Path | None = None

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    structlog.processors.StackInfoRenderer(),
]


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is *now*: the live status line swaps it for a proxy
    that keeps log lines from tearing the status line apart."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201 - logging's own attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _console_line(_logger: Any, _name: str, event_dict: dict[str, Any]) -> str:
    level = event_dict.pop("level", "info")
    event = event_dict.pop("event", "")
    for k in ("ts", "timestamp", "logger", "_record", "_from_structlog"):
        event_dict.pop(k, None)
    extra = " ".join(f"{k}={v}" for k, v in event_dict.items() if v is not None)
    prefix = "ralph: " if level == "info" else f"ralph: {level}: "
    return f"{prefix}{event}" + (f" ({extra})" if extra else "")


def _redact_line(_logger: Any, _name: str, line: str) -> str:
    """The JSON log file is ours, under the logs folder: no secret reaches it."""
    from orchestrator.redact import redact  # lazy: keeps `import log` light

    return redact(line)


def configure(log_file: Path | None = None, *, verbose: bool = False) -> None:
    """Route structlog through stdlib logging to the console and (optionally) a JSON file.

    Safe to call more than once (e.g. once per run in tests): earlier handlers are replaced.
    """
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, _HANDLER_TAG, False)]:
        root.removeHandler(h)
        h.close()
    root.setLevel(logging.DEBUG)
    # A log line that cannot be written (disk full) must not print logging's own traceback.
    logging.raiseExceptions = False

    console = _CurrentStderr()
    console.setLevel(logging.DEBUG if verbose else logging.WARNING)
    console.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                _console_line,
            ],
            foreign_pre_chain=_SHARED,
        )
    )
    setattr(console, _HANDLER_TAG, True)
    root.addHandler(console)

    if log_file is not None:
        global _last_file
        _last_file = Path(log_file)
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(default=str),
                    _redact_line,
                ],
                foreign_pre_chain=_SHARED,
            )
        )
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
