"""`ralph serve`: a local, read-only dashboard of one project (Starlette + uvicorn + SSE).

Pages are rendered on the server (HTML and the token chart as inline SVG), so the dashboard
works with no network: the only script is the small shipped `static/dashboard.js`, which
listens to `/events` (server-sent events) and inserts what the server rendered: the live
run's state, each new agent line, and each new iteration's row and the redrawn chart.

Everything is read from the files the loop writes (ledger, lock, transcripts, progress.txt,
references, A/B reports), the same way `ralph status --follow` reads them (watch.py). Nothing
here writes into the project.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import socket
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator import ledger
from orchestrator.errors import UsageError
from orchestrator.log import get_logger
from orchestrator.project import Project
from orchestrator.run import status, watch
from orchestrator.run.display import iteration_cells, money
from orchestrator.tokens import fmt

log = get_logger()

POLL_S = 0.5
_STATIC = resources.files("orchestrator").joinpath("static")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


# ---- data ------------------------------------------------------------------------------------


def runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per run id, newest first."""
    out = []
    for run_id in reversed(ledger.run_ids(records)):
        mine = [r for r in records if r.get("run_id") == run_id]
        start = next((r for r in mine if r.get("event") == "run_start"), {})
        end = next((r for r in reversed(mine) if r.get("event") == "run_end"), None)
        out.append(
            {
                "run_id": run_id,
                "ts": start.get("ts"),
                "agent": start.get("agent"),
                "mode": start.get("mode"),
                "status": end.get("status") if end else None,
                "totals": ledger.totals(mine),
            }
        )
    return out


def reference_use(
    records: list[dict[str, Any]], paths: list[str] | None = None
) -> dict[str, dict[str, int | None]]:
    """How often each reference was inlined into a prompt, opened by the agent, missed
    (needed but not given) or updated, from the iteration records. A count is None when no
    record carries that field (older ledgers, or not recorded yet)."""
    fields = {
        "inlined": "selected_references",
        "opened": "opened_references",
        "missed": "missed_references",
        "updated": "updated_references",
    }
    iters = ledger.iterations(records)
    present = {k: any(f in r for r in iters) for k, f in fields.items()}
    use: dict[str, dict[str, int | None]] = {path: {} for path in paths or []}
    for r in iters:
        for kind, f in fields.items():
            for path in r.get(f) or []:
                counts = use.setdefault(str(path), {})
                counts[kind] = int(counts.get(kind) or 0) + 1
    for counts in use.values():
        for kind in fields:
            counts.setdefault(kind, 0 if present[kind] else None)
    return use


