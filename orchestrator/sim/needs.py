"""Memory that matters to the simulated agent: a story's needs and the mistakes they prevent.

A sim script (`sim.yaml`) says which earlier learnings a story depends on (`needs`: reference
topics, or one learning's text; by default the topics it `reads`). When the agent starts a
story, each need whose learning already exists in the project's memory is checked against
what the agent saw: its prompt and the files it opened (it may open references named in the
index, as a real agent would, at a token cost; it does so with probability `open_rate`).
A need it did not see turns, with probability `mistake_rate`, into the mistake the learning
prevents: the story's checks fail, the attempt is recorded in progress.txt and the story takes
another iteration (or, for a third of mistakes, a fix-up within the iteration at a token cost).
A failed attempt is remembered: the next attempt at the story knows what broke.

The draws come from `random.Random(f"{seed}|{story}|{attempt}")`: replicates with different
seeds differ, and a run is repeatable from its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from orchestrator.sim.script import Need, SimScript

FAILED_NOTE = "Checks failed (sim): {story} missed the learning on {topic}"
FIXUP_SHARE = 1 / 3  # of mistakes, those fixed within the iteration (extra tokens)


@dataclass(frozen=True)
class NeedCheck:
    topic: str
    learning: str  # the text the story depends on (the first bullet when by topic)
    seen: bool
    how: str  # prompt/opened | learned from a failed attempt | missing


def normal(text: str) -> str:
    return " ".join(text.split()).lower()


def rng_for(seed: int, story_id: str, attempt: int) -> random.Random:
    return random.Random(f"{seed}|{story_id}|{attempt}")


def failed_note(story_id: str, topic: str) -> str:
    return FAILED_NOTE.format(story=story_id, topic=topic)


def failed_attempts(progress_text: str, story_id: str) -> int:
    prefix = normal(FAILED_NOTE.split("{story}")[0] + story_id + " ")
    return normal(progress_text).count(prefix)


def check(
    needs: list[Need],
    script: SimScript | None,
    *,
    memory: str,
    seen: str,
    progress: str,
    story_id: str,
) -> list[NeedCheck]:
    """Each need whose learning exists in `memory` (the project's files), and whether the
    agent saw it (`seen`: its prompt and what it opened) or learned it from a failed attempt
    recorded in `progress`."""
    memory_n, seen_n, progress_n = normal(memory), normal(seen), normal(progress)
    out = []
    for need in needs:
        texts = (
            [need.learning] if need.learning else (script.bullets_of(need.topic) if script else [])
        )
        known = [t for t in texts if normal(t) and normal(t) in memory_n]
        if not known:
            continue  # nothing learned yet that this story could have been told
        if any(normal(t) in seen_n for t in known):
            out.append(NeedCheck(need.topic, known[0], True, "prompt/opened"))
        elif normal(failed_note(story_id, need.topic)) in progress_n:
            out.append(NeedCheck(need.topic, known[0], True, "learned from a failed attempt"))
        else:
            out.append(NeedCheck(need.topic, known[0], False, "missing"))
    return out


def mistake(
    checks: list[NeedCheck], rng: random.Random, rate: float
) -> tuple[str, NeedCheck] | None:
    """The first missing learning that causes its mistake: ("failed" | "fixup", need)."""
    for c in checks:
        if not c.seen and rng.random() < rate:
            return ("fixup" if rng.random() < FIXUP_SHARE else "failed"), c
    return None
