"""refloss: a condensed reference is not a wiped one (corpus cases in tests/adversarial)."""

from __future__ import annotations

from orchestrator.memory import refloss

REFERENCE = """# Auth flow

## US-003 - Login form
- The session cookie is set in `src/server/auth/session.ts` by `createSession()`; it is
  httpOnly and SameSite=Lax, so tests must use the `agent` from supertest to keep it.
- `POST /api/login` returns 401 with `{ error: "invalid_credentials" }`, never 404, so the
  form can show one message for unknown users and wrong passwords.
- Passwords are hashed with argon2id (`hashPassword` in `src/server/auth/hash.ts`);
  bcrypt was removed in US-002, do not import it again.
- Rate limiting: `loginLimiter` allows 5 attempts per 15 minutes per IP (express-rate-limit).

## US-004 - Logout and session expiry
- `DELETE /api/session` clears the cookie and deletes the row in `sessions` (Prisma model
  `Session`); the row's `expiresAt` is checked in `requireUser` middleware.
- Session lifetime is `SESSION_TTL_HOURS` (default 72) read in `src/server/config.ts`.
- The e2e test `tests/e2e/logout.spec.ts` needs `npm run db:seed` first.

## US-005 - Password reset
- Reset tokens live in `password_resets` with a sha256 of the token, never the token itself.
- Mail goes through `sendMail()` in `src/server/mail/index.ts`; in tests it writes to
  `tmp/mail/*.eml` (MAIL_TRANSPORT=file).
- `npm run typecheck` fails on `any` in `src/server/**`: use `unknown` and narrow.
"""

CONDENSED = """# Auth flow
- Session cookie: `createSession()` in `src/server/auth/session.ts`, httpOnly,
  SameSite=Lax; tests keep it with supertest's `agent`.
- `POST /api/login` -> 401 `invalid_credentials` (never 404).
- argon2id via `hashPassword` (`src/server/auth/hash.ts`); no bcrypt (removed US-002).
- `loginLimiter`: 5 attempts / 15 minutes / IP (express-rate-limit).
- `DELETE /api/session` clears cookie + `sessions` row (Prisma `Session`); `expiresAt`
  checked in `requireUser`; TTL `SESSION_TTL_HOURS` (72) in `src/server/config.ts`.
- `tests/e2e/logout.spec.ts` needs `npm run db:seed`.
- `password_resets` stores sha256 of the token; `sendMail()` (`src/server/mail/index.ts`)
  writes `tmp/mail/*.eml` in tests (MAIL_TRANSPORT=file).
- `npm run typecheck` rejects `any` in `src/server/**`: use `unknown`.
"""


def test_condensing_keeps_the_facts_and_passes() -> None:
    assert len(CONDENSED) < 0.7 * len(REFERENCE)
    assert refloss.assess(REFERENCE, CONDENSED) is None


def test_adding_and_small_edits_pass() -> None:
    assert refloss.assess(REFERENCE, REFERENCE + "\n## US-006\n- new fact\n") is None
    assert refloss.assess(REFERENCE, REFERENCE.replace("72", "48")) is None


def test_wipes_are_losses() -> None:
    for wiped in (
        "# Auth flow\n\n(nothing)\n",
        "",
        "# Auth flow\n- See the code.\n- Tests pass.\n",
        "# Auth flow\n- Auth works; sessions, logout and password reset are done.\n",
    ):
        loss = refloss.assess(REFERENCE, wiped)
        assert loss is not None, wiped
        assert loss.kept_terms < loss.old_terms // 4
        assert "content lines" in loss.describe()


def test_every_line_blanked_to_a_word_is_a_loss() -> None:
    blanked = "\n".join("- x" if line.strip() else "" for line in REFERENCE.splitlines())
    assert refloss.assess(REFERENCE, blanked) is not None


def test_small_references_are_not_judged() -> None:
    assert refloss.assess("# T\n- one fact `a.py`\n- two\n", "# T\n") is None


def test_compact_condense_check_refuses_a_wipe_and_takes_a_condensing() -> None:
    from orchestrator.upkeep.compact import condense_check

    assert condense_check(REFERENCE, CONDENSED, "Auth flow") == []
    [problem] = condense_check(REFERENCE, "# Auth flow\n\n(nothing)\n", "Auth flow")
    assert problem.startswith("it dropped most of the facts")
