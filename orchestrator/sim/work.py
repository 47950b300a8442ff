"""One story's work by the simulated agent: read, write, record, commit (see sim_agent)."""

from __future__ import annotations

import datetime as _dt
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from orchestrator import fsutil, git
from orchestrator.memory.markdown import split_story_tag
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.progress import Progress
from orchestrator.memory.references import slugify
from orchestrator.sim import needs as sim_needs
from orchestrator.sim import prompt as sim_prompt
from orchestrator.sim.options import Options
from orchestrator.sim.script import (
    SCRIPT_NAME,
    SimScript,
    StoryPlan,
    generated_plan,
    load_script,
    safe_target,
)
from orchestrator.sim.stream import Stream

SENTINEL = "<promise>COMPLETE</promise>"
DEFAULT_REFERENCES_DIR = "ralph/references"
_FALLBACK_IDENTITY = git.Identity("Ralph Sim", "ralph-sim@localhost")


def changed_region(old: str, new: str) -> tuple[str, str]:
    """The smallest whole-line span that differs, as an Edit tool's old/new strings."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    start = old.rfind("\n", 0, start) + 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    tail = old[len(old) - end :]
    cut = tail.find("\n")
    end = end - (cut + 1) if cut >= 0 else 0
    return old[start : len(old) - end], new[start : len(new) - end]


def _normal(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Work:
    stream: Stream
    ws: sim_prompt.Workspace
    prd: Prd
    story: Story
    prompt: str
    mode: str
    faults: set[str]
    opts: Options
    touched: list[str] = field(default_factory=list)
    read_paths: set[str] = field(default_factory=set)
    last_entry: str = ""
    seen: list[str] = field(default_factory=list)  # what the agent read this iteration
    knows_index: bool = False
    _plan: StoryPlan | None = None
    _script: SimScript | None = None

    # ---- the story, start to end -----------------------------------------------------------
    def run(self) -> int:
        s = self.stream
        s.say(f"I'll implement {self.story.id} - {self.story.title} ({self.mode} mode).")
        progress_text = self._progress_text()
        rng = sim_needs.rng_for(
            self.opts.seed,
            self.story.id,
            sim_needs.failed_attempts(progress_text, self.story.id),
        )
        self.read_context(rng)
        stop = self.midway_faults(before_writing=True)
        if stop is not None:
            return stop
        plan = self.plan()
        s.say(f"Implementing {self.story.id}: {len(plan.files)} file(s) to write.")
        self.write_files(plan)
        made = sim_needs.mistake(self.check_needs(progress_text), rng, self.opts.mistake_rate)
        if made is not None and made[0] == "failed":
            return self.fail_story(plan, made[1])
        if made is not None:
            self.fix_up(plan, made[1])
        for check in plan.checks:
            # Shown as run so the transcript looks like a real session; the sim runs nothing.
            self.stream.bash(check, "Run the project's checks", "OK (simulated: not run)")
        stop = self.midway_faults(before_writing=False)
        if stop is not None:
            return stop
        if "skip-prd" not in self.faults:
            self.mark_passed()
        ref_path = self.record_reference(plan) if self.mode == "indexed" else None
        self.append_progress(plan, ref_path)
        self.apply_damage()
        if "skip-commit" not in self.faults:
            self.commit()
        return self.finish()

    def midway_faults(self, before_writing: bool) -> int | None:
        if before_writing and "noop" in self.faults:
            text = f"I looked at {self.story.id} but did not change anything this time."
            self.stream.say(text)
            self.stream.result(text)
            return 0
        if not before_writing and "crash-midway" in self.faults:
            print(
                "Error: simulated crash after writing files (fault 'crash-midway')",
                file=sys.stderr,
                flush=True,
            )
            return self.opts.exit_code
        return None

    # ---- reading --------------------------------------------------------------------------
    def read(self, path: Path, text: str | None = None) -> str:
        text = fsutil.read_text(path) if text is None else text
        self.read_paths.add(str(path.resolve()))
        self.seen.append(text)
        self.stream.read_file(str(path), text)
        return text

    def inlined(self, text: str, path: Path | None = None) -> bool:
        """Whether the prompt gives this file: verbatim, or (a reference) named by its path
        with some of its bullets, as the prompt builder inlines the items that matter. The
        prompt tells the agent not to reopen what it was given."""
        prompt = _normal(self.prompt)
        if text.strip() and _normal(text) in prompt:
            return True
        if path is None or self.ws.rel(path) not in self.prompt:
            return False
        # The prompt shows a run of one story's bullets under its tag, once (select.render).
        bullets = [
            _normal(split_story_tag(ln)[1])
            for ln in text.splitlines()
            if ln.lstrip().startswith("- ")
        ]
        return any(b in prompt for b in bullets)

    def read_context(self, rng: random.Random | None = None) -> None:
        self.read(self.ws.prd_path)
        if not self.ws.progress_path.is_file():
            return
        if self.mode == "full":
            text = fsutil.read_text(self.ws.progress_path)
            if not self.inlined(text):
                self.read(self.ws.progress_path, text)  # Ralph: the whole log, every time
            return
        progress = Progress.load(self.ws.progress_path)
        shown = any(row.path in self.prompt for row in progress.index_rows)
        told = "progress index" in self.prompt.lower()
        # An agent knows of references only through the index: shown in its prompt, or named
        # there so it reads the table itself. A prompt that does neither hides them.
        self.knows_index = shown or told
        if progress.has_index and told and not shown:
            # Only the index table (the RFC: "read ONLY the index table").
            self.seen.append(progress.index_text)
            self.stream.tool(
                "Read",
                {
                    "file_path": str(self.ws.progress_path),
                    "limit": progress.index_text.count("\n") + 1,
                },
                progress.index_text,
                read_text=progress.index_text,
            )
        if not self.knows_index:
            return
        needed = [n.topic for n in self.plan().needed()]
        for topic in dict.fromkeys([*self.plan().reads, *needed]):
            # A real agent does not always open what would have helped (seeded).
            if rng is None or rng.random() < self.opts.open_rate:
                self.open_reference(topic, progress)

    def open_reference(self, topic: str, progress: Progress) -> None:
        path = self.reference_path(topic, progress)
        if path is None or not path.is_file() or str(path.resolve()) in self.read_paths:
            return
        text = fsutil.read_text(path)
        if not self.inlined(text, path):  # given in the prompt: no need to open it
            self.read(path, text)

    # ---- planning and writing -----------------------------------------------------------
    def script(self) -> SimScript | None:
        if self._script is None:
            path = self.opts.script or (self.ws.ralph_dir / SCRIPT_NAME)
            self._script = load_script(path) if path.is_file() else None
        return self._script

    def plan(self) -> StoryPlan:
        if self._plan is None:
            script = self.script()
            found = script.plan_for(self.story.id) if script is not None else None
            self._plan = found or generated_plan(self.story)
        return self._plan

    # ---- needs: the mistakes a missing learning causes (sim_needs.py) --------------------
    def _progress_text(self) -> str:
        if not self.ws.progress_path.is_file():
            return ""
        return fsutil.read_text(self.ws.progress_path)

    def _memory_text(self, progress_text: str) -> str:
        """Everything the project remembers (log and references), whatever the agent saw."""
        parts = [progress_text]
        refs = safe_target(self.ws.root, self.refs_dir(self.load_progress()))
        if refs.is_dir():
            parts += [fsutil.read_text(p) for p in sorted(refs.rglob("*.md")) if p.is_file()]
        return "\n".join(parts)

    def check_needs(self, progress_text: str) -> list[sim_needs.NeedCheck]:
        return sim_needs.check(
            self.plan().needed(),
            self.script(),
            memory=self._memory_text(progress_text),
            seen="\n".join([self.prompt, *self.seen]),
            progress=progress_text,
            story_id=self.story.id,
        )

    def fail_story(self, plan: StoryPlan, need: sim_needs.NeedCheck) -> int:
        """The mistake costs the iteration: checks fail, the attempt is logged, no pass."""
        check = plan.checks[0] if plan.checks else "run the checks"
        detail = f"the code ignores an earlier learning ({need.topic}): {need.learning}"
        self.stream.bash(check, "Run the project's checks", f"FAILED (simulated): {detail}")
        self.stream.say(f"The checks fail: {detail}. I cannot finish {self.story.id} now.")
        now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        block = (
            f"## {now} - {self.story.id}\n- Attempted: {self.story.title}\n"
            f"- Files changed: {', '.join(f.path for f in plan.files) or 'none'}\n"
            f"- {sim_needs.failed_note(self.story.id, need.topic)}\n---\n"
        )
        progress = self.load_progress()
        lead = "\n" if progress.text.strip() and not progress.text.endswith("\n\n") else ""
        fsutil.atomic_write_text(
            self.ws.progress_path, progress.append_entry(lead + block).render()
        )
        self.touched.append(self.ws.rel(self.ws.progress_path))
        self.commit(f"wip: {self.story.id} - {self.story.title} (checks failing)")
        text = f"{self.story.id} is not done: its checks fail ({need.topic})."
        self.stream.say(text)
        self.stream.result(text)
        return 0

    def fix_up(self, plan: StoryPlan, need: sim_needs.NeedCheck) -> None:
        """The mistake is caught and fixed within the iteration, at a token cost."""
        check = plan.checks[0] if plan.checks else "run the checks"
        detail = f"the code ignores an earlier learning ({need.topic}): {need.learning}"
        self.stream.bash(check, "Run the project's checks", f"FAILED (simulated): {detail}")
        self.stream.say(f"The checks fail: {detail}. Fixing it.")
        for spec in plan.files:
            target = safe_target(self.ws.root, spec.path)
            self.read(target, spec.content)
            self.stream.write_file(str(target), spec.content, True)

    def write_files(self, plan: StoryPlan) -> None:
        for spec in plan.files:
            target = safe_target(self.ws.root, spec.path)
            existed = target.exists()
            fsutil.atomic_write_text(target, spec.content)
            self.touched.append(spec.path)
            self.stream.write_file(str(target), spec.content, existed)

    def edit(self, path: Path, new_text: str) -> None:
        old_text = fsutil.read_text(path) if path.exists() else ""
        fsutil.atomic_write_text(path, new_text)
        self.touched.append(self.ws.rel(path))
        if old_text:
            old, new = changed_region(old_text, new_text)
            self.stream.edit_file(str(path), old, new)
        else:
            self.stream.write_file(str(path), new_text, existed=False)

    def mark_passed(self) -> None:
        self.prd.mark_passed(self.story.id)
        self.edit(self.ws.prd_path, self.prd.render())

    # ---- memory: progress entry, reference, index row ---------------------------------
    def refs_dir(self, progress: Progress | None) -> str:
        marked = sim_prompt.references_dir(self.prompt)
        if marked:
            return marked
        for row in progress.index_rows if progress else []:
            parent = PurePosixPath(row.path).parent.as_posix()
            if parent not in ("", "."):
                return parent
        return DEFAULT_REFERENCES_DIR

    def reference_rel(self, topic: str, progress: Progress | None) -> str:
        for row in progress.index_rows if progress else []:
            if row.topic.strip().lower() == topic.strip().lower():
                return row.path
        return f"{self.refs_dir(progress)}/{slugify(topic)}.md"

    def reference_path(self, topic: str, progress: Progress | None) -> Path | None:
        try:
            return safe_target(self.ws.root, self.reference_rel(topic, progress))
        except Exception:  # a row pointing outside the project is never followed
            return None

    def record_reference(self, plan: StoryPlan) -> str | None:
        progress = self.load_progress()
        rel = self.reference_rel(plan.learning.topic, progress)
        path = self.reference_path(plan.learning.topic, progress)
        if path is None:
            return None
        section = f"## {self.story.id} - {self.story.title}\n" + "".join(
            f"- {b}\n" for b in plan.learning.bullets
        )
        if path.is_file():
            old = fsutil.read_text(path)
            if str(path.resolve()) not in self.read_paths and not self.inlined(old, path):
                self.read(path, old)
            sep = "" if old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
            self.edit(path, old + sep + section)
        else:
            self.edit(path, f"# {plan.learning.topic}\n\n{section}")
        if "forget-index-row" not in self.faults:
            updated = progress.with_index_row(plan.learning.topic, rel)
            self.edit(self.ws.progress_path, updated.render())
        return rel

    def load_progress(self) -> Progress:
        if self.ws.progress_path.is_file():
            return Progress.load(self.ws.progress_path)
        return Progress.parse("")

    def entry_block(self, plan: StoryPlan, ref_path: str | None) -> str:
        """Ralph's entry. In indexed mode the learnings went to the reference, so the log
        gets the short narrative the indexed prompt asks for, naming the reference."""
        now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        lines = [f"## {now} - {self.story.id}", f"- Implemented: {self.story.title}"]
        files = [f.path for f in plan.files]
        if self.mode == "indexed" and ref_path:
            lines.append(f"- Files changed: {', '.join(files + [ref_path])}")
            lines.append(f"- References: {plan.learning.topic} ({ref_path})")
            return "\n".join(lines) + "\n---\n"
        lines += [f"- {b}" for b in plan.summary]
        lines.append(f"- Files changed: {', '.join(files) or 'none'}")
        lines += [f"- Checks: `{c}` passed" for c in plan.checks]
        if self.story.acceptance_criteria:
            lines.append("- Acceptance criteria met:")
            lines += [f"  - {c}" for c in self.story.acceptance_criteria]
        lines.append("- **Learnings for future iterations:**")
        lines += [f"  - {b}" for b in plan.learning.bullets]
        return "\n".join(lines) + "\n---\n"

    def append_progress(self, plan: StoryPlan, ref_path: str | None) -> None:
        block = self.entry_block(plan, ref_path)
        progress = self.load_progress()
        lead = "\n" if progress.text.strip() and not progress.text.endswith("\n\n") else ""
        new = progress.append_entry(lead + block).render()
        fsutil.atomic_write_text(self.ws.progress_path, new)
        self.touched.append(self.ws.rel(self.ws.progress_path))
        rel = self.ws.rel(self.ws.progress_path)
        self.stream.bash(f"cat >> {rel} <<'EOF'\n{lead + block}EOF", "Append progress entry")
        self.last_entry = block

    # ---- faults that damage memory ------------------------------------------------------
    def apply_damage(self) -> None:
        if "truncate-progress" in self.faults:
            progress = self.load_progress()
            text = progress.header.rstrip("\n") + "\n\n" + self.last_entry
            fsutil.atomic_write_text(self.ws.progress_path, text)
            self.stream.write_file(str(self.ws.progress_path), text, existed=True)
        if "delete-reference" in self.faults:
            for row in self.load_progress().index_rows:
                path = self.reference_path(row.topic, self.load_progress())
                if path is not None and path.is_file():
                    path.unlink()
                    self.touched.append(self.ws.rel(path))
                    self.stream.bash(f"rm {self.ws.rel(path)}", "Remove reference file")
                    break
        self.damage_references()

    def damage_references(self) -> None:
        progress = self.load_progress()
        rows = progress.index_rows
        if not rows:
            return
        first = self.reference_path(rows[0].topic, progress)
        if first is not None and first.is_file():
            old = fsutil.read_text(first)
            if "wipe-reference" in self.faults:
                self.edit(first, f"# {rows[0].topic}\n\n(nothing)\n")
            elif "condense-reference" in self.faults:
                self.edit(first, condensed(old))
        if "drop-index-row" in self.faults:
            self.edit(self.ws.progress_path, progress.without_index_row(rows[0].topic).render())

    # ---- commit and final message -------------------------------------------------------
    def commit(self, message: str | None = None) -> None:
        message = message or f"feat: {self.story.id} - {self.story.title}"
        paths = sorted(set(self.touched))
        root = self.ws.root
        # A failed git step is shown in the transcript, as a real agent's would be, not raised.
        done = git.run(["add", "-A", "--", *paths], root, check=False, timeout=None)
        if done.returncode == 0:
            # The fallback only when the user has none: their identity is used when configured.
            identity = None if git.config(root, "user.email") else _FALLBACK_IDENTITY
            done = git.run(
                ["commit", "-q", "-m", message], root, check=False, timeout=None, identity=identity
            )
        output = (done.stdout + done.stderr).strip() or (
            git.output(["log", "--oneline", "-1"], root) or ""
        ).strip()
        self.stream.bash(
            f"git add -A -- {' '.join(paths)} && git commit -m '{message}'",
            "Commit the story",
            output,
        )

    def finish(self) -> int:
        remaining = sum(1 for st in self.prd.stories if not st.passes)
        if remaining == 0:
            text = f"{self.story.id} is done and all stories pass. {SENTINEL}"
        elif "early-sentinel" in self.faults:
            text = f"{self.story.id} is done. {SENTINEL}"
        elif "mention-sentinel" in self.faults:
            text = f"{self.story.id} is done; {remaining} remain, so no {SENTINEL} yet."
        else:
            text = (
                f"{self.story.id} is done: {self.story.title}. "
                f"{remaining} stories still have passes: false."
            )
        self.stream.say(text)
        self.stream.result(text)
        return 0


_FILLER = re.compile(
    r"\b(?:basically|actually|really|very|just|note that|please|in order)\s+|\b(?:the|that)\s+",
    re.IGNORECASE,
)


def condensed(text: str) -> str:
    """What a careful agent's condensing looks like: headings kept, filler words dropped and
    bullets joined two by two, so the text shrinks while every name and fact stays."""
    out: list[str] = []
    pending: str | None = None
    for line in text.splitlines():
        body = line.strip()
        if body.startswith("- "):
            short = _FILLER.sub("", body[2:]).rstrip(". ")
            if pending is None:
                pending = short
            else:
                out.append(f"- {pending}; {short}")
                pending = None
            continue
        if pending is not None:
            out.append(f"- {pending}")
            pending = None
        if body:
            out.append(body)
    if pending is not None:
        out.append(f"- {pending}")
    return "\n".join(out) + "\n"
