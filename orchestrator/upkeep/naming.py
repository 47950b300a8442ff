"""Topic names a person would write, from what the learnings say.

A topic is named by its code area when the area says what it is ("Payments stripe",
"Database migrations"), and by the words that set its learnings apart when it is one of
several topics cut from one area or keyword ("Search: tokenizer & boosts"). Salient words
are frequent in the topic, rare in the history (tf-idf over all learnings) and, for a
piece of a group, more frequent there than in the rest of the group. They are what the
learnings are about (identifiers, nouns: see wordclass), not what they say is done or how
things are ("provides & complete"), and two words the learnings write as one phrase are
named so ("Schema validation"). Never "other", "General notes", story ids or numbered
parts; a name `ralph check` would call a duplicate of another takes the next best words
instead.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

from orchestrator.memory.entries import Item, paths_in
from orchestrator.upkeep.audit import SimilarIndex
from orchestrator.upkeep.wordclass import Grammar, stem

# One string split at import: a stop-word list reads better as text than as 150 literals.
_STOP_WORDS = (
    "about above after again against all also always and any are because been before being "
    "below between both but can cannot could did does doing done down during each every few "
    "for from further had has have having here how into its itself just like made make "
    "makes more most must need needs never new not now off once only other our out over own "
    "same should since some such than that the their them then there these they this those "
    "through too under until use used uses using very via was were what when where which "
    "while who why will with within without would you your added adds created updated "
    "implemented instead file files story stories work works working already still first "
    "second next true false null none value values don't doesn't isn't it's data type types "
    "test tests check checks build run runs call calls return returns one two way ways time "
    # Keywords of programming languages: frequent in code spans, never what a topic is about.
    "else elif const self this func async await void "
)
STOP = frozenset(_STOP_WORDS.split())
# Said of any learning ("seen while working on ...", "the existing approach"), so they
# name nothing.
_FILLER = frozenset(
    [
        "seen",
        "while",
        "working",
        "learned",
        "learning",
        "learnings",
        "note",
        "notes",
        "gotcha",
        "gotchas",
        "pattern",
        "patterns",
        "iteration",
        "iterations",
        "change",
        "changes",
        "changed",
        "fixed",
        "fixes",
        "issue",
        "issues",
        "based",
        "existing",
        "anything",
        "something",
        "present",
        "remain",
        "remains",
        "custom",
        "handle",
        "handles",
        "full",
        "well",
        "similar",
        "simple",
        "consistent",
        "conditional",
        "focused",
        "approach",
        "clean",
        "outside",
        "dedicated",
        "empty",
        "initial",
        "phase",
        "important",
        "correct",
        "correctly",
        "properly",
        "proper",
        "good",
        "better",
        "able",
        "instead",
        "rather",
        "even",
        "correct",
        "sure",
        "make",
        "sure",
        "ensure",
        "ensures",
    ]
)
GENERIC_DIRS = frozenset({"src", "lib", "app", "source", "internal", "pkg", "main", "java"})
# Whole words only: "49bc550" (a commit) holds no word "bc550".
WORD_RE = re.compile(r"(?<![a-z0-9])[a-z][a-z0-9]{3,}")
_CODE = re.compile(r"`([^`\n]+)`")
_WORD_CASED = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9]{3,}")
_ACRONYMS = {
    "db": "DB",
    "api": "API",
    "ui": "UI",
    "ipc": "IPC",
    "http": "HTTP",
    "sql": "SQL",
    "css": "CSS",
    "llm": "LLM",
    "ai": "AI",
    "e2e": "E2E",
    "i18n": "i18n",
    "k8s": "k8s",
    "json": "JSON",
    "graphql": "GraphQL",
}
_SPREAD = 0.5  # a word in more groups than this share is filler ("added", "aggiunto")
_TERMS = 3  # at most this many words after the head: a name, not a summary
_PHRASE_TERMS = 4  # the best words looked at for phrases (Vocabulary.phrases)
# Two words with only spaces between them; the second is looked at, not taken, so that
# "schema validation rules" gives both of its pairs. A word cut short ("disabl…") pairs
# with none.
_ADJACENT = re.compile(
    r"(?<![a-z0-9])([a-z][a-z0-9]{3,}+)[ \t]+(?=([a-z][a-z0-9]{3,}+)(?![a-z0-9]))"
)
_NOT_NOUN = 0.2  # the weight left to a word all evidence calls a verb or an adjective
_SPREAD_WEIGHT = 0.1  # and to a word of most groups
# Vocabulary.kind: how well a word names a topic, best first.
THING, SAID_OF_ALL, VERB_OR_ADJECTIVE = 0, 1, 2


# Words cut short ("control api disabl…" in pasted test output) and contractions, which the
# word pattern splits at the apostrophe ("doesn't" -> "doesn"): no word to name a topic by.
_NOT_WORDS = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z0-9_]+(?:…|\.\.\.)|\b[A-Za-z]+n['’]t\b")


def _clean(text: str) -> str:
    return _NOT_WORDS.sub(" ", text)


def words(text: str) -> set[str]:
    return {stem(w) for w in WORD_RE.findall(_clean(text).lower()) if w not in STOP}


def _cased(word: str) -> str:
    return _ACRONYMS.get(word, word)


# A "word" longer than this is data (a hash, a minified or pasted line), not what a
# topic is named by: as a name it would make one index row as long as itself.
LONGEST_WORD = 40
# A commit hash ("aa0c86f"): hex digits, letters and digits mixed. Logs cite commits
# ("Already committed (aa0c86f)"); such a word names no topic. A few letters then digits
# is a name ("ed25519", "e1000").
_HEX_ID = re.compile(r"(?=[a-f]*\d)[0-9a-f]{5,}")
_LETTERS_THEN_DIGITS = re.compile(r"[a-f]{1,3}\d+")


def is_data(word: str) -> bool:
    """A number, a hash or a pasted run of characters: never a word a topic is named by."""
    if word.isdigit() or len(word) > LONGEST_WORD:
        return True
    return bool(_HEX_ID.fullmatch(word)) and not _LETTERS_THEN_DIGITS.fullmatch(word)


class Vocabulary:
    """Word bags of all learnings and their document frequencies: what makes a word
    salient. Story-id prefixes ("prop" of PROP-002) and filler never name a topic."""

    def __init__(self, items: list[Item]) -> None:
        self._bags: dict[int, set[str]] = {}
        self._forms: dict[str, Counter[str]] = {}  # stem -> its written forms
        self._stems: dict[str, str] = {}  # written form given by `label` -> its stem
        self._pairs: dict[int, list[tuple[str, str]]] = {}  # see _adjacent
        self.skip = set(_FILLER)
        for it in items:
            for sid in it.source.split(","):
                self.skip.update(w.lower() for w in re.findall(r"[A-Za-z]+", sid))
        self.df: Counter[str] = Counter(w for it in items for w in self.bag(it))
        self.n = max(1, len(items))
        # Names of things: identifiers (useAuth) always; the words of `code` spans unless
        # they read as a verb or an adjective there too (`stale`, `text-muted rounded`).
        self.ident: set[str] = set()
        self.code: set[str] = set()
        self.grammar = Grammar()
        for it in items:
            text = _clean("\n".join(it.lines))
            self.grammar.read(text)
            self.grammar.read_paths([*it.files, *it.applies])
            for w in _WORD_CASED.findall(text):
                low = stem(w.lower())
                forms = self._forms.get(low)
                if forms is None:  # not setdefault: a Counter made per word cost a tenth
                    forms = self._forms[low] = Counter()
                forms[w] += 1
                if not w[1:].islower() and not w.isupper():  # useAuth, DealOggetto
                    self.ident.add(low)
            if "`" in text:
                for span in _CODE.findall(text):
                    if not paths_in(span):  # a path's folders are the area, not a thing
                        self.code.update(stem(w) for w in WORD_RE.findall(span.lower()))
        self.spread: set[str] = set()  # see learn_groups
        self._things: dict[str, float] = {}  # see _thing

    def learn_groups(self, groups: list[list[Item]]) -> None:
        """Words found in most groups of the log ("added", "aggiunto", "component") say
        little of any one of them: a name takes them only when the rest of its words
        are verbs and adjectives. Needs five groups to tell."""
        if len(groups) < 5:
            return
        spread = Counter(w for its in groups for w in set().union(*map(self.bag, its)))
        self.spread.update(w for w, c in spread.items() if c > _SPREAD * len(groups))
        self._things.clear()

    def kind(self, word: str) -> int:
        """How well `word` (a stem) can name a topic: THING, SAID_OF_ALL (a word of most
        groups) or VERB_OR_ADJECTIVE (what the learnings do or how things are)."""
        if word not in self.ident and self._noun_weight(word) <= 0.5:
            return VERB_OR_ADJECTIVE
        return SAID_OF_ALL if word in self.spread else THING

    def label(self, word: str) -> str:
        """The word as the learnings write it most often ("ingress", not the stem "ingre";
        "useAuth", not "useauth")."""
        found = self._forms.get(word)
        if not found:
            written = _cased(word)
        else:
            best = min(found, key=lambda w: (-found[w], w))
            written = _cased(best) if best.islower() else best
        self._stems[written] = word
        return written

    def phrases(self, items: list[Item], terms: list[str]) -> dict[tuple[str, str], str]:
        """Pairs of the first `terms` (from `salient`: the pairs names are most often made
        of; all eight cost a sixth of naming) that the learnings write as one phrase, one
        word right after the other ("schema validation", "demo mode"), in at least two
        of `items` and in most of those that have both: {(first, second): "first second"}."""
        stems = {self._stems.get(t, stem(t.lower())): t for t in terms[:_PHRASE_TERMS]}
        if len(stems) < 2:
            return {}
        forms = {f.lower(): w for w in stems for f in self._forms.get(w, {w: 1})}
        seen: Counter[tuple[str, str]] = Counter()
        bags = [self.bag(it).intersection(stems) for it in items]
        for it, bag in zip(items, bags, strict=True):
            if len(bag) > 1:
                found = {(forms.get(a, ""), forms.get(b, "")) for a, b in self._adjacent(it)}
                seen.update(p for p in found if p[0] in bag and p[1] in bag)
        out = {}
        for (sa, sb), n in seen.items():
            both = sum(1 for bag in bags if sa in bag and sb in bag)
            if sa != sb and n >= 2 and 2 * n > both:
                a, b = stems[sa], stems[sb]
                out[(a, b)] = f"{a} {b.lower() if b.istitle() else b}"
        return out

    def _adjacent(self, item: Item) -> list[tuple[str, str]]:
        """The pairs of words written one right after the other in `item`, lower-case."""
        key = id(item)
        if key not in self._pairs:
            self._pairs[key] = _ADJACENT.findall("\n".join(item.lines).lower())
        return self._pairs[key]

    def kinds(self, terms: Iterable[str]) -> dict[str, int]:
        """The `kind` of each written word of `terms` (from `salient`)."""
        return {t: self.kind(self._stems.get(t, stem(t.lower()))) for t in terms}

    def _noun_weight(self, word: str) -> float:
        return self.grammar.noun_weight(word, self._forms.get(word))

    def _thing(self, word: str) -> float:
        """How much `word` names a thing: identifiers most, then nouns; verbs, adjectives
        and adverbs ("provides", "stale", "identically") least."""
        found = self._things.get(word)
        if found is None:
            found = self._things[word] = self._weigh_thing(word)
        return found

    def _weigh_thing(self, word: str) -> float:
        if word in self.ident:
            return 1.5
        noun = _NOT_NOUN + (1 - _NOT_NOUN) * self._noun_weight(word)
        if word in self.spread:
            noun *= _SPREAD_WEIGHT
        return noun * 1.5 if word in self.code else noun

    def bag(self, item: Item) -> set[str]:
        key = id(item)
        if key not in self._bags:
            self._bags[key] = words("\n".join(item.lines))
        return self._bags[key]

    def counts(self, items: list[Item]) -> Counter[str]:
        return Counter(w for it in items for w in self.bag(it))

    def salient(
        self,
        items: list[Item],
        rest: tuple[Counter[str], int] | None = None,
        skip: Iterable[str] = (),
        n: int = 8,
        written: bool = True,
    ) -> list[str]:
        """The `n` words that best say what `items` are about, as written. With `rest`
        (word counts and size of the group they were cut from), words more frequent here
        than in the group come first. `written=False`: the stems, for comparing."""
        counts = self.counts(items)
        size = len(items)
        avoid = self.skip | {stem(w) for w in skip}
        ranked: list[tuple[float, int, str]] = []
        for least in (min(2, size), 1):  # words of one learning only when need be
            ranked = []
            for w, c in counts.items():
                if w in avoid or c < least or is_data(w):
                    continue
                score = (c / size) * math.log(1 + self.n / self.df[w]) * self._thing(w)
                if rest is not None and rest[0][w]:
                    score *= min(3.0, (c / size) / (rest[0][w] / rest[1]))
                ranked.append((-score, -c, w))
            if any(self.kind(w) == THING for _s, _c, w in ranked):
                break
        ranked.sort()
        top = [w for _s, _c, w in ranked[:n]]
        return [self.label(w) for w in top] if written else top


def area_head(area: str, taken: SimilarIndex) -> str:
    """A folder as a person names it: its last meaningful parts as words ("src/db/
    migrations" -> "DB migrations"), longer when that is taken; "" when the folder says
    nothing of its own ("src", top-level files): its learnings name it then."""
    parts = [
        w
        for seg in area.split("/")
        for w in re.split(r"[-_.\s]+", seg)
        if w and w[0].isalpha() and w.lower() not in GENERIC_DIRS
    ]
    if not parts:
        return ""
    for n in range(min(2, len(parts)), len(parts) + 1):
        name = _sentence(" ".join(_cased(p.lower()) if p.islower() else p for p in parts[-n:]))
        if name not in taken:
            return name
    return ""


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _joined(terms: list[str]) -> str:
    if len(terms) <= 1:
        return "".join(terms)
    return ", ".join(terms[:-1]) + " & " + terms[-1]


def candidates(
    head: str,
    terms: list[str],
    kinds: Mapping[str, int] | None = None,
    phrases: Mapping[tuple[str, str], str] | None = None,
) -> list[str]:
    """Names to try in order: the two best words, then other pairs, then three words,
    then one; by `kinds` (Vocabulary.kinds), names of things before words said of all
    groups before verbs and adjectives: "Split" before "Split & identically". A pair the
    learnings write as one phrase (`phrases`, Vocabulary.phrases) is named as written:
    "Schema validation", not "Validation & schema"."""
    top = terms[:8]
    rank = kinds or {}
    phrases = phrases or {}
    picks: list[list[str]] = []
    picks += [[a, b] for i, a in enumerate(top) for b in top[i + 1 :]]
    picks += [top[:3]] if len(top) >= 3 else []
    picks += [[t] for t in top]
    picks.sort(key=lambda p: max(rank.get(t, THING) for t in p))  # stable: order above
    names = []
    for p in picks:
        pair = (p[0], p[-1]) if len(p) == 2 else ("", "")
        body = phrases.get(pair) or phrases.get(pair[::-1]) or _joined(p[:_TERMS])
        names.append(f"{head}: {body}" if head else _sentence(body))
    return [n for n in dict.fromkeys(names) if n and not n.endswith(": ")]


def unique(options: list[str], taken: SimilarIndex, span: str) -> str:
    """The first option `ralph check` would not call a duplicate of a taken name; past
    them all, the best one with the stories it spans (never a bare "(2)")."""
    for name in options:
        if name not in taken:
            return name
    best = options[0] if options else "Learnings"
    name, n = f"{best} ({span})", 2
    while name in taken:
        name, n = f"{best} ({span}, {n})", n + 1
    return name


def story_span(items: list[Item]) -> str:
    first, last = items[0].source.split(",")[0], items[-1].source.split(",")[0]
    return first if first == last else f"{first} to {last}"
