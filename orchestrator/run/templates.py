"""Prompt templates: the built-in ones, a project's own (ralph.yaml `template`, or
`prompt.template.md` in the Ralph folder), Ralph's prompt.md/CLAUDE.md for a tool, and the
one `{{placeholder}}` renderer they all go through."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator import fsutil
from orchestrator.errors import ConfigError
from orchestrator.project import Project

USER_TEMPLATE = "prompt.template.md"
TEMPLATE_FIELDS = (
    "story",
    "story_id",
    "story_title",
    "notes",
    "index",
    "references",
    "progress",
    "progress_path",
    "prd_path",
    "references_dir",
    "branch",
)
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")


@dataclass(frozen=True)
class Template:
    name: str  # where it came from, for messages and `--json`
    text: str


def render_template(template: Template, values: dict[str, str]) -> str:
    """Fill `{{name}}` placeholders in one pass (values are never re-scanned).

    A placeholder alone on its line whose value is empty takes its line with it, so a
    prompt without notes has no blank gap.
    """
    unknown = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template.text)} - set(values))
    if unknown:
        raise ConfigError(
            f"{template.name}: unknown placeholder(s) "
            f"{', '.join('{{' + u + '}}' for u in unknown)}; "
            f"valid ones are {', '.join(TEMPLATE_FIELDS)}"
        )
    lines = []
    for line in template.text.splitlines(keepends=True):
        m = _PLACEHOLDER.fullmatch(line.strip())
        if m and not values[m.group(1)].strip():
            continue
        lines.append(line)
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], "".join(lines))


def builtin_template(name: str) -> Template:
    text = fsutil.shipped_templates().joinpath(name).read_text(encoding="utf-8")
    return Template(f"built-in templates/{name}", text)


def _read_template(path: Path, what: str) -> Template:
    try:
        return Template(str(path), fsutil.read_bytes(path).decode("utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{what}: {path} does not exist; fix the path or remove it") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what}: {path} is not UTF-8 text") from exc


def indexed_template(project: Project) -> Template:
    configured = project.config.template
    if configured:
        return _read_template(Path(project.root) / configured, "ralph.yaml template")
    local = Path(project.ralph_dir) / USER_TEMPLATE
    if fsutil.present(local):
        return _read_template(local, USER_TEMPLATE)
    return builtin_template("prompt.md")


def user_prompt_file(ralph_dir: Path, tool: str | None) -> Template | None:
    """Ralph's prompt for this tool, exactly as ralph.sh would pipe it to the agent."""
    path = Path(ralph_dir) / ("CLAUDE.md" if tool == "claude" else "prompt.md")
    if not fsutil.present(path):
        return None
    # Bytes unchanged: decoded losslessly so the runner can write back the same bytes.
    return Template(str(path), fsutil.read_bytes(path).decode("utf-8", errors="surrogateescape"))
