"""Merging an overlay subagent's layer into the workspace when it completes: all of it or nothing.

`merge_layer` takes the workspace's merge lock (one merge at a time per workspace, across
processes: `flock` on `.delegate/layers/.merge.lock`), lists what the layer changes
(`layer_changes`), and checks each path against what the subagent first saw of it (`Layer.seen`,
content hashes): if the workspace changed any of them since, nothing is applied and each such path
is a `Conflict`. Otherwise the merge is journalled, then applied:

1. each new version is hard-linked from the layer into `<layer>/stage/<n>` (same file system, no
   copy), the folder flushed;
2. the plan (`journal.json`: each path, its operation and its staged name) is written durably;
   from here on the merge is decided;
3. each path is applied with one `rename` (a new or changed file or link takes its place
   atomically), `unlink` or `mkdir`, from a handle on the folder that holds it (walked from the
   root, `_paths.walk`): a folder swapped meanwhile cannot send a change elsewhere;
4. the layer, journal included, is removed.

A process killed before step 2 has changed nothing in the workspace (the layer is kept, like a
failed subagent's); killed after it, the next start (`recover_merges`, from the runtime's
`_prepare_workspace`) applies the plan again: every step is idempotent (a staged file that is gone
was renamed into place; a delete of what is gone is done), so the workspace ends with the whole
change. Kept layers older than `RunLimits.layers_kept` are removed by `sweep_layers`.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from .._empty import empty_list
from .._record import Change, Conflict
from ._changes import Folders, layer_changes
from ._layer import LAYERS, TRASH, Layer, content_hash, descend, open_layers, read_json, remove_tree, write_json
from ._overlay import never_merged
from ._paths import PathEscape, PathLoop, lstat_at
from ._root import Workspace
from ._sandbox import merge_over_quota

JOURNAL = "journal.json"
_log = logging.getLogger("delegate.merge")


@dataclass(kw_only=True, slots=True)
class MergeOutcome:
    """What a merge did: the layer's `changes`, and its `conflicts` (when there are any, nothing
    was applied and the layer is kept)."""

    changes: list[Change] = field(default_factory=empty_list)
    conflicts: list[Conflict] = field(default_factory=empty_list)
    over_quota: bool = False
    """Whether it was refused because it would take the workspace past its disk quota (each
    change is then a conflict saying so)."""

    @property
    def merged(self) -> bool:
        return not self.conflicts


def merge_layer(workspace: Workspace, layer: Layer) -> MergeOutcome:
    """Apply `layer` to `workspace` all or nothing (see the module's doc); the layer is removed
    once merged, kept (its `layer.json` saying `conflict`) when not."""
    shared = workspace.shared
    with merge_lock(shared.root):
        hashes: dict[str, str | None] = {}
        changes = layer_changes(layer, never_merged(shared), diffs=True, hashes=hashes)
        if not changes:
            layer.remove()
            return MergeOutcome()
        conflicts = _conflicts(shared, layer, changes, hashes)
        if conflicts:
            layer.describe(status="conflict", conflicts=[c.to_dict() for c in conflicts])
            return MergeOutcome(changes=changes, conflicts=conflicts)
        over = merge_over_quota(shared, layer)
        if over is not None:
            conflicts = [Conflict(path=c.path, reason=over) for c in changes]
            layer.describe(status="conflict", conflicts=[c.to_dict() for c in conflicts])
            return MergeOutcome(changes=changes, conflicts=conflicts, over_quota=True)
        plan = _stage(layer, changes)
        refused = apply_plan(shared, layer, plan)
        layer.remove()
    return MergeOutcome(changes=[c for c in changes if c.path not in refused])


@contextmanager
def merge_lock(root: Path) -> Generator[None]:
    """The workspace's merge lock, held across processes (`flock` on a file of `.delegate/layers`,
    opened from a handle on the root without following a symlink)."""
    fd = open_layers(root, create=True)
    try:
        lock = os.open(".merge.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


def _conflicts(
    workspace: Workspace, layer: Layer, changes: list[Change], hashes: dict[str, str | None]
) -> list[Conflict]:
    """The changes whose path the workspace changed since the subagent first saw it, or which
    can no longer be applied where they were made (`hashes`: what `layer_changes` just read)."""
    closed = never_merged(workspace)
    found: list[Conflict] = []
    with Folders(workspace.root) as folders:
        for change in changes:
            name = change.path.rsplit("/", 1)[-1]
            try:
                parent = folders.parent(change.path)
            except (OSError, PathEscape, PathLoop):
                found.append(Conflict(path=change.path, reason="a folder on its path is now a file, or leads out"))
                continue
            if parent is None:
                current = None
            else:
                real = "/".join((*parent.parts, name))
                if real != change.path and closed(real):
                    found.append(Conflict(path=change.path, reason=f"its folder now leads to {real}"))
                    continue
                current = hashes[change.path] if change.path in hashes else content_hash(parent.folder, name)
            reason = _changed(change, layer.seen, current)
            if reason is not None:
                found.append(Conflict(path=change.path, reason=reason))
    return found


def _changed(change: Change, seen: dict[str, str | None], current: str | None) -> str | None:
    """Why the workspace's `current` version of a changed path is not the one the subagent saw."""
    if change.path in seen:
        expected = seen[change.path]
    elif change.op == "create":
        expected = None
    else:
        return None  # changed by a command before anything saw it: nothing to compare with
    if current == expected or (current == "dir" and change.op == "create" and expected is None):
        return None
    if expected is None:
        return "created in the workspace after the subagent found it missing"
    if current is None:
        return "deleted in the workspace since the subagent first saw it"
    return "changed in the workspace since the subagent first saw it"


