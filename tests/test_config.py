from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from orchestrator.config import Config, ConfigError, known_keys, load_config

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = Config().model_dump()


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "ralph.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults_without_file() -> None:
    c = load_config(None, {})
    assert c.tool == "amp" and c.max_iterations == 10 and c.mode == "auto"
    assert c.references.dir == "ralph/references" and c.references.max_tokens == 800
    assert c.log.dir == "ralph/logs" and c.budget.prompt_tokens == 16000
    assert c.budget.run_tokens is None and c.checks == "warn"
    assert c.timeouts.iteration == 3600 and c.limits.max_wait == 21600
    assert c.agents == {} and c.warnings == [] and c.path is None


def test_missing_file_is_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "ralph.yaml", {}).model_dump() == Config().model_dump()


def test_empty_and_comment_only_files_are_ok(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ""), {}).model_dump() == Config().model_dump()
    assert load_config(write(tmp_path, "# nothing yet\n"), {}).model_dump() == DEFAULTS


def test_section_with_every_key_commented_out_is_its_defaults(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, "budget:\n  # prompt_tokens: 1\nagents:\nlog:\n"), {})
    assert c.model_dump() == DEFAULTS and c.warnings == []


def test_precedence_flag_over_file_over_default(tmp_path: Path) -> None:
    p = write(tmp_path, "tool: claude\nmax_iterations: 25\nbudget:\n  prompt_tokens: 9000\n")
    c = load_config(p, {"max_iterations": 3, "tool": None, "budget.warn_at": None})
    assert c.max_iterations == 3  # flag wins
    assert c.tool == "claude"  # flag not given (None) -> file
    assert c.budget.prompt_tokens == 9000  # file
    assert c.budget.warn_at == 0.8  # default
    assert c.path == p


def test_override_into_missing_section_and_agent(tmp_path: Path) -> None:
    c = load_config(None, {"budget.run_cost_usd": 2.5, "agents.claude.model": "opus"})
    assert c.budget.run_cost_usd == 2.5
    assert c.agent("claude").model == "opus"
    assert c.agent("codex").command is None


def test_unknown_override_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'budget.nope'"):
        load_config(None, {"budget.nope": 1})


def test_bad_override_names_command_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^command line: max_iterations must be at least 1"):
        load_config(write(tmp_path, "tool: claude\n"), {"max_iterations": 0})


def test_unknown_keys_warn_with_suggestion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    p = write(
        tmp_path,
        "budget:\n  promt_tokens: 5\nmax_iteration: 4\nprompt_tokens: 1\n"
        "agents:\n  claude:\n    modle: opus\nzzz: 1\n",
    )
    c = load_config(p, {})
    assert c.warnings == [
        "ralph.yaml: unknown key 'budget.promt_tokens' (did you mean 'budget.prompt_tokens'?)",
        "ralph.yaml: unknown key 'max_iteration' (did you mean 'max_iterations'?)",
        "ralph.yaml: unknown key 'prompt_tokens' (did you mean 'budget.prompt_tokens'?)",
        "ralph.yaml: unknown key 'agents.claude.modle' (did you mean 'agents.claude.model'?)",
        "ralph.yaml: unknown key 'zzz'",
    ]
    # Unknown keys are ignored, the rest still applies.
    assert c.budget.prompt_tokens == 16000 and c.max_iterations == 10
    assert "claude" in c.agents


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "budget:\n  prompt_tokens: lots\n",
            "ralph.yaml: budget.prompt_tokens must be an integer, got 'lots' (default: 16000)",
        ),
        ("max_iterations: true\n", "ralph.yaml: max_iterations must be an integer, got true"),
        ("max_iterations: 0\n", "ralph.yaml: max_iterations must be at least 1, got 0"),
        ("mode: fast\n", "ralph.yaml: mode must be one of 'auto', 'indexed' or 'full', got 'fast'"),
        ("checks: maybe\n", "ralph.yaml: checks must be one of 'warn', 'retry' or 'fail'"),
        ("budget: 5\n", "ralph.yaml: budget must be a mapping of settings, got 5"),
        ("budget:\n  warn_at: 2\n", "ralph.yaml: budget.warn_at must be at most 1"),
        (
            "references:\n  dir: ../elsewhere\n",
            "ralph.yaml: references.dir must be a relative folder inside the project",
        ),
        (
            "references:\n  dir: ./\n",
            "ralph.yaml: references.dir must be a folder of its own, not the project root",
        ),
        (
            "references:\n  always: auth\n",
            "ralph.yaml: references.always must be a list, got 'auth'",
        ),
        (
            "agents:\n  claude:\n    env: {TOKEN: 1}\n",
            "ralph.yaml: agents.claude.env.TOKEN must be a string, got 1",
        ),
        (
            "agents:\n  claude:\n    prompt: pipe\n",
            "ralph.yaml: agents.claude.prompt must be one of 'stdin', 'file' or 'argument'",
        ),
        (
            "agents:\n  claude:\n    args: [1]\n",
            "ralph.yaml: agents.claude.args[0] must be a string, got 1",
        ),
        ("encoding: gpt2\n", "ralph.yaml: encoding must be one of 'o200k_base' or 'cl100k_base'"),
        ("tool:\n", "ralph.yaml: tool must be a string, got nothing (null)"),
        ("- tool\n", "ralph.yaml: the top level must be a mapping of settings"),
        ("tool: claude\ntool: amp\n", "ralph.yaml:2:1: invalid YAML: duplicate key 'tool'"),
        ("tool: claude\nbudget:\n  prompt_tokens: [1\n", "ralph.yaml:4:1: invalid YAML: expected"),
        ("tool: claude\n  mode: full\n", "ralph.yaml:2:7: invalid YAML: mapping values"),
    ],
)
def test_bad_config_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), {})
    assert str(info.value).startswith(message), str(info.value)


