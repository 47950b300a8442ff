"""The findings engine behind `ralph check`: is the indexed memory consistent?

It reads progress.txt's `## Progress Index` and `## Archived` tables with line numbers (so a
finding can point at the line to fix) through `memory.progress.Progress`, the one reading
`ralph run` uses, so a row check accepts is a row the loop reads and a line check calls
malformed is one the loop does not read. With the references folder it reports: malformed
tables, rows whose file is missing, files no row names, paths escaping the folder, duplicate
and near-duplicate topics, references over `references.max_tokens`, log entries without a
story id, and an interrupted compact/migrate apply. It never writes.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import fsutil, tokens
from orchestrator.errors import FatalError, PathEscapeError
from orchestrator.memory import areas, journal
from orchestrator.memory.findings import Finding
from orchestrator.memory.markdown import unclosed_fence
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.memory.store import FastStore, NamedFiles, PathResolver
from orchestrator.memory.tables import TableRow, is_reserved_heading
from orchestrator.memory.vocab import extract_story_ids
from orchestrator.project import Project

_NEAR = 0.85  # difflib ratio between two words that counts as the same word (typos)
# `ralph check` and `ralph status` warn when the Progress Index passes this share of
# budget.prompt_tokens: every agent that reads the index pays for it, and ralph.sh users
# load all of it each iteration.
INDEX_WARN_SHARE = 0.25


Row = TableRow  # one row type: the model's


def _finding(kind: str, file: str, line: int | None, message: str, fix: str) -> Finding:
    """A `ralph check` finding: every one fails the check (exit 1), so all are errors."""
    return Finding(kind, "error", message, fix, file, line)


# ---------------------------------------------------------------- topics


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


def _grams(word: str) -> set[str]:
    return {word[i : i + 3] for i in range(len(word) - 2)} or {word}


class SimilarIndex:
    """Topics indexed so that finding the `similar` ones costs a few comparisons, not one
    per topic (thousands of topics made `ralph check` and `ralph migrate` quadratic).

    Candidates are the topics with the same sorted words (equal or reordered names) and
    those with as many words where each word shares a character trigram with the query's
    word at the same position: two words `_same_word` calls near-equal (ratio >= 0.85, at
    least 5 letters) differ by about one edit per 7 letters, which always leaves 3 letters
    in a row untouched. The position with the fewest such topics gives the candidates, the
    other positions filter them (index-wide "Billing: ..." topics share their first word),
    and `similar` itself confirms each, so the answers are exactly its own.
    """

    def __init__(self) -> None:
        self._names: list[str] = []
        self._grams: list[list[set[str]]] = []  # per topic, per word position
        self._by_words: dict[tuple[str, ...], list[int]] = {}
        self._by_gram: dict[tuple[int, int, str], list[int]] = {}

    def _candidates(self, words: list[str]) -> set[int]:
        found = set(self._by_words.get(tuple(sorted(words)), ()))
        n = len(words)
        grams = [_grams(w) for w in words]
        postings = [[self._by_gram.get((n, p, g), []) for g in gs] for p, gs in enumerate(grams)]
        best = min(range(n), key=lambda p: sum(len(x) for x in postings[p]))
        others = [p for p in range(n) if p != best]
        tried: set[int] = set()  # a topic sharing several trigrams is in several postings
        for posting in postings[best]:
            for i in posting:
                if i in tried:
                    continue
                tried.add(i)
                if all(not self._grams[i][p].isdisjoint(grams[p]) for p in others):
                    found.add(i)
        return found

    def add(self, name: str) -> None:
        words = norm_topic(name).split()
        n = len(self._names)
        self._names.append(name)
        grams = [_grams(w) for w in words]
        self._grams.append(grams)
        if not words:
            return
        self._by_words.setdefault(tuple(sorted(words)), []).append(n)
        for p, gs in enumerate(grams):
            for g in gs:
                self._by_gram.setdefault((len(words), p, g), []).append(n)

    def matches(self, name: str) -> list[int]:
        """Positions (in insertion order) of the added names `similar` to `name`."""
        words = norm_topic(name).split()
        if not words:
            return []
        return sorted(i for i in self._candidates(words) if similar(self._names[i], name))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.matches(name))


def near_duplicate_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(earlier, later) rows whose topics are `similar`, in row order."""
    index = SimilarIndex()
    pairs: list[tuple[int, int]] = []
    for j, b in enumerate(rows):
        pairs.extend((i, j) for i in index.matches(b.topic))
        index.add(b.topic)
    return [(rows[i], rows[j]) for i, j in sorted(pairs)]


