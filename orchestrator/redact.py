"""Remove secrets from text before it reaches our logs and transcripts.

Agents print what they see: environment dumps, config files, curl commands. Two nets:
known token shapes (Anthropic/OpenAI `sk-...`, GitHub `ghp_...`/`github_pat_...`, AWS access
keys, Slack tokens, Google API keys, `Authorization: Bearer ...`, private-key blocks), and the
exact values of environment variables whose names say they are secret (KEY, TOKEN, SECRET,
PASSWORD ...), which catches keys of any shape that we know about.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

MASK = "[REDACTED]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Short values ("1", "true") would mask ordinary words; real secrets are longer.
MIN_SECRET_LEN = 8

_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
]
# Keep the label, mask the value: "Bearer abc" -> "Bearer [REDACTED]".
_LABELLED = [
    re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE),
    re.compile(
        r"((?:aws_secret_access_key|secret_access_key)\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}",
        re.IGNORECASE,
    ),
    re.compile(
        r"((?:x-api-key|api[_-]?key)\"?\s*[=:]\s*[\"']?)[A-Za-z0-9._\-]{12,}", re.IGNORECASE
    ),
]


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables in env (default: os.environ), longest first."""
    source = os.environ if env is None else env
    values = {v for k, v in source.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> str:
    """`text` with secrets replaced by [REDACTED]. env defaults to os.environ."""
    for value in [*secret_values(env), *extra]:
        if value and value in text:
            text = text.replace(value, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    for pattern in _LABELLED:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


class Redactor:
    """Redaction with the secret values computed once (for line-by-line transcripts)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.values = secret_values(env)

    def __call__(self, text: str) -> str:
        return redact(text, env={}, extra=self.values)
