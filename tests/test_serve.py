"""`ralph serve`: the read-only dashboard, served for real and driven in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from run_helpers import RALPH, env, make_project

from orchestrator.reports import serve
from orchestrator.sim import examples

CHROMIUM = os.environ.get("RALPH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SVG = "{http://www.w3.org/2000/svg}"


def _tree(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def _serve(root: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [*RALPH, "serve", "--port", "0"],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:\d+/", line)
    assert m, line + (proc.stderr.read() if proc.poll() is not None else "")
    return proc, m.group(0)


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_chart_is_valid_svg_with_both_series() -> None:
    its = [
        {"iteration": i, "prompt_tokens": 1000 + i, "full_history_tokens": 1000 * i}
        for i in range(1, 5)
    ]
    svg = ET.fromstring(serve.chart_svg(its))
    assert svg.tag == f"{SVG}svg"
    assert {p.get("class") for p in svg.iter(f"{SVG}polyline")} == {"sent", "full"}
    assert len(list(svg.iter(f"{SVG}circle"))) == 8
    assert "4.0k" in "".join(t.text or "" for t in svg.iter(f"{SVG}text"))  # the y-axis top
    ET.fromstring(serve.chart_svg([]))  # no iterations yet: still an image


def test_reference_use_counts_what_the_ledger_records() -> None:
    records = [
        {"event": "iteration", "selected_references": ["a.md", "b.md"], "updated_references": []},
        {"event": "iteration", "selected_references": ["a.md"], "updated_references": ["b.md"]},
    ]
    use = serve.reference_use(records)
    assert use["a.md"] == {"inlined": 2, "opened": None, "missed": None, "updated": 0}
    assert use["b.md"]["inlined"] == 1 and use["b.md"]["updated"] == 1


def test_serve_answers_and_writes_nothing(tmp_path: Path, stop: list) -> None:
    root = make_project(tmp_path / "p", 1)
    assert subprocess.run([*RALPH, "run", "--tool", "sim"], cwd=root, env=env()).returncode == 0
    before = _tree(root)
    proc, url = _serve(root)
    stop.append(proc)
    page = urllib.request.urlopen(url, timeout=30).read().decode()
    assert "US-001" in page and "<svg" in page and "no run is live" in page
    for path in ("static/dashboard.js", "chart.svg"):
        assert urllib.request.urlopen(url + path, timeout=30).status == 200
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(url + "static/..%2F..%2Fpyproject.toml", timeout=30)
    assert _tree(root) == before


def _browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set RALPH_CHROMIUM)")
    return sync_api


def _example_with_history(tmp_path: Path) -> Path:
    """The bundled example after a first run of 6 iterations (references, index, savings)."""
    root = examples.copy_example("recipe-box", tmp_path / "recipe-box")
    first = subprocess.run(
        [*RALPH, "run", "--tool", "sim", "6"], cwd=root, env=env(), capture_output=True, text=True
    )
    assert first.returncode == 1, first.stdout + first.stderr  # max iterations reached
    return root


@pytest.mark.e2e
def test_dashboard_in_chromium_shows_a_running_loop_live(tmp_path: Path, stop: list) -> None:
    sync_api = _browser()
    root = _example_with_history(tmp_path)
    run = subprocess.Popen(
        [*RALPH, "run", "--tool", "sim", "3"],
        cwd=root,
        env=env(RALPH_SIM_DELAY="0.3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop.append(run)
    logs = root / "ralph/logs"
    deadline = time.monotonic() + 60
    while len(list(logs.glob("*/iteration-1.log"))) < 2:
        assert run.poll() is None and time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    server, url = _serve(root)
    stop.append(server)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.goto(url)
        assert page.title() == "ralph · recipe-box"
        page.wait_for_selector("#facts >> text=live run")
        page.evaluate("window.__loaded_once = true")  # gone if the page reloads
        rows = page.locator("#iterations tbody tr")
        first = rows.count()
        assert first < 3
        # A new iteration's row arrives over SSE, without a reload.
        page.wait_for_function(
            f"document.querySelectorAll('#iterations tbody tr').length > {first}", timeout=90_000
        )
        assert page.evaluate("window.__loaded_once") is True
        page.wait_for_selector("#agent div", timeout=30_000)  # the agent's lines, live
        # The chart is an inline SVG that the browser lays out: one point per series and row.
        box = page.locator("#chart").bounding_box()
        assert box and box["width"] > 300 and box["height"] > 100
        assert page.locator("#chart circle").count() == 2 * rows.count()
        assert page.locator("#runs tbody tr").count() == 2
        inlined = page.locator("#references tbody tr td:nth-child(4)").all_inner_texts()
        assert inlined and all(n.isdigit() for n in inlined) and any(int(n) for n in inlined)
        shot = os.environ.get("RALPH_DASHBOARD_SCREENSHOT")
        page.screenshot(path=shot or str(tmp_path / "dashboard.png"), full_page=True)
        page.wait_for_function(
            "document.querySelectorAll('#iterations tbody tr').length === 3", timeout=90_000
        )
        page.wait_for_selector("body.ended", timeout=60_000)
        # The run's line in the runs table followed it too.
        live_row = page.locator("#runs tbody tr").first.inner_text()
        assert "exhausted" in live_row and "3 / 3" in live_row, live_row
        browser.close()
    assert run.wait(timeout=60) == 1  # 3 iterations done, stories remain


def test_ctrl_c_stops_serve_even_with_a_live_page_open(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    child = pexpect.spawn(
        sys.executable,
        [*RALPH[1:], "serve", "--port", "0"],
        cwd=str(root),
        env=env(),
        encoding="utf-8",
        timeout=30,
    )
    child.expect(r"http://127\.0\.0\.1:\d+/")
    url = child.after
    stream = urllib.request.urlopen(url + "events", timeout=30)  # an open event stream
    time.sleep(0.5)
    child.sendintr()
    child.expect(pexpect.EOF, timeout=15)
    child.close()
    stream.close()
    assert child.exitstatus == 0 and "Traceback" not in (child.before or "")


def test_serve_without_the_extras_says_what_to_install(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", 1)
    code = (
        "import sys; sys.modules['sse_starlette'] = None; "
        "from orchestrator.cli import main; sys.exit(main(['serve']))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env(), capture_output=True, text=True
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "pip install 'ralph-index[serve]'" in res.stderr and "sse_starlette" in res.stderr


def test_ab_reports_are_found_where_ab_demo_and_report_write_them(tmp_path: Path) -> None:
    from orchestrator import ledger
    from orchestrator.project import locate
    from orchestrator.reports import report

    root = make_project(tmp_path / "p", 1)
    arms = []
    for name, prompt in (("indexed", 100), ("full", 400)):
        path = tmp_path / f"{name}.jsonl"
        with ledger.Ledger(path, run_id=name) as led:
            led.event("run_start", mode=name, agent="sim")
            rec = {"iteration": 1, "story_id": "US-001", "outcome": "passed"}
            led.iteration({**rec, "prompt_tokens": prompt})
        arms.append(report.load_arm(path, name=name))
    report.write_report(arms, root / "ralph/logs/ab-20261201-120000")  # ralph ab
    report.write_report(arms, root / "ab-report")  # ralph demo
    found = serve.ab_reports(locate(root))
    assert [r["markdown"] for r in found] == [
        "ab-report/ab-report.md",
        "ralph/logs/ab-20261201-120000/ab-report.md",
    ]
    assert found[0]["arms"] == ["indexed", "full"] and round(found[0]["saving_pct"]) == 75


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_events_with_a_bad_query_answer_400_or_404_and_never_a_traceback(
    tmp_path: Path, stop: list
) -> None:
    root = make_project(tmp_path / "p", 2)
    assert subprocess.run([*RALPH, "run", "--tool", "sim"], cwd=root, env=env()).returncode == 0
    run_id = next(
        json.loads(line)["run_id"]
        for line in (root / "ralph" / "logs" / "ledger.jsonl").read_text().splitlines()
    )
    proc, url = _serve(root)
    stop.append(proc)
    for query in ("after=abc", "after=-5", "after=1.5", "after=%20"):
        status, body = _get(f"{url}events?{query}")
        assert (status, body) == (
            400,
            "after must be a whole number of iterations already shown (0 or more)\n",
        ), query
    assert _get(f"{url}events?run=x") == (404, "no run 'x' in this project's ledger\n")
    # A finished run with both iterations on the page: only its `end` event, nothing re-sent.
    status, body = _get(f"{url}events?run={run_id}&after=2")
    assert status == 200 and "event: end" in body and "event: iteration" not in body
    status, body = _get(f"{url}events?run={run_id}&after=0")
    assert body.count("event: iteration") == 2
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "Error" not in err, err


def test_a_request_that_fails_anyway_is_one_error_line_not_a_traceback(capsys) -> None:
    import asyncio

    async def broken(scope, receive, send) -> None:
        raise RuntimeError("generator raised StopIteration")

    async def nothing() -> dict:
        return {}

    async def ignore(message: dict) -> None:
        return None

    asyncio.run(serve._NoTraceback(broken)({"type": "http", "path": "/events"}, nothing, ignore))
    out = capsys.readouterr()
    text = out.out + out.err
    assert "serve: request failed" in text and "RuntimeError" in text and "/events" in text
    assert "Traceback" not in text