# ---------------------------------------------------------------- the memory on disk


@dataclass
class MemoryFiles:
    """progress.txt's tables plus access to the references folder, for check and compact."""

    project: Project
    text: str
    rows: list[Row]
    table_problems: list[tuple[int, str]]
    rel_dir: str
    progress: Progress = field(default_factory=lambda: Progress.parse(""))
    texts: dict[str, str | None] = field(default_factory=dict)  # read once per path
    nested: list[Row] = field(default_factory=list)  # the topics area references list
    store: PathResolver | None = None  # project.references, resolving many paths at once

    @classmethod
    def load(cls, project: Project) -> MemoryFiles:
        tokens.use_disk_cache(project.logs_dir)
        path = Path(project.progress_path)
        text = fsutil.read_text(path) if fsutil.present(path) else ""
        progress = Progress.parse(text)
        rows, problems = _rows(progress)
        mem = cls(project, text, rows, problems, project.references.rel_dir, progress)
        mem.store = FastStore(project.references)
        for r in rows:
            if r.archived:
                continue
            body = mem.read(r.path)
            if body is not None and areas.is_area(body):
                mem.nested += [Row(t, p, 0, False, r.path) for t, p in areas.nested_rows(body)]
        return mem

    def is_area(self, index_path: str) -> bool:
        text = self.read(index_path)
        return text is not None and areas.is_area(text)

    def nested_of(self, index_path: str) -> list[Row]:
        return [n for n in self.nested if n.area == index_path]

    def abs(self, index_path: str) -> Path:
        """The file an index path names; archived paths live under the same folder."""
        return (self.store or self.project.references).resolve(index_path)

    def read(self, index_path: str) -> str | None:
        if index_path in self.texts:
            return self.texts[index_path]
        try:
            p = self.abs(index_path)
        except PathEscapeError:
            return None
        text = fsutil.read_text(p) if fsutil.present(p) else None
        self.texts[index_path] = text
        return text


