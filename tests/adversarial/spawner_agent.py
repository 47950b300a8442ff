"""A misbehaving agent for the process tests: it leaves processes behind the way real agents'
tools do. Knobs (environment):

  SPAWNER_SLEEP     the sleep length its children use, e.g. "3000.1234567": a marker the
                    tests find in the command line even when the environment is scrubbed
  SPAWNER_SETSID    "1": start `setsid sleep ...` (a new session and group)
  SPAWNER_DAEMON    "1": double-fork a daemon (setsid, reparented to init) that sleeps
  SPAWNER_SCRUB     "1": the daemon execs with an empty environment (no inherited marker)
  SPAWNER_ZOMBIE    "1": fork a child that exits at once and is never waited for
  SPAWNER_IGNORE_TERM "1": ignore SIGTERM (only SIGKILL ends it)
  SPAWNER_HANG      "1": after spawning, sleep forever instead of exiting 0
  SPAWNER_READY     a file written once everything is spawned
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def daemon(duration: str, scrub: bool) -> None:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            argv = ["sleep", duration]
            if scrub:
                os.execve("/usr/bin/sleep", argv, {})
            os.execvp("sleep", argv)
        os._exit(0)
    os.waitpid(pid, 0)


def main() -> int:
    sys.stdin.read()
    duration = os.environ.get("SPAWNER_SLEEP", "300")
    if os.environ.get("SPAWNER_SETSID") == "1":
        subprocess.Popen(["setsid", "sleep", duration])
    if os.environ.get("SPAWNER_DAEMON") == "1":
        daemon(duration, os.environ.get("SPAWNER_SCRUB") == "1")
    if os.environ.get("SPAWNER_ZOMBIE") == "1" and os.fork() == 0:
        os._exit(0)
    if os.environ.get("SPAWNER_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(0.3)  # let the children exec (their command lines carry the marker)
    print("spawner: children started", flush=True)
    ready = os.environ.get("SPAWNER_READY")
    if ready:
        with open(ready, "w") as f:
            f.write(str(os.getpid()))
    if os.environ.get("SPAWNER_HANG") == "1":
        while True:
            time.sleep(3600)
    print("spawner: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
