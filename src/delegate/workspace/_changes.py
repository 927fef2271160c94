"""What a layer (`_layer.py`) changes in the workspace: the paths it creates, modifies and deletes.

Both sides are read from handles: the layer's entries by walking `upper/` (`Layer.entries`, each
folder opened from its parent with `O_NOFOLLOW`), the workspace's by `Folders`, which walks each
folder that holds a changed path once from a handle on the root (`_paths.walk`) and keeps its
handle for the rest of the pass, so a merge of 1,000 files in one folder walks that folder once.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .._record import Change
from ._layer import Layer, content_hash, is_whiteout, open_below
from ._paths import MAX_LINKS, Found, PathEscape, PathLoop, lstat_at, walk

DIFF_MAX_CHARS = 8_000
"""The most characters of a change's diff kept in the record (the layer keeps the whole file)."""
DIFF_MAX_BYTES = 512 * 1024
"""Files larger than this get no diff (their change says how many bytes they hold)."""
_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parent_handle(
    root_fd: int,
    root: str,
    parts: tuple[str, ...] | list[str],
    *,
    create: bool,
    closed: Callable[[str], bool] | None = None,
) -> Found | None:
    """Where the folder that holds `parts` is, walked from `root_fd` (symlinks on the way
    followed, never out of the root; missing folders made with `create`): a `Found` whose
    `parts` are the folder's real path, and whose `folder` is a handle on that folder itself
    (`name` is `.`). None when a folder on the way is missing (and not made). With `closed`, a
    folder whose real path it names (internal state) is neither made nor handed back: `PathEscape`.
    A folder swapped for a link between the walk and its opening is walked again."""

    def may_make(real: tuple[str, ...]) -> None:
        if closed is not None and closed("/".join(real)):
            raise PathEscape(f"{'/'.join(real)} is internal state")

    for _ in range(MAX_LINKS):
        found = walk(root_fd, root, [*parts[:-1], "."], create=may_make if create else None)
        try:
            if found.info is None or not stat.S_ISDIR(found.info.st_mode):
                return None
            may_make(found.parts)
            if found.name == ".":
                return Found(folder=os.dup(found.folder), name=".", parts=(), info=found.info)
            try:
                fd = os.open(found.name, _PATH_DIR, dir_fd=found.folder)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since the walk
                    continue
                raise
            return Found(folder=fd, name=".", parts=found.parts, info=found.info)
        finally:
            found.close()
    raise PathLoop("the path keeps changing")


class Folders:
    """Handles on the workspace's folders that hold the paths of one pass (listing a layer's
    changes, checking them, applying them), each walked once from a handle on the root."""

    def __init__(self, root: Path, *, closed: Callable[[str], bool] | None = None) -> None:
        self.root = str(root)
        self.closed = closed
        """Names internal state (see `parent_handle`): a folder there is refused, never made."""
        self.fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._known: dict[tuple[str, ...], Found] = {}

    def parent(self, rel: str, *, create: bool = False) -> Found | None:
        """The folder holding `rel` (see `parent_handle`; the handle stays this object's), None
        when it is missing. Raises `OSError` when a part of the way is a file, `PathEscape` or
        `PathLoop` when it leads out of the root or in circles."""
        parts = rel.split("/")
        key = tuple(parts[:-1])
        found = self._known.get(key)
        if found is None:
            found = parent_handle(self.fd, self.root, parts, create=create, closed=self.closed)
            if found is not None:
                self._known[key] = found
        return found

    def lstat(self, rel: str) -> os.stat_result | None:
        """The workspace's `lstat` of `rel`, its last component not followed (None: missing)."""
        try:
            parent = self.parent(rel)
        except (OSError, PathEscape, PathLoop):
            return None
        return None if parent is None else lstat_at(parent.folder, rel.rsplit("/", 1)[-1])

    def forget(self, rel: str) -> None:
        """Drop the handles of `rel` and of the folders below it (it was moved away)."""
        key = tuple(rel.split("/"))
        for known in [k for k in self._known if k[: len(key)] == key]:
            self._known.pop(known).close()

    def close(self) -> None:
        for found in self._known.values():
            found.close()
        self._known.clear()
        os.close(self.fd)

    def __enter__(self) -> Folders:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def layer_changes(
    layer: Layer,
    skip: Callable[[str], bool],
    *,
    diffs: bool = False,
    hashes: dict[str, str | None] | None = None,
) -> list[Change]:
    """What `layer` changes in the workspace, path by path in path order: each file, link or
    empty folder it adds (`create`), each it changes (`modify`; a file copied up and left as it was
    is no change) and each it deletes (`delete`). `skip(rel)` names paths never merged (hidden and
    read-only folders: the mount points a sandbox makes there). `hashes`, when given, receives
    the workspace's content hash of each changed file it compared."""
    if not layer.exists():
        return []
    changes: list[Change] = []
    made: list[str] = []  # folders the layer adds
    settled: list[str] = []  # paths whose layer entries below are not looked at
    with Folders(layer.root) as folders:
        for rel, info, opaque, folder in layer.entries():
            if any(_under(rel, s) for s in settled):
                continue
            if skip(rel):
                settled.append(rel)
                continue
            lower = folders.lstat(rel)
            if is_whiteout(info):
                if lower is not None:
                    changes.append(Change(path=rel, op="delete"))
                settled.append(rel)
            elif stat.S_ISDIR(info.st_mode):
                if lower is None or not stat.S_ISDIR(lower.st_mode):
                    changes.append(Change(path=rel, op="create" if lower is None else "modify"))
                    made.append(rel)
                elif opaque:
                    changes += _hidden_by(layer, folders, rel)
            else:
                change = _file_change(folders, folder, rel, info, lower, diffs, hashes)
                if change is not None:
                    changes.append(change)
    # a folder it adds is a change of its own only when nothing below it is
    busy = {p for c in changes for p in _ancestors(c.path)}
    changes = [c for c in changes if c.path not in made or c.path not in busy]
    return sorted(changes, key=lambda c: c.path)


