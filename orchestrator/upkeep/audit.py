"""The findings engine behind `ralph check`: is the indexed memory consistent?

It reads progress.txt's `## Progress Index` and `## Archived` tables with line numbers (so a
finding can point at the line to fix) and the references folder, and reports: malformed
tables, rows whose file is missing, files no row names, paths escaping the folder, duplicate
and near-duplicate topics, references over `references.max_tokens`, log entries without a
story id, and an interrupted compact/migrate apply. It never writes.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import fsutil, tokens
from orchestrator.errors import FatalError, PathEscapeError
from orchestrator.memory import journal
from orchestrator.memory.markdown import sections
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import extract_story_ids, looks_like_entry

INDEX_HEADING = "## Progress Index"
ARCHIVED_HEADING = "## Archived"
HISTORY_HEADING = "## Migrated History"
_RESERVED = ("## progress index", "## archived", "## codebase patterns", "## migrated history")
_SEPARATOR = re.compile(r"^:?-{3,}:?$")
_NEAR = 0.85  # difflib ratio between two words that counts as the same word (typos)


@dataclass(frozen=True)
class Row:
    topic: str
    path: str
    line: int  # 1-based line in progress.txt
    archived: bool = False
    extra_cells: bool = False  # `| topic | path | note |`: read, but never rewritten


@dataclass(frozen=True)
class Finding:
    kind: str
    file: str
    line: int | None
    message: str
    fix: str

    def format(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message} (fix: {self.fix}) [{self.kind}]"


# ---------------------------------------------------------------- parsing helpers


def split_row(line: str) -> list[str] | None:
    """Cells of a markdown table line (`\\|` is a literal bar), or None if it is not one."""
    s = line.strip()
    if not s.startswith("|"):
        return None
    cells = re.split(r"(?<!\\)\|", s.strip("|") if s.endswith("|") and len(s) > 1 else s[1:])
    return [c.strip().replace("\\|", "|") for c in cells]


def is_reserved(heading: str) -> bool:
    return heading.strip().lower().startswith(_RESERVED)


def is_log_section(heading: str) -> bool:
    """A narrative log entry (rotated by compact, expected to carry a story id)."""
    if is_reserved(heading):
        return False
    return looks_like_entry(heading)


def story_ids(heading: str) -> list[str]:
    return extract_story_ids(heading)


def norm_topic(topic: str) -> str:
    """Lower case words, plural 's' dropped: 'Auth Flows' and 'auth-flow' are the same."""
    words = re.findall(r"[a-z0-9]+", topic.lower())
    return " ".join(
        w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words
    )


_PART = re.compile(r"^(.*), (\S+)(?: to (\S+))?$")


def _parts_of_one_topic(a: str, b: str) -> bool:
    """ "Auth, US-001 to US-009" and "Auth, US-010 to US-020" are consecutive parts of one
    topic that migrate split to respect the size cap: distinct on purpose, not duplicates."""
    ma, mb = _PART.match(a), _PART.match(b)
    return bool(
        ma
        and mb
        and ma.group(1) == mb.group(1)
        and ma.group(2) != mb.group(2)
        and re.search(r"\d", ma.group(2))
        and re.search(r"\d", mb.group(2))
    )


def similar(a: str, b: str) -> bool:
    """Same topic in other words: equal after norm_topic, the same words in another order,
    or word-by-word near-equal (typos, plurals), e.g. 'Auth flow' / 'auth-flows'."""
    if _parts_of_one_topic(a, b):
        return False
    na, nb = norm_topic(a).split(), norm_topic(b).split()
    if not na or not nb:
        return False
    if na == nb or sorted(na) == sorted(nb):
        return True
    return len(na) == len(nb) and all(_same_word(x, y) for x, y in zip(na, nb, strict=True))


def _same_word(x: str, y: str) -> bool:
    if x == y:
        return True
    if min(len(x), len(y)) < 5:  # short words: one letter changes the meaning (pass/past)
        return False
    sm = difflib.SequenceMatcher(None, x, y)
    return sm.real_quick_ratio() >= _NEAR and sm.quick_ratio() >= _NEAR and sm.ratio() >= _NEAR


def near_duplicate_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(earlier, later) rows whose topics are `similar`."""
    return [(a, b) for i, a in enumerate(rows) for b in rows[i + 1 :] if similar(a.topic, b.topic)]


# ---------------------------------------------------------------- the memory on disk


