from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import iterations, make_project, ralph

from orchestrator.redact import MASK, Redactor, forget, redact, secret_values

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
from install import install  # noqa: E402


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-" + "A1b2C3d4" * 6,
        "sk-proj-" + "Zz09" * 10,
        "sk-" + "a" * 40,
        "ghp_" + "A" * 36,
        "github_pat_" + "11ABCDEFG0" * 5,
        "AKIAIOSFODNN7EXAMPLE",
        "xoxb-1234567890-abcdefghij",
        "AIza" + "B" * 35,
        "glpat-" + "c" * 20,
    ],
)
def test_known_token_shapes(secret):
    out = redact(f"export X={secret} # trailing", env={})
    assert secret not in out and MASK in out and out.endswith("# trailing")


def test_labelled_values_keep_their_label():
    text = (
        'curl -H "Authorization: Bearer abcdef123456.xyz" -H "x-api-key: 0123456789abcdef"\n'
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    )
    out = redact(text, env={})
    assert "Bearer [REDACTED]" in out and "abcdef123456" not in out
    assert "x-api-key: [REDACTED]" in out and "0123456789abcdef" not in out
    assert "wJalrXUtnFEMI" not in out and "aws_secret_access_key = [REDACTED]" in out


def test_private_key_block():
    text = (
        "a\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz\naGtleQ==\n"
        "-----END OPENSSH PRIVATE KEY-----\nz"
    )
    assert redact(text, env={}) == f"a\n{MASK}\nz"


def test_secret_named_env_values_of_any_shape():
    env = {
        "DB_PASSWORD": "hunter2-correct-horse",
        "MY_API_KEY": "plain-looking-value",
        "GH_TOKEN": "short",
        "HOME": "/root/home-dir",
        "CLIENT_SECRET": "s3cr3t-v4lue",
    }
    text = (
        "pw hunter2-correct-horse key plain-looking-value tok short home /root/home-dir "
        "s3cr3t-v4lue"
    )
    out = redact(text, env=env)
    assert out == f"pw {MASK} key {MASK} tok short home /root/home-dir {MASK}"
    assert "short" not in secret_values(env)  # too short to mask safely


def test_ordinary_text_is_untouched():
    text = (
        "Implemented US-001: sk-style naming, task-list and the risk-assessment module.\n"
        "git commit -m 'feat: tokens' && pytest -q  # 12 passed"
    )
    assert redact(text, env={}) == text


