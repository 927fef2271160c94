"""Which subagents run on a layer, and what happens to the layer when they end.

A subagent runs on a private layer (`delegate.workspace._layer`) when its definition says `isolation:
overlay` or the lead's `task` call asks `isolation="overlay"`: `overlay`. A type without write
tools (no `write_file`, no `edit_file`) runs on one too, unless its definition says `isolation:
shared` (the built-in `bash` type, whose builds write): `read-only`; its commands run over the
layer, and whatever they write is refused (`tools/_shell.py`). When the subagent ends, `settle`
turns its layer into its record: a completed overlay subagent's changes are merged all or nothing
(`_merge.py`); on a conflict, or when it failed, timed out, was stopped or cancelled, nothing is
applied and the layer is kept (`TaskOutput.layer`) for `RunLimits.layers_kept` seconds.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from typing import Any

from .._errors import ToolError, WorkspaceError
from .._record import Change, Conflict, Isolation, Skipped, TaskOutput
from ..agents import WRITE_TOOLS, Subagent
from ..tools import Tool, never_merged
from ..workspace import Layer, Workspace, layer_changes, merge_layer
from ._complete import validate_paths
from ._output import RESULTS_DIR

ISOLATIONS = ("overlay", "shared")
"""What the lead's `task(isolation=...)` may ask for."""


def isolation_for(definition: Subagent, tools: Sequence[Tool], asked: str | None) -> Isolation:
    """How a subagent of `definition` with `tools` runs, the lead having `asked` for an isolation
    (or not). The lead can ask for a layer, never take one away."""
    if not WRITE_TOOLS.intersection(t.name for t in tools) and definition.isolation != "shared":
        return "read-only"
    if definition.isolation == "overlay" or asked == "overlay":
        return "overlay"
    return "shared"


def check_asked(value: object) -> str | None:
    """The `isolation` argument of a `task` call, checked (a `ToolError` says what it may be)."""
    if value is None or value in ISOLATIONS:
        return value if isinstance(value, str) else None
    raise ToolError(f"isolation must be 'overlay' or 'shared', not {value!r}")


def layer_for(
    isolation: Isolation, workspace: Workspace, run_id: str, agent_id: str, tools: Sequence[Tool]
) -> Layer | None:
    """The layer a subagent runs on (None: it writes the shared workspace, or cannot write at all).
    A stretch of work has a layer of its own, empty as it starts: one found at its place is what
    an attempt of a killed process left (its merge, if journalled, finished at start by
    `recover_merges`), and is removed, since the subagent starts afresh on resume. Kept, it would
    show the new attempt files it never wrote, and merge them under its record."""
    if not needs_layer(isolation, tools):
        return None
    layer = Layer(
        root=workspace.root,
        run_id=run_id,
        agent_id=agent_id,
        read_only=isolation == "read-only",
        track=isolation == "overlay",
        opaque=False,  # new: nothing in it yet
    )
    if layer.exists():
        layer.remove()
    return layer


def needs_layer(isolation: Isolation, tools: Sequence[Tool]) -> bool:
    """Whether a subagent of `isolation` with `tools` runs on a layer: not when it writes the shared
    workspace, nor when it is read-only and nothing it has can write (there is nothing to check)."""
    if isolation == "shared":
        return False
    return isolation != "read-only" or any(t.name == "bash" for t in tools)


def settle(record: TaskOutput, layer: Layer, workspace: Workspace) -> tuple[str, dict[str, Any]] | None:
    """Turn the layer of the subagent of `record` into its record (see the module's doc), and
    return the event to emit (`workspace.merged` / `workspace.conflict`), if any."""
    shared = workspace.shared
    if layer.read_only:
        refused = sorted(set(layer.refused))
        record.conflicts = [Conflict(path=p, reason=f"refused: type {record.type!r} is read-only") for p in refused]
        layer.remove()
        if not refused:
            return None
        return "workspace.conflict", {"conflicts": [c.to_dict() for c in record.conflicts], "layer": None}
    if record.status != "completed":
        if not layer.exists():
            return None
        record.changes = layer_changes(layer, never_merged(shared))
        record.layer = layer.rel
        layer.describe(status=record.status)
        return None
    outcome = merge_layer(workspace, layer)
    record.changes = outcome.changes
    if outcome.merged:
        record.artifacts, skipped = validate_paths(shared, [a.relative_path for a in record.artifacts])
        record.skipped += skipped
        if not outcome.changes:
            return None
        return "workspace.merged", {"changes": [c.to_dict() | {"diff": None} for c in outcome.changes]}
    record.layer = layer.rel
    # past the quota, its versions stay in its layer (copying them out would pass it too)
    record.conflicts = (
        outcome.conflicts
        if outcome.over_quota
        else [_with_version(c, layer, shared, record) for c in outcome.conflicts]
    )
    _unmerged_artifacts(record, shared)
    data = {"conflicts": [c.to_dict() for c in record.conflicts], "layer": layer.rel}
    return "workspace.conflict", data


def add_recovered(record: TaskOutput, earlier: list[Change] | None) -> None:
    """Put in `record` what an attempt of its subagent that a kill cut short merged (`earlier`:
    its journalled merge, finished by `recover_merges` as the run resumed): what the workspace
    holds from it is listed among its `changes`, once a path (what the new attempt did to it
    last), unless its own layer is kept unmerged (its `changes` are then what waits there)."""
    if earlier and not record.layer:
        now = {c.path for c in record.changes}
        record.changes = [*(c for c in earlier if c.path not in now), *record.changes]


def _with_version(conflict: Conflict, layer: Layer, shared: Workspace, record: TaskOutput) -> Conflict:
    """`conflict`, its subagent's version copied where the lead can read it
    (`subagent-results/<run>/<agent>/<path>`), when it is a file."""
    folder = f"{RESULTS_DIR}/{_safe(layer.run_id)}/{_safe(record.id)}"
    target = f"{folder}/{conflict.path}"
    up = layer.folder(create=False)
    if up is None:
        return conflict
    try:
        *parts, name = conflict.path.split("/")
        fd = up
        for part in parts:
            step = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            if fd != up:
                os.close(fd)
            fd = step
        try:
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        finally:
            if fd != up:
                os.close(fd)
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                return conflict
            with shared.locate(target, write=True, create=True) as at:
                dst = os.open(
                    at.name,
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o644,
                    dir_fd=at.folder,
                )
                try:
                    while chunk := os.read(src, 1 << 20):
                        os.write(dst, chunk)
                finally:
                    os.close(dst)
        finally:
            os.close(src)
    except (OSError, WorkspaceError):
        return conflict
    finally:
        os.close(up)
    conflict.version = target
    return conflict


def _unmerged_artifacts(record: TaskOutput, shared: Workspace) -> None:
    """Artifacts of a subagent whose layer was not merged: those it changed are not in the
    workspace (skipped, saying where its version is); the others are checked there."""
    changed = {c.path for c in record.changes}
    versions = {c.path: c.version for c in record.conflicts}
    kept = [a for a in record.artifacts if a.relative_path not in changed]
    for artifact in record.artifacts:
        if artifact.relative_path in changed:
            where = versions.get(artifact.relative_path) or f"{record.layer}/upper/{artifact.relative_path}"
            record.skipped.append(
                Skipped(
                    path=artifact.relative_path,
                    reason=f"not merged (the workspace changed meanwhile); its version: {where}",
                )
            )
    record.artifacts, skipped = validate_paths(shared, [a.relative_path for a in kept])
    record.skipped += skipped


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