@dataclass
class MemoryFiles:
    """progress.txt's tables plus access to the references folder, for check and compact."""

    project: Any
    text: str
    rows: list[Row]
    table_problems: list[tuple[int, str]]
    rel_dir: str

    @classmethod
    def load(cls, project: Any) -> MemoryFiles:
        path = Path(project.progress_path)
        text = fsutil.read_text(path) if fsutil.present(path) else ""
        rows, problems = parse_tables(text)
        return cls(project, text, rows, problems, project.references.rel_dir)

    def abs(self, index_path: str) -> Path:
        """The file an index path names; archived paths live under the same folder."""
        return self.project.references.resolve(index_path)

    def read(self, index_path: str) -> str | None:
        try:
            p = self.abs(index_path)
        except PathEscapeError:
            return None
        return fsutil.read_text(p) if fsutil.present(p) else None


def parse_tables(text: str) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows of the index and archived tables, and (line, problem) for malformed lines."""
    lines = text.split("\n")
    rows: list[Row] = []
    problems: list[tuple[int, str]] = []
    for heading, start, end in sections(lines):
        low = heading.lower()
        if not (low.startswith(INDEX_HEADING.lower()) or low.startswith(ARCHIVED_HEADING.lower())):
            continue
        archived = low.startswith(ARCHIVED_HEADING.lower())
        rows_here, probs = _parse_table(lines, start + 1, end, archived)
        rows += rows_here
        problems += probs
    return rows, problems


def _parse_table(lines: list[str], start: int, end: int, archived: bool):
    rows: list[Row] = []
    problems: list[tuple[int, str]] = []
    seen_sep = False
    in_comment = False
    for i in range(start, end):
        ln = lines[i].strip()
        if in_comment or ln.startswith("<!--"):
            in_comment = "-->" not in ln
            continue
        if not ln or ln == "---":
            continue
        cells = split_row(ln)
        if cells is None:
            problems.append((i + 1, "a line inside the table is not a table row"))
            continue
        if all(_SEPARATOR.match(c) for c in cells if c):
            seen_sep = True
            continue
        if cells[0].lower() == "topic" and len(cells) > 1 and cells[1].lower().startswith("ref"):
            continue
        if len(cells) != 2 or not cells[0] or not cells[1]:
            problems.append((i + 1, f"a row needs exactly 2 cells (topic, path), found {cells}"))
            if len(cells) < 2 or not cells[0] or not cells[1]:
                continue
            # Extra cells: the loop and `ralph status` read the first two, so this row still
            # names its reference; dropping it here would call that file an orphan and
            # suggest deleting it.
        if not seen_sep:
            problems.append((i + 1, "the table has no header separator line (|---|---|)"))
            seen_sep = True
        rows.append(Row(cells[0], cells[1].strip("`"), i + 1, archived, len(cells) > 2))
    return rows, problems


# ---------------------------------------------------------------- the checks


def check(project: Any) -> list[Finding]:
    mem = MemoryFiles.load(project)
    prog = project.rel(project.progress_path)
    out: list[Finding] = []
    out += _journal_findings(project)
    out += [
        Finding(
            "malformed-table",
            prog,
            n,
            why,
            "write rows as `| Topic | path |` under the "
            "`| Topic | Reference Path |` header and `|---|---|` line",
        )
        for n, why in mem.table_problems
    ]
    out += _row_findings(mem, prog)
    out += _folder_findings(mem)
    out += _orphan_findings(mem)
    out += _duplicate_findings(mem, prog)
    out += _size_findings(mem)
    out += _log_findings(mem, prog)
    out += _always_findings(mem)
    return out


def _always_findings(mem: MemoryFiles) -> list[Finding]:
    """references.always naming no live row would silently select nothing."""
    project = mem.project
    live = [r for r in mem.rows if not r.archived]
    names = {norm_topic(r.topic) for r in live} | {norm_topic(Path(r.path).stem) for r in live}
    where = project.rel(project.config_path) if project.config_path else "ralph.yaml"
    return [
        Finding(
            "unknown-always",
            where,
            None,
            f"references.always names {topic!r}, which no Progress Index row has",
            "add the row or remove the topic from references.always",
        )
        for topic in project.config.references.always
        if norm_topic(topic) not in names
    ]


def _journal_findings(project: Any) -> list[Finding]:
    jdir = journal.pending(project.ralph_dir)
    if jdir is None:
        return []
    return [
        Finding(
            "interrupted-apply",
            project.rel(jdir),
            None,
            "an apply was interrupted; memory files may be half-updated",
            "run `ralph compact --recover` (or `--rollback`)",
        )
    ]


def _row_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    for r in mem.rows:
        try:
            p = mem.abs(r.path)
        except PathEscapeError as exc:
            out.append(
                Finding(
                    "path-escape",
                    prog,
                    r.line,
                    f"row {r.topic!r}: {exc}",
                    f"use a path inside {mem.rel_dir}/",
                )
            )
            continue
        if not p.is_file():
            out.append(
                Finding(
                    "missing-file",
                    prog,
                    r.line,
                    f"row {r.topic!r} points to {r.path}, which does not exist",
                    "create the file or delete the row",
                )
            )
    return out


def _folder_findings(mem: MemoryFiles) -> list[Finding]:
    """A file (or anything else) where the references folder belongs: every reference
    write fails, and the agent's learnings never reach memory."""
    folder = mem.project.references.dir
    if folder.is_dir() or not (folder.exists() or folder.is_symlink()):
        return []
    return [
        Finding(
            "references-not-a-folder",
            mem.rel_dir,
            None,
            "is not a folder, so no reference can be written",
            f"move it away and create the folder: mkdir -p {mem.rel_dir}",
        )
    ]