def parse_tables(text: str) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows of the index and archived tables, and (line, problem) for malformed lines: the
    one reading of `memory.progress` (the rows `ralph run` reads, plus `## Archived`)."""
    return _rows(Progress.parse(text))


def _rows(progress: Progress) -> tuple[list[Row], list[tuple[int, str]]]:
    tables = progress.tables()
    return tables.rows, tables.problems


# ---------------------------------------------------------------- the checks


def check(project: Project) -> list[Finding]:
    mem = MemoryFiles.load(project)
    prog = project.rel(project.progress_path)
    out: list[Finding] = []
    out += _journal_findings(project)
    out += [
        _finding(
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
    out += _index_size_findings(mem, prog)
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
        _finding(
            "unknown-always",
            where,
            None,
            f"references.always names {topic!r}, which no Progress Index row has",
            "add the row or remove the topic from references.always",
        )
        for topic in project.config.references.always
        if norm_topic(topic) not in names
    ]


def _journal_findings(project: Project) -> list[Finding]:
    jdir = journal.pending(project.ralph_dir)
    if jdir is None:
        return []
    return [
        _finding(
            "interrupted-apply",
            project.rel(jdir),
            None,
            "an apply was interrupted; memory files may be half-updated",
            "run `ralph compact --recover` (or `--rollback`)",
        )
    ]


def _row_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    for r in [*mem.rows, *mem.nested]:
        where, line = (r.area, None) if r.area else (prog, r.line)
        try:
            p = mem.abs(r.path)
        except PathEscapeError as exc:
            out.append(
                _finding(
                    "path-escape",
                    where,
                    line,
                    f"row {r.topic!r}: {exc}",
                    f"use a path inside {mem.rel_dir}/",
                )
            )
            continue
        if not p.is_file():
            out.append(
                _finding(
                    "missing-file",
                    where,
                    line,
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
        _finding(
            "references-not-a-folder",
            mem.rel_dir,
            None,
            "is not a folder, so no reference can be written",
            f"move it away and create the folder: mkdir -p {mem.rel_dir}",
        )
    ]


def _orphan_findings(mem: MemoryFiles) -> list[Finding]:
    fast = mem.store if isinstance(mem.store, FastStore) else FastStore(mem.project.references)
    named = NamedFiles(fast)
    for r in [*mem.rows, *mem.nested]:
        with contextlib.suppress(PathEscapeError):  # reported as path-escape
            named.file(r.path)
    return [
        _finding(
            "orphan-file",
            ip,
            None,
            "no index row names this reference",
            f"add `| <Topic> | {ip} |` to the Progress Index or delete it",
        )
        for ip, _file in named.unnamed()
    ]


def _duplicate_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    seen_path: dict[str, Row] = {}
    for r in mem.rows:
        key = r.path.strip().lstrip("./")
        if key in seen_path:
            first = seen_path[key]
            out.append(
                _finding(
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
            _finding(
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
    for r in [*mem.rows, *mem.nested]:
        if r.archived:
            continue
        text = mem.read(r.path)
        if text is None or (not r.area and areas.is_area(text)):
            continue  # an area reference lists topics; it never goes into a prompt
        if (n := tokens.count(text)) > cap:
            out.append(
                _finding(
                    "oversized",
                    r.path,
                    None,
                    f"{n} tokens, over references.max_tokens ({cap})",
                    "condense it (`ralph compact --agent NAME`) or split the topic",
                )
            )
    return out


def index_size(text: str | Progress) -> tuple[int, int]:
    """(tokens, 1-based heading line) of progress.txt's Progress Index section; (0, 0)
    when there is none. Pass the Progress when there is one: the text is parsed otherwise."""
    return _index_size(text if isinstance(text, Progress) else _parsed(text))


@functools.lru_cache(maxsize=1)
def _parsed(text: str) -> Progress:
    """`ralph status` asks for the index's size and its warning with the same text: one
    parse (a str caches its hash, so the lookup costs nothing after the first)."""
    return Progress.parse(text)


def _index_size(progress: Progress) -> tuple[int, int]:
    section, line = progress.index_section()
    return (tokens.count(section), line) if line else (0, 0)


def index_warning(
    text: str | Progress, budget: int, *, exact: bool = True
) -> tuple[str, int] | None:
    """(message, line) when the index passes INDEX_WARN_SHARE of the prompt budget.

    `exact=False` (a run's first iteration) decides without encoding a table whose size
    settles it (tokens.table_tokens_at_least, and its bytes as the upper bound)."""
    progress = text if isinstance(text, Progress) else _parsed(text)
    limit = INDEX_WARN_SHARE * budget
    at_least = ""
    if exact:
        n, line = _index_size(progress)
    else:
        section, line = progress.index_section()
        size = len(section.encode("utf-8", "surrogateescape")) if line else 0
        if size <= limit:
            return None
        n = tokens.table_tokens_at_least(section)
        if n <= limit:
            n = tokens.count(section)
        else:
            at_least = "at least "
    if n <= limit:
        return None
    return (
        f"the Progress Index is {at_least}{n:,} tokens, {100 * n / budget:.0f}% of "
        f"budget.prompt_tokens ({budget:,}); past {100 * INDEX_WARN_SHARE:.0f}% every agent "
        "that reads it pays for rows it does not need",
        line,
    )


def _index_size_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    warning = index_warning(mem.progress, mem.project.config.budget.prompt_tokens)
    if warning is None:
        return []
    return [
        _finding(
            "index-large",
            prog,
            warning[1],
            warning[0],
            "run `ralph compact --apply`: it groups topics under area references "
            "(references.max_topics)",
        )
    ]


def _log_findings(mem: MemoryFiles, prog: str) -> list[Finding]:
    out: list[Finding] = []
    fence = unclosed_fence(mem.text)
    if fence is not None:
        out.append(
            _finding(
                "unclosed-fence",
                prog,
                fence,
                "this code fence is never closed: ralph reads the headings after it, but an "
                "agent or a markdown viewer reads the rest of the log as code",
                "close it with the same ``` (or ~~~) on a line of its own",
            )
        )
    known = _prd_story_ids(mem.project)
    for heading, line in mem.progress.section_headings():
        if is_reserved_heading(heading) or extract_story_ids(heading):
            continue
        if _names_one_of(heading, known):
            continue
        out.append(
            _finding(
                "entry-without-story",
                prog,
                line,
                f"log entry {heading!r} has no story id",
                "put the story id in the heading, e.g. '## <date> - US-001'",
            )
        )
    return out


def _prd_story_ids(project: Project) -> list[str]:
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
