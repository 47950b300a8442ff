"""Remove secrets from text before it reaches our logs and transcripts.

Agents print what they see: environment dumps, config files, curl commands. Three nets:
- known token shapes (Anthropic/OpenAI `sk-...`, GitHub `ghp_...`/`github_pat_...`, AWS access
  keys, Slack, Google API keys, GitLab, npm, Stripe `sk_live_...`/`rk_live_...`, Hugging Face
  `hf_...`, JWTs, private-key blocks, PGP private-key blocks included);
- labelled values: `password=...`, `api_key: ...`, `"client_secret": "..."`, `--token ...`,
  `Authorization: Bearer ...`, `scheme://user:password@host` (the label is kept);
- the exact values of environment variables whose names say they are secret (KEY, TOKEN,
  SECRET, PASSWORD ...), which catches keys of any shape that we know about.

Every file we write under the logs folder goes through here (`write_text`); the user's own
memory files (progress.txt, references) never do: they are the user's, verbatim.

A value found behind a label is remembered for the rest of the process (`_MEMORY`): an agent
that printed `AWS_SECRET_ACCESS_KEY=wJalr...` in a tool result and the bare `wJalr...` in its
final message has that value masked in the ledger, the console and every file written after,
not only in the transcript where it was first seen.

A private-key block whose END never comes is masked to the end of the text, except when its
BEGIN sits in a JSON object line (a stream event): there the block cannot go on past that
JSON string, so it is masked to the string's closing quote and the line stays valid JSON.

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
    """(literal, pattern): `prefix` then `body`, only where no token character precedes it,
    or a JSON escape does (`\\n` in a stream line's string: a token at the start of a line of
    a tool result). The literal comes first so the regex engine can skip ahead to it, and the
    pattern is only run at all when the literal occurs in the text."""
    lit = re.escape(prefix)
    lookbehind = rf"(?:(?<![{_B64}]{lit})|(?<=\\[nrt]{lit}))"
    return prefix, re.compile(lit + lookbehind + body)


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
    # Stripe secret and restricted keys (gitleaks' stripe-access-token): the random part is
    # 24 to 99 base62 characters; 20 at least and no `_` after it, so an identifier such as
    # `sk_test_helper` or `sk_live_mode_enabled` is not a key.
    *(
        _token(f"{kind}_{env}_", r"[A-Za-z0-9]{20,}+(?!_)")
        for kind in ("sk", "rk")
        for env in ("live", "test")
    ),
    # Hugging Face access tokens: `hf_` and 34 letters (gitleaks: huggingface-access-token);
    # digits allowed, 30 at least, so `hf_hub_download` stays.
    _token("hf_", r"[A-Za-z0-9]{30,}+(?!_)"),
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
# PEM (`RSA`, `EC`, `OPENSSH`, `ENCRYPTED` ...) and PGP (`PGP PRIVATE KEY BLOCK`) keys.
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# The rest of a JSON string from inside it: up to (not including) its closing quote.
_JSON_STRING_REST = re.compile(r"(?:[^\"\\\n]++|\\.)*+")
# Values a labelled pattern found and that are long enough to mask wherever they reappear.
_LEARN_MIN = 8
# At most this many remembered values (each costs one substring search per text redacted).
_MEMORY_MAX = 1000


class _Memory:
    """Values learned behind a label, for the rest of the process, longest first."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.ordered: list[str] = []

    def add(self, values: set[str]) -> None:
        new = values - self.values
        if new and len(self.values) < _MEMORY_MAX:
            self.values |= set(sorted(new)[: _MEMORY_MAX - len(self.values)])
            self.ordered = sorted(self.values, key=len, reverse=True)

    def clear(self) -> None:
        self.values, self.ordered = set(), []


_MEMORY = _Memory()