def _hidden_by(layer: Layer, folders: Folders, rel: str) -> list[Change]:
    """The deletes an opaque folder of the layer makes: the workspace's entries it lacks."""
    try:
        parent = folders.parent(f"{rel}/x")
    except (OSError, PathEscape, PathLoop):
        return []
    if parent is None:
        return []
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent.folder)
    except OSError:
        return []
    try:
        theirs = set(os.listdir(fd))
    finally:
        os.close(fd)
    up = layer.folder(create=False)
    assert up is not None
    try:
        mine_fd = open_below(up, tuple(rel.split("/")))
    finally:
        os.close(up)
    mine: set[str] = set()
    if mine_fd is not None:
        try:
            mine = set(os.listdir(mine_fd))
        finally:
            os.close(mine_fd)
    return [Change(path=f"{rel}/{name}", op="delete") for name in sorted(theirs - mine)]


def _file_change(
    folders: Folders,
    folder: int,
    rel: str,
    info: os.stat_result,
    lower: os.stat_result | None,
    diffs: bool,
    hashes: dict[str, str | None] | None,
) -> Change | None:
    """The change of a file or link of the layer (in its `folder`), None when it is the
    workspace's as it is."""
    name = rel.rsplit("/", 1)[-1]
    size = len(os.fsencode(os.readlink(name, dir_fd=folder))) if stat.S_ISLNK(info.st_mode) else info.st_size
    try:
        parent = folders.parent(rel) if lower is not None else None
    except (OSError, PathEscape, PathLoop):
        parent = None
    if lower is None or parent is None:
        if hashes is not None:
            hashes[rel] = None
        return Change(path=rel, op="create", bytes=size, diff=_diff(None, folder, name, info) if diffs else None)
    theirs = content_hash(parent.folder, name)
    if hashes is not None:
        hashes[rel] = theirs
    if theirs == content_hash(folder, name):
        return None  # copied up, left as it was
    diff = _diff((parent.folder, lower), folder, name, info) if diffs else None
    return Change(path=rel, op="modify", bytes=size, diff=diff)


def _diff(old: tuple[int, os.stat_result] | None, folder: int, name: str, info: os.stat_result) -> str | None:
    """A unified diff of a text file's old version (None: it is new) and its layer's, capped."""
    if not stat.S_ISREG(info.st_mode) or info.st_size > DIFF_MAX_BYTES:
        return None
    if old is not None and (not stat.S_ISREG(old[1].st_mode) or old[1].st_size > DIFF_MAX_BYTES):
        return None
    texts: list[list[str]] = []
    for where in ((old[0] if old else None), folder):
        if where is None:
            texts.append([])
            continue
        try:
            texts.append(_read(where, name).decode("utf-8").splitlines(keepends=True))
        except (OSError, UnicodeDecodeError):
            return None
    import difflib  # on first use: most runs show no diff

    lines = difflib.unified_diff(texts[0], texts[1], "a/" + name if old else "/dev/null", "b/" + name)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text if len(text) <= DIFF_MAX_CHARS else text[:DIFF_MAX_CHARS] + "\n[diff cut]\n"


def _read(folder: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def _ancestors(rel: str) -> Iterator[str]:
    parts = rel.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])
