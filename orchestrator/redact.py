"""Remove secrets from text before it reaches our logs and transcripts.

Agents print what they see: environment dumps, config files, curl commands. Three nets:
- known token shapes (Anthropic/OpenAI `sk-...`, GitHub `ghp_...`/`github_pat_...`, AWS access
  keys, Slack, Google API keys, GitLab, npm, JWTs, private-key blocks);
- labelled values: `password=...`, `api_key: ...`, `"client_secret": "..."`, `--token ...`,
  `Authorization: Bearer ...`, `scheme://user:password@host` (the label is kept);
- the exact values of environment variables whose names say they are secret (KEY, TOKEN,
  SECRET, PASSWORD ...), which catches keys of any shape that we know about.

Every file we write under the logs folder goes through here (`write_text`); the user's own
memory files (progress.txt, references) never do: they are the user's, verbatim.

Linear time by construction: a pattern may only start where its token cannot continue from
the left (a lookbehind on the token's own characters), every repeat is possessive or
bounded, and private-key blocks are found with two plain searches, so a 10 MB line of
near-misses costs one pass, not one pass per start position.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from orchestrator import fsutil

MASK = "[REDACTED]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Short values ("1", "true") would mask ordinary words; real secrets are longer.
MIN_SECRET_LEN = 8

_B64 = r"A-Za-z0-9_\-"  # base64url and most token alphabets


def _token(prefix: str, body: str) -> tuple[str, re.Pattern[str]]:
    """(literal, pattern): `prefix` then `body`, only where no token character precedes it.
    The literal comes first so the regex engine can skip ahead to it, and the pattern is
    only run at all when the literal occurs in the text."""
    lookbehind = rf"(?<![{_B64}]{re.escape(prefix)})"
    return prefix, re.compile(re.escape(prefix) + lookbehind + body)


_PATTERNS = [
    *(
        _token(f"sk-{kind}", rf"[{_B64}]{{16,}}+")
        for kind in ("ant-", "proj-", "svcacct-", "admin-", "")
    ),
    *(_token(f"{kind}_", r"[A-Za-z0-9]{30,}+") for kind in ("ghp", "gho", "ghu", "ghs", "ghr")),
    _token("github_pat_", r"[A-Za-z0-9_]{40,}+"),
    _token("AKIA", r"[0-9A-Z]{16}(?![0-9A-Za-z])"),
    _token("ASIA", r"[0-9A-Z]{16}(?![0-9A-Za-z])"),
    *(_token(f"xox{kind}-", r"[A-Za-z0-9\-]{10,}+") for kind in "abprse"),
    _token("AIza", r"[0-9A-Za-z_\-]{35}"),
    _token("glpat-", r"[A-Za-z0-9_\-]{20,}+"),
    _token("npm_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    # JWT: three base64url parts, the first two JSON objects ("eyJ" is '{"').
    _token("eyJ", r"[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]{8,}+"),
]
# An optional quote around a key or value, escaped when the text is JSON (a transcript's
# `"password: \"x\""`) or JSON inside JSON (a tool call's input): up to 7 backslashes.
_QUOTE = r"""(?:\\{0,7}+["'])?"""
# Keep the label, mask the value (group 2).
_KEYS = (
    r"(?:password|passwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey|"
    r"access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|private[_-]?key|"
    r"auth[_-]?token|access[_-]?token|refresh[_-]?token|token|x-api-key|credentials?)"
)
# Matched in ASCII-lowered text: a value needs a letter (`input_tokens: 1234` is a count).
_VALUE = r"""(?!\[redacted\])(?=[^\s"'`,;<>\\]*?[a-z])[^\s"'`,;<>\\]{4,}+"""
_KEY_HINTS = ("pass", "secret", "key", "token", "credential")
# (hints, pattern): the pattern runs only when one hint occurs in the ASCII-lowered text.
_LABELLED = [
    (("bearer",), re.compile(r"(\bbearer[ \t]++)([a-z0-9._~+/=\-]{8,}+)")),
    (
        ("authorization",),
        re.compile(
            r"(\bauthorization[\"']?[ \t]*+:[ \t]*+[\"']?(?:basic|token)[ \t]++)"
            r"([a-z0-9._~+/=\-]{8,}+)"
        ),
    ),
    # key=value, key: value, "key": "value", key = 'value' (JSON, YAML, env files, INI).
    # The key may carry a prefix (DB_PASSWORD, github_token) but nothing after the keyword:
    # `max_tokens: 4096` and `tokenizer: x` are not secrets.
    (
        _KEY_HINTS,
        re.compile(
            rf"""({_KEYS}{_QUOTE}[ \t]{{0,4}}+(?:=|:(?!//))[ \t]{{0,4}}+{_QUOTE})({_VALUE})"""
        ),
    ),
    # Command-line flags: --password hunter2, --api-key=...; -p is too ambiguous to take.
    (_KEY_HINTS, re.compile(rf"(--{_KEYS}(?:=|[ \t]++))({_VALUE})")),
    # scheme://user:password@host (the scheme is left as it is)
    (
        ("://",),
        re.compile(r"(://(?<=[A-Za-z0-9]://)[^\s/:@]{0,200}+:)([^\s/@]{1,200}+)(?=@)"),
    ),
]
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")
# Values a labelled pattern found and that are long enough to mask wherever they reappear.
_LEARN_MIN = 8


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables in env (default: os.environ), longest first."""
    source = os.environ if env is None else env
    values = {v for k, v in source.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _mask_pem(text: str) -> str:
    """Private-key blocks -> MASK; an unterminated block is masked to the end (a key cut
    short is still a key)."""
    out: list[str] = []
    pos = 0
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        out.append(text[pos : begin.start()])
        out.append(MASK)
        end = _PEM_END.search(text, begin.end())
        if end is None:
            return "".join(out)
        pos = end.end()
    out.append(text[pos:])
    return "".join(out)


def _shapes(text: str, learned: set[str] | None = None) -> str:
    text = _mask_pem(text)
    for literal, pattern in _PATTERNS:
        if literal in text:
            text = pattern.sub(MASK, text)
    lowered = text.translate(_ASCII_LOWER)  # same length: str.lower() may change it

    for hints, pattern in _LABELLED:
        if any(h in lowered for h in hints):
            text, lowered = _mask_values(text, lowered, pattern, learned)
    return text


def _mask_values(
    text: str, lowered: str, pattern: re.Pattern[str], learned: set[str] | None
) -> tuple[str, str]:
    """Mask group 2 of each match of `pattern` found in `lowered` (the ASCII-lowered `text`,
    same length): a case-sensitive search is several times faster than IGNORECASE."""
    out: list[str] = []
    low: list[str] = []
    pos = 0
    for m in pattern.finditer(lowered):
        start, end = m.span(2)
        value = text[start:end]
        if learned is not None and len(value) >= _LEARN_MIN:
            learned.add(value)
        out += (text[pos:start], MASK)
        low += (lowered[pos:start], MASK.lower())
        pos = end
    if not out:
        return text, lowered
    out.append(text[pos:])
    low.append(lowered[pos:])
    return "".join(out), "".join(low)


def _values(text: str, values: Iterable[str]) -> str:
    for value in values:
        if value and value in text:
            text = text.replace(value, MASK)
    return text


def redact(text: str, env: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> str:
    """`text` with secrets replaced by [REDACTED]. env defaults to os.environ."""
    learned: set[str] = set()
    text = _shapes(_values(text, [*secret_values(env), *extra]), learned)
    # A password seen once as `password=x` is masked where it reappears bare (`echo x`).
    return _values(text, sorted(learned, key=len, reverse=True))


class Redactor:
    """Redaction for a stream of lines (a transcript): the environment's secret values are
    computed once, values found behind a label are remembered for later lines, and a
    private-key block spanning lines is masked from its BEGIN line to its END line."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.values = secret_values(env)
        self.learned: set[str] = set()
        self.in_pem = False

    def __call__(self, text: str) -> str:
        if self.in_pem:
            end = _PEM_END.search(text)
            if end is None:
                return MASK
            self.in_pem = False
            text = MASK + text[end.end() :]
        begins = list(_PEM_BEGIN.finditer(text))
        if begins and _PEM_END.search(text, begins[-1].end()) is None:
            self.in_pem = True
        learned: set[str] = set()
        text = _shapes(_values(text, self.values), learned)
        self.learned |= learned
        known = sorted(self.learned, key=len, reverse=True)
        return _values(text, known) if known else text


def write_text(path: Path, text: str, env: Mapping[str, str] | None = None) -> None:
    """Write a file of ours (a log, a prompt copy, a report) atomically, secrets masked."""
    fsutil.atomic_write_text(path, redact(text, env))


def rewrite(path: Path, env: Mapping[str, str] | None = None) -> None:
    """Redact a file we let another process write (an A/B arm's console log) in place."""
    path = Path(path)
    if path.is_file():
        text = fsutil.read_text(path)
        masked = redact(text, env)
        if masked != text:
            fsutil.atomic_write_text(path, masked)
