"""The pty runner through real processes: output, stdin files, transcripts, timeouts that end a
whole process group (grandchildren included), Ctrl-C, leftovers holding the pty."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.agents import runner

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
from install import install  # noqa: E402

PY = sys.executable


def alive(pid: int) -> bool:
    """True while pid runs (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_pid_file(path: Path, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text().split()[0])
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    exe = install(bin_dir, "agentx")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("hello\n")
    return exe, prompt


def test_lines_exit_code_and_no_carriage_returns(tmp_path):
    lines: list[str] = []
    out = runner.run(
        [
            PY,
            "-c",
            "import sys; print('one'); print('two'); sys.stdout.write('partial'); sys.exit(3)",
        ],
        cwd=tmp_path,
        on_line=lines.append,
    )
    assert out.exit_code == 3 and out.timed_out is None and not out.interrupted
    assert lines == ["one", "two", "partial"]
    assert out.output == "one\ntwo\npartial" and "\r" not in out.output
    assert out.duration_s > 0


def test_runs_in_cwd_with_env_overlay(tmp_path):
    out = runner.run(
        [PY, "-c", "import os; print(os.getcwd()); print(os.environ['RX'], 'PATH' in os.environ)"],
        cwd=tmp_path,
        env={"RX": "yes"},
    )
    assert out.output.splitlines() == [str(tmp_path), "yes True"]


def test_stdin_is_the_whole_file_then_eof(tmp_path):
    data = ("line ünïcode\n" * 30_000).encode()
    assert len(data) > 300_000
    prompt = tmp_path / "prompt.md"
    prompt.write_bytes(data)
    code = (
        "import sys, hashlib; d = sys.stdin.buffer.read(); "
        "print(len(d), hashlib.sha256(d).hexdigest(), sys.stdin.isatty())"
    )
    out = runner.run([PY, "-c", code], cwd=tmp_path, stdin_file=prompt, wall_timeout=30)
    assert out.output == f"{len(data)} {hashlib.sha256(data).hexdigest()} False"


def test_no_stdin_file_means_dev_null(tmp_path):
    out = runner.run(
        [PY, "-c", "import sys; print(repr(sys.stdin.read()))"], cwd=tmp_path, wall_timeout=10
    )
    assert out.output == "''"


def test_stdout_is_a_wide_terminal(tmp_path):
    code = (
        "import os, sys, json; print(sys.stdout.isatty(), os.get_terminal_size().columns); "
        "print(json.dumps({'k': 'v' * 3000}))"
    )
    out = runner.run([PY, "-c", code], cwd=tmp_path)
    first, second = out.output.splitlines()
    assert first == f"True {runner.PTY_COLUMNS}"
    assert len(second) == len('{"k": ""}') + 3000


def test_multibyte_text_survives_chunking(tmp_path):
    out = runner.run([PY, "-c", "print('é✓' * 100000)"], cwd=tmp_path)
    assert out.output == "é✓" * 100000


def test_transcript_is_full_and_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret-value-123")
    code = (
        "print('key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAA'); "
        "print('env tok-very-secret-value-123'); print('plain')"
    )
    transcript = tmp_path / "logs" / "iter-1.log"
    out = runner.run([PY, "-c", code], cwd=tmp_path, transcript_path=transcript)
    assert "tok-very-secret-value-123" in out.output  # parsers see the real output
    saved = transcript.read_text()
    assert saved == "key [REDACTED]\nenv [REDACTED]\nplain\n"


def test_missing_program_exit_127(tmp_path):
    out = runner.run(["definitely-not-a-program-xyz"], cwd=tmp_path)
    assert out.exit_code == 127
    assert "definitely-not-a-program-xyz: command not found" in out.output


def test_argv_must_be_a_list(tmp_path):
    with pytest.raises(ValueError, match="no shell strings"):
        runner.run("echo hi; rm -rf /", cwd=tmp_path)


def test_wall_timeout_ends_the_group_including_grandchild(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    pid_file = tmp_path / "grandchild.pid"
    record = tmp_path / "rec"
    monkeypatch.setenv("FAKE_GRANDCHILD", str(pid_file))
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("FAKE_SLEEP", "60")
    start = time.monotonic()
    out = runner.run([str(exe)], cwd=tmp_path, stdin_file=prompt, wall_timeout=2, grace=2)
    elapsed = time.monotonic() - start
    assert out.timed_out == "wall" and not out.interrupted
    assert out.exit_code == -signal.SIGTERM
    assert 2 <= elapsed < 8
    grandchild = wait_pid_file(pid_file)
    child, group = map(int, (record / "pid").read_text().split())
    assert group == child  # the agent leads its own process group
    assert os.getpgid(os.getpid()) != group  # ... which is not ours
    assert not alive(child) and not alive(grandchild)


def test_idle_timeout(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    monkeypatch.setenv("FAKE_SILENT_SLEEP", "60")
    out = runner.run(
        [str(exe)], cwd=tmp_path, stdin_file=prompt, idle_timeout=1.5, wall_timeout=30, grace=1
    )
    assert out.timed_out == "idle" and out.duration_s < 6


def test_output_keeps_idle_timeout_at_bay(tmp_path):
    code = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.4)"
    out = runner.run([PY, "-c", code], cwd=tmp_path, idle_timeout=1.5, wall_timeout=30)
    assert out.timed_out is None and out.exit_code == 0 and out.output.split() == list("012345")


def test_sigterm_ignored_gets_sigkill(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    monkeypatch.setenv("FAKE_IGNORE_TERM", "1")
    monkeypatch.setenv("FAKE_SLEEP", "60")
    out = runner.run([str(exe)], cwd=tmp_path, stdin_file=prompt, wall_timeout=1, grace=0.5)
    assert out.timed_out == "wall" and out.exit_code == -signal.SIGKILL
    assert out.duration_s < 6


def test_ctrl_c_kills_group_and_reports_interrupted(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("FAKE_GRANDCHILD", str(pid_file))
    monkeypatch.setenv("FAKE_SLEEP", "60")
    # A real SIGINT to this process, as a terminal's Ctrl-C would send.
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        out = runner.run([str(exe)], cwd=tmp_path, stdin_file=prompt, wall_timeout=30, grace=2)
    finally:
        timer.cancel()
    assert out.interrupted and out.timed_out is None and out.duration_s < 8
    assert not alive(wait_pid_file(pid_file))


def test_background_leftover_holding_the_pty_is_ended(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    pid_file = tmp_path / "server.pid"
    monkeypatch.setenv("FAKE_BACKGROUND", str(pid_file))
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type":"result"}\n')
    monkeypatch.setenv("FAKE_TRANSCRIPT", str(transcript))
    out = runner.run([str(exe)], cwd=tmp_path, stdin_file=prompt, wall_timeout=30, grace=2)
    # The agent exited 0; the "dev server" it left kept the pty open until we ended it.
    assert out.exit_code == 0 and out.timed_out is None
    assert out.output == '{"type":"result"}' and out.duration_s < 10
    assert not alive(wait_pid_file(pid_file))


def test_on_line_errors_do_not_stop_the_run(tmp_path):
    def boom(line: str) -> None:
        raise RuntimeError("display bug")

    out = runner.run([PY, "-c", "print('a'); print('b')"], cwd=tmp_path, on_line=boom)
    assert out.exit_code == 0 and out.output == "a\nb"


def test_terminal_control_sequences_are_removed(tmp_path):
    code = (
        r"print('\x1b[32mgreen\x1b[0m plain'); "
        r"print('\x1b[?25h\x1b7\x1b[r\x1b8\x1b]0;title\x07\x1b(B'); print('tab\there')"
    )
    transcript = tmp_path / "t.log"
    out = runner.run([PY, "-c", code], cwd=tmp_path, transcript_path=transcript)
    assert out.output == "green plain\n\ntab\there"
    assert transcript.read_text() == "green plain\n\ntab\there\n"


def test_sigterm_to_ralph_ends_the_agent_too(fake, tmp_path, monkeypatch):
    exe, prompt = fake
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("FAKE_GRANDCHILD", str(pid_file))
    monkeypatch.setenv("FAKE_SLEEP", "60")
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        out = runner.run([str(exe)], cwd=tmp_path, stdin_file=prompt, wall_timeout=30, grace=2)
    finally:
        timer.cancel()
    assert out.interrupted and out.duration_s < 8
    assert not alive(wait_pid_file(pid_file))
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is gone again


def test_line_up_to_the_cap_arrives_whole(tmp_path):
    n = runner.LINE_HEAD + runner.LINE_TAIL - 10  # 9 of JSON around it, 1 for the pty's \r
    code = f"import sys; sys.stdout.write('{{\"x\": \"' + 'a' * {n} + '\"}}\\nend\\n')"
    out = runner.run([PY, "-c", code], cwd=tmp_path, wall_timeout=60)
    first, second = out.output.split("\n")
    assert len(first) == n + 9 and second == "end" and out.dropped_bytes == 0


def test_huge_single_line_keeps_head_and_tail_and_counts_the_rest(tmp_path):
    code = "import sys; sys.stdout.write('<' + 'a' * 5_000_000 + '>\\nend\\n')"
    out = runner.run([PY, "-c", code], cwd=tmp_path, wall_timeout=60)
    first, second = out.output.split("\n")
    dropped = 5_000_002 + 1 - (runner.LINE_HEAD + runner.LINE_TAIL)  # + the pty's \r
    assert first.startswith("<aaa") and first.endswith("aaa>") and second == "end"
    assert out.dropped_bytes == dropped
    assert f"[... {dropped} bytes of this line dropped ...]" in first
    assert out.duration_s < 20


@pytest.mark.parametrize("shift", range(6))
def test_a_cut_stream_event_stays_readable_wherever_the_cut_falls(tmp_path, shift):
    # A result line over the cap is cut inside its one long string: a cut through `\\"` or
    # `\\n` made the event invalid JSON, and the run's usage and cost were lost.
    from orchestrator.agents import get_agent

    code = (
        "import json, sys\n"
        f"text = 'x' * {shift} + 'print(\"a\")\\n\\tq = \"\\\\\"\\n' * 120_000\n"
        "event = {'type': 'result', 'subtype': 'success', 'is_error': False, 'result': text,"
        " 'total_cost_usd': 0.25, 'usage': {'input_tokens': 1000, 'output_tokens': 7}}\n"
        "sys.stdout.write(json.dumps(event) + '\\n')\n"
    )
    out = runner.run([PY, "-c", code], cwd=tmp_path, wall_timeout=60)
    assert out.dropped_bytes > 0
    result = get_agent("claude", None, check=False).parse(out.output, out.exit_code)
    assert result.cost_usd == 0.25 and result.usage is not None
    assert result.usage.output_tokens == 7


def test_a_cut_between_two_strings_is_left_as_it_is():
    # The tail starting at a string's closing quote: the plain join is valid JSON already,
    # and stripping that quote (as for a quote whose backslash was dropped) broke it.
    head = '{"type": "result", "result": "' + "a" * 10
    line, dropped = runner._joined(head, '", "usage": {"input_tokens": 5}}', 100)
    assert json.loads(line)["usage"] == {"input_tokens": 5} and dropped == 100
    line, dropped = runner._joined(head + "\\", 'n more"}', 100)
    assert json.loads(line)["result"].endswith("dropped ...] n more") and dropped == 101


def test_last_words_after_sigterm_are_kept(tmp_path):
    code = (
        "import signal, sys, time\n"
        "def bye(*a):\n    print('cleaning up', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('started', flush=True)\ntime.sleep(60)\n"
    )
    out = runner.run([PY, "-c", code], cwd=tmp_path, wall_timeout=1.5, grace=3)
    assert out.timed_out == "wall" and out.exit_code == 0
    assert out.output.splitlines() == ["started", "cleaning up"]


def test_pwd_names_the_agents_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PWD", "/somewhere/else")
    work = tmp_path / "work"
    work.mkdir()
    out = runner.run([PY, "-c", "import os; print(os.environ['PWD'])"], cwd=work)
    assert out.output == str(work)


def test_run_agent_redacts_error_texts(tmp_path, monkeypatch):
    import json

    from orchestrator.agents import get_agent

    secret = "sk-ant-api03-" + "Z" * 30
    replay = tmp_path / "replay.jsonl"
    replay.write_text(
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "result": f"Invalid API key {secret} · run /login",
            }
        )
        + "\n"
    )
    bin_dir = tmp_path / "bin"
    install(bin_dir, "claude")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_TRANSCRIPT", str(replay))
    monkeypatch.setenv("FAKE_EXIT", "1")
    prompt = tmp_path / "p.md"
    prompt.write_text("hi")
    shown: list[str] = []
    outcome, result = runner.run_agent(
        get_agent("claude"), prompt, cwd=tmp_path, on_line=shown.append, wall_timeout=30
    )
    assert outcome.exit_code == 1 and result.is_error
    assert secret in outcome.output  # what the adapters parse is untouched
    assert result.error == "Invalid API key [REDACTED] · run /login"
    assert shown == ["✗ error: Invalid API key [REDACTED] · run /login"]


def test_missing_cwd_is_an_error_not_output(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        runner.run(["/bin/true"], cwd=tmp_path / "nope")
