"""Tell a condensed reference from a wiped one.

References are memory like the log, but unlike the log they may be rewritten: the template
asks the agent to condense a reference (facts kept, shorter wording). So "fewer lines" alone
is no loss. What makes a text specific is its distinctive terms (identifiers, paths,
commands, numbers, long words; see `distinctive_terms`): a fact cannot be kept without its
names. A rewrite is a loss (`assess` returns a `Loss`) when:

- under half of the old content lines remain and under half of the old terms occur in the
  new text (a wipe: a title and "(nothing)" instead of 32 learnings), or
- the lines are there but under half of the old bytes, with under a quarter of the old
  terms (every line blanked or replaced by a word).

Condensing keeps most terms, so it passes even at a third of the length: on 92 references
made by `ralph migrate` from 6 corpus histories, bullets joined, tags and filler dropped and
every bullet cut to its first clause (a 65% cut) is never taken for a wipe, and a title plus
"(nothing)" always is (tests/adversarial/test_memory_safety.py). Small
references (fewer than MIN_LINES content lines) are never judged: too little to tell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_LINES = 3
SHRINK = 0.5  # under this share of old lines (or bytes) left: "shrank a lot"
KEPT = 0.5  # under this share of old distinctive terms left, with the lines gone
KEPT_BYTES = 0.25  # ... with only the bytes gone (lines kept but emptied)

# A token: a word possibly joined by . _ / - : (paths, identifiers, versions, flags).
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:-]*[A-Za-z0-9_]|[A-Za-z0-9_]")
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2,}")
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_STOP = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "always",
        "because",
        "before",
        "being",
        "between",
        "cannot",
        "could",
        "during",
        "either",
        "every",
        "further",
        "having",
        "instead",
        "itself",
        "should",
        "something",
        "through",
        "together",
        "whether",
        "which",
        "while",
        "within",
        "without",
        "would",
        "update",
        "updated",
        "change",
        "changed",
        "changes",
        "using",
        "learnings",
        "learning",
        "important",
        "remember",
        "already",
        "another",
    ]
)


@dataclass(frozen=True)
class Loss:
    old_lines: int
    new_lines: int
    old_terms: int
    kept_terms: int

    def describe(self) -> str:
        return (
            f"{self.new_lines} of {self.old_lines} content lines and "
            f"{self.kept_terms} of {self.old_terms} distinctive terms left"
        )


def content_lines(text: str) -> list[str]:
    """Lines that carry something: not blank, not a separator, not the `# Title` line."""
    out = []
    for line in text.splitlines():
        body = line.strip()
        if not body or body in ("---", "***", "___") or re.fullmatch(r"#\s+.*", body):
            continue
        out.append(body)
    return out


def _distinctive(token: str) -> bool:
    if any(c in token for c in "._/:-") or any(c.isdigit() for c in token):
        return len(token) >= 3
    if _CAMEL.search(token):
        return True
    return len(token) >= 8 and token.lower() not in _STOP


def distinctive_terms(text: str) -> set[str]:
    """Lower-cased terms that make the text specific: backticked spans, identifiers and
    paths, CamelCase names, numbers, and long words outside a small stop list. When a text
    has fewer than 4 such terms, every word of 5+ letters counts instead."""
    terms = {m.group(1).strip().lower() for m in _BACKTICK.finditer(text)}
    tokens = _TOKEN.findall(text)
    terms |= {t.strip("./:-").lower() for t in tokens if _distinctive(t)}
    terms.discard("")
    if len(terms) < 4:
        terms |= {t.lower() for t in tokens if len(t) >= 5 and t.lower() not in _STOP}
    return terms


def assess(old: str, new: str) -> Loss | None:
    """A Loss when `new` wiped `old` rather than condensing it (module doc); else None."""
    if new == old:
        return None  # most references are untouched by an iteration
    before = content_lines(old)
    if len(before) < MIN_LINES:
        return None
    after = content_lines(new)
    lines_gone = len(after) < SHRINK * len(before)
    bytes_gone = len(new.encode()) < SHRINK * len(old.encode())
    if not (lines_gone or bytes_gone):
        return None  # before the terms: most references did not shrink at all
    terms = distinctive_terms(old)
    if not terms:
        return None
    haystack = new.lower()
    kept = sum(1 for t in terms if t in haystack)
    share = kept / len(terms)
    if (lines_gone and share < KEPT) or (bytes_gone and share < KEPT_BYTES):
        return Loss(len(before), len(after), len(terms), kept)
    return None
