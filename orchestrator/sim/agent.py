"""The simulated coding agent: `python -m orchestrator.sim.agent` (the `sim` tool).

This is a SIMULATION, not an AI. It is spawned exactly like a real agent (argv, prompt on
stdin, project root as cwd, through the runner's pty) and does what a Ralph agent does for
one story, scripted: reads the prompt and what a Ralph agent would read (prd.json; all of
progress.txt in full mode; the references it is not given in indexed mode), writes the
story's files from the project's sim script (`sim.yaml` beside prd.json, see
`orchestrator.sim.script`), marks the story passed in prd.json, appends a Ralph-format entry
to progress.txt, records the learning as a reference + index row (indexed mode) and commits
`feat: <ID> - <Title>`. It prints Claude-style stream-json whose usage is the tiktoken count
of what it read and wrote (see `orchestrator.sim.stream`), and can misbehave on purpose
(`--fault`, see `orchestrator.sim.options`) so the loop's defences can be tested for real.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from orchestrator.errors import FatalError
from orchestrator.memory.prd import Prd, Story
from orchestrator.memory.progress import Progress
from orchestrator.sim import options as sim_options
from orchestrator.sim import prompt as sim_prompt
from orchestrator.sim.options import Options
from orchestrator.sim.stream import Stream

SENTINEL = "<promise>COMPLETE</promise>"


def read_prompt(opts: Options) -> str:
    if opts.prompt_file is not None:
        return opts.prompt_file.read_text(encoding="utf-8", errors="replace")
    data = sys.stdin.buffer.read()
    return data.decode("utf-8", errors="replace")


def choose_story(prd: Prd, prompt: str) -> Story | None:
    """The story the prompt names (first id that exists), else the next pending one."""
    known = {s.id: s for s in prd.stories}
    for story_id in sim_prompt.story_ids(prompt):
        if story_id in known:
            return known[story_id]
    return prd.next_story()


def choose_mode(prompt: str, progress: Progress | None) -> str:
    """What the prompt says (see sim_prompt.mode); else indexed iff progress.txt has index
    rows (a project that has adopted references)."""
    marked = sim_prompt.mode(prompt, progress.text if progress else None)
    if marked:
        return marked
    return "indexed" if progress is not None and progress.index_rows else "full"


def sleep_forever() -> None:
    while True:  # killed by the runner's timeout (SIGTERM/SIGKILL of the process group)
        time.sleep(3600)


def early_faults(
    stream: Stream, faults: set[str], opts: Options, prompt: str, prd: Prd
) -> int | None:
    """Faults that stop the run before any work; an exit code, or None to go on."""
    if "hang" in faults:
        sleep_forever()
    if "echo-prompt" in faults:
        # Some CLIs print the prompt in plain output; a sentinel in it is no completion.
        stream.out.write(prompt + ("\n" if not prompt.endswith("\n") else ""))
        stream.out.flush()
    stream.init()
    if "hang-after-output" in faults:
        stream.say("Let me read the PRD first.", counted=False)
        stream.read_file(str(prd.path), prd.render(), counted=False)
        sleep_forever()
    if "crash" in faults:
        stream.say("Let me look at the project first.", counted=False)
        print("Error: simulated crash (fault 'crash')", file=sys.stderr, flush=True)
        return opts.exit_code
    if "transient" in faults:
        stream.out.write("Error: No messages returned\n")
        stream.out.flush()
        return 1
    if "limit-event" in faults:
        resets = int(time.time() + opts.limit_reset)
        stream.emit(
            {
                "type": "rate_limit_event",
                "rate_limit_info": {
                    "status": "rejected",
                    "resetsAt": resets,
                    "rateLimitType": "five_hour",
                },
                "session_id": stream.session_id,
            }
        )
        stream.result(f"Claude AI usage limit reached|{resets}", is_error=True)
        return 1
    if "limit-text" in faults:
        stream.say(opts.limit_text, counted=False)
        stream.result(opts.limit_text, is_error=True)
        return 1
    if "limit-429" in faults:
        text = (
            "API Error: Request rejected (429) · Number of request tokens has exceeded "
            "your per-minute rate limit"
        )
        stream.say(text, counted=False)
        stream.result(text, is_error=True, api_error_status=429)
        return 1
    return None


def run(opts: Options, root: Path, out: TextIO | None = None) -> int:
    prompt = read_prompt(opts)
    stream = Stream(
        cwd=str(root),
        model=opts.model,
        encoding=opts.encoding,
        delay=opts.delay,
        out=out or sys.stdout,
    )
    stream.read_prompt(prompt)
    ws = sim_prompt.locate(root, prompt, opts.ralph_dir)
    if ws is None:
        stream.init()
        stream.result("I could not find prd.json in this project.", is_error=True)
        return 1
    prd = Prd.load(ws.prd_path)
    progress = Progress.load(ws.progress_path) if ws.progress_path.is_file() else None
    story = choose_story(prd, prompt)
    active = (
        opts.faults if sim_options.fault_applies(opts, story.id if story else None, root) else set()
    )
    code = early_faults(stream, active, opts, prompt, prd)
    if code is not None:
        return code
    if story is None:
        stream.read_file(str(ws.prd_path), prd.render())
        stream.say(f"Every story in prd.json passes. {SENTINEL}")
        stream.result(f"Every story in prd.json passes. {SENTINEL}")
        return 0
    from orchestrator.sim.work import Work  # msgspec, YAML et al.: only when there is work

    work = Work(
        stream=stream,
        ws=ws,
        prd=prd,
        story=story,
        prompt=prompt,
        mode=choose_mode(prompt, progress),
        faults=active,
        opts=opts,
    )
    return work.run()


def main(argv: list[str] | None = None) -> int:
    try:
        opts = sim_options.parse(sys.argv[1:] if argv is None else argv)
        return run(opts, Path.cwd())
    except FatalError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
