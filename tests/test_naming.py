"""Topic names are made of what the learnings are about (identifiers, nouns), not of what
they say is done or how things are (verbs, adjectives, adverbs): issue 17."""

from __future__ import annotations

import re

from orchestrator.memory.entries import Item
from orchestrator.upkeep import migrate, naming
from orchestrator.upkeep.wordclass import Grammar, looks_like_non_noun

CAP = 800  # config default references.max_tokens
VERBS_AND_ADJECTIVES = {
    "omits",
    "include",
    "includes",
    "rejects",
    "provides",
    "complete",
    "stale",
    "critical",
    "dynamic",
    "away",
    "current",
    "identically",
    "stay",
}


def _log(entries: list[tuple[str, list[str]]]) -> str:
    """A flat log: (story id, learnings) per entry; no files, so the words group them."""
    out = ["# Ralph Progress Log", "Started: today", "---", ""]
    for n, (sid, learnings) in enumerate(entries, 1):
        out += [f"## 2026-01-{n % 28 + 1:02d} - {sid}", "- Did the story"]
        out.append("- **Learnings for future iterations:**")
        out += [f"  - {ln}" for ln in learnings]
        out += ["---", ""]
    return "\n".join(out)


def _names_of(text: str) -> dict[str, str]:
    """Topic name -> the text of its learnings."""
    plan = migrate.build_plan(text, max_tokens=CAP)
    return {t.name: " ".join(ln for it in t.items for ln in it.lines) for t in plan.topics}


