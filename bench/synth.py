"""Synthetic Ralph projects shaped like the corpus, at any size.

Entries look like the corpus's: a `## <date> - US-0042` heading, a "What was implemented"
line, a "Files changed" list and three or four learning bullets, about 300 tokens in all.
Learnings talk about the files of one code area (40 areas, a few files each), so `ralph
migrate` finds areas and keywords as it does in real logs. Deterministic for a seed.

    flat project:    scripts/ralph/{prd.json, progress.txt}  (a log `ralph migrate` takes)
    indexed project: the same log under a `## Progress Index` of R rows, plus R reference
                     files in ralph/references/ holding the learnings (tagged `- [US-0042]`)
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

AREAS = {
    "src/services/billing": ("invoiceService.ts", "taxRates.ts", "refunds.ts"),
    "src/services/auth": ("session.ts", "tokens.ts", "passwordReset.ts"),
    "src/http/controllers": ("usersController.ts", "ordersController.ts", "health.ts"),
    "src/http/middleware": ("rateLimit.ts", "cors.ts", "requestId.ts"),
    "src/db/migrations": ("001_init.sql", "014_orders.sql", "022_audit.sql"),
    "src/db/models": ("user.ts", "order.ts", "invoice.ts"),
    "src/components/dashboard": ("Chart.tsx", "KpiCard.tsx", "Filters.tsx"),
    "src/components/forms": ("TextField.tsx", "DatePicker.tsx", "Validation.ts"),
    "src/components/layout": ("Sidebar.tsx", "Topbar.tsx", "Shell.tsx"),
    "src/hooks": ("useAuth.ts", "useOrders.ts", "useDebounce.ts"),
    "src/store": ("cartSlice.ts", "userSlice.ts", "index.ts"),
    "src/i18n/locales": ("en.json", "de.json", "fr.json"),
    "src/workers/email": ("sendWelcome.ts", "digest.ts", "queue.ts"),
    "src/workers/export": ("csvExport.ts", "pdfExport.ts", "scheduler.ts"),
    "src/search": ("indexer.ts", "query.ts", "ranking.ts"),
    "src/payments/stripe": ("webhooks.ts", "checkout.ts", "customers.ts"),
    "src/notifications": ("push.ts", "inbox.ts", "preferences.ts"),
    "src/reports": ("monthly.ts", "cohorts.ts", "funnel.ts"),
    "src/admin/users": ("UserTable.tsx", "RoleEditor.tsx", "Impersonate.tsx"),
    "src/admin/settings": ("FeatureFlags.tsx", "Branding.tsx", "Billing.tsx"),
    "src/api/graphql": ("schema.graphql", "resolvers.ts", "context.ts"),
    "src/api/rest": ("routes.ts", "pagination.ts", "errors.ts"),
    "src/utils": ("dates.ts", "money.ts", "retry.ts"),
    "src/config": ("env.ts", "features.ts", "logging.ts"),
    "tests/e2e": ("checkout.spec.ts", "login.spec.ts", "admin.spec.ts"),
    "tests/unit": ("money.test.ts", "dates.test.ts", "cart.test.ts"),
    "scripts": ("seed.ts", "migrate.sh", "release.sh"),
    "infra/terraform": ("main.tf", "rds.tf", "redis.tf"),
    "infra/k8s": ("deployment.yaml", "ingress.yaml", "cronjobs.yaml"),
    "mobile/screens": ("HomeScreen.tsx", "CartScreen.tsx", "ProfileScreen.tsx"),
    "mobile/navigation": ("RootStack.tsx", "Tabs.tsx", "linking.ts"),
    "src/features/onboarding": ("Wizard.tsx", "steps.ts", "progress.ts"),
    "src/features/inventory": ("stockLevels.ts", "reorder.ts", "warehouses.ts"),
    "src/features/shipping": ("rates.ts", "labels.ts", "tracking.ts"),
    "src/features/subscriptions": ("plans.ts", "renewals.ts", "proration.ts"),
    "src/features/chat": ("ChatWindow.tsx", "presence.ts", "attachments.ts"),
    "src/features/calendar": ("Agenda.tsx", "recurrence.ts", "timezones.ts"),
    "src/features/uploads": ("Dropzone.tsx", "s3.ts", "thumbnails.ts"),
    "src/analytics": ("events.ts", "segment.ts", "consent.ts"),
    "docs": ("architecture.md", "runbook.md", "api.md"),
}
SUBJECTS = {
    "billing": ("invoice totals", "tax rounding", "credit notes", "refund ledger"),
    "auth": ("session cookies", "refresh tokens", "password reset links", "login throttling"),
    "controllers": ("request validation", "error envelopes", "pagination params"),
    "middleware": ("rate limit headers", "CORS preflight", "request ids"),
    "migrations": ("column defaults", "backfill batches", "index creation"),
    "models": ("soft deletes", "timestamps", "enum columns"),
    "dashboard": ("chart tooltips", "KPI deltas", "date range filters"),
    "forms": ("field validation", "date parsing", "error messages"),
    "layout": ("sidebar collapse", "sticky topbar", "responsive shell"),
    "hooks": ("stale closures", "debounced input", "auth redirects"),
    "store": ("cart totals", "persisted state", "selector memoisation"),
    "locales": ("missing keys", "plural rules", "date formats"),
    "email": ("template rendering", "retry queue", "unsubscribe links"),
    "export": ("CSV escaping", "PDF fonts", "scheduled exports"),
    "search": ("tokenizer", "ranking boosts", "index rebuilds"),
    "stripe": ("webhook signatures", "idempotency keys", "customer sync"),
    "notifications": ("push tokens", "inbox badges", "quiet hours"),
    "reports": ("cohort windows", "funnel steps", "timezone buckets"),
    "users": ("role checks", "impersonation audit", "bulk actions"),
    "settings": ("feature flags", "branding uploads", "plan limits"),
    "graphql": ("resolver batching", "schema stitching", "auth context"),
    "rest": ("route ordering", "cursor pagination", "problem details"),
    "utils": ("money rounding", "date math", "retry backoff"),
    "config": ("env parsing", "feature defaults", "log levels"),
    "e2e": ("flaky waits", "seeded fixtures", "login helper"),
    "unit": ("fake timers", "money cases", "snapshot churn"),
    "scripts": ("seed data", "release tags", "migration order"),
    "terraform": ("state locking", "RDS parameters", "redis eviction"),
    "k8s": ("readiness probes", "ingress timeouts", "cronjob history"),
    "screens": ("safe areas", "list virtualization", "pull to refresh"),
    "navigation": ("deep links", "tab state", "back handling"),
    "onboarding": ("wizard steps", "progress saving", "skip rules"),
    "inventory": ("stock reservations", "reorder points", "warehouse transfers"),
    "shipping": ("rate quotes", "label printing", "tracking webhooks"),
    "subscriptions": ("plan changes", "renewal dates", "proration math"),
    "chat": ("presence pings", "attachment previews", "unread counts"),
    "calendar": ("recurrence rules", "timezone shifts", "agenda paging"),
    "uploads": ("multipart uploads", "thumbnail jobs", "content types"),
    "analytics": ("event names", "consent gating", "batch flushing"),
    "docs": ("runbook steps", "API examples", "architecture notes"),
}
VERBS = ("must be computed", "is cached", "has to be awaited", "is validated", "is normalised")
WHENS = (
    "before the response is sent",
    "inside the same transaction",
    "after the feature flag check",
    "on every page load",
    "when the user switches account",
    "in the background worker, not in the request",
)
CONSEQUENCES = (
    "otherwise the totals drift by a cent on large orders",
    "or the e2e suite fails intermittently on CI",
    "because the old code path silently swallowed the error",
    "and the typecheck only catches it with strict mode on",
    "so reuse the existing helper instead of writing a new one",
    "which the reviewers flagged twice in earlier stories",
)


@dataclass
class Story:
    id: str
    title: str
    area: str
    files: list[str]
    learnings: list[str]
    day: date


def _area_word(area: str) -> str:
    return area.rstrip("/").rsplit("/", 1)[-1]


def stories(n: int, seed: int = 7) -> list[Story]:
    rnd = random.Random(seed)
    areas = list(AREAS)
    out: list[Story] = []
    start = date(2025, 1, 6)
    for k in range(1, n + 1):
        # Stories cluster: the next story usually stays in the area of the last one.
        area = out[-1].area if out and rnd.random() < 0.4 else rnd.choice(areas)
        word = _area_word(area)
        subject = rnd.choice(SUBJECTS[word])
        files = [f"{area}/{f}" for f in rnd.sample(AREAS[area], 2)]
        other = rnd.choice(areas)
        files.append(f"{other}/{rnd.choice(AREAS[other])}")
        learnings = []
        for _ in range(rnd.choice((3, 4, 4, 5))):
            f = rnd.choice(files)
            s = rnd.choice(SUBJECTS[_area_word(f.rsplit("/", 1)[0])])
            learnings.append(
                f"The {s} in `{f}` {rnd.choice(VERBS)} {rnd.choice(WHENS)}; "
                f"{rnd.choice(CONSEQUENCES)} (seen while working on {subject})."
            )
        title = f"{subject.capitalize()} for the {word} area ({k})"
        out.append(Story(f"US-{k:04d}", title, area, files, learnings, start + timedelta(k // 6)))
    return out


def entry(s: Story) -> str:
    lines = [
        f"## {s.day.isoformat()} - {s.id}",
        f"- What was implemented: {s.title}, with tests and the typecheck passing",
        "- Files changed:",
        *[f"  - `{f}` - updated for {s.title.split(' for ')[0].lower()}" for f in s.files],
        "- **Learnings for future iterations:**",
        *[f"  - {ln}" for ln in s.learnings],
        "---",
        "",
    ]
    return "\n".join(lines)


HEADER = "# Ralph Progress Log\nStarted: Mon Jan  6 09:00:00 UTC 2025\n---\n\n"


def prd(items: list[Story], pending: int = 3) -> dict:
    # The pending stories are new work in a busy area, the case ranking must get right.
    rows = [
        {
            "id": s.id,
            "title": s.title,
            "description": f"As a user I want {s.title.lower()} so that the app behaves.",
            "acceptanceCriteria": [f"Touches {f}" for f in s.files[:2]] + ["Typecheck passes"],
            "priority": k,
            "passes": True,
            "notes": "",
        }
        for k, s in enumerate(items, 1)
    ]
    base = len(items)
    for j in range(pending):
        area = list(AREAS)[(j * 7) % len(AREAS)]
        word = _area_word(area)
        rows.append(
            {
                "id": f"US-{base + j + 1:04d}",
                "title": f"Extend {SUBJECTS[word][0]} in the {word} area",
                "description": f"Change {area}/{AREAS[area][0]} to support the new flow.",
                "acceptanceCriteria": [f"{SUBJECTS[word][0]} handled", "Typecheck passes"],
                "priority": base + j + 1,
                "passes": False,
                "notes": "",
            }
        )
    return {"project": "Synthetic", "branchName": "ralph/synthetic", "userStories": rows}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def flat_project(root: Path, n_stories: int, seed: int = 7) -> Path:
    """A project whose progress.txt is a flat log of `n_stories` entries."""
    items = stories(n_stories, seed)
    ralph = root / "scripts" / "ralph"
    _write(ralph / "prd.json", json.dumps(prd(items), indent=2) + "\n")
    _write(ralph / "progress.txt", HEADER + "\n".join(entry(s) for s in items))
    return root


def _topic_names(n_refs: int) -> list[tuple[str, str]]:
    """(topic, area) pairs: area + subject first, then numbered variants of a subject as a
    hand-grown index gets them ("Billing: invoice totals, checkout 3")."""
    base = [
        (f"{_area_word(a).capitalize()}: {s}", a) for a in AREAS for s in SUBJECTS[_area_word(a)]
    ]
    out: list[tuple[str, str]] = []
    k = 0
    while len(out) < n_refs:
        name, area = base[k % len(base)]
        rnd = k // len(base)
        out.append((name if rnd == 0 else f"{name}, case {rnd + 1}", area))
        k += 1
    return out


def _slug(name: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def indexed_project(root: Path, n_stories: int, n_refs: int, seed: int = 7) -> Path:
    """A project with a Progress Index of `n_refs` rows and the learnings of `n_stories`
    stories spread over their references (at least two items each); progress.txt also keeps
    the stories' log entries, as it does when the agent appends after each story."""
    items = stories(n_stories, seed)
    names = _topic_names(n_refs)
    by_area: dict[str, list[int]] = {}
    for r, (_name, area) in enumerate(names):
        by_area.setdefault(area, []).append(r)
    bodies: list[list[str]] = [[] for _ in names]
    bullets = [(s, ln) for s in items for ln in s.learnings]
    rnd = random.Random(seed + 1)
    for n, (s, ln) in enumerate(bullets):
        home = by_area.get(s.area) or [n % n_refs]
        bodies[rnd.choice(home)].append(f"- [{s.id}] {ln}")
    for r, body in enumerate(bodies):  # topics no story reached still hold two learnings
        while len(body) < 2:
            s, ln = bullets[(r * 13 + len(body)) % len(bullets)]
            body.append(f"- [{s.id}] {ln}")
    rows = []
    for (name, area), body in zip(names, bodies, strict=True):
        path = f"ralph/references/{_slug(name)}.md"
        rows.append(f"| {name} | {path} |")
        text = f"# {name}\n\nAreas: `{area}/`\n\n" + "\n".join(body) + "\n"
        _write(root / path, text)
    ralph = root / "scripts" / "ralph"
    index = "## Progress Index\n| Topic | Reference Path |\n|---|---|\n" + "\n".join(rows)
    log = "\n".join(entry(s) for s in items)
    _write(ralph / "prd.json", json.dumps(prd(items), indent=2) + "\n")
    _write(ralph / "progress.txt", f"{HEADER}{index}\n\n{log}")
    return root


def big_log_project(
    root: Path, megabytes: float, n_refs: int = 100, n_stories: int = 3000, seed: int = 7
) -> Path:
    """An indexed project (`n_stories` stories, `n_refs` references) whose progress.txt then
    grows with further log entries to about `megabytes` MB: a project years into its loop."""
    indexed_project(root, n_stories, n_refs, seed)
    path = root / "scripts" / "ralph" / "progress.txt"
    target = int(megabytes * 1_000_000)
    size = path.stat().st_size
    per = max(1, size // n_stories)  # bytes per entry, roughly
    extra = stories(n_stories + 2 * max(0, target - size) // per + 1, seed)[n_stories:]
    with open(path, "a", encoding="utf-8") as f:
        for s in extra:
            if size >= target:
                break
            text = "\n" + entry(s)
            f.write(text)
            size += len(text.encode("utf-8"))
    return root
