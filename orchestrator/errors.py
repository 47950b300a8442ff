"""One family of fatal errors; `cli.main` turns them into a message and an exit code.

Exit codes (documented in the README):
0 all stories pass · 1 iterations exhausted · 2 usage, config or input error ·
3 budget exhausted · 4 stopped as stuck · 128 + signal when stopped by a signal: 130 Ctrl-C
(SIGINT), 143 SIGTERM, 129 SIGHUP (each cleans up the same way; see stopsignals.py).
"""

from __future__ import annotations

from orchestrator import stopsignals

EXIT_OK = 0
EXIT_ITERATIONS_EXHAUSTED = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_STUCK = 4
EXIT_INTERRUPTED = 130


class FatalError(Exception):
    """An error the user must act on. The message names the file, the field and the fix."""

    exit_code: int = EXIT_USAGE


class UsageError(FatalError):
    """Bad command-line usage."""


class InputError(FatalError):
    """A user file (prd.json, progress.txt, ralph.yaml, a reference) is invalid."""


class ConfigError(InputError):
    """ralph.yaml is invalid."""


class PathEscapeError(InputError):
    """A reference path points outside the references folder."""


class AgentNotFound(FatalError):
    """The agent's executable is not on PATH."""


class LockHeld(FatalError):
    """Another `ralph run` holds this project's lock."""


class BudgetExhausted(FatalError):
    exit_code = EXIT_BUDGET


class Stuck(FatalError):
    exit_code = EXIT_STUCK


class Interrupted(FatalError):
    exit_code = EXIT_INTERRUPTED

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.exit_code = stopsignals.exit_code()  # 128 + the signal that stopped us


class FileError(InputError, OSError):
    """A user or log file could not be read or written (permission, a folder in the way, a
    FIFO, a symlink loop, disk full...). Also an OSError, so `except OSError` still sees it."""

    def __init__(self, message: str, *, path: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.filename = path
        self.errno = errno

    def __str__(self) -> str:
        return self.message