def test_redactor_uses_process_env(monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", "zzz-from-environment-1")
    r = Redactor()
    assert r("value zzz-from-environment-1 here") == f"value {MASK} here"


# ---------------------------------------------------------------------------- more shapes
STRIPE_LIVE = "sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefGHIJ"
HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
PGP_BODY = "lQOYBF0secretPGPbodyQx7Zk9aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT2uV3wX4yZ"


@pytest.mark.parametrize(
    "secret",
    [
        STRIPE_LIVE,
        "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "rk_live_" + "51HxYzAbCdEfGh0123456789",
        "rk_test_" + "51HxYzAbCdEfGh0123456789",
        HF_TOKEN,
        "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH",
    ],
)
def test_stripe_and_hugging_face_tokens(secret):
    out = redact(f"export X={secret} # trailing", env={})
    assert secret not in out and out == f"export X={MASK} # trailing"


def test_pgp_private_key_block():
    text = (
        f"a\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=abcd\n"
        "-----END PGP PRIVATE KEY BLOCK-----\nz"
    )
    assert redact(text, env={}) == f"a\n{MASK}\nz"
    # A public key block is not a secret.
    public = "-----BEGIN PGP PUBLIC KEY BLOCK-----\nmQINBF\n-----END PGP PUBLIC KEY BLOCK-----"
    assert redact(public, env={}) == public


@pytest.mark.parametrize(
    "text",
    [
        "def sk_test_helper(): return sk_live_mode_enabled and rk_test_fixture",
        "stripe_client(settings.sk_test_key)  # sk_live_ keys go in the vault",
        "from huggingface_hub import hf_hub_download; hf_transfer = hf_token_path",
        "sk_test_shortvalue12 and hf_AbCdEfGhIjKlMnOp",  # too short for a key
        "sk_test_helperfunctionforpayments_v2",  # an identifier: `_` after the letters
    ],
)
def test_identifiers_like_the_new_shapes_are_left_alone(text):
    assert redact(text, env={}) == text


def test_token_after_a_json_newline_escape():
    """In a stream line a tool result's lines are joined by `\\n` (a backslash and an `n`):
    a token that starts such a line is preceded by a letter, and is still a token."""
    line = json.dumps({"content": f"x\nAKIAIOSFODNN7EXAMPLE\nghp_{'A1' * 18}\n{STRIPE_LIVE}"})
    out = redact(line, env={})
    assert json.loads(out) == {"content": f"x\n{MASK}\n{MASK}\n{MASK}"}


# ---------------------------------------------------------------------------- key blocks
def test_unterminated_key_in_a_json_line_masks_that_string_only():
    r = Redactor(env={})
    event = {
        "type": "user",
        "content": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1\nMIIEowIBAAKCAQEA2",
        "after": "kept",
    }
    out = r(json.dumps(event))
    assert json.loads(out) == {**event, "content": MASK}
    assert r('{"type": "assistant", "text": "Key looks fine"}') == (
        '{"type": "assistant", "text": "Key looks fine"}'
    )
    # JSON inside a JSON string (a tool input holding JSON): the outer string ends the block.
    inner = json.dumps({"k": "-----BEGIN PRIVATE KEY-----\nMIIE"})
    out = json.loads(r(json.dumps({"input": inner, "n": 1})))
    assert out == {"input": '{"k": "' + MASK, "n": 1}


def test_multi_line_key_in_plain_output_is_still_masked():
    r = Redactor(env={})
    lines = ["ok", "-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNz", "aGtleQ=="]
    lines += ["-----END OPENSSH PRIVATE KEY-----", "after"]
    assert [r(ln) for ln in lines] == ["ok", MASK, MASK, MASK, MASK, "after"]
    # A block whose END never comes runs until the next stream event (never part of a key).
    assert [r(ln) for ln in ["-----BEGIN EC PRIVATE KEY-----", "MHcCAQEE", '{"a": 1}']] == [
        MASK,
        MASK,
        '{"a": 1}',
    ]


def test_redactor_text_ignores_the_streams_open_block():
    r = Redactor(env={})
    assert r("-----BEGIN RSA PRIVATE KEY-----") == MASK
    assert r.text("agent failed: overloaded") == "agent failed: overloaded"
    assert r("MIIEowIBAAKCAQEA1") == MASK  # the stream's block is still open


def test_a_learned_value_is_masked_by_every_redaction_after():
    """`AWS_SECRET_ACCESS_KEY=v` seen once in a transcript: the ledger's, the log's and the
    console's redaction mask the bare `v` too."""
    value = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYLEARNED01"
    try:
        assert redact(f"final: {value}", env={}) == f"final: {value}"
        Redactor(env={})(json.dumps({"content": f"AWS_SECRET_ACCESS_KEY={value}\nX=1"}))
        assert redact(f"final: {value}", env={}) == f"final: {MASK}"
        assert Redactor(env={}).text(f"error {value}") == f"error {MASK}"
    finally:
        forget()


def test_placeholders_and_the_users_own_text_teach_nothing():
    # A reference's `password: required` (read by redact() to keep it out of our cache)
    # and an agent's `api_key: undefined` made "required"/"undefined" [REDACTED] in every
    # later line of the run: story titles in the ledger, console lines, transcripts.
    try:
        assert redact("- [US-3] password: required (schema)", env={}).endswith(f"{MASK} (schema)")
        stream = Redactor(env={})
        stream("api_key: undefined --token YOUR_TOKEN_HERE1 secret=$API_SECRET9")
        line = "Make the email field required; undefined is YOUR_TOKEN_HERE1 or $API_SECRET9"
        assert redact(line, env={}) == line
        assert stream(line) == line
        stream("password=hunter2hunter2")  # a value with a digit: a secret, remembered
        assert redact("echo hunter2hunter2", env={}) == f"echo {MASK}"
    finally:
        forget()


LINEAR = r"""
import json, sys
from orchestrator.redact import Redactor, redact
unit = ('sk_live_ hf_ rk_test_ sk-ant- ghp_ \\nAKIA password=1 api_key: 2 https://a: '
        'Bearer --token -----BEGIN RSA PRIVATE KEY----- -----BEGIN PGP PRIVATE KEY BLOCK-----\\n')
text = unit * (1_000_000 // len(unit))
line = json.dumps({"type": "user", "content": text})
out = Redactor(env={})(line)
content = json.loads(out)["content"]  # the first BEGIN masks the rest of the string
assert content == unit[: unit.index("-----BEGIN")] + "[REDACTED]", content[:300]
# Many unterminated blocks on one line, each in its own string: one scan of the line each.
keys = ["-----BEGIN RSA PRIVATE KEY-----MIIE"] * (1_000_000 // 40)
out = Redactor(env={})(json.dumps({"type": "user", "content": keys}))
assert json.loads(out)["content"] == ["[REDACTED]"] * len(keys)
plain = redact(text.replace("-----BEGIN", "BEGIN"), env={})
assert plain.count("[REDACTED]") >= text.count("password=1") // 2
print("ok", len(line))
"""


def test_a_1mb_line_of_near_misses_is_redacted_in_linear_time():
    """Every shape's prefix and unterminated key blocks, back to back in one stream line:
    a quadratic pass would take minutes; the bound is generous for a shared machine."""
    proc = subprocess.run(
        [sys.executable, "-c", LINEAR], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stderr


# ---------------------------------------------------------------------------- through `ralph run`
# A real `ralph run` with a fake `claude` (tests/fakes) replaying a stream-json transcript.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GHP = "ghp_1234567890abcdefghijABCDEFGHIJ123456"


def _event(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, **fields, "session_id": "s-1"})


def _assistant(*blocks: dict) -> str:
    return _event("assistant", message={"role": "assistant", "content": list(blocks)})


def _tool_result(text: str) -> str:
    block = {"tool_use_id": "t0", "type": "tool_result", "content": text}
    return _event("user", message={"role": "user", "content": [block]})


def _result(text: str, *, is_error: bool) -> str:
    usage = {"input_tokens": 100, "output_tokens": 10}
    return _event("result", subtype="success", is_error=is_error, result=text, usage=usage)


def _ralph_run(tmp_path: Path, lines: list[str]) -> tuple[str, dict, Path]:
    """(stdout + stderr, the iteration record, the transcript) of `ralph run --tool claude 1`
    whose agent prints `lines`; asserts no Python traceback."""
    bin_dir = tmp_path / "bin"
    install(bin_dir, "claude")
    root = make_project(
        tmp_path / "p", 1, config={"agents": {"claude": {"command": [str(bin_dir / "claude")]}}}
    )
    replay = tmp_path / "stream.jsonl"
    replay.write_text("\n".join(lines) + "\n")
    proc = ralph(root, "run", "--tool", "claude", "1", FAKE_TRANSCRIPT=str(replay))
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    [rec] = iterations(root)
    return out, rec, root / rec["transcript"]


def _files_under_logs(transcript: Path) -> str:
    logs = transcript.parents[1]
    return "".join(f.read_text(errors="replace") for f in logs.rglob("*") if f.is_file())


def test_run_masks_new_shapes_and_learned_values_in_ledger_console_and_logs(tmp_path):
    env_file = (
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\nSTRIPE={STRIPE_LIVE}\nHF={HF_TOKEN}\n"
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n-----END PGP PRIVATE KEY BLOCK-----"
    )
    bare = f"{AWS_SECRET} {STRIPE_LIVE} {HF_TOKEN}"
    lines = [
        _assistant(
            {"type": "tool_use", "id": "t0", "name": "Bash", "input": {"command": "cat .env"}}
        ),
        _tool_result(env_file),
        _assistant({"type": "text", "text": f"secret {AWS_SECRET}"}),
        f"warning: plain stderr line with {bare}",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----",
        PGP_BODY,
        "-----END PGP PRIVATE KEY BLOCK-----",
        _result(f"Done. For reference: {bare}", is_error=True),
    ]
    out, rec, transcript = _ralph_run(tmp_path, lines)
    assert rec["error"] == f"Done. For reference: {MASK} {MASK} {MASK}"
    assert f"warning: plain stderr line with {MASK} {MASK} {MASK}" in out
    logs = _files_under_logs(transcript)
    for value in (AWS_SECRET, STRIPE_LIVE, HF_TOKEN, PGP_BODY):
        assert value not in out and value not in logs, value


def test_run_redacts_live_lines_before_shortening_them(tmp_path):
    """The display shortens to 100 characters; the token straddles the cut."""
    text = (
        f"Set the CI secret GITHUB_TOKEN in the repo settings to the new one:  {GHP} and redeploy."
    )
    out, _rec, _t = _ralph_run(
        tmp_path, [_assistant({"type": "text", "text": text}), _result("ok", is_error=False)]
    )
    assert "ghp_1234567890" not in out
    assert f"to the new one: {MASK} and redeploy." in out


def test_run_key_block_in_a_display_line_leaves_later_lines_and_the_error(tmp_path):
    key = "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
    lines = [
        _assistant({"type": "text", "text": f"A fixture key ({key} -----END PRIVATE KEY-----)."}),
        _assistant({"type": "text", "text": "Now running the tests."}),
        _result("API Error: 529 overloaded", is_error=True),
    ]
    out, rec, _t = _ralph_run(tmp_path, lines)
    assert "MIIEvQIBADANBgkq" not in out
    assert f"assistant: A fixture key ({MASK})." in out
    assert "assistant: Now running the tests." in out
    assert "last: failed (exit 0) API Error: 529 overloaded." in out, out
    assert rec["error"] == "API Error: 529 overloaded"


def test_run_unterminated_key_in_a_tool_result_masks_only_that_result(tmp_path):
    """`head -3 key.pem`: a key with no END line inside one stream line."""
    head = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1\nMIIEowIBAAKCAQEA2"
    lines = [
        _tool_result(head),
        _assistant({"type": "text", "text": "Key looks fine, moving on."}),
        _result("US-001 done.", is_error=False),
    ]
    _out, _rec, transcript = _ralph_run(tmp_path, lines)
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert events[0]["message"]["content"][0]["content"] == MASK
    assert events[1:] == [json.loads(line) for line in lines[1:]]
    assert "MIIEowIBAAKCAQEA" not in transcript.read_text()


@pytest.fixture(autouse=True)
def _forget_learned_values():
    """Values these tests teach the process are dropped after each, so no other test in this
    process sees them masked."""
    yield
    forget()


def test_run_error_shortened_from_output_never_ends_on_half_a_token(tmp_path):
    """No result line: the error quotes the last plain line, shortened to 300 characters.
    The cut would fall inside the token: it is redacted first, so none of it is kept."""
    plain = "fatal: " + "x " * 131 + GHP + " end"
    _out, rec, _t = _ralph_run(tmp_path, [plain])
    assert rec["error"].startswith("claude produced no result line: fatal: x x")
    assert rec["error"].endswith(f"x {MASK} end") and "ghp_" not in rec["error"]