def test_several_errors_reported_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "mode: x\nmax_iterations: y\n"), {})
    assert len(str(info.value).splitlines()) == 2


def test_not_utf8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ralph.yaml").write_bytes(b"tool: \xff\n")
    with pytest.raises(ConfigError, match="ralph.yaml: not UTF-8"):
        load_config(tmp_path / "ralph.yaml", {})


def test_command_string_is_split_into_argv(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, "agents:\n  amp:\n    command: npx '@x/amp cli'\n"), {})
    assert c.agent("amp").command == ["npx", "@x/amp cli"]
    c = load_config(write(tmp_path, "agents:\n  claude:\n"), {})
    assert c.agent("claude").args == []


def test_reference_yaml_is_the_defaults_and_documents_every_key() -> None:
    text = (REPO / "ralph.yaml").read_text(encoding="utf-8")
    assert load_config(REPO / "ralph.yaml", {}).model_dump() == DEFAULTS
    shipped = resources.files("orchestrator.templates").joinpath("ralph.yaml").read_text("utf-8")
    assert shipped == text, "templates/ralph.yaml must be a copy of the reference ralph.yaml"
    data = yaml.safe_load(text)
    for key in known_keys():
        if key.startswith("agents."):
            assert re.search(rf"#\s+{key.split('.')[-1]}:", text), key
            continue
        node = data
        for part in key.split("."):
            node = node[part]
    # one comment line right above every active key
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*[a-z_]+:\s*\S", line) and not line.lstrip().startswith("#"):
            assert lines[i - 1].lstrip().startswith("#"), line


# ---- the parse cache: a ralph.yaml read before, byte for byte, skips PyYAML ------------------


