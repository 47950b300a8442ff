"""Which files an agent opened, from the tool calls in its stream.

The adapters know their own streams (Claude-style `tool_use` blocks, Codex
`command_execution` items); what a tool call or a shell command reads is the same question
for all of them and is answered here. Paths are returned as the agent named them (absolute,
relative, `./x`): only the caller knows the project root and the references folder, so
normalising is `orchestrator.memory.usage`'s job.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any, NamedTuple

# Programs that print a whole file, and programs that read part of one (or search it).
_WHOLE_FILE_READERS = frozenset({"cat", "less", "more", "bat", "tac", "nl", "view"})
_PARTIAL_READERS = frozenset({"head", "tail", "sed", "grep", "rg", "awk", "egrep", "fgrep"})
# Shells a CLI wraps a command in (`bash -lc 'cat x'`, Codex's usual form).
_SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
_SEGMENTS = re.compile(r"&&|\|\||;|\||\n")
# Claude Code tools (and their Amp/Gemini/opencode namesakes) that read one file.
_READ_TOOLS = frozenset({"Read", "read", "read_file", "view", "NotebookRead"})
_SEARCH_TOOLS = frozenset({"Grep", "grep", "search_file_content"})
_PATH_KEYS = ("file_path", "filePath", "absolute_path", "path", "notebook_path")


class FileRead(NamedTuple):
    """One file the agent opened: its path as written, and whether it read all of it (a
    `Read` without offset/limit, `cat`) or part of it (`head`, `sed -n`, `grep`, a limit).
    A plain (path, whole) pair, so layers below the agents read it without importing it."""

    path: str
    whole: bool


def _path_of(tool_input: dict[str, Any]) -> str:
    for key in _PATH_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def tool_reads(name: str, tool_input: Any) -> list[FileRead]:
    """What one tool call reads: a Read tool's file, a Grep over one file, or the files a
    Bash command prints (`command`, or Amp's `cmd`)."""
    data = tool_input if isinstance(tool_input, dict) else {}
    if name in _READ_TOOLS:
        path = _path_of(data)
        partial = any(data.get(k) is not None for k in ("offset", "limit"))
        return [FileRead(path, not partial)] if path else []
    if name in _SEARCH_TOOLS:
        path = _path_of(data)
        return [FileRead(path, False)] if path else []
    if name.lower() in ("bash", "shell", "run_shell_command"):
        return shell_reads(str(data.get("command") or data.get("cmd") or ""))
    return []


def shell_reads(command: str, depth: int = 0) -> list[FileRead]:
    """Each file a shell command reads with a file-reading program (`cat x` whole,
    `head`/`sed -n`/`grep` partial), looking inside `bash -lc '...'`; redirect targets
    (`cat >> x`), `git add x` and here-document bodies read nothing."""
    out: list[FileRead] = []
    for words in _commands(command.split("<<", 1)[0]):
        prog = PurePosixPath(words[0]).name
        if prog in _SHELLS and depth < 2:
            script = next((w for i, w in enumerate(words[1:], 1) if _is_c_flag(words[i - 1])), "")
            out += shell_reads(script, depth + 1) if script else []
        elif prog in _WHOLE_FILE_READERS or prog in _PARTIAL_READERS:
            whole = prog in _WHOLE_FILE_READERS
            out += [FileRead(w, whole) for w in words[1:] if _is_file_word(w)]
    return out


def _is_c_flag(word: str) -> bool:
    return word.startswith("-") and not word.startswith("--") and word.endswith("c")


def _is_file_word(word: str) -> bool:
    return word.endswith((".md", ".txt")) and not word.startswith("-")


def _commands(command: str) -> list[list[str]]:
    """The simple commands of a command line, as words, without redirections (`> x`,
    `2>/dev/null`): a redirect target is written, not read."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: read it as plain words
        tokens = command.split()
    out: list[list[str]] = []
    words: list[str] = []
    skip = False
    for tok in tokens:
        if skip:
            skip = False
        elif tok and set(tok) <= set("<>&") and set(tok) & set("<>"):
            if words and words[-1].isdigit():
                words.pop()  # the fd of `2>`
            skip = True
        elif tok and set(tok) <= set(";|&()"):
            out.append(words)
            words = []
        else:
            words.append(tok)
    out.append(words)
    return [w for w in out if w]
