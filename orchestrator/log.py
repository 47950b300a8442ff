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

import logging
import sys
from pathlib import Path
from typing import Any

import structlog

_HANDLER_TAG = "_ralph_handler"

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
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(default=str),
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