def _load_in_subprocess(root: Path) -> tuple[dict, set[str]]:
    """load_config in a fresh interpreter: (the settings, the modules it imported)."""
    code = (
        "import json, sys; from pathlib import Path; from orchestrator.config import load_config;"
        "c = load_config(Path('ralph.yaml')); print(json.dumps(c.model_dump()));"
        "print(json.dumps(sorted(sys.modules)))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    settings, modules = res.stdout.splitlines()[-2:]
    return json.loads(settings), set(json.loads(modules))


def test_second_read_of_the_same_bytes_skips_yaml_and_an_edit_is_read_again(
    tmp_path: Path,
) -> None:
    write(tmp_path, "tool: claude\nbudget:\n  prompt_tokens: 9000\n")
    first, modules = _load_in_subprocess(tmp_path)
    assert "yaml" in modules and first["budget"]["prompt_tokens"] == 9000
    again, modules = _load_in_subprocess(tmp_path)
    assert again == first and "yaml" not in modules
    # Same size, same mtime second: only the bytes tell the edit apart.
    p = write(tmp_path, "tool: claude\nbudget:\n  prompt_tokens: 8000\n")
    os.utime(p, (p.stat().st_atime, p.stat().st_mtime))
    edited, modules = _load_in_subprocess(tmp_path)
    assert edited["budget"]["prompt_tokens"] == 8000 and "yaml" in modules


def test_a_config_holding_a_secret_is_not_copied_into_the_cache(tmp_path: Path) -> None:
    url = "https://hooks.slack.com/services/T000/B000/" + "x" * 24
    write(tmp_path, f"tool: claude\nnotify:\n  urls: ['{url}']\n  password: hunter2hunter2\n")
    for _ in range(2):
        _, modules = _load_in_subprocess(tmp_path)
        assert "yaml" in modules  # parsed each time: nothing was kept
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "ralph-index" / "config"
    kept = b"".join(f.read_bytes() for f in cache.glob("*")) if cache.is_dir() else b""
    assert b"hunter2hunter2" not in kept


def test_cached_parse_gives_the_same_errors_and_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    p = write(tmp_path, "tool: claude\nzzz: 1\nmax_iterations: 0\n")
    messages = []
    for _ in range(2):  # the first parse is cached (it is valid YAML), the second uses it
        with pytest.raises(ConfigError) as info:
            load_config(p, {})
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "max_iterations must be at least 1" in messages[0]
    write(tmp_path, "tool: claude\nzzz: 1\n")
    assert [load_config(p, {}).warnings for _ in range(2)] == [
        ["ralph.yaml: unknown key 'zzz'"]
    ] * 2


def test_damaged_or_unwritable_cache_and_dates_still_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    p = write(tmp_path, "tool: claude\n")
    assert load_config(p, {}).tool == "claude"
    (entry,) = (cache / "ralph-index" / "config").iterdir()
    entry.write_bytes(b"\x00garbage")
    assert load_config(p, {}).tool == "claude"
    # A value marshal cannot hold (a date) is not cached: parsed, and reported, each time.
    write(tmp_path, "tool: 2026-01-01\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="tool must be a string, got 2026-01-01"):
            load_config(p, {})
    shutil.rmtree(cache)
    cache.write_text("not a folder")  # the cache cannot be written: only slower
    assert load_config(write(tmp_path, "tool: amp\n"), {}).tool == "amp"


@pytest.mark.parametrize(
    ("log_dir", "why"),
    [
        ("scripts/ralph", "not the Ralph folder"),
        ("ralph/references", "not the references folder"),
        (".", "not the project root"),
        ("scripts", "not a folder holding the Ralph folder (scripts/ralph)"),
        ("ralph", "not a folder holding the references folder (ralph/references)"),
        ("ralph/references/logs", "not inside the references folder (ralph/references)"),
    ],
)
def test_log_dir_among_the_users_folders_is_refused_before_anything_is_written(
    tmp_path: Path, log_dir: str, why: str
) -> None:
    from run_helpers import RALPH, env, make_project

    root = make_project(tmp_path / "p", 1, config={"log": {"dir": log_dir}})
    before = sorted(p.relative_to(root) for p in root.rglob("*") if ".git" not in p.parts)
    for args in (["run", "--tool", "sim", "1"], ["status"]):
        proc = subprocess.run([*RALPH, *args], cwd=root, env=env(), capture_output=True, text=True)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.startswith(
            "ralph: error: ralph.yaml: log.dir must be a folder of its own"
        )
        assert why in proc.stderr and "use a new folder such as ralph/logs" in proc.stderr
    after = sorted(p.relative_to(root) for p in root.rglob("*") if ".git" not in p.parts)
    assert after == before


@pytest.mark.parametrize("log_dir", ["ralph/logs", "scripts/ralph/logs", ".ralph-logs", "/tmp/x"])
def test_log_dir_of_its_own_is_accepted(tmp_path: Path, log_dir: str) -> None:
    (tmp_path / "ralph.yaml").write_text(f"log:\n  dir: {log_dir}\n")
    assert load_config(tmp_path / "ralph.yaml").log.dir == log_dir