def _orphan_findings(mem: MemoryFiles) -> list[Finding]:
    named: set[Path] = set()
    for r in mem.rows:
        try:
            named.add(mem.abs(r.path).resolve())
        except PathEscapeError:
            continue
    out: list[Finding] = []
    store = mem.project.references
    for f in store.files():
        if f.resolve() not in named:
            ip = store.index_path_of(f)
            out.append(
                Finding(
                    "orphan-file",
                    ip,
                    None,
                    "no index row names this reference",
                    f"add `| <Topic> | {ip} |` to the Progress Index or delete it",
                )
            )
    return out


def _duplicate_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    seen_path: dict[str, Row] = {}
    for r in mem.rows:
        key = r.path.strip().lstrip("./")
        if key in seen_path:
            first = seen_path[key]
            out.append(
                Finding(
                    "duplicate-path",
                    prog,
                    r.line,
                    f"rows {first.topic!r} (line {first.line}) and {r.topic!r} name "
                    f"the same file {r.path}",
                    "keep one row",
                )
            )
        seen_path.setdefault(key, r)
    # Only rows compact can merge: one with extra cells is reported as malformed first.
    for a, b in near_duplicate_pairs([r for r in mem.rows if not r.archived and not r.extra_cells]):
        kind = "duplicate-topic" if norm_topic(a.topic) == norm_topic(b.topic) else "near-duplicate"
        out.append(
            Finding(
                kind,
                prog,
                b.line,
                f"topic {b.topic!r} duplicates {a.topic!r} (line {a.line})",
                "merge them: `ralph compact --apply`, or rename one",
            )
        )
    return out


def _size_findings(mem: MemoryFiles) -> list[Finding]:
    cap = mem.project.config.references.max_tokens
    out: list[Finding] = []
    for r in mem.rows:
        if r.archived:
            continue
        text = mem.read(r.path)
        if text is not None and (n := tokens.count(text)) > cap:
            out.append(
                Finding(
                    "oversized",
                    r.path,
                    None,
                    f"{n} tokens, over references.max_tokens ({cap})",
                    "condense it (`ralph compact --agent NAME`) or split the topic",
                )
            )
    return out


def _log_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    known = _prd_story_ids(mem.project)
    for heading, start, _end in sections(mem.text.split("\n")):
        if is_reserved(heading) or story_ids(heading) or _names_one_of(heading, known):
            continue
        out.append(
            Finding(
                "entry-without-story",
                prog,
                start + 1,
                f"log entry {heading!r} has no story id",
                "put the story id in the heading, e.g. '## <date> - US-001'",
            )
        )
    return out


def _prd_story_ids(project: Any) -> list[str]:
    """prd.json's story ids: an id the heading pattern cannot recognise (`API/006`) is still
    a story id when prd.json has it. A missing or broken prd.json is not this check's to
    report."""
    try:
        return [s.id for s in Prd.load(project.prd_path).stories]
    except (FatalError, OSError):
        return []


def _names_one_of(heading: str, ids: list[str]) -> bool:
    words = set(re.split(r"[\s,:;()\[\]]+", heading))
    return any(i in words for i in ids)
