"""Why relevant learnings are missed: every scored late story's relevant groups (the
learnings of one earlier story, as the selector groups them), with the signals that made
their score and whether the selection took them.

    RALPH_CORPUS=... .venv/bin/python bench/cv_diag.py [--only NAME] [-v]
        [--cutoff C] [--files F] [--recency R] [--feedback N] [--share S]

Defaults: those of orchestrator/run/select.py (the CV's consensus). A missed bullet is
  budget/cap      its item was above the bar (cut-off x best score), cut by the references'
                  ceiling or references.max_tokens
  below cut-off   scored under the bar; counted by which of its group's signals were low
                  (< 0.5): t text, f files (- unknown), r recency; capitals when >= 0.5
  not in memory   migrate kept no item holding it
Used to diagnose, never to choose a setting: bench/cv.py does that on training folds.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_bench as cb  # noqa: E402
import cv  # noqa: E402
import cv_data as cd  # noqa: E402

from orchestrator.run import prompt as pr  # noqa: E402
from orchestrator.run import rank, refcache, where  # noqa: E402
from orchestrator.run import select as sel  # noqa: E402


def _pickle() -> Path:
    """Where the cases are kept between runs (a minute to build): keyed, like the memories
    they hold, by the source migrate runs, and by the corpus (its path and each log's size
    and time), so a changed migrate or corpus rebuilds them."""
    root = cb.corpus_root().resolve()
    logs = sorted(root.glob("*/progress.txt"))
    stamp = repr([str(root), *((p.parent.name, p.stat().st_size, p.stat().st_mtime) for p in logs)])
    key = hashlib.sha256(stamp.encode()).hexdigest()[:12]
    return cd.CACHE / f"diag-cases-{cd._migrate_hash()}-{key}.pkl"


def load(only: str | None, reload: bool = False) -> list[cd.Case]:
    kept = _pickle()
    if kept.exists() and not only and not reload:
        cases: list[cd.Case] = pickle.loads(kept.read_bytes())
        return cases
    ns = argparse.Namespace(only=only, cutoff=None, blend=None, budget=16000, ref_cap=800)
    cases = cv.load_cases(cb.corpus_root(), ns)
    if not only:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(pickle.dumps(cases))
    return cases


def signals(c: cd.Case, w: sel.Weights) -> dict[str, Any]:
    """Per group: text, recency and file scores, as `select.score` combines them."""
    sources = cd._sources(c)
    terms = list(dict.fromkeys(sel.tokenize(pr._query(c.inp.story))))
    t = sel._text_scores(terms, sources, pr._other_stories(c.inp))
    order = refcache.PLAIN.story_order(c.inp.progress_text)
    rec = rank.recency_scores(t.names, order, sel.RECENCY_HALF_LIFE)
    files = sel._files_of(t, c.inp.progress_text)
    prior = (1 - w.recency) * t.g_score + w.recency * rec
    fs = where.scores(frozenset(terms), files, prior, (), feedback=w.feedback)
    return {"names": t.names, "text": t.g_score, "rec": rec, "files": fs, "known": files}


def diagnose(c: cd.Case, w: sel.Weights, share: float, verbose: bool) -> collections.Counter:
    sources = cd._sources(c)
    sc = cd.weights_of(c, w)
    s = sel.take(sc, sources, cutoff=w.cutoff, budget=cd.room(c, share), ref_cap=c.inp.ref_cap)
    block = cb._norm(sel.render(s, sources))
    bodies = [cb._norm(body) for ix in sc.index for _, body in ix.items]
    sig = signals(c, w)
    bar = w.cutoff * sc.scores.max(initial=0.0)
    best = np.zeros(len(sc.groups))
    np.maximum.at(best, sc.item_groups, sc.scores)
    out: collections.Counter = collections.Counter()
    missed: collections.Counter = collections.Counter()
    for b in c.relevant:
        at = next((i for i, body in enumerate(bodies) if b in body), None)
        if b in block:
            out["found"] += 1
        elif at is None:
            out["not in memory"] += 1
        elif sc.scores[at] >= bar:
            out["budget/cap"] += 1
        else:
            g = int(sc.item_groups[at])
            key = "".join(
                k.upper() if v >= 0.5 else k
                for k, v in (("t", sig["text"][g]), ("f", sig["files"][g]), ("r", sig["rec"][g]))
            )
            out["below cut-off " + (key if sig["known"][g] else key.replace("f", "-"))] += 1
            missed[g] += 1
    n = len(c.relevant)
    print(f"{c.history} {c.inp.story.id}: recall {out['found']}/{n}, {s.tokens} tokens taken")
    if verbose:
        for g, k in missed.most_common():
            print(
                f"    missed {sig['names'][g][:24]:24} {k:3d} bullets, score {best[g]:.2f}"
                f" < bar {bar:.2f}: text {sig['text'][g]:.2f} files {sig['files'][g]:.2f}"
                f" recency {sig['rec'][g]:.2f}"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only")
    ap.add_argument("--cutoff", type=float, default=sel.DEFAULT_CUTOFF)
    ap.add_argument("--files", type=float, default=sel.DEFAULT_FILES)
    ap.add_argument("--recency", type=float, default=sel.DEFAULT_RECENCY)
    ap.add_argument("--feedback", type=int, default=sel.DEFAULT_FEEDBACK)
    ap.add_argument("--share", type=float, default=pr.REFERENCES_SHARE)
    ap.add_argument("--reload", action="store_true")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    cases = [c for c in load(args.only, args.reload) if c.scored]
    cases = [c for c in cases if not args.only or args.only in c.history]
    w = sel.Weights(
        cutoff=args.cutoff, files=args.files, recency=args.recency, feedback=args.feedback
    )
    total: collections.Counter = collections.Counter()
    recalls = []
    for c in cases:
        got = diagnose(c, w, args.share, args.v)
        total += got
        recalls.append(got["found"] / len(c.relevant))
    print(f"{len(cases)} scored stories, median recall {np.median(recalls):.3f}; bullets:")
    for k, v in total.most_common():
        print(f"  {k:24} {v:5d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
