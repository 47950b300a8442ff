"""Which files an agent opened, from the tool calls in its stream.

The adapters know their own streams (Claude-style `tool_use` blocks, Codex
`command_execution` items); what a tool call or a shell command reads is the same question
for all of them and is answered here. Paths are returned as the agent named them (absolute,
relative, `./x`, a glob, `{a,b}`, a folder it searched): only the caller knows the project
root and the references folder, so normalising, expanding and checking that a path exists
is `orchestrator.memory.usage`'s job.

Shell commands are read, not run: one pass over the words of the command line (linear in
its length), knowing the options of the usual readers (`grep`'s pattern is not a file,
`head -n 20` reads part), pipes (`cat x | head` reads part of x), `< file`, wrappers
(`timeout 5 cat x`, `env LC_ALL=C grep`, `xargs cat`, `find -exec cat {} +`), a `cd` earlier
on the same command line and `for f in ...; do cat "$f"; done`. Anything else (command
substitution, functions, a `cd` in an earlier tool call) is not followed.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# Programs that print a whole file, and programs that read part of one (or search it).
_WHOLE_FILE_READERS = frozenset({"cat", "less", "more", "bat", "batcat", "tac", "nl", "view"})
_PARTIAL_READERS = frozenset({"head", "tail", "sed", "grep", "rg", "awk", "gawk", "egrep", "fgrep"})
# Their first operand is a pattern or a script, not a file, unless an option gave it.
_SEARCHERS = frozenset({"grep", "egrep", "fgrep", "rg"})
_PATTERN_OPTS = {
    "grep": ("-e", "-f", "--regexp", "--file"),
    "rg": ("-e", "-f", "--regexp", "--file"),
    "sed": ("-e", "-f", "--expression", "--file"),
    "awk": ("-f", "--file"),
}
# A whole file piped into one of these is read in part (`cat x | head -12`).
_FILTERS = _PARTIAL_READERS | {"wc", "cut"}
# Options that take a value (short letters, long names given as a separate word).
_GREP_ARGS = (
    "efmABCdD",
    {"--regexp", "--file", "--max-count", "--after-context", "--before-context", "--context"}
    | {"--include", "--exclude", "--exclude-dir", "--exclude-from", "--label", "--devices"}
    | {"--directories", "--binary-files", "--group-separator"},
)
_OPTION_ARGS: dict[str, tuple[str, set[str]]] = {
    "grep": _GREP_ARGS,
    "rg": (
        "efgtTmABCjMrEd",
        {"--regexp", "--file", "--glob", "--iglob", "--type", "--type-not", "--max-count"}
        | {"--after-context", "--before-context", "--context", "--threads", "--max-depth"}
        | {"--max-columns", "--replace", "--encoding", "--type-add", "--sort", "--sortr"}
        | {"--ignore-file", "--pre", "--pre-glob", "--max-filesize", "--engine"},
    ),
    "sed": ("efl", {"--expression", "--file", "--line-length"}),
    "awk": ("fvF", {"--file", "--assign", "--field-separator"}),
    "head": ("nc", {"--lines", "--bytes"}),
    "tail": ("ncs", {"--lines", "--bytes", "--sleep-interval", "--pid"}),
    "nl": ("bdfhilnsvw", {"--body-numbering", "--number-format", "--number-width"}),
    "bat": (
        "lHmr",
        {"--language", "--highlight-line", "--map-syntax", "--line-range", "--style"}
        | {"--theme", "--tabs", "--terminal-width", "--wrap", "--color", "--paging"},
    ),
    "less": ("bhjkoOpPtTxyz", set()),
}
_ALIASES = {"egrep": "grep", "fgrep": "grep", "gawk": "awk", "batcat": "bat"}
# Shells a CLI wraps a command in (`bash -lc 'cat x'`, Codex's usual form).
_SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
# Words that open a compound command; what follows is a command of its own.
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})")
_MAX_WRAPPERS = 8
_MAX_VALUES = 64  # of a `for` variable: what one command line can name stays bounded
_MAX_READS = 1000  # of one command line: more are a loop, not reads the ledger needs
_MAX_COMMANDS = 10_000  # pipelines of one command line: a generated script past that
# Claude Code tools (and their Amp/Gemini/opencode namesakes) that read one file.
_READ_TOOLS = frozenset({"Read", "read", "read_file", "view", "NotebookRead"})
_SEARCH_TOOLS = frozenset({"Grep", "grep", "search_file_content"})
_MANY_READ_TOOLS = frozenset({"read_many_files"})
_SHELL_TOOLS = frozenset({"bash", "shell", "run_shell_command"})
_PATH_KEYS = ("file_path", "filePath", "absolute_path", "path", "notebook_path")
# Where a shell tool runs its command (Amp's Bash `cwd`, Gemini's `directory`).
_CWD_KEYS = ("cwd", "workdir", "directory")
# Keys that make a read tool's call a partial read (Amp's Read takes `read_range`).
_PARTIAL_KEYS = ("offset", "limit", "read_range")


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


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def tool_reads(name: str, tool_input: Any) -> list[FileRead]:
    """What one tool call reads: a Read tool's file, a Grep over a file or folder, Gemini's
    `read_many_files` paths and globs, or the files a Bash command prints (`command`, or
    Amp's `cmd`, run in the tool's `cwd`/`workdir`/`directory` when it names one)."""
    data = tool_input if isinstance(tool_input, dict) else {}
    if name in _READ_TOOLS:
        path = _path_of(data)
        partial = any(data.get(k) is not None for k in _PARTIAL_KEYS)
        return [FileRead(path, not partial)] if path else []
    if name in _SEARCH_TOOLS:
        path = _path_of(data)
        return [FileRead(path, False)] if path else []
    if name in _MANY_READ_TOOLS:
        return [
            FileRead(p, True) for p in _strings(data.get("paths")) + _strings(data.get("include"))
        ]
    if name.lower() in _SHELL_TOOLS:
        cwd = next((str(data[k]) for k in _CWD_KEYS if isinstance(data.get(k), str)), "")
        return shell_reads(str(data.get("command") or data.get("cmd") or ""), cwd=cwd)
    return []


@dataclass
class _Cmd:
    """One simple command: its words, a `< file` it reads, and whether its output is piped
    into the next command."""

    words: list[str]
    stdin: str = ""
    piped: bool = False


@dataclass
class _State:
    """What one command line has set so far: the directory (`cd`; None once unknown, as
    after `cd ~`), and variables of `for` loops and plain assignments."""

    cwd: str | None = ""
    dirs: list[str | None] = field(default_factory=list)
    vars: dict[str, list[str]] = field(default_factory=dict)


def shell_reads(command: str, depth: int = 0, cwd: str = "") -> list[FileRead]:
    """Each file a shell command reads with a file-reading program (`cat x` whole,
    `head`/`sed -n`/`grep` partial, `cat x | head` partial), looking inside `bash -lc '...'`;
    redirect targets (`cat >> x`), `git add x` and here-document bodies read nothing.
    `cwd`: the directory the command runs in, relative to the project root ("" = the root)."""
    state = _State(cwd=cwd)
    return _line_reads(command, depth, state)


def _line_reads(command: str, depth: int, state: _State) -> list[FileRead]:
    """The reads of a command line: at most _MAX_READS of them, in its first _MAX_COMMANDS
    commands (a generated script of 100,000 `cat $f` in a loop over 64 globs took 15 s and
    made millions). A file read twice is two reads: it cost twice."""
    out: list[FileRead] = []
    for pipeline in itertools.islice(_pipelines(command.split("<<", 1)[0]), _MAX_COMMANDS):
        listed: list[str] = []  # what the previous command printed as paths (for xargs)
        for n, cmd in enumerate(pipeline):
            into = pipeline[n + 1].words if cmd.piped and n + 1 < len(pipeline) else []
            reads, listed = _command_reads(cmd, listed, _program(into), depth, state)
            out += reads
            if len(out) >= _MAX_READS:
                return out[:_MAX_READS]
    return out


def _program(words: list[str]) -> str:
    words = _unwrap(_strip_keywords(words))[0]
    return posixpath.basename(words[0]) if words else ""


def _strip_keywords(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) and words[i] in _KEYWORDS:
        i += 1
    return words[i:]


def _command_reads(
    cmd: _Cmd, listed: list[str], into: str, depth: int, state: _State, *, feed: bool = False
) -> tuple[list[FileRead], list[str]]:
    """The reads of one simple command, and the paths it lists for an `xargs` after it
    (`listed`: what the command before it listed; `feed`: it gets them as `-exec` does)."""
    words = _strip_keywords(cmd.words)
    if not words:
        return [], []
    if words[0] in ("for", "select") and len(words) > 2 and words[2] == "in":
        state.vars[words[1]] = [w for x in words[3:] for w in _expand(x, state)][:_MAX_VALUES]
        return [], []
    if all(_ASSIGNMENT.match(w) for w in words):
        for w in words:
            name, _, value = w.partition("=")
            state.vars[name] = [value]
        return [], []
    words, xargs = _unwrap(words)
    if not words:
        return [], []
    prog = posixpath.basename(words[0])
    if prog in _SHELLS and depth < 2:
        script = next((w for i, w in enumerate(words[1:], 1) if _is_c_flag(words[i - 1])), "")
        inner = _State(cwd=state.cwd, vars=dict(state.vars))  # a child shell: its cd stays in it
        return (_line_reads(script, depth + 1, inner) if script else []), []
    if prog in ("cd", "pushd", "popd"):
        _change_dir(prog, words[1:], state)
        return [], []
    args = [w for x in words[1:] for w in _expand(x, state)]
    fed = listed if xargs or feed else []
    if prog == "find":
        return _find_reads(args, into, depth, state)
    reads = _reads(prog, args, fed, into, state)
    if cmd.stdin and prog in _WHOLE_FILE_READERS | _PARTIAL_READERS and not reads:
        reads = _at_all(state, [cmd.stdin], _whole(_ALIASES.get(prog, prog), {}, into))
    return reads, _listing(prog, args, state)


def _expand(word: str, state: _State) -> list[str]:
    """A word that is `$f`/`${f}` of a variable set on this line, replaced by its values;
    any other word as it is (a pattern `^x$` stays a pattern; a path naming another
    variable names no file the caller finds)."""
    m = _VARIABLE.fullmatch(word) if "$" in word else None
    name = (m.group(1) or m.group(2)) if m else ""
    return state.vars[name][:_MAX_VALUES] if name in state.vars else [word]


def _change_dir(prog: str, args: list[str], state: _State) -> None:
    if prog == "popd":
        state.cwd = state.dirs.pop() if state.dirs else None
        return
    if prog == "pushd":
        state.dirs.append(state.cwd)
    target = next((a for a in args if not a.startswith("-")), "")
    if not target or target.startswith(("~", "$")):
        state.cwd = None  # home, the previous dir, a variable: unknown from here on
    elif state.cwd is not None or target.startswith("/"):
        # Folded (`a/b/..` -> `a`), so a line of `cd x && ... && cd ..` keeps it short.
        folded = posixpath.normpath(posixpath.join(state.cwd or "", target))
        state.cwd = "" if folded == "." else folded


def _at(state: _State, word: str) -> str | None:
    """A path word as seen from the project root (None when the directory is unknown)."""
    if word.startswith("/"):
        return word
    if state.cwd is None:
        return None
    return posixpath.join(state.cwd, word) if state.cwd else word


def _at_all(state: _State, words: list[str], whole: bool) -> list[FileRead]:
    paths = (_at(state, w) for w in words if w and w not in ("-", "{}"))
    return [FileRead(p, whole) for p in paths if p]


def _reads(prog: str, args: list[str], fed: list[str], into: str, state: _State) -> list[FileRead]:
    """What one reader (`cat`, `grep`, ...) reads: its file operands and what xargs fed it."""
    if prog not in _WHOLE_FILE_READERS and prog not in _PARTIAL_READERS:
        return []
    kind = _ALIASES.get(prog, prog)
    operands, opts = _parse_options(args, kind)
    if kind == "rg" and ("--files" in opts or "--type-list" in opts):
        return []  # lists file names, reads none
    if kind in _PATTERN_OPTS and not any(o in opts for o in _PATTERN_OPTS[kind]):
        operands = operands[1:]  # the pattern or script
    return _at_all(state, [*operands, *fed], _whole(kind, opts, into))


def _whole(kind: str, opts: dict[str, str], into: str) -> bool:
    """Whether a reader shows the whole file: `cat` does unless piped into `head` and
    the like; `tail -n +1` does; `bat -r 1:9` does not."""
    if into in _FILTERS:
        return False
    if kind == "tail":
        start = opts.get("-n", opts.get("--lines", ""))
        return start.startswith("+") and start[1:].isdigit() and int(start[1:]) <= 1
    if kind == "bat":
        return "-r" not in opts and "--line-range" not in opts
    return kind in _WHOLE_FILE_READERS


def _parse_options(args: list[str], kind: str) -> tuple[list[str], dict[str, str]]:
    """A command's operands and options (name -> value, "" for a flag), getopt-style:
    `-n5`, `-n 5`, `-nA3`, `--lines=5`, `--lines 5` for options known to take a value, and
    `--` ends the options."""
    short, long = _OPTION_ARGS.get(kind, ("", set()))
    operands: list[str] = []
    opts: dict[str, str] = {}
    it = iter(args)
    for word in it:
        if word == "--":
            operands += list(it)
        elif word.startswith("--"):
            name, eq, value = word.partition("=")
            opts[name] = value if eq else (next(it, "") if name in long else "")
        elif word.startswith("-") and len(word) > 1:
            for i, ch in enumerate(word[1:], 1):
                if ch in short:
                    opts["-" + ch] = word[i + 1 :] or next(it, "")
                    break
                opts["-" + ch] = ""
        else:
            operands.append(word)
    return operands, opts


def _find_reads(
    args: list[str], into: str, depth: int, state: _State
) -> tuple[list[FileRead], list[str]]:
    """`find DIR... [-name P] [-exec READER ... {} +]`: the reader reads what find finds
    (written `DIR/**/P`, a glob the caller matches); without -exec, that is its listing."""
    i = 0
    while i < len(args) and args[i] in ("-H", "-L", "-P"):
        i += 1
    starts: list[str] = []
    while i < len(args) and not args[i].startswith(("-", "(", "!")):
        starts.append(args[i])
        i += 1
    names: list[str] = []
    execs: list[str] = []
    while i < len(args):
        if args[i] in ("-name", "-iname") and i + 1 < len(args):
            names.append(args[i + 1])
        elif args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            execs = [w for w in args[i + 1 :] if w not in ("+", ";")]
            break
        i += 1
    found = [
        posixpath.join(start.rstrip("/") or "/", "**", name)
        for start in starts or ["."]
        for name in names or ["*"]
    ]
    if not execs or depth > 2:
        return [], found
    return _command_reads(_Cmd(words=execs), found, into, depth + 1, state, feed=True)[0], []


def _listing(prog: str, args: list[str], state: _State) -> list[str]:
    """The paths a command prints, for an `xargs` reader after it: `ls`'s and `echo`'s
    operands (a folder stands for its files), `grep -l`'s files, `rg --files`'s folders."""
    if prog in ("ls", "echo"):
        paths = [a for a in args if not a.startswith("-")] or (["."] if prog == "ls" else [])
    elif prog in _SEARCHERS:
        operands, opts = _parse_options(args, _ALIASES.get(prog, prog))
        if "--files" in opts:
            paths = operands or ["."]
        elif {"-l", "--files-with-matches"} & set(opts):
            has_pattern = any(o in opts for o in _PATTERN_OPTS["grep"])
            paths = operands if has_pattern else operands[1:]
        else:
            return []
    else:
        return []
    return paths  # as written: the reader they are fed to resolves them (`_at_all`) once


def _unwrap(words: list[str]) -> tuple[list[str], bool]:
    """The command a wrapper runs (`timeout 5 cat x` -> `cat x`, `env A=1 grep`,
    `nice -n 5`, `xargs -0 cat`), and whether xargs feeds it its input's paths."""
    xargs = False
    for _ in range(_MAX_WRAPPERS):
        words = words[_assignments(words) :]
        if not words:
            break
        prog = posixpath.basename(words[0])
        skip = _WRAPPER_SKIP.get(prog)
        if skip is None:
            break
        rest = skip(words[1:])
        if rest is None:
            return [], False  # `command -v x` looks a name up, runs nothing
        words, xargs = rest, xargs or prog == "xargs"
    return words, xargs


