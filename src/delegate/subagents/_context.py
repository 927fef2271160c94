"""Project context: the workspace's `AGENTS.md`, `CLAUDE.md`, `.claude/CLAUDE.md` and
`ARCHITECTURE.md` (spec 003: subagents receive the architecture context automatically), put in the
system prompt of the lead and of every subagent whose definition does not opt out
(`project_context: false`), each bounded in size and marked as what it is."""

from __future__ import annotations

from .._errors import ToolError, WorkspaceError
from ..workspace import Workspace, open_for_reading

CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md", "ARCHITECTURE.md")
MAX_FILE_CHARS = 8_000
"""Characters of one file kept in the prompt; the rest is left for `read_file`."""
MAX_FILE_BYTES = 64 * 1024
"""Bytes of one file read to find its first `MAX_FILE_CHARS` characters (a huge file is not read whole)."""


def project_context(workspace: Workspace) -> str:
    """The system prompt's part for the workspace's context files (empty when it has none).
    A file that is a link out of the workspace, or not UTF-8 text, is left out."""
    parts: list[str] = []
    for name in CONTEXT_FILES:
        try:
            with workspace.locate(name) as at:
                if not at.is_file():
                    continue
                with open_for_reading(at.folder, at.name, at.rel) as f:
                    text = f.read(MAX_FILE_BYTES).decode("utf-8").strip()
        except (WorkspaceError, ToolError, OSError, UnicodeDecodeError):
            continue
        if not text:
            continue
        if len(text) > MAX_FILE_CHARS:
            more = len(text) - MAX_FILE_CHARS
            text = f"{text[:MAX_FILE_CHARS]}\n[... {more} more characters: read {name} with read_file]"
        parts.append(f'<project-context file="{name}">\n{text}\n</project-context>')
    if not parts:
        return ""
    return (
        "Project context: the workspace's own notes for agents working in it (conventions, commands, "
        "layout). Follow them where they apply to your task; your task and these instructions come first.\n"
        + "\n".join(parts)
    )
