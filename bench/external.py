"""Fetch the external histories that bench/external.tsv lists, as a corpus folder.

    .venv/bin/python bench/external.py --out ../external            # all 61
    .venv/bin/python bench/external.py --out ../external --set validation
    RALPH_CORPUS=../external .venv/bin/python bench/corpus_bench.py --out /tmp/ext

bench/external.tsv names real Ralph histories from public repositories that are not in
`../shared/corpus` (one per owner): `set` cv (31, added to the cross-validation that chose the
defaults) or validation (30, never used for any choice; measured once, at the end). Each row
pins a commit, so the files fetched are the ones measured. The texts are other people's and
are not kept in this repository: this fetches them from GitHub (`--base` for a mirror).
Before anything is written, prd.json must parse and progress.txt must be UTF-8 text, not
empty and not an HTML page; a history whose files cannot be fetched is reported and skipped,
the others are kept.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

TSV = Path(__file__).resolve().parent / "external.tsv"
GITHUB = "https://raw.githubusercontent.com"


def rows(which: str | None) -> list[dict[str, str]]:
    with TSV.open(newline="", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if which in (None, r["set"])]


def _get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (https or --base)
        data: bytes = r.read()
        return data


def fetch_one(row: dict[str, str], out: Path, base: str, timeout: float) -> None:
    """One history into out/<folder>/ (progress.txt, prd.json, SOURCE.txt), written only when
    both files came and read as they should."""
    raw = f"{base.rstrip('/')}/{row['repo']}/{row['commit']}"
    progress = _get(f"{raw}/{urllib.parse.quote(row['path'])}", timeout)
    prd = _get(f"{raw}/{urllib.parse.quote(row['prd_path'])}", timeout)
    json.loads(prd)  # a prd.json that does not parse is not the file measured
    text = progress.decode("utf-8").lstrip()
    if not text or text.startswith("<"):  # a log never starts with a tag; an error page does
        raise ValueError("progress.txt is empty or an HTML page, not a log")
    folder = out / row["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "progress.txt").write_bytes(progress)
    (folder / "prd.json").write_bytes(prd)
    source = "".join(f"{k}: {row[k]}\n" for k in ("repo", "commit", "path", "prd_path"))
    (folder / "SOURCE.txt").write_text(source, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder to write the corpus to")
    ap.add_argument("--set", choices=("cv", "validation"), help="only this set (default: both)")
    ap.add_argument("--base", default=GITHUB, help="raw-file server: <base>/<repo>/<commit>/<path>")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    failed = 0
    wanted = rows(args.set)
    for row in wanted:
        try:
            fetch_one(row, args.out, args.base, args.timeout)
        except (OSError, ValueError, urllib.error.URLError) as e:  # JSONDecodeError is a ValueError
            failed += 1
            print(f"{row['folder']}: not fetched ({e})", file=sys.stderr)
    print(f"{len(wanted) - failed} histories in {args.out}, {failed} not fetched")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
