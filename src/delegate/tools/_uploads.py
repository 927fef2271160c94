"""Files the user uploaded earlier in the conversation, and the `list_uploaded_files` tool.

A run's uploads are a state of the run: a list of entries, each with a `filename` (and, when known,
its workspace `path`, `size` and `content_type`). An empty list is a valid state; a missing or
malformed one is none at all, and then the tool is not offered. Subagents started with `task` get
a deep copy of their parent's state; batch items never get the tool.
"""

from __future__ import annotations

import copy
from typing import Any, cast

from ._tool import ToolContext, tool


def uploads_state(value: object) -> list[dict[str, Any]] | None:
    """`value` as a run's uploads state, deep-copied, or None when it is missing or malformed (not
    a list, or an entry that is not a mapping with a non-empty `filename`)."""
    if not isinstance(value, list):
        return None
    entries = cast(list[object], value)
    for entry in entries:
        if not isinstance(entry, dict):
            return None
        filename = cast(dict[str, Any], entry).get("filename")
        if not isinstance(filename, str) or not filename.strip():
            return None
    return copy.deepcopy(cast(list[dict[str, Any]], entries))


@tool
def list_uploaded_files(ctx: ToolContext) -> str:
    """List the files the user uploaded earlier in this conversation: each one's name, size, type
    and where it is in the workspace (read it there with read_file)."""
    entries = ctx.uploaded_files or []
    if not entries:
        return "No files have been uploaded in this conversation."
    return "\n".join(_line(entry) for entry in entries)


def _line(entry: dict[str, Any]) -> str:
    facts = [f"{size:,} bytes" for size in [entry.get("size")] if isinstance(size, int)]
    facts += [kind for kind in [entry.get("content_type")] if isinstance(kind, str) and kind]
    where = entry.get("path")
    line = f"- {entry['filename']}" + (f" ({', '.join(facts)})" if facts else "")
    return line + (f" at {where}" if isinstance(where, str) and where else "")
