"""What `ralph status` reports, as plain data (the command only renders it).

Read-only: nothing here writes a project file (only the token-count cache in the logs
folder, so an unchanged project is not counted again). A missing progress.txt or ledger is
reported as empty, not as an error; a missing or invalid prd.json is an error naming the
file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator import fsutil, ledger, tokens
from orchestrator.errors import PathEscapeError
from orchestrator.memory import areas, usage
from orchestrator.memory.prd import Prd
from orchestrator.memory.progress import Progress
from orchestrator.memory.store import FastStore, NamedFiles
from orchestrator.project import Project
from orchestrator.run import watch
from orchestrator.upkeep import audit


def collect(project: Project) -> dict[str, Any]:
    prd = Prd.load(Path(project.prd_path))
    nxt = prd.next_story()
    enc = project.config.encoding
    tokens.use_disk_cache(project.logs_dir)
    progress_path = Path(project.progress_path)
    text = fsutil.read_text(progress_path) if fsutil.present(progress_path) else ""
    # Each file is read and parsed once: the index's size and warning come from this parse,
    # the last run and the live run from one read of the ledger.
    prog = Progress.parse(text)
    refs = references(project, prog, enc)
    records = ledger.read(Path(project.ledger_path))
    warning = audit.index_warning(prog, project.config.budget.prompt_tokens)
    return {
        "project": prd.project,
        "branch": prd.branch_name,
        "prd": project.rel(prd.path),
        "mode": project.config.mode,
        "stories": {
            "passed": prd.passed_count(),
            "total": len(prd.stories),
            "next": {"id": nxt.id, "title": nxt.title} if nxt else None,
            "pending": [s.id for s in prd.stories if not s.passes],
        },
        "memory": {
            "progress_tokens": tokens.count(text, enc),
            "entries": prog.entry_count,
            "references_tokens": sum(r["tokens"] for r in refs if r["exists"]),
        },
        "index": [{"topic": r.topic, "path": r.path} for r in prog.index_rows],
        "index_tokens": audit.index_size(prog)[0],
        "warnings": [warning[0] + "; run `ralph compact --apply`"] if warning else [],
        "references": refs,
        "last_run": last_run(records, refs, project.references.rel_dir),
        "live": live_run(project, records),
    }


# The notes of `references` that ask something of the user (the others only inform: "area:
# lists topics", "in area X"); a nested topic's note starts with one, then its area's name.
MISSING, OUTSIDE, UNINDEXED = (
    "missing file",
    "path outside the references folder",
    "not in the index",
)
PROBLEMS = (MISSING, OUTSIDE, UNINDEXED)


def references(project: Project, prog: Any, encoding: str) -> list[dict[str, Any]]:
    """Every index row (with its file's size) and every reference file not in the index."""
    named = NamedFiles(FastStore(project.references))
    out: list[dict[str, Any]] = []
    for row in prog.index_rows:
        item, text = _item(row.topic, row.path, encoding, named)
        out.append(item)
        if text is not None and areas.is_area(text):
            item["note"] = "area: lists topics"
            # Its topics follow it (one level: they are never areas themselves).
            for topic, path in areas.nested_rows(text):
                nested, _ = _item(topic, path, encoding, named)
                nested["area"] = row.topic
                nested["note"] = (nested["note"] + "; " if nested["note"] else "") + (
                    f"in area {row.topic}"
                )
                out.append(nested)
    for _index_path, file in named.unnamed():
        out.append(
            {
                "topic": None,
                "path": project.rel(Path(file)),
                "exists": True,
                "tokens": tokens.count(fsutil.read_text(file), encoding),
                "note": UNINDEXED,
            }
        )
    return out


def _item(
    topic: str, path: str, encoding: str, named: NamedFiles
) -> tuple[dict[str, Any], str | None]:
    """An index row's line of the table, and its file's text when it has one."""
    item: dict[str, Any] = {"topic": topic, "path": path, "exists": False, "tokens": 0, "note": ""}
    try:
        text = fsutil.read_text(named.file(path))
    except PathEscapeError:
        item["note"] = OUTSIDE
        return item, None
    except FileNotFoundError:
        item["note"] = MISSING
        return item, None
    item.update(exists=True, tokens=tokens.count(text, encoding))
    return item, text


def last_run(
    records: ledger.Records, refs: list[dict[str, Any]] | None = None, refs_dir: str = ""
) -> dict[str, Any] | None:
    """The ledger's last run: totals, how it ended, what its agents opened."""
    run_id = ledger.last_run_id(records)
    if not run_id:
        return None
    use = usage.summarize(ledger.iterations(records, run_id)).as_dict()
    topics = {usage.index_path(r["path"], refs_dir): r["topic"] for r in refs or [] if r["topic"]}
    use["missed_topics"] = [topics.get(p) or Path(p).stem for p in use["missed_paths"]]
    end = [r for r in records if r.get("run_id") == run_id and r.get("event") == "run_end"]
    d = ledger.run_totals(records, run_id).as_dict()
    d.update(
        run_id=run_id,
        status=end[-1].get("status") if end else None,
        exit_code=end[-1].get("exit_code") if end else None,
        skipped_lines=len(records.skipped),
        references_use=use,
    )
    return d


def live_run(project: Project, records: ledger.Records) -> dict[str, Any] | None:
    """The run going on now (pid, story, iteration, since), or None when none is live."""
    run_id = watch.live_run_id(project, records)
    if run_id is None:
        return None
    view = watch.build(project, records, run_id, live=True)
    return {
        "run_id": run_id,
        "pid": view.pid,
        "agent": view.agent,
        "since": view.started.isoformat(timespec="seconds") if view.started else None,
        "story_id": view.story_id,
        "story_title": view.story_title,
        "iteration": view.iteration,
        "max_iterations": view.max_iterations,
        "spent_tokens": view.spent_tokens,
        "spent_cost_usd": round(view.spent_cost, 4) if view.costed else None,
    }