def _stage(layer: Layer, changes: list[Change]) -> list[dict[str, Any]]:
    """Hard-link each new version into `<layer>/stage/`, then write the journal: the plan."""
    remove_tree(layer.root, f"{layer.rel}/stage")
    stage = layer.folder(create=True, sub="stage")
    up = layer.folder(create=False)
    assert stage is not None and up is not None
    opened: dict[tuple[str, ...], int] = {}  # the layer's folders, each opened once
    plan: list[dict[str, Any]] = []
    try:
        for n, change in enumerate(changes):
            entry: dict[str, Any] = {"path": change.path, "op": change.op, "kind": "file", "stage": str(n)}
            plan.append(entry)
            if change.op == "delete":
                continue
            *folders, name = change.path.split("/")
            folder = opened.get(tuple(folders))
            if folder is None:
                folder = opened[tuple(folders)] = descend(up, folders)
            info = os.stat(name, dir_fd=folder, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                entry["kind"] = "dir"
                continue
            entry["kind"] = "link" if stat.S_ISLNK(info.st_mode) else "file"
            try:
                os.link(name, str(n), src_dir_fd=folder, dst_dir_fd=stage, follow_symlinks=False)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_entry(folder, name, stage, str(n), info)
        base = layer.folder(create=False, sub=".")
        assert base is not None
        try:
            write_json(base, JOURNAL, {"state": "apply", "changes": plan})  # flushed: the merge is decided
        finally:
            os.close(base)
    finally:
        for fd in (stage, up, *opened.values()):
            os.close(fd)
    return plan


def apply_plan(workspace: Workspace, layer: Layer, plan: list[dict[str, Any]]) -> set[str]:
    """Apply a journalled plan to `workspace` (its shared view); idempotent (see the module's doc).
    Returns the paths it refused: those whose folder now leads into internal state or out of the
    root (a folder swapped for a link since the merge was checked, or since a killed merge was
    journalled), checked on the folder each is applied in, from its handle, never by its name."""
    stage = layer.folder(create=True, sub="stage")
    old = layer.folder(create=True, sub="old")
    assert stage is not None and old is not None
    refused: set[str] = set()
    try:
        with Folders(workspace.root, closed=never_merged(workspace)) as folders:
            for entry in plan:
                try:
                    _apply_one(folders, stage, old, entry)
                except (PathEscape, PathLoop, NotADirectoryError) as exc:
                    refused.add(str(entry["path"]))
                    _log.warning("the merge of %s left %s out: %s", layer.rel, entry["path"], exc)
    finally:
        os.close(stage)
        os.close(old)
    return refused


def _apply_one(folders: Folders, stage: int, old: int, entry: dict[str, Any]) -> None:
    path = str(entry["path"])
    name, staged, op, kind = path.rsplit("/", 1)[-1], str(entry["stage"]), entry["op"], entry["kind"]
    parent = folders.parent(path, create=op != "delete")
    if parent is None:
        return  # a delete of what is gone already
    here = lstat_at(parent.folder, name)
    if op == "delete":
        if here is not None:
            _move_aside(parent.folder, name, here, old, staged)
            folders.forget(path)
        return
    if kind == "dir":
        if here is not None and not stat.S_ISDIR(here.st_mode):
            _move_aside(parent.folder, name, here, old, staged)
        with suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent.folder)
        return
    if lstat_at(stage, staged) is None:
        return  # renamed into place before
    if here is not None and stat.S_ISDIR(here.st_mode):
        _move_aside(parent.folder, name, here, old, staged)
        folders.forget(path)
    os.rename(staged, name, src_dir_fd=stage, dst_dir_fd=parent.folder)


