"""bench/cv.py's figures: held-out medians, the trade-off curve, per-history rows, chart."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import cv
import cv_data as cd
import numpy as np

from orchestrator.run import select as sel


def _med(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if x is not None and not np.isnan(x)]
    return round(statistics.median(vals), 3) if vals else None


def _pool(rows: list[dict[str, Any]], cases: list[cd.Case]) -> dict[str, Any]:
    big = [r["prompt_ratio"] for r, c in zip(rows, cases, strict=True) if c.log_tokens > 10000]
    return {
        "stories": len(rows),
        "scored": sum(1 for r in rows if r["recall"] is not None),
        "median_memory_ratio": _med([r["memory_ratio"] for r in rows]),
        "median_memory_ratio_scored": _med(
            [r["memory_ratio"] for r in rows if r["recall"] is not None]
        ),
        "median_recall": _med([r["recall"] for r in rows]),
        "mean_recall": _med([statistics.mean(r["recall"] for r in rows if r["recall"] is not None)])
        if any(r["recall"] is not None for r in rows)
        else None,
        "median_prompt_ratio_log_over_10k": _med(big),
        "stories_log_over_10k": len(big),
    }


def _row(t: np.ndarray, i: int, j: int, m: int) -> dict[str, Any]:
    mem, rec, pr_ = t[i, j, m].tolist()
    return {"memory_ratio": mem, "recall": None if np.isnan(rec) else rec, "prompt_ratio": pr_}


def _held_out_rows(cases: list[cd.Case], t: np.ndarray, cv_: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for fo in cv_:
        for i in fo["test"].tolist():
            out[i] = _row(t, i, fo["setting"], fo["cutoff"])
    return out


def _per_history(cases: list[cd.Case], rows: dict[int, dict], folds: dict[str, int]) -> list:
    out = []
    for name in dict.fromkeys(c.history for c in cases):
        idx = [i for i, c in enumerate(cases) if c.history == name]
        rec = [rows[i]["recall"] for i in idx if rows[i]["recall"] is not None]
        base = [cd.baseline(cases[i]) for i in idx]
        out.append(
            {
                "history": name,
                "fold": folds[name],
                "stories": len(idx),
                "scored": len(rec),
                "median_memory_ratio": _med([rows[i]["memory_ratio"] for i in idx]),
                "median_recall": _med(rec),
                "baseline_memory_ratio": _med([b["memory_ratio"] for b in base]),
                "baseline_recall": _med([b["recall"] for b in base]),
            }
        )
    return out


def _fold_rows(cases, t, ws, cutoffs, cv_) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    out = []
    for fo in cv_:
        st, cut = ws[fo["setting"]], cutoffs[fo["cutoff"]]
        w = st.weights
        mem, rec = cv._medians(t, fo["train"])
        test = [_row(t, i, fo["setting"], fo["cutoff"]) for i in fo["test"].tolist()]
        real = [cd.real(cases[i], _with_cutoff(w, cut), st.share) for i in fo["test"].tolist()]
        out.append(
            {
                "fold": fo["fold"],
                "histories": sorted({cases[i].history for i in fo["test"].tolist()}),
                "chosen": {
                    "cutoff": cut,
                    "blend": w.blend,
                    "recency": w.recency,
                    "files": w.files,
                    "semantic": w.semantic,
                    "feedback": w.feedback,
                    "share": st.share,
                    "floor": st.floor,  # bench only: the real path has no floor
                },
                "train": {
                    "median_memory_ratio": round(float(mem[fo["setting"], fo["cutoff"]]), 3),
                    "median_recall": round(float(rec[fo["setting"], fo["cutoff"]]), 3),
                },
                "held_out": _pool(test, [cases[i] for i in fo["test"].tolist()]),
                "held_out_real_path": _pool(real, [cases[i] for i in fo["test"].tolist()]),
            }
        )
    return out


def _with_cutoff(w: sel.Weights, cut: float) -> sel.Weights:
    return sel.Weights(cut, w.blend, w.recency, w.files, w.semantic, w.feedback)


def result(cases, t, ws, cutoffs, folds, cv_) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    rows = _held_out_rows(cases, t, cv_)
    order = sorted(rows)
    held = [rows[i] for i in order]
    held_cases = [cases[i] for i in order]
    per_h = _per_history(cases, rows, folds)
    head = _pool(held, held_cases)
    head["histories"] = len(per_h)
    head["histories_recall_below_0.5"] = [
        h["history"] for h in per_h if h["median_recall"] is not None and h["median_recall"] < 0.5
    ]
    g_m, g_r = cv.MEMORY_GOAL, cv.RECALL_GOAL
    return {
        "objective": f"widest margin to both targets: min(({g_m} - median memory) / {g_m}, "
        f"(median recall - {g_r}) / {1 - g_r:.2f}), training folds",
        "headline": head,
        "baseline": _pool([cd.baseline(c) for c in held_cases], held_cases),
        "oracle": _pool([cd.oracle(c) for c in held_cases], held_cases),
        "curve": cv.held_out_curve(t, cv_, cutoffs),
        "folds": _fold_rows(cases, t, ws, cutoffs, cv_),
        "consensus_defaults": cv.consensus(ws, cutoffs, cv_),
        "grid": {
            "cutoffs": cutoffs,
            "settings": [{**st.weights.__dict__, "share": st.share} for st in ws],
        },
        "histories": per_h,
    }


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def markdown(r: dict[str, Any]) -> str:
    h, b, o = r["headline"], r["baseline"], r["oracle"]
    lines = [
        "# Selection quality, 5-fold cross-validation by history (held-out folds only)",
        "",
        f"Objective: {r['objective']}. Population: late stories (last quarter) of logs > 5k "
        f"tokens: {h['stories']} stories ({h['scored']} with relevant learnings), "
        f"{h['histories']} histories.",
        "",
        "| | median memory ratio | same, scored stories | median recall "
        "| median prompt ratio (logs > 10k) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, x in (("ralph-index (held-out)", h), ("naive baseline", b), ("oracle", o)):
        lines.append(
            f"| {name} | {_fmt(x['median_memory_ratio'])} "
            f"| {_fmt(x['median_memory_ratio_scored'])} | {_fmt(x['median_recall'])} "
            f"| {_fmt(x['median_prompt_ratio_log_over_10k'])} |"
        )
    lines += [
        "",
        f"Histories with median recall < 0.5: {h['histories_recall_below_0.5'] or 'none'}",
    ]
    lines += ["", "## Trade-off curve (held-out, cut-off moving)", ""]
    lines += ["| cut-off | memory ratio | recall |", "|---:|---:|---:|"]
    lines += [
        f"| {p['cutoff']} | {_fmt(p['memory_ratio'])} | {_fmt(p['recall'])} |" for p in r["curve"]
    ]
    lines += ["", "## Folds (settings chosen on the other folds)", ""]
    lines += _fold_lines(r["folds"])
    lines += ["", f"Consensus defaults (median of the folds' choices): {r['consensus_defaults']}"]
    lines += ["", "## Per history (held-out)", ""]
    lines += [
        "| history | fold | stories | scored | memory ratio | recall "
        "| baseline memory | baseline recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in r["histories"]:
        lines.append(
            f"| {x['history']} | {x['fold']} | {x['stories']} | {x['scored']} "
            f"| {_fmt(x['median_memory_ratio'])} | {_fmt(x['median_recall'])} "
            f"| {_fmt(x['baseline_memory_ratio'])} | {_fmt(x['baseline_recall'])} |"
        )
    return "\n".join(lines) + "\n"


def _fold_lines(folds: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| fold | chosen | train memory / recall | held-out memory / recall | real path |",
        "|---:|---|---|---|---|",
    ]
    for f in folds:
        c, tr, ho, rp = f["chosen"], f["train"], f["held_out"], f["held_out_real_path"]
        lines.append(
            f"| {f['fold']} | cut-off {c['cutoff']}, blend {c['blend']}, recency "
            f"{c['recency']}, files {c['files']}, feedback {c['feedback']}, semantic "
            f"{c['semantic']}, share "
            f"{c['share']} | {_fmt(tr['median_memory_ratio'])} / "
            f"{_fmt(tr['median_recall'])} | {_fmt(ho['median_memory_ratio'])} / "
            f"{_fmt(ho['median_recall'])} | {_fmt(rp['median_memory_ratio'])} / "
            f"{_fmt(rp['median_recall'])} |"
        )
    return lines


def plot(r: dict[str, Any], png: Path) -> None:
    import matplotlib  # the charts extra; imported only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5))
    _curve(ax, r)
    _histories(bx, r)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def _curve(ax: Any, r: dict[str, Any]) -> None:
    pts = [p for p in r["curve"] if p["recall"] is not None]
    ax.plot(
        [p["memory_ratio"] for p in pts],
        [p["recall"] for p in pts],
        "o-",
        label="ralph-index, cut-off moving",
    )
    for p in pts:
        ax.annotate(str(p["cutoff"]), (p["memory_ratio"], p["recall"]), fontsize=7)
    for name, x, mark, color in (
        ("held-out operating point", r["headline"], "*", "tab:orange"),
        ("naive baseline", r["baseline"], "s", "tab:green"),
        ("oracle", r["oracle"], "D", "tab:red"),
    ):
        at = ([x["median_memory_ratio"]], [x["median_recall"]])
        ax.plot(*at, mark, color=color, markersize=11, label=name)
        ax.plot(
            [x["median_memory_ratio_scored"]],
            [x["median_recall"]],
            mark,
            color=color,
            markersize=11,
            fillstyle="none",
            label=f"{name}, memory on scored stories only",
        )
    ax.axvspan(0, 0.15, ymin=0.9 / 1.05, alpha=0.1, color="green", label="target")
    ax.set_xlim(0, 0.45)
    ax.set(
        xlabel="median memory ratio",
        ylabel="median recall",
        ylim=(0, 1.05),
        title="Held-out folds (5-fold CV by history)",
    )
    ax.legend(fontsize=7, loc="lower right")


def _histories(bx: Any, r: dict[str, Any]) -> None:
    hs = [h for h in r["histories"] if h["median_recall"] is not None]
    bx.scatter(
        [h["median_memory_ratio"] for h in hs],
        [h["median_recall"] for h in hs],
        label="ralph-index",
    )
    bx.scatter(
        [h["baseline_memory_ratio"] for h in hs],
        [h["baseline_recall"] for h in hs],
        marker="s",
        alpha=0.5,
        label="baseline",
    )
    bx.axhline(0.5, ls=":", color="grey")
    bx.set(
        xlabel="median memory ratio",
        ylabel="median recall",
        ylim=(-0.05, 1.05),
        title="Per history (held-out)",
    )
    bx.legend(fontsize=8)


def write(r: dict[str, Any], out: Path, png: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "cv.json").write_text(json.dumps(r, indent=1, default=float))
    (out / "cv.md").write_text(markdown(r))
    plot(r, png)