def _weak_words(name: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", name)} & VERBS_AND_ADJECTIVES


def _names_about(topic: list[str], other: list[str], said: str) -> list[str]:
    """Migrate a log of `topic`'s learnings then `other`'s, one story each: the names of the
    topics whose learnings say `said` (at least one), none with a verb or an adjective."""
    text = _log([(f"US-{k:03d}", [ln]) for k, ln in enumerate(topic + other, 1)])
    names = _names_of(text)
    about = [n for n, learnings in names.items() if said in learnings]
    assert about, names
    assert not [n for n in about if _weak_words(n)], names
    return about


def test_a_topic_is_named_by_its_identifier_not_by_the_verbs_around_it() -> None:
    # Pasted test output, as in a real history: the same verbs in every line, one class.
    api = [
        "CheckybotControlApiTest omits removed heartbeat fields and must include the owner",
        "CheckybotControlApiTest rejects relative urls; summaries include component counts",
        "The list omits archived checks: CheckybotControlApiTest must include them later",
        "CheckybotControlApiTest omits stale rows and rejects disabled runs",
    ]
    ledger = [
        "Ledger export writes one CSV row per invoice",
        "Ledger export rounds the invoice totals to cents",
        "Ledger export keeps the invoice currency column",
    ]
    for name in _names_about(api, ledger, "CheckybotControlApiTest"):
        assert "CheckybotControlApiTest" in name


def test_nouns_of_a_topic_name_it_before_the_verbs_and_adjectives_of_its_prose() -> None:
    # The adjectives and verbs are the topic's most frequent words: the old names were
    # "provides & complete"; the things the learnings are about are the store and trail.
    docs = [
        "Evidence store provides complete audit trail for compliance gates",
        "The evidence store provides complete history; keep the audit trail append-only",
        "CI examples stay complete: the evidence store provides a trail per run",
        "Troubleshooting provides complete steps when the audit trail is missing",
    ]
    other = [
        "Prisma migration renames the invoice column",
        "Prisma migration seeds the invoice table",
        "Prisma migration needs a shadow database",
    ]
    for name in _names_about(docs, other, "audit trail"):
        assert re.search(r"(?i)store|trail|audit|evidence", name), name


def test_a_pair_with_a_verb_or_adjective_comes_after_a_name_of_things() -> None:
    kinds = {"Split": naming.THING, "identically": naming.VERB_OR_ADJECTIVE}
    options = naming.candidates("", ["Split", "identically"], kinds)
    assert options[0] == "Split", options
    assert options.index("Split & identically") > options.index("Split")
    # Without kinds, the order is as before: the two best words first.
    assert naming.candidates("", ["Split", "identically"])[0] == "Split & identically"
    # A word of most groups ranks between a thing and a verb or adjective.
    kinds = {"monitor": 0, "stale": 2, "heartbeat": naming.SAID_OF_ALL}
    got = naming.candidates("Api", ["monitor", "stale", "heartbeat"], kinds)
    assert got.index("Api: monitor & heartbeat") < got.index("Api: monitor & stale"), got


def test_spelling_tells_a_verb_or_adjective_apart_from_a_noun() -> None:
    for word in ("provides", "omits", "included", "critical", "decorative", "identically"):
        assert looks_like_non_noun(word), word
    for word in ("aggiornato", "modificati"):  # Italian participles, as in one history
        assert looks_like_non_noun(word), word
    for word in ("store", "heartbeat", "archive", "directive", "caching", "modal", "feed"):
        assert not looks_like_non_noun(word), word


def test_where_a_word_stands_weighs_it() -> None:
    g = Grammar()
    for text in (
        "Open the modal. The modal is closed by Escape; each modal has a title",
        "The check is stale when the run is stale; it must omit the field",
        "Rendering omits the row and provides the cursor",
    ):
        g.read(text)
    assert g.noun_weight("modal") > 0.5  # after "the", before a pause or "is"
    assert g.noun_weight("stale") <= 0.5  # after "is"
    assert g.noun_weight("omit") <= 0.5  # after "must", before "the"
    assert g.noun_weight("provide") <= 0.5
    assert g.noun_weight("cursor") > 0.5  # nothing speaks against a noun
    # An adjective's ending with a plural is a noun's: "professionals" names people.
    g.read("Professional rates apply")
    assert g.noun_weight("professional", {"Professional": 1}) <= 0.5
    g.read("Professionals book the slot; professionals see it")
    assert g.noun_weight("professional", {"Professional": 1, "professionals": 2}) > 0.5
    # File names are names of things, whatever their words look like elsewhere.
    g.read("Keep it decorative")
    assert g.noun_weight("decorative") <= 0.5
    g.read_paths(["src/components/Decorative.tsx"])
    assert g.noun_weight("decorative") > 0.5


def _salient(lines: list[str]) -> tuple[list[Item], naming.Vocabulary, list[str]]:
    """One learning per line, each from its own story: the items, their vocabulary and its
    salient terms."""
    items = [Item([f"- {ln}"], f"US-{n}", [], n, tokens=20) for n, ln in enumerate(lines, 1)]
    vocab = naming.Vocabulary(items)
    return items, vocab, vocab.salient(items)


def test_a_code_span_word_that_reads_as_an_adjective_names_nothing() -> None:
    # `stale` is a status value in backticks: a word of code, but said of things.
    lines = [
        "A monitor is `stale` when the heartbeat is late; the monitor is `stale` then",
        "The monitor turns `stale` after the heartbeat interval",
        "A monitor row is stale once its heartbeat is missed",
    ]
    _, vocab, terms = _salient(lines)
    assert terms[0].lower() in {"monitor", "heartbeat"}, terms
    assert vocab.kinds(terms)["stale"] == naming.VERB_OR_ADJECTIVE
    name = naming.candidates("", terms, vocab.kinds(terms))[0]
    assert "stale" not in name.lower(), name


def test_two_words_written_as_one_phrase_name_it_as_written() -> None:
    # "schema validation" is what the learnings call it: not "Validation & schema".
    lines = [
        "Schema validation: validation of a schema runs first",
        "Run schema validation before the export",
        "The schema validation error names the field",
        "Schema validation is cached per export",
    ]
    items, vocab, terms = _salient(lines)
    phrases = vocab.phrases(items, terms)
    assert ("schema", "validation") in phrases, (terms, phrases)
    assert ("validation", "schema") not in phrases
    assert {terms[0], terms[1]} == {"schema", "validation"}, terms
    name = naming.candidates("Api", terms, vocab.kinds(terms), phrases)[0]
    assert name == "Api: schema validation", name
    # Once is not a phrase: the words stay apart.
    once = items[:1] + [Item(["- Validation of the schema"], "US-9", [], 9, tokens=20)]
    assert naming.Vocabulary(once).phrases(once, ["schema", "validation"]) == {}


def test_a_commit_hash_never_names_a_topic() -> None:
    # Real logs cite the commits that already did a story; one history's topic was
    # "Aa0c86f & bc550" (the second word the tail of "49bc550").
    log = _log(
        [
            ("US-001", ["Already committed (aa0c86f): marked passes true in the PRD"]),
            ("US-002", ["Already implemented in US-001 (commit 49bc550), checked again"]),
            ("US-003", ["Already committed (aa0c86f) and verified against commit 49bc550"]),
        ]
    )
    names = _names_of(log)
    assert names and not any(re.search(r"(?i)aa0c86f|bc550", n) for n in names), names
    assert all(naming.is_data(w) for w in ("aa0c86f", "c0ffee1", "12345", "x" * 41))
    names_too = ("deadline", "e2e", "sha256", "facade", "oauth2", "ed25519", "e1000", "bc550")
    assert not any(naming.is_data(w) for w in names_too)
    assert naming.words("commit 49bc550 and 1a2b3c4d") == {"commit"}


def test_a_pasted_giant_word_never_names_a_topic() -> None:
    # A minified line or a hash pasted as a learning: as a name it made one index row
    # 20,000 characters wide.
    giant = "x" * 20_000
    log = _log([("US-001", [giant]), ("US-002", [f"Session tokens expire {giant}"])])
    names = _names_of(log)
    assert names and all(len(name) < 100 for name in names), [n[:80] for n in names]
