"""Whether a word of the learnings names a thing (a noun) or says something of one (a verb,
an adjective, an adverb): topic names are made of the former ("Evidence store", not
"provides & complete").

No tagger: no model to download on an offline machine, and dev prose defeats taggers
trained on news anyway. Three kinds of evidence, gathered over all the learnings of a
history, weigh each word:

- what a word looks like: a curated list of verbs and adjectives frequent in developer
  notes, and endings that nouns rarely have ("-ly", "-ive", "-ous", participles);
- where it stands: after "the"/"a"/"each" and before a pause or "is"/"of" (a noun), after
  "must"/"should"/"we" or right before "the" (a verb), after "is"/"very"/"not" (an
  adjective or participle); an adjective's ending with a plural ("collectibles") is a noun's;
- where it is a name already: the words of the files the learnings concern.

`Grammar.noun_weight(word)` is the share of the evidence that says "noun" (0 to 1).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping


def _words(text: str) -> frozenset[str]:
    """A word list written as text: reads better than hundreds of literals."""
    return frozenset(text.split())


# Verbs, adjectives and adverbs that developer notes use often and rarely as the name of a
# thing. Words a person does name topics by ("cache", "store", "merge", "default") are
# left out whatever else they can be: their use in the learnings decides.
_NOT_NOUNS = _words(
    """
    provide omit include exclude reject allow await convert create require define produce
    compile maintain affect avoid expect contain ensure prevent apply skip succeed respect
    preserve remove delete enable disable show hide generate implement extract replace
    resolve validate verify detect save insert append trim strip accept receive send emit
    wait keep treat follow read write prefer want know become seem appear exist happen
    occur depend refer reflect rely reuse remember forget mean matter give take bring
    finish continue describe explain mention consider pass assume belong stay remain
    refactor rename retry reset sort walk render compute inject reduce classify negotiate
    animate cancel install refresh invoke execute navigate submit configure initialize
    register subscribe unsubscribe mount unmount persist populate encode decode serialize
    deserialize normalize sanitize unwrap migrate deploy recompute rerender
    complete stale critical dynamic away current previous minimal exact identical
    unchanged reduced quick extra specific external alone concurrent primary bigger
    manual muted rounded inline available upper unsafe useful risky latest last separate
    cross single incremental hidden generic basic static global local internal optional
    additional different full empty valid invalid correct wrong proper old large small
    long short high low fast slow easy hard safe secure stable broken missing visible
    enabled disabled active inactive ready pending done failed successful important
    necessary possible required unique multiple several various entire whole major minor
    real actual final initial original prior recent deprecated experimental native raw
    dirty fresh reliable straightforward explicit implicit direct indirect automatic
    relevant obvious clear nice great huge tiny main open closed light dark heavy
    visual happy appropriate multi lower upper marked floating aware prepare often
    sometimes usually rarely soon elsewhere everywhere accordingly
    whenever later earlier together separately instead otherwise meanwhile anyway
    fully mostly quickly mainly easily auto built found shown given taken written kept
    left sent made known seen gone broken chosen hidden thrown begun
    """
)

# Italian function words and verbs: one history of the corpus is written in Italian.
_ITALIAN = _words(
    """
    deve devono viene vengono quando sono essere come anche della delle degli nella nelle
    sulla questo questa quello quella dopo prima sempre ancora solo ogni tutti tutte senza
    tramite perché dove cosa fatto può possono invece già
    """
)

# Endings of adverbs, adjectives and participles. Nouns with them are listed apart; their
# plural, or a determiner before them, speaks for them too.
_ADJ_ENDINGS = ("ly", "ive", "ous", "ful", "less", "ible", "ical", "ional", "ernal", "imal")
_PARTICIPLE_ENDINGS = ("ed",)
# Italian, Spanish and Portuguese participles ("Aggiornato", "Creato", "atualizado").
_ROMANCE_PARTICIPLES = ("ato", "ati", "ito", "iti", "ado", "ados", "ido", "idos")
_NOUNS_WITH_THOSE_ENDINGS = _words(
    """
    assembly anomaly family supply reply poly
    archive directive primitive alternative objective narrative derivative executive
    initiative perspective incentive relative representative drive olive hive
    need seed feed speed shed bleed breed hundred embed
    potato tomato burrito mosquito tornado avocado
    decimal animal
    """
)
_GERUND_ENDING = "ing"  # "caching", "routing" name things; "running", "showing" do not

# Words that stand before a noun, or before an adjective and its noun.
DETERMINERS = _words("the a an each every this these those its their our your my any some no all")
# Words that follow a noun phrase's last word: a pause in the sentence, a verb of its own.
_AFTER_NOUN = _words(
    """
    is are was were has have had must should can cannot will would could may might does
    doesn't isn't of in on for with from by at to and or when that which needs uses
    """
)
# Words after which comes a verb: modals, subjects, frequency adverbs.
_BEFORE_VERB = _words(
    """
    must should can cannot will would could may might does do did don't doesn't didn't
    won't can't always never also automatically we they it
    """
)
# Words after which comes an adjective or a participle.
_BEFORE_ADJECTIVE = _words(
    """
    is are was were be been being become becomes stays stay remain remains seems seem
    very too quite fully not isn't aren't wasn't
    """
)
# Words that follow a verb: its object ("omits it", "provides them").
_OBJECTS = _words("it them")


def _alternatives(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w)))


# Each kind of evidence is one pattern run over a learning (a loop over its words in Python
# made migrate of 3,000 stories half as slow again). A word is a run of letters and digits
# starting with a letter, at least four long, not glued to "_" or an apostrophe.
_EDGE = r"(?<![a-z0-9_'’])"
_END = r"(?![a-z0-9_'’])"
_WORD = r"([a-z][a-z0-9]{3,}+)" + _END  # possessive: no backtracking into a word
_AFTER_DETERMINER = re.compile(
    rf"{_EDGE}(?:{_alternatives(DETERMINERS)})\s+{_WORD}"
    rf"(?=\s*(?:[^\sa-z0-9_'’]|$)|\s+(?:{_alternatives(_AFTER_NOUN)}){_END})"
)
# After "must", "we", "is", "very" ... or right before "the", "it" ...: a verb or an
# adjective. One pattern for both: "must include the" counts "include" once.
_VERB_OR_ADJECTIVE = re.compile(
    rf"{_EDGE}(?:(?:{_alternatives(_BEFORE_VERB | _BEFORE_ADJECTIVE)})\s+{_WORD}"
    rf"|{_WORD}(?=\s+(?:{_alternatives(DETERMINERS | _OBJECTS)}){_END}))"
)
_PRIOR_NOUN = 2.0  # a word nothing speaks against is a noun
_PRIOR_OTHER = 2.0  # a listed verb or adjective needs that much evidence to be one


def stem(word: str) -> str:
    """The form names compare words by: "services" and "service" are one word."""
    return word.rstrip("s") if len(word) > 4 else word


def _lemmas(form: str) -> set[str]:
    """`form` and what it may be inflected from ("provides", "provided" -> "provide")."""
    out = {form}
    for end, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e")):
        if form.endswith(end) and len(form) - len(end) >= 3:
            out.add(form[: -len(end)] + repl)
    return out


def looks_like_non_noun(form: str) -> bool:
    """By its spelling alone (a lower-case written form): a listed verb or adjective or one
    of their inflections, or the ending of an adjective, an adverb or a participle."""
    if form in _NOUNS_WITH_THOSE_ENDINGS or form.endswith(_GERUND_ENDING):
        return False
    if _lemmas(form) & _NOT_NOUNS or form in _ITALIAN:
        return True
    if len(form) < 5:
        return False
    if form.endswith(_ADJ_ENDINGS + _PARTICIPLE_ENDINGS):
        return True
    return len(form) >= 6 and form.endswith(_ROMANCE_PARTICIPLES)


def _plural(form: str) -> bool:
    return form.endswith("s") and not form.endswith(("ss", "us", "is", "ous"))


class Grammar:
    """Evidence for each word (a stem, as naming cuts it) of being a noun or not."""

    def __init__(self) -> None:
        self.noun: Counter[str] = Counter()
        self.other: Counter[str] = Counter()
        self.in_paths: set[str] = set()  # words of file names
        self._weights: dict[str, float] = {}

    def read(self, text: str) -> None:
        """Count the places of each word in one learning."""
        low = text.lower()
        self.noun.update(map(stem, _AFTER_DETERMINER.findall(low)))
        self.other.update(stem(a or b) for a, b in _VERB_OR_ADJECTIVE.findall(low))
        self._weights.clear()

    def read_paths(self, paths: Iterable[str]) -> None:
        """Words of file names are names of things ("CheckybotControlApiTest.php")."""
        seen = {  # whole words only: "ExternalLink.tsx" says nothing of "external"
            stem(w.lower()) for p in paths for w in re.split(r"[^A-Za-z0-9]+", p) if len(w) >= 4
        }
        self.noun.update(seen)
        self.in_paths.update(seen)
        self._weights.clear()

    def noun_weight(self, word: str, written: Mapping[str, int] | None = None) -> float:
        """The share of the evidence that says `word` (a stem) names a thing. `written`:
        how often each written form of it occurs ("Provides": 2, "provide": 1), the same
        at each call (the weight is kept until the next `read`)."""
        if word not in self._weights:
            forms: Counter[str] = Counter()
            for form, n in (written or {word: 1}).items():
                forms[form.lower()] += n
            self._weights[word] = self._weigh(word, forms)
        return self._weights[word]

    def _weigh(self, word: str, forms: Counter[str]) -> float:
        usual = min(forms, key=lambda f: (-forms[f], f))
        noun = float(self.noun[word])
        if looks_like_non_noun(usual) and word not in self.in_paths:
            prior_noun, prior_other = 0.0, _PRIOR_OTHER
            if not _lemmas(usual) & _NOT_NOUNS and any(_plural(f) for f in forms):
                noun += 2  # adjectives have no plural: "collectibles", "professionals"
        elif usual.endswith(_GERUND_ENDING):
            prior_noun, prior_other = 1.0, 1.0
        else:
            prior_noun, prior_other = _PRIOR_NOUN, 0.0
        noun += prior_noun
        return noun / (noun + self.other[word] + prior_other)
