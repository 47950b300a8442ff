"""A stand-in for a coding-agent CLI (claude, amp, codex, gemini, opencode): replays a recorded
transcript after checking that it was called the way the real CLI must be called.

Tests install it on PATH under the real binary's name (see `install()` in the test helpers):
the name it was called by picks the rules. Like the real CLIs it reads its prompt from stdin
TO EOF before answering (Claude Code waits forever on an open pipe; so does this), unless the
prompt came as an argument.

Environment knobs:
  FAKE_TRANSCRIPT     file whose lines are printed (a real recorded transcript)
  FAKE_LINE_DELAY     seconds between lines (default 0)
  FAKE_EXIT           exit code after the transcript (default 0)
  FAKE_SLEEP          seconds to sleep after printing (timeouts)
  FAKE_SILENT_SLEEP   sleep this long BEFORE printing anything (idle timeout)
  FAKE_RECORD         directory: argv.json, stdin.txt, env.json are written there
  FAKE_GRANDCHILD     file: start a grandchild process (sleeps 600 s), write its pid there
  FAKE_BACKGROUND     file: start a nohup-style background child (ignores SIGHUP, keeps running
                      after we exit, holding the pty), write its pid there
  FAKE_IGNORE_TERM    "1": ignore SIGTERM (forces the runner's SIGKILL)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# name -> (required argv words, where the prompt comes from)
RULES: dict[str, tuple[list[str], str]] = {
    "claude": (
        ["-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"],
        "stdin",
    ),
    "amp": (["-x", "--stream-json", "--dangerously-allow-all"], "stdin"),
    "codex": (["exec", "--json", "--skip-git-repo-check"], "stdin"),
    "gemini": (["--output-format", "--approval-mode=yolo", "-p"], "stdin"),
    "opencode": (["run", "--format", "json"], "argument"),
}


def fail(message: str, code: int = 1) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)


def check_call(name: str, argv: list[str]) -> None:
    required, _ = RULES.get(name, ([], "stdin"))
    for word in required:
        if word not in argv:
            fail(f"{name}: error: missing required option {word}")
    if name == "claude":
        if "--output-format" in argv and "--verbose" not in argv:
            fail("Error: When using --print, --output-format=stream-json requires --verbose")
        if os.geteuid() == 0 and os.environ.get("IS_SANDBOX") != "1":
            fail(
                "--dangerously-skip-permissions cannot be used with root/sudo privileges "
                "for security reasons"
            )
    if name == "codex" and argv[-1] != "-" and not os.environ.get("FAKE_PROMPT_ARG"):
        fail("codex: expected '-' (read the prompt from stdin) as the last argument")


def read_prompt(name: str, argv: list[str]) -> str:
    _, source = RULES.get(name, ([], "stdin"))
    if source == "argument":
        return argv[-1]
    # Like the real CLIs: read stdin to EOF. An open pipe or a tty would block here forever.
    if os.isatty(0):
        fail(f"{name}: refusing to read the prompt from a terminal (expected a file on stdin)")
    return sys.stdin.read()


def record(directory: str, argv: list[str], prompt: str) -> None:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "argv.json").write_text(json.dumps(argv))
    (out / "stdin.txt").write_text(prompt, encoding="utf-8")
    (out / "env.json").write_text(json.dumps(dict(os.environ)))
    (out / "pid").write_text(f"{os.getpid()} {os.getpgrp()}")


def spawn_sleeper(pid_file: str, *, detached_stdio: bool) -> None:
    """Start a child that sleeps 600 s; it writes its own pid once ready (handlers set)."""
    ignore = "signal.signal(signal.SIGHUP, signal.SIG_IGN); " if detached_stdio else ""
    code = (
        "import os, signal, sys, time; "
        + ignore
        + "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
    )
    # detached: like `nohup server &`, it survives the terminal's hangup when we exit, keeps
    # the pty open through stdout/stderr, and stays in our process group.
    stdin = subprocess.DEVNULL if detached_stdio else None
    subprocess.Popen([sys.executable, "-c", code, pid_file], stdin=stdin)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not Path(pid_file).exists():
        time.sleep(0.01)


def main() -> None:
    # install() runs this file under the real binary's name via runpy, passing FAKE_NAME.
    name = globals().get("FAKE_NAME") or Path(sys.argv[0]).name
    argv = sys.argv[1:]
    if os.environ.get("FAKE_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    check_call(name, argv)
    prompt = read_prompt(name, argv)
    if os.environ.get("FAKE_RECORD"):
        record(os.environ["FAKE_RECORD"], argv, prompt)
    if os.environ.get("FAKE_GRANDCHILD"):
        spawn_sleeper(os.environ["FAKE_GRANDCHILD"], detached_stdio=False)
    if os.environ.get("FAKE_BACKGROUND"):
        spawn_sleeper(os.environ["FAKE_BACKGROUND"], detached_stdio=True)
    time.sleep(float(os.environ.get("FAKE_SILENT_SLEEP", "0")))
    delay = float(os.environ.get("FAKE_LINE_DELAY", "0"))
    transcript = os.environ.get("FAKE_TRANSCRIPT")
    if transcript:
        for line in Path(transcript).read_text(encoding="utf-8").splitlines():
            print(line, flush=True)
            time.sleep(delay)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))


if __name__ == "__main__":
    main()
