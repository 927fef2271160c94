"""`complete(summary, paths)`: a subagent's stop tool, which validates what it delivers."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from .._errors import WorkspaceError
from .._workspace import Workspace
from ..tools import PathParam, Tool, ToolContext, ToolReturn
from ._output import Artifact, Skipped


@dataclass(kw_only=True, slots=True)
class Delivery:
    summary: str
    artifacts: list[Artifact] = field(default_factory=list[Artifact])
    skipped: list[Skipped] = field(default_factory=list[Skipped])


def validate_paths(workspace: Workspace, paths: list[str]) -> tuple[list[Artifact], list[Skipped]]:
    """Each path must exist, resolve under the workspace root, and not repeat."""
    artifacts: list[Artifact] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for claimed in paths:
        try:
            real = workspace.resolve(claimed)
        except WorkspaceError as exc:
            skipped.append(Skipped(path=claimed, reason=str(exc)))
            continue
        key = str(real)
        if key in seen:
            skipped.append(Skipped(path=claimed, reason="listed more than once"))
            continue
        seen.add(key)
        given = claimed if os.path.isabs(claimed) else workspace.root / claimed
        try:
            link = os.lstat(given)
            info = os.stat(real)
        except OSError:
            skipped.append(Skipped(path=claimed, reason="does not exist"))
            continue
        kind = "symlink" if stat.S_ISLNK(link.st_mode) else "directory" if stat.S_ISDIR(info.st_mode) else "file"
        artifacts.append(
            Artifact(
                path=key,
                size=info.st_size,
                fs_type=kind,
                modified_at=datetime.fromtimestamp(info.st_mtime, UTC).isoformat(),
                relative_path=workspace.relative(real),
            )
        )
    return artifacts, skipped


def _complete(
    ctx: ToolContext,
    summary: Annotated[str, Field(description="What you did and found: short, specific, with key results.")],
    paths: Annotated[
        list[str],
        PathParam(),
        Field(description="Files you wrote for the delegating agent to read (workspace-relative or absolute)."),
    ] = [],  # noqa: B006 - pydantic copies defaults
) -> ToolReturn:
    artifacts, skipped = validate_paths(ctx.workspace, paths)
    delivery = Delivery(summary=summary, artifacts=artifacts, skipped=skipped)
    note = f"Delivered {len(artifacts)} file(s)."
    if skipped:
        note += " Not delivered: " + "; ".join(f"{s.path} ({s.reason})" for s in skipped)
    return ToolReturn(content=note, data=delivery)


COMPLETE_TOOL = Tool.from_function(
    _complete,
    name="complete",
    description=(
        "Finish your task and hand the result back. Call it once, at the end, with a short summary and "
        "the paths of the files you wrote. Your work ends when this succeeds."
    ),
    stop=True,
)
