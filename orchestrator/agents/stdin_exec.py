"""`python stdin_exec.py FILE -- PROG ARG...`: run PROG with FILE as its standard input.

The runner spawns agents on a pty (so they behave as in a terminal), but the prompt must
arrive on stdin as a file that ends (agents such as Claude Code wait forever on an open
pipe). This tiny trampoline opens FILE, puts it on fd 0 and execs PROG in place: same pid,
same process group, no shell, no quoting. FILE "-" means /dev/null.
Only the standard library is used, so the runner can start it with `python -I -S`.
"""

from __future__ import annotations

import os
import signal
import sys

EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126


def _join_cgroup() -> None:
    """Enter the cgroup the runner made for this agent (agents/proctree.py) before exec, so that
    nothing the agent starts can escape it; best effort (the runner also tracks by psutil)."""
    procs = os.environ.pop("RALPH_CGROUP_PROCS", None)
    if procs:
        try:
            with open(procs, "w") as f:
                f.write("0")
        except OSError:
            pass


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: stdin_exec.py FILE -- PROG [ARG...]\n")
        return 2
    path, prog = argv[0], argv[2:]
    try:
        fd = os.open(os.devnull if path == "-" else path, os.O_RDONLY)
    except OSError as exc:
        sys.stderr.write(f"ralph: cannot open prompt file {path}: {exc.strerror}\n")
        return EXIT_CANNOT_RUN
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    # Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive exec: give the agent
    # the defaults a shell gives, so `cmd | head` in its tools ends quietly as it should.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    _join_cgroup()
    try:
        os.execvp(prog[0], prog)
    except FileNotFoundError:
        sys.stderr.write(f"ralph: {prog[0]}: command not found\n")
        return EXIT_NOT_FOUND
    except OSError as exc:
        sys.stderr.write(f"ralph: cannot run {prog[0]}: {exc.strerror}\n")
        return EXIT_CANNOT_RUN
    return EXIT_CANNOT_RUN  # not reached: execvp replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
