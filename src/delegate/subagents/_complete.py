"""`complete(summary, paths)`: a subagent's stop tool, which validates what it delivers.

A type with an `output_schema` gets `complete(summary, paths, result)` instead (`typed_complete`):
`result` is checked against the schema, and a result that does not fit goes back to the subagent
as a tool error listing what is wrong. After `MAX_RESULT_FAILURES` such answers in a row the
subagent ends `error` (stop reason `invalid_result`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Annotated, Any, cast

from pydantic import Field

from .._empty import empty_list
from .._errors import ToolError, WorkspaceError
from .._record import ResultSchema
from .._time import iso
from ..tools import PathParam, Tool, ToolContext, ToolReturn
from ..workspace import Located, Workspace
from ._output import Artifact, Skipped

MAX_RESULT_FAILURES = 3
"""How many invalid typed results in a row end a subagent with `error`."""


@dataclass(kw_only=True, slots=True)
class Delivery:
    """What `complete` delivered. `invalid` says why the subagent gave up on its typed result."""

    summary: str
    artifacts: list[Artifact] = field(default_factory=empty_list)
    skipped: list[Skipped] = field(default_factory=empty_list)
    result: Any = None
    invalid: str | None = None


def validate_paths(workspace: Workspace, paths: Sequence[str]) -> tuple[list[Artifact], list[Skipped]]:
    """Each path must exist, resolve under the workspace root, and not repeat. A symlink must lead
    to something that does, and is reported as the link (a link and its target listed together
    are two artifacts)."""
    artifacts: list[Artifact] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for claimed in paths:
        try:
            at = workspace.locate(claimed)
        except WorkspaceError as exc:
            skipped.append(Skipped(path=claimed, reason=str(exc)))
            continue
        with at:
            artifact = _artifact(at)
            if artifact is not None and at.followed:
                artifact = _as_link(workspace, claimed, at, artifact)
        if artifact is None:
            skipped.append(Skipped(path=claimed, reason="does not exist"))
        elif artifact.path in seen:
            skipped.append(Skipped(path=claimed, reason="listed more than once"))
        else:
            seen.add(artifact.path)
            artifacts.append(artifact)
    return artifacts, skipped


def _artifact(at: Located) -> Artifact | None:
    """The artifact at a located path (where a link leads), None if missing."""
    info = at.info
    if info is None:
        return None
    return Artifact(
        path=str(at.real),
        size=info.st_size,
        fs_type="directory" if stat.S_ISDIR(info.st_mode) else "file",
        modified_at=iso(datetime.fromtimestamp(info.st_mtime, UTC)),
        relative_path=at.rel,
    )


def _as_link(workspace: Workspace, claimed: str, target: Located, found: Artifact) -> Artifact:
    """The artifact of `claimed` when its last name is itself a symlink (not only a folder on its
    way): the link, with its own path, size and time, naming `found` (where it leads) as its
    target. Its folder is walked as any path is, so the link itself lies in the view too."""
    path = PurePosixPath(claimed)
    if path.name in ("", ".", ".."):
        return found
    try:
        folder = workspace.locate(str(path.parent))
    except WorkspaceError:
        return found
    with folder:
        if not folder.is_dir() or folder.real / path.name == target.real:
            return found  # only a folder on the way was a link: the object is what it named
        try:
            fd = folder.open(os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return found
        try:
            info = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            info = None
        finally:
            os.close(fd)
    if info is None or not stat.S_ISLNK(info.st_mode):
        return found  # it changed meanwhile, or lies in an overlay's layer: reported as what it names
    rel = f"{folder.rel}/{path.name}" if folder.rel != "." else path.name
    return Artifact(
        path=str(folder.real / path.name),
        size=info.st_size,
        fs_type="symlink",
        modified_at=iso(datetime.fromtimestamp(info.st_mtime, UTC)),
        relative_path=rel,
        target=found.relative_path,
    )


def _complete(
    ctx: ToolContext,
    summary: Annotated[str, Field(description="What you did and found: short, specific, with key results.")],
    paths: Annotated[
        Sequence[str],
        PathParam(),
        Field(description="Files you wrote for the delegating agent to read (workspace-relative or absolute)."),
    ] = (),  # a default pydantic need not copy for each call (a list's deep copy cost every subagent 2 µs)
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


def typed_complete(schema: ResultSchema) -> Tool:
    """The `complete` tool of a type with an `output_schema`: it also takes a validated `result`."""
    failures: dict[tuple[str, str], int] = {}
    result_schema, defs = schema.parameter()
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "What you did and found: short, specific."},
            "result": {**result_schema, "description": "Your result, exactly in the shape this schema requires."},
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Files you wrote for the delegating agent to read (workspace-relative or absolute).",
            },
        },
        "required": ["summary", "result"],
        "additionalProperties": False,
        **({"$defs": defs} if defs else {}),
    }

    def run(ctx: ToolContext, args: dict[str, Any]) -> ToolReturn:
        summary, paths = args.get("summary"), args.get("paths", [])
        if not isinstance(summary, str):
            raise ToolError("summary is required: a string saying what you did")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in cast(list[object], paths)):
            raise ToolError("paths must be a list of strings")
        if "result" in args:
            value, problems = schema.check(args["result"])
        else:
            value, problems = None, ["result is missing: pass it, in the shape of the schema"]
        key = (ctx.run_id, ctx.agent_id)
        if problems:
            tries = failures[key] = failures.get(key, 0) + 1
            shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
            if tries >= MAX_RESULT_FAILURES:
                del failures[key]
                why = f"the result did not match the output schema after {tries} tries: {shown}"
                return ToolReturn(content=f"Giving up: {why}", data=Delivery(summary=summary, invalid=why))
            raise ToolError(
                f"result does not match the output schema: {shown}. Fix it and call complete again "
                f"({MAX_RESULT_FAILURES - tries} tries left)"
            )
        failures.pop(key, None)
        artifacts, skipped = validate_paths(ctx.workspace, cast(list[str], paths))
        delivery = Delivery(summary=summary, artifacts=artifacts, skipped=skipped, result=value)
        return ToolReturn(content=f"Delivered the result and {len(artifacts)} file(s).", data=delivery)

    return Tool(
        name="complete",
        description=(
            "Finish your task and hand the result back. Call it once, at the end, with a short summary, your "
            "`result` in the shape of its schema, and the paths of the files you wrote."
        ),
        parameters=parameters,
        function=run,
        stop=True,
        path_params={"paths": "existing"},
    )