def _move_aside(folder: int, name: str, info: os.stat_result, old: int, staged: str) -> None:
    """Take `name` out of the workspace: a folder renamed into the layer's `old/` (removed with
    the layer), anything else unlinked."""
    if stat.S_ISDIR(info.st_mode):
        with suppress(FileNotFoundError):
            os.rename(name, staged, src_dir_fd=folder, dst_dir_fd=old)
    else:
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)


def recover_merges(workspace: Workspace) -> list[tuple[Layer, list[Change]]]:
    """Finish the merges a killed process left journalled (see the module's doc); return each
    layer whose merge was applied now, with what it changed (as its plan says: no sizes, no
    diffs), for the record of its subagent. A merge that cannot be finished now (a disk error) is
    left journalled for the next start, with a warning."""
    finished: list[tuple[Layer, list[Change]]] = []
    for layer in _layers(workspace.root):
        if _journal(layer) is None:
            continue
        try:
            with merge_lock(workspace.root):
                plan = _journal(layer)  # read again under the lock: its own process may have ended it
                if plan is None:
                    continue
                apply_plan(workspace.shared, layer, plan)
                layer.remove()
        except OSError as exc:
            _log.warning(
                "the merge journalled in %s could not be finished (%s); the next start tries again", layer.rel, exc
            )
            continue
        finished.append((layer, [Change(path=str(step["path"]), op=step["op"]) for step in plan]))
    return finished


def _journal(layer: Layer) -> list[dict[str, Any]] | None:
    """The plan `layer`'s journal holds, None when it has none (nothing decided, or all done)."""
    base = layer.folder(create=False, sub=".")
    if base is None:
        return None
    try:
        journal = read_json(base, JOURNAL)
    finally:
        os.close(base)
    if not isinstance(journal, dict) or cast(dict[str, Any], journal).get("state") != "apply":
        return None
    return cast(list[dict[str, Any]], cast(dict[str, Any], journal).get("changes") or [])


def sweep_layers(workspace: Workspace, kept: float) -> list[str]:
    """Remove layers last touched more than `kept` seconds ago (a journalled merge is finished by
    `recover_merges` first, never swept); return those removed."""
    cutoff = time.time() - kept
    with suppress(OSError):  # what a killed process left half-removed (another may be emptying it too)
        remove_tree(workspace.root, f"{LAYERS}/{TRASH}")
    removed: list[str] = []
    for layer in _layers(workspace.root):
        base = layer.folder(create=False, sub=".")
        if base is None:
            continue
        try:
            touched = os.stat(base).st_mtime
            described = read_json(base, "layer.json")
            stamp = cast(dict[str, Any], described).get("updated_at") if isinstance(described, dict) else None
            if isinstance(stamp, (int, float)):
                touched = max(touched, float(stamp))
            journalled = read_json(base, JOURNAL) is not None
        finally:
            os.close(base)
        if touched < cutoff and not journalled:
            with suppress(OSError):
                layer.remove()
                removed.append(layer.rel)
    return removed


def _layers(root: Path) -> Iterator[Layer]:
    """Every layer folder of the workspace (`.delegate/layers/<run>/<agent>`), by handles."""
    try:
        fd = open_layers(root)
    except OSError:
        return
    try:
        runs = [r for r in _folders(fd) if not r.startswith(".")]  # `.trash`: removed layers
        for run in runs:
            run_fd = descend(fd, [run])
            try:
                agents = _folders(run_fd)
            finally:
                os.close(run_fd)
            for agent in agents:
                yield Layer(root=root, run_id=run, agent_id=agent, track=False)
    except OSError:
        return
    finally:
        os.close(fd)


def _folders(fd: int) -> list[str]:
    listed = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    try:
        with os.scandir(listed) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    finally:
        os.close(listed)


def _copy_entry(folder: int, name: str, stage: int, staged: str, info: os.stat_result) -> None:
    """Copy a file or link where a hard link cannot be made (another file system)."""
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=folder), staged, dir_fd=stage)
        return
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        dst = os.open(
            staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, stat.S_IMODE(info.st_mode), dir_fd=stage
        )
        try:
            while chunk := os.read(src, 1 << 20):
                os.write(dst, chunk)
            os.fsync(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