def _skip_options(args: list[str], with_value: str, long_value: tuple[str, ...] = ()) -> list[str]:
    """`args` after their leading options (`-s KILL`, `-k5`, `--signal=X`, `--foo X`)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        word = args[i]
        i += 1
        if word == "--":
            break
        if word.startswith("--"):
            i += 1 if word in long_value else 0
        elif word[-1] in with_value and len(word) == 2:
            i += 1
    return args[i:]


def _skip_timeout(args: list[str]) -> list[str]:
    return _skip_options(args, "sk", ("--signal", "--kill-after"))[1:]  # then the duration


def _skip_env(args: list[str]) -> list[str]:
    rest = _skip_options(args, "uCS", ("--unset", "--chdir", "--split-string"))
    return rest[_assignments(rest) :]


def _assignments(words: list[str]) -> int:
    """How many `NAME=value` words lead `words` (counted, not sliced off one by one: a
    line of 40,000 of them took seconds)."""
    n = 0
    while n < len(words) and _ASSIGNMENT.match(words[n]):
        n += 1
    return n


def _skip_command(args: list[str]) -> list[str] | None:
    return None if {"-v", "-V"} & set(args[:2]) else _skip_options(args, "")


def _skip_xargs(args: list[str]) -> list[str]:
    long_value = ("--arg-file", "--delimiter", "--max-args", "--max-lines", "--max-procs")
    rest = _skip_options(args, "IanLPdEs", (*long_value, "--max-chars", "--eof"))
    return rest or ["echo"]


_WRAPPER_SKIP: dict[str, Any] = {
    "env": _skip_env,
    "timeout": _skip_timeout,
    "nice": lambda a: _skip_options(a, "n", ("--adjustment",)),
    "ionice": lambda a: _skip_options(a, "cnp"),
    "nohup": lambda a: a,
    "time": lambda a: _skip_options(a, "fo"),
    "exec": lambda a: _skip_options(a, "a"),
    "command": _skip_command,
    "builtin": lambda a: a,
    "sudo": lambda a: _skip_options(a, "ugCDhprtU", ("--user", "--group")),
    "stdbuf": lambda a: _skip_options(a, "ioe", ("--input", "--output", "--error")),
    "xargs": _skip_xargs,
}


def _is_c_flag(word: str) -> bool:
    return word.startswith("-") and not word.startswith("--") and word.endswith("c")


def _pipelines(command: str) -> list[list[_Cmd]]:
    """The pipelines of a command line, each a list of simple commands, without
    redirections (`> x`, `2>/dev/null`: a redirect target is written, not read; `< x` is
    kept as the command's input)."""
    tokens = _tokens(command)
    if tokens is None:  # an unclosed quote: read it as plain words
        tokens = [(False, w) for w in command.split()]
    out: list[list[_Cmd]] = []
    pipeline: list[_Cmd] = []
    cmd = _Cmd(words=[])
    redirect = ""
    for is_op, tok in tokens:
        if redirect and not is_op:
            cmd.stdin = tok if redirect == "<" else cmd.stdin
            redirect = ""
        elif not is_op:
            cmd.words.append(tok)
        elif set(tok) & set("<>"):
            if cmd.words and cmd.words[-1].isdigit():
                cmd.words.pop()  # the fd of `2>`
            redirect = tok
        elif tok in ("|", "|&"):
            cmd.piped = True
            pipeline.append(cmd)
            cmd = _Cmd(words=[])
        else:  # ; && || & ( ) newline
            pipeline.append(cmd)
            out.append(pipeline)
            pipeline, cmd = [], _Cmd(words=[])
    pipeline.append(cmd)
    out.append(pipeline)
    return [[c for c in p if c.words] for p in out if any(c.words for c in p)]


# One lexical item of a POSIX shell command line (an operator, a quoted string, an escaped
# character, a comment, a run of plain characters). Matched in one left-to-right pass:
# shlex builds a token one character at a time, which is quadratic in a long `bash -lc`.
_LEX = re.compile(
    r"""(?P<space>[ \t\r]+|\\\n)
    |(?P<op>&&|\|\||\|&|;;|&>>|&>|>>|>&|<&|>\||<>|<<<|<<|[|&;()<>\n])
    |(?P<single>'[^']*')
    |(?P<double>"(?:[^"\\]|\\.)*")
    |(?P<escape>\\.)
    |(?P<comment>\#[^\n]*)
    |(?P<plain>[^\s|&;()<>'"\\]+)""",
    re.X | re.S,
)
_PLAIN = re.compile(r"[^\s|&;()<>'\"\\]+")
_DOUBLE_ESCAPE = re.compile(r'\\([$`"\\])')


def _tokens(command: str) -> list[tuple[bool, str]] | None:
    """The words and operators of a command line, quotes removed ((is operator, text));
    None when a quote is not closed. `#` starts a comment only where a word would start."""
    out: list[tuple[bool, str]] = []
    word: list[str] = []
    pos = 0
    while pos < len(command):
        m = _LEX.match(command, pos)
        if m is None:
            return None
        kind, text = m.lastgroup, m.group()
        if kind == "comment" and word:  # `a#b`: part of the word
            m = _PLAIN.match(command, pos)
            assert m is not None  # `#` is a plain character
            kind, text = "plain", m.group()
        pos = m.end()
        if kind in ("space", "op", "comment"):
            if word:
                out.append((False, "".join(word)))
                word = []
            if kind == "op":
                out.append((True, text))
        elif kind == "single":
            word.append(text[1:-1])
        elif kind == "double":
            word.append(_DOUBLE_ESCAPE.sub(r"\1", text[1:-1].replace("\\\n", "")))
        elif kind == "escape":
            word.append(text[1])
        else:
            word.append(text)
    if word:
        out.append((False, "".join(word)))
    return out
