from __future__ import annotations

import pytest

from orchestrator.redact import MASK, Redactor, redact, secret_values


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
