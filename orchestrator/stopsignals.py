"""SIGINT, SIGTERM and SIGHUP all mean "stop cleanly", for every command that runs agents.

A supervisor (systemd, CI timeouts, `timeout(1)`) sends SIGTERM; a closed terminal sends
SIGHUP; a user presses Ctrl-C. Each is turned into a `KeyboardInterrupt` in the main thread, so
one cleanup path (end the agents' process trees, record the iteration, close the ledger,
release the lock, remove temporary copies) serves all three. The signal is remembered, and the
exit code is 128 + its number, as a shell reports a process killed by it: 130 for SIGINT, 143
for SIGTERM, 129 for SIGHUP. Scripts and supervisors can tell who stopped the run.

Only the standard library: `cli.py` imports this module to compute the exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


class StopSignal(KeyboardInterrupt):
    """Raised in the main thread when a stop signal arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def received() -> int | None:
    """The first stop signal this process received, if any."""
    return _received[0] if _received else None


def exit_code() -> int:
    """128 + the stop signal received (130 when only a plain KeyboardInterrupt was seen)."""
    return 128 + (received() or int(signal.SIGINT))


@contextlib.contextmanager
def interrupt_on_stop_signals() -> Iterator[None]:
    """While active, each of STOP_SIGNALS raises StopSignal (a KeyboardInterrupt) in the main
    thread. Nested uses are fine: each restores what it replaced."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be installed from the main thread
        return

    def interrupt(signum: int, frame: object) -> None:
        _received.append(signum)
        raise StopSignal(signum)

    previous = {}
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold stop signals during a short cleanup that must not be cut in half; a signal that
    arrives meanwhile is remembered (for the exit code) and not raised."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def remember(signum: int, frame: object) -> None:
        _received.append(signum)

    previous = {}
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            previous[sig] = signal.signal(sig, remember)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_parent(parent: int) -> bool:
    """Ask the kernel (Linux) to send this process SIGTERM when `parent` ends, however it
    ends: a `ralph ab` killed with SIGKILL cannot stop its arms itself, and an arm left
    running would go on spending tokens for nobody. SIGTERM takes the usual stop path (the
    agent's tree ended, the iteration recorded). If `parent` is already gone, stop now.
    False where the kernel cannot do it (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return False
    # ctypes only here (the arms of `ralph ab`): cli.py imports this module for every
    # command, `ralph --version` included.
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # it ended before the request was in place
        os.kill(os.getpid(), signal.SIGTERM)
    return True