def ab_reports(project: Project) -> list[dict[str, Any]]:
    """A/B reports (`ralph ab` / `ralph report` output) under the logs folder and the root."""
    logs = Path(project.logs_dir)
    root = Path(project.root)
    # `ralph ab` writes into <logs>/ab-<time>/, `ralph demo` into <root>/ab-report/.
    found = [*logs.glob("*/*-report.json"), *root.glob("*-report.json")]
    found += [p for p in root.glob("*/*-report.json") if logs not in p.parents]
    out = []
    for path in sorted(set(found)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            arms = [a["name"] for a in data["arms"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        saving = (data.get("saving") or {}).get("prompt_tokens") or {}
        out.append(
            {
                "path": project.rel(path),
                "arms": arms,
                "saving_pct": saving.get("pct"),
                "of": (data.get("saving") or {}).get("of"),
                "markdown": project.rel(path.with_suffix(".md")),
            }
        )
    return out


# ---- rendering ---------------------------------------------------------------------------------


def chart_svg(iterations: list[dict[str, Any]], width: int = 640, height: int = 240) -> str:
    """Tokens per iteration: the prompt sent (indexed) against the full-history estimate."""
    left, right, top, bottom = 56, 12, 28, 30
    pts = [
        (int(r.get("iteration") or i + 1), r.get("prompt_tokens"), r.get("full_history_tokens"))
        for i, r in enumerate(iterations)
    ]
    top_value = max([1] + [int(v or 0) for _, a, b in pts for v in (a, b)])
    w, h = width - left - right, height - top - bottom
    n = max(1, len(pts) - 1)

    def xy(i: int, v: Any) -> tuple[float, float]:
        return left + w * i / n, top + h * (1 - int(v or 0) / top_value)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="chart" class="chart" viewBox="0 0 '
        f'{width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="tokens per iteration">',
        f'<text x="{left}" y="16" class="t">tokens per iteration</text>',
        f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" class="axis"/>',
        f'<text x="{left - 6}" y="{top + 4}" class="y">{fmt(top_value)}</text>',
        f'<text x="{left - 6}" y="{top + h}" class="y">0</text>',
    ]
    for i, (it, _, _) in enumerate(pts):
        x, _ = xy(i, 0)
        parts.append(f'<text x="{x:.1f}" y="{top + h + 16}" class="x">{it}</text>')
    for key, name, cls in ((2, "full history (estimate)", "full"), (1, "prompt sent", "sent")):
        coords = [xy(i, p[key]) for i, p in enumerate(pts)]
        if len(coords) > 1:
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{line}" class="{cls}"/>')
        for (x, y), p in zip(coords, pts, strict=True):
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="{cls}">'
                f"<title>#{p[0]} {name}: {fmt(p[key])} tok</title></circle>"
            )
    legend_x = left + w - 300
    parts.append(f'<rect x="{legend_x}" y="8" width="10" height="3" class="sent"/>')
    parts.append(f'<text x="{legend_x + 14}" y="14" class="l">prompt sent</text>')
    parts.append(f'<rect x="{legend_x + 110}" y="8" width="10" height="3" class="full"/>')
    parts.append(f'<text x="{legend_x + 124}" y="14" class="l">full history (estimate)</text>')
    parts.append("</svg>")
    return "".join(parts)


def iteration_row(r: dict[str, Any]) -> str:
    refs = ", ".join(Path(p).stem for p in r.get("selected_references") or []) or "-"
    cells = [*iteration_cells(r), refs]
    tds = "".join(f"<td>{esc(c)}</td>" for c in cells)
    attrs = f'class="it {esc(r.get("outcome"))}" data-iteration="{esc(r.get("iteration"))}"'
    return f"<tr {attrs}>{tds}</tr>"


_ITER_HEAD = (
    "#",
    "story",
    "outcome",
    "prompt",
    "full",
    "saved",
    "in",
    "out",
    "cost",
    "time",
    "refs",
)


def _table(head: tuple[str, ...], rows: list[str], table_id: str) -> str:
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(rows)
    return f'<table id="{table_id}"><thead><tr>{ths}</tr></thead><tbody>{body}</tbody></table>'


def run_row(run: dict[str, Any], current: str | None, live: str | None) -> str:
    t = run["totals"]
    cls = ' class="current"' if run["run_id"] == current else ""
    cells = [
        f'<a href="/?run={esc(run["run_id"])}">{esc(run["run_id"])}</a>',
        esc((run["ts"] or "").replace("T", " ")[:19]),
        esc(run["agent"]),
        esc(run["mode"]),
        esc(run["status"] or ("running" if run["run_id"] == live else "unfinished")),
        esc(f"{t.iterations} / {t.passed}"),
        esc(fmt(t.prompt_tokens)),
        esc(f"{t.saved_pct:.0f}%"),
        esc(money(t.cost_usd) if t.cost_reported else "-"),
    ]
    tds = "".join(f"<td>{c}</td>" for c in cells)
    return f'<tr{cls} data-run="{esc(run["run_id"])}">{tds}</tr>'


def runs_table(items: list[dict[str, Any]], current: str | None, live: str | None) -> str:
    rows = [run_row(run, current, live) for run in items]
    head = ("run", "started (UTC)", "agent", "mode", "status", "iter / passed", "prompt", "saved")
    return _table((*head, "cost"), rows, "runs")


def references_table(refs: list[dict[str, Any]], use: dict[str, dict[str, int | None]]) -> str:
    rows = []
    seen = set()
    for r in refs:
        seen.add(r["path"])
        counts = use.get(r["path"], {})
        cells = [
            r["topic"] or "-",
            r["path"],
            fmt(r["tokens"]) if r["exists"] else "-",
            *(_count(counts.get(k)) for k in ("inlined", "opened", "missed", "updated")),
            r["note"],
        ]
        rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    for path, counts in sorted(use.items()):
        if path not in seen:
            cells = ["-", path, "-", *(_count(counts.get(k)) for k in counts), "no longer exists"]
            rows.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    head = ("topic", "path", "tokens", "inlined", "opened", "missed", "updated", "note")
    return _table(head, rows, "references")


def _count(n: int | None) -> str:
    return "n/a" if n is None else str(n)


def reports_list(items: list[dict[str, Any]]) -> str:
    if not items:
        return "<p class='dim'>No A/B reports yet (<code>ralph ab</code> writes one).</p>"
    lis = []
    for rep in items:
        saving = f"{rep['saving_pct']:.1f}% prompt tokens saved" if rep["saving_pct"] else ""
        lis.append(
            f"<li><code>{esc(rep['markdown'])}</code> · {esc(' vs '.join(rep['arms']))}"
            f"{' · ' + esc(saving) if saving else ''}</li>"
        )
    return f'<ul id="reports">{"".join(lis)}</ul>'


def live_panel(view: watch.RunView | None, lines: list[str]) -> str:
    if view is None:
        facts = ["no run is live (start one with ralph run)"]
    else:
        facts = watch.facts(view, datetime.now(timezone.utc))
    items = "".join(f"<div>{esc(f)}</div>" for f in facts)
    agent = "".join(f"<div>{esc(line)}</div>" for line in lines)
    run = esc(view.run_id) if view else ""
    return (
        f'<section id="live" data-run="{run}"><h2>live</h2><div id="facts">{items}</div>'
        f'<div id="agent" class="agent">{agent}</div></section>'
    )


def page(project: Project, selected: str | None) -> str:
    records = ledger.read(Path(project.ledger_path))
    live_id = watch.live_run_id(project, records)
    items = runs(records)
    run_id = selected or (items[0]["run_id"] if items else None)
    view = watch.build(project, records, live_id, live=True) if live_id else None
    lines: list[str] = []
    if view is not None:
        tail = watch.TranscriptTail(watch.display_filter(project, view.agent), keep=12)
        tail.poll(view.transcript)
        lines = list(tail.last)
    its = ledger.iterations(records, run_id) if run_id else []
    st = status.collect(project)
    body = [
        f"<header><h1>ralph · {esc(st['project'] or project.root.name)}</h1>"
        f"<p>branch {esc(st['branch'] or '-')} · stories {st['stories']['passed']}/"
        f"{st['stories']['total']} passed · mode {esc(st['mode'])}</p></header>",
        live_panel(view, lines),
        f'<section><h2>run <span id="run-id">{esc(run_id or "-")}</span></h2>'
        f'<div id="chart-box">{chart_svg(its)}</div>'
        + _table(_ITER_HEAD, [iteration_row(r) for r in its], "iterations")
        + "</section>",
        f"<section><h2>runs</h2>{runs_table(items, run_id, live_id)}</section>",
        "<section><h2>index and references</h2>"
        + references_table(
            st["references"], reference_use(records, [r["path"] for r in st["references"]])
        )
        + "</section>",
        f"<section><h2>A/B reports</h2>{reports_list(ab_reports(project))}</section>",
    ]
    # Live updates when the page shows the live run or "the latest run" (no ?run=).
    follow = "1" if (run_id and run_id == live_id) or selected is None else "0"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>ralph · {esc(project.root.name)}</title>"
        '<link rel="stylesheet" href="/static/dashboard.css"></head>'
        f'<body data-run="{esc(run_id or "")}" data-follow="{follow}">'
        + "".join(body)
        + '<script src="/static/dashboard.js"></script></body></html>'
    )


