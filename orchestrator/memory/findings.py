"""One finding about Ralph's files, shared by the post-story checks (`run/checks.py`) and
`ralph check` (`upkeep/audit.py`): what kind it is, how bad, what is wrong, how to fix it,
and where (a root-relative file, a 1-based line when there is one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: Severity
    message: str
    fix: str = ""
    file: str | None = None
    line: int | None = None

    def format(self) -> str:
        """`ralph check`'s line: `file:line: message (fix: ...) [kind]`."""
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message} (fix: {self.fix}) [{self.kind}]"

    def to_dict(self) -> dict[str, Any]:
        """The ledger's form (`checks.findings[]`): the file is written as `path`, and a
        line only when there is one, so records stay as they always were."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "path": self.file,
        }
        if self.line is not None:
            out["line"] = self.line
        return out