def forget() -> None:
    """Drop the values remembered so far (tests that need a clean process state)."""
    _MEMORY.clear()


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named variables in env (default: os.environ), longest first."""
    source = os.environ if env is None else env
    values = {v for k, v in source.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def _mask_pem(text: str) -> tuple[str, bool]:
    """(text with private-key blocks -> MASK, whether the last block is still open).

    An unterminated block is masked to the end (a key cut short is still a key), unless its
    BEGIN is inside a JSON object line: then to the end of that JSON string. Each character
    is scanned a bounded number of times, whatever the number of BEGINs."""
    out: list[str] = []
    pos = 0
    lines = _LineSpans(text)
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        out.append(text[pos : begin.start()])
        out.append(MASK)
        stop = lines.json_string_end(begin.start(), begin.end())
        end = _PEM_END.search(text, begin.end(), len(text) if stop is None else stop)
        if end is not None:
            pos = end.end()
        elif stop is None:
            return "".join(out), True
        else:
            pos = stop
    out.append(text[pos:])
    return "".join(out), False


class _LineSpans:
    """Which line of `text` a position is on, and whether that line is a JSON object (a
    stream event); the last line is remembered, so many BEGINs on one line cost one scan."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.start = self.end = -1
        self.is_json = False

    def json_string_end(self, at: int, after: int) -> int | None:
        """Where the JSON string holding position `at` ends (its closing quote, or the end
        of the line), scanning from `after`; None when `at` is not on a JSON object line."""
        if not self.start <= at < self.end:
            text = self.text
            self.start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            self.end = len(text) if end < 0 else end
            line = text[self.start : self.end].strip()
            self.is_json = line.startswith("{") and line.endswith("}")
        if not self.is_json:
            return None
        rest = _JSON_STRING_REST.match(self.text, after, self.end)
        return rest.end() if rest is not None else self.end


def _is_json_line(text: str) -> bool:
    line = text.strip()
    return line.startswith("{") and line.endswith("}")


def _shapes(text: str, learned: set[str] | None = None) -> str:
    """Token shapes and labelled values (private-key blocks are masked before)."""
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


def _known(text: str, learned: set[str], remember: bool = False) -> str:
    """`text` with this text's learned values and the process's remembered ones masked.
    Only an agent's stream (`Redactor`) adds to the memory, and only values that look like
    secrets: `redact()` also reads the user's references (`password: required`), whose
    placeholders would otherwise be masked in every later line of the run."""
    if remember:
        _MEMORY.add({v for v in learned if _worth_remembering(v)})
    text = _values(text, sorted(learned - _MEMORY.values, key=len, reverse=True))
    return _values(text, _MEMORY.ordered)


def _worth_remembering(value: str) -> bool:
    """A value with a digit that is no placeholder (`$TOKEN`, `<key>`, `YOUR_TOKEN_1`,
    `process.env.X`): `required`, `undefined`, `changeme` name no secret."""
    return any(c.isdigit() for c in value) and not value.startswith(
        ("$", "<", "{", "%", "YOUR_", "your_", "process.env")
    )


def redact(text: str, env: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> str:
    """`text` with secrets replaced by [REDACTED]. env defaults to os.environ."""
    return _redact_text(text, [*secret_values(env), *extra])


def _redact_text(text: str, values: Iterable[str]) -> str:
    learned: set[str] = set()
    text, _open = _mask_pem(_values(text, values))
    text = _shapes(text, learned)
    # A password seen once as `password=x` is masked where it reappears bare (`echo x`).
    return _known(text, learned)


class Redactor:
    """Redaction for a stream of lines (a transcript): the environment's secret values are
    computed once, values found behind a label are remembered (for the whole process), and
    a private-key block spanning lines is masked from its BEGIN line to its END line.

    `text()` redacts one text on its own (an error message, a display line): it uses the
    same values but neither reads nor changes the stream's private-key state."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.values = secret_values(env)
        self.in_pem = False

    def __call__(self, text: str) -> str:
        if self.in_pem:
            # A stream event is never part of a key: the block ended without its END line.
            if _is_json_line(text):
                self.in_pem = False
            else:
                end = _PEM_END.search(text)
                if end is None:
                    return MASK
                self.in_pem = False
                text = MASK + text[end.end() :]
        learned: set[str] = set()
        text, self.in_pem = _mask_pem(_values(text, self.values))
        return _known(_shapes(text, learned), learned, remember=True)

    def text(self, text: str) -> str:
        return _redact_text(text, self.values)


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