# ---- live events ---------------------------------------------------------------------------------


def event_params(project: Project, request: Request) -> tuple[int, str | None] | Response:
    """`/events`' query (`after`: iterations already on the page, `run`: the run shown), or
    the 400/404 answer for a wrong one: it is checked before the stream starts, so a bad
    query gets a short answer instead of a stream that dies."""
    after = request.query_params.get("after") or "0"
    # isascii: int() also takes "١٢" and " 7 ", which no page of ours sends.
    if not (after.isascii() and after.isdigit()):
        return PlainTextResponse(
            "after must be a whole number of iterations already shown (0 or more)\n",
            status_code=400,
        )
    run_id = request.query_params.get("run") or None
    if run_id is not None:
        records = ledger.read(Path(project.ledger_path))
        if run_id not in ledger.run_ids(records):
            return PlainTextResponse(f"no run {run_id!r} in this project's ledger\n", 404)
    return int(after), run_id


def _summary(records: list[dict[str, Any]], run_id: str) -> dict[str, Any]:
    """The run's summary; an empty one if its records are gone (the ledger was replaced)."""
    found = next((x for x in runs(records) if x["run_id"] == run_id), None)
    return found or runs([{"event": "run_start", "run_id": run_id}])[0]


async def events(project: Project, shown: int, run_id: str | None) -> AsyncIterator[dict[str, str]]:
    """The live run as server-sent events: `state` (its facts), `line` (a new agent line),
    `iteration` (a finished iteration: its row and the redrawn chart), `run` (another run
    became live) and `end`. `shown`: iterations already on the page."""
    tail: watch.TranscriptTail | None = None
    last_state = ""
    while True:
        records = ledger.read(Path(project.ledger_path))
        live_id = watch.live_run_id(project, records)
        if live_id and live_id != run_id:
            yield {"event": "run", "data": live_id}
            return
        if run_id:
            view = watch.build(project, records, run_id, live=live_id == run_id)
            if tail is None:
                tail = watch.TranscriptTail(watch.display_filter(project, view.agent), keep=12)
                tail.poll(view.transcript)  # lines already on the page
            for line in tail.poll(view.transcript):
                yield {"event": "line", "data": line}
            its = ledger.iterations(records, run_id)
            for r in its[shown:]:
                summary = _summary(records, run_id)
                data = {
                    "row": iteration_row(r),
                    "chart": chart_svg(its),
                    "run": run_id,
                    "run_row": run_row(summary, run_id, live_id),
                }
                yield {"event": "iteration", "data": json.dumps(data)}
            shown = len(its)
            state = json.dumps(watch.facts(view, datetime.now(timezone.utc)))
            if state != last_state:
                last_state = state
                yield {"event": "state", "data": state}
            if not view.live:
                summary = _summary(records, run_id)
                row = run_row(summary, run_id, None)
                yield {"event": "end", "data": json.dumps({"run": run_id, "run_row": row})}
                return
        await asyncio.sleep(POLL_S)


