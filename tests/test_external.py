"""bench/external.py: fetching the external histories from a raw-file server (here a local
one on 127.0.0.1, laid out as GitHub's raw host is)."""

from __future__ import annotations

import functools
import http.server
import json
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import corpus_bench  # noqa: E402
import external  # noqa: E402

COMMIT = "a" * 40
ROWS = [
    ("cv", "ann__shop", "ann/shop", "scripts/ralph/progress.txt", "scripts/ralph/prd.json"),
    ("validation", "bob__game", "bob/game", "tasks/[DONE] x/progress.txt", "prd.json"),
    ("validation", "cy__gone", "cy/gone", "progress.txt", "prd.json"),  # not on the server
    ("validation", "dee__page", "dee/page", "progress.txt", "prd.json"),  # an HTML error page
]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    for _, folder, repo, path, prd in [*ROWS[:2], ROWS[3]]:
        base = root / repo / COMMIT
        (base / path).parent.mkdir(parents=True, exist_ok=True)
        log = (
            "<html>404</html>" if folder == "dee__page" else f"## 2026-01-01 - US-001: {folder}\r\n"
        )
        (base / path).write_bytes(log.encode())
        (base / prd).parent.mkdir(parents=True, exist_ok=True)
        (base / prd).write_text(json.dumps({"userStories": [{"id": "US-001"}]}))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_histories_are_fetched_byte_exact_and_a_missing_one_is_reported(
    tmp_path: Path, server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tsv = tmp_path / "external.tsv"
    head = "set\tfolder\trepo\tcommit\tpath\tprd_path\n"
    tsv.write_text(head + "".join(f"{s}\t{f}\t{r}\t{COMMIT}\t{p}\t{q}\n" for s, f, r, p, q in ROWS))
    monkeypatch.setattr(external, "TSV", tsv)
    out = tmp_path / "corpus"
    assert external.main(["--out", str(out), "--base", server, "--timeout", "5"]) == 1
    got = sorted(p.name for p in out.iterdir())
    assert got == ["ann__shop", "bob__game"]  # the missing one wrote nothing
    assert (
        out / "bob__game" / "progress.txt"
    ).read_bytes() == b"## 2026-01-01 - US-001: bob__game\r\n"
    assert "repo: bob/game\n" in (out / "bob__game" / "SOURCE.txt").read_text()
    err = capsys.readouterr()
    assert "cy__gone: not fetched" in err.err and "dee__page: not fetched" in err.err
    assert "2 histories in" in err.out and "2 not fetched" in err.out
    only = tmp_path / "only"
    assert external.main(["--out", str(only), "--base", server, "--set", "cv"]) == 0
    assert [p.name for p in only.iterdir()] == ["ann__shop"]


def test_the_manifest_pins_every_history_to_a_commit() -> None:
    rows = external.rows(None)
    assert {r["set"] for r in rows} == {"cv", "validation"}
    assert all(re.fullmatch(r"[0-9a-f]{40}", r["commit"]) for r in rows)
    owners = [r["repo"].split("/")[0].lower() for r in rows]
    assert len(set(owners)) == len(rows)  # one per owner
    corpus = corpus_bench.corpus_root()
    if not corpus.is_dir():
        pytest.skip(f"no shared corpus at {corpus} to compare with")
    shared = {p.name.split("__")[0].lower() for p in corpus.iterdir()}
    assert not set(owners) & shared  # no owner of the shared corpus