# ---- the app -----------------------------------------------------------------------------------


def app(project: Project) -> Starlette:
    async def index(request: Request) -> Response:
        return HTMLResponse(page(project, request.query_params.get("run") or None))

    async def chart(request: Request) -> Response:
        records = ledger.read(Path(project.ledger_path))
        run_id = request.query_params.get("run") or ledger.last_run_id(records)
        svg = chart_svg(ledger.iterations(records, run_id) if run_id else [])
        return Response(svg, media_type="image/svg+xml")

    async def stream(request: Request) -> Response:
        params = event_params(project, request)
        if isinstance(params, Response):
            return params
        return EventSourceResponse(events(project, *params), ping=15)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("dashboard.js", "dashboard.css"):
            return Response("not found", status_code=404)
        with resources.as_file(_STATIC.joinpath(name)) as path:
            return FileResponse(path)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/chart.svg", chart),
            Route("/events", stream),
            Route("/static/{name}", static),
        ]
    )


class _NoTraceback:
    """The outermost layer: a request that fails anyway is one `ralph: error:` line on the
    console, not uvicorn's traceback (Starlette has already answered 500 if it could)."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        except Exception as exc:  # any failure of one request, reported once
            log.error(
                "serve: request failed",
                path=scope.get("path"),
                error=f"{type(exc).__name__}: {exc}",
            )


def serve(project: Project, host: str = "127.0.0.1", port: int = 8765) -> int:
    """Serve until Ctrl-C. The socket is bound first so the printed URL has the real port
    (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening now (not when uvicorn starts) so the URL works as soon as it is printed.
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc.strerror}); try another --port"
        ) from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"ralph serve: http://{shown}:{bound}/ (read-only; Ctrl-C stops)", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"ralph: warning: listening on {host}: anyone who can reach it sees this project's "
            "runs, prompts' sizes and agent output",
            file=sys.stderr,
        )
    # Live pages hold an event stream open: give them a second to close on Ctrl-C, then stop.
    config = uvicorn.Config(
        _NoTraceback(app(project)), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    # uvicorn re-raises the Ctrl-C it shut down on; for a server that is the normal stop.
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])
    print("ralph serve: stopped", flush=True)
    return 0
