"""A copy-on-write layer over the workspace: where an overlay subagent's writes land until it completes.

A `Layer` is a folder of the workspace's hidden `.delegate/` (`.delegate/layers/<run>/<agent>/`)
whose `upper/` holds what the subagent changed, in the format of an overlayfs upper layer, so the
file tools and the subagent's commands (bubblewrap over an overlay mount, `workspace/_sandbox.py`) read
and write one and the same thing: a file there is the subagent's version of that path, a
character device 0/0 (a whiteout) says the path is deleted, a folder marked opaque
(`user.overlay.opaque`) hides what the workspace has below it. Everything else is read from the
workspace, as it is now.

`Layer.over` turns where a path is in the workspace (a `Located` from `Workspace.locate`) into
where it is in the subagent's view: its version in the layer when it has one, nothing when it
deleted it, else the workspace's file. A write first copies the workspace's file up into the layer.
Both walks are made from handles, the workspace's from its root (`_paths.py`), the layer's from a
handle on `upper/` opened from the root one component at a time with `O_NOFOLLOW`, so no rename or
symlink swapped in meanwhile sends a read or a write elsewhere. The content hash of each workspace
file is recorded the first time the subagent sees it (`seen`): the merge (`workspace/_merge.py`)
applies its changes only where the workspace still holds what it saw.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._empty import empty_dict, empty_list
from .._errors import WorkspaceError
from ._paths import Found, lstat_at

if TYPE_CHECKING:
    from ._root import Located

LAYERS = ".delegate/layers"
"""Where layers live in a workspace: `<run>/<agent>/` below it, hidden from agents."""
OPAQUE = ("user.overlay.opaque", "trusted.overlay.opaque")
"""The extended attributes overlayfs marks an opaque folder with (`userxattr` mounts: the first)."""
TRASH = ".trash"
"""Where removed layers go before they are emptied (in `LAYERS`)."""
LAYERS_KEPT = 86_400.0
"""Seconds a kept layer (a conflict's, a failed subagent's) stays before it is swept."""

_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def is_whiteout(info: os.stat_result) -> bool:
    """Whether `info` is an overlayfs whiteout: a character device numbered 0/0."""
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def is_opaque(fd: int) -> bool:
    """Whether the folder of handle `fd` (any kind, `O_PATH` too) hides the workspace's below it."""
    for name in OPAQUE:
        with suppress(OSError):
            if os.getxattr(f"/proc/self/fd/{fd}", name) == b"y":
                return True
    return False


def content_hash(folder: int, name: str) -> str | None:
    """A hash of what `name` of the folder handle `folder` holds: a file's bytes, a link's target, a
    folder's kind; None when it does not exist."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(info.st_mode):
        return "link:" + hashlib.blake2b(os.fsencode(os.readlink(name, dir_fd=folder))).hexdigest()
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    if not stat.S_ISREG(info.st_mode):
        return f"special:{stat.S_IFMT(info.st_mode)}"
    digest = hashlib.blake2b()
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    try:
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def layer_rel(run_id: str, agent_id: str) -> str:
    """The workspace-relative folder of the layer of `agent_id` in `run_id`."""
    return f"{LAYERS}/{_safe(run_id)}/{_safe(agent_id)}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120] or "_"


@dataclass(eq=False, kw_only=True)
class Layer:
    """The private layer of one subagent over the workspace at `root` (see the module's doc).

    `read_only` marks a type without write tools: its commands still run on the layer, and any
    write found there is refused (`refused` names them). `seen` maps each view path the subagent
    looked at to the hash of what the workspace held then (None: nothing). Folders are made on the
    first write, so a layer that is only read costs nothing on disk.
    """

    root: Path
    run_id: str
    agent_id: str
    read_only: bool = False
    track: bool = True
    """Whether to record what the subagent sees (a layer that never merges need not)."""
    seen: dict[str, str | None] = field(default_factory=empty_dict)
    refused: list[str] = field(default_factory=empty_list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _upper: int | None = field(default=None, repr=False)
    opaque: bool | None = None
    """Whether a folder of the layer is opaque: False for a layer this process made and only its
    file tools wrote (they make one only where the subagent deleted a folder), None when unknown
    (a command ran: `after_command` looks again)."""

    @property
    def rel(self) -> str:
        return layer_rel(self.run_id, self.agent_id)

    @property
    def path(self) -> Path:
        """The layer's folder on disk (for records and the sandbox's mounts; walked by handle)."""
        return self.root / self.rel

    @property
    def upper(self) -> Path:
        return self.path / "upper"

    @property
    def work(self) -> Path:
        """overlayfs's work folder (same file system as `upper`, emptied by each mount)."""
        return self.path / "work"

    # -- folders ------------------------------------------------------------------------------

    def folder(self, *, create: bool, sub: str = "upper") -> int | None:
        """A handle (`O_PATH`) on the layer's `sub` folder, opened from a handle on the workspace
        root one component at a time, none a symlink; made when `create`, else None if missing."""
        if sub == "upper" and self._upper is not None:
            return os.dup(self._upper)
        top = open_root(self.root)
        try:
            fd = descend(top, [*self.rel.split("/"), sub], create=create)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise WorkspaceError(f"the subagent's layer {self.rel} cannot be opened: {exc.strerror}") from None
        finally:
            os.close(top)
        if sub == "upper":  # kept: the layer's own folder, opened once (a handle, never a name)
            self._upper = os.dup(fd)
        return fd

    def close(self) -> None:
        """Let go of the handle on `upper` the layer keeps."""
        if self._upper is not None:
            os.close(self._upper)
            self._upper = None

    def prepare(self) -> None:
        """Make the layer's folders (`upper`, `work`, `tmp`) and its description (`layer.json`)."""
        for sub in ("upper", "work", "tmp"):
            fd = self.folder(create=True, sub=sub)
            if fd is not None:
                os.close(fd)
        self.describe(status="running")

    def describe(self, **fields: Any) -> None:
        """Write `layer.json` (who the layer is of, its state, when): merged over what it says."""
        base = self.folder(create=True, sub=".")
        if base is None:  # pragma: no cover - create=True makes it
            return
        try:
            data = self.description() | fields
            data.update(run_id=self.run_id, agent_id=self.agent_id, read_only=self.read_only, updated_at=time.time())
            write_json(base, "layer.json", data)
        finally:
            os.close(base)

    def description(self) -> dict[str, Any]:
        base = self.folder(create=False, sub=".")
        if base is None:
            return {}
        try:
            return read_json(base, "layer.json") or {}
        finally:
            os.close(base)

    def exists(self) -> bool:
        fd = self.folder(create=False)
        if fd is None:
            return False
        os.close(fd)
        return True

    def remove(self) -> None:
        """Remove the layer: its folder is renamed into `.delegate/layers/.trash/` at once (it is
        gone from where it was in one step), and emptied there by a thread of its own; what a
        killed process leaves in the trash, `empty_trash` removes."""
        self.close()
        trash = f"{LAYERS}/{TRASH}/{secrets.token_hex(8)}"
        try:
            fd = open_layers(self.root)
        except OSError:
            return
        try:
            with suppress(FileExistsError):
                os.mkdir(TRASH, 0o700, dir_fd=fd)
            run, agent = self.rel.split("/")[-2:]
            run_fd = os.open(run, _PATH_DIR, dir_fd=fd)
            bin_fd = os.open(TRASH, _PATH_DIR, dir_fd=fd)
            try:
                os.rename(agent, trash.rsplit("/", 1)[1], src_dir_fd=run_fd, dst_dir_fd=bin_fd)
            finally:
                os.close(run_fd)
                os.close(bin_fd)
            with suppress(OSError):
                os.rmdir(run, dir_fd=fd)
        except FileNotFoundError:
            return
        finally:
            os.close(fd)
        threading.Thread(target=_empty, args=(self.root, trash), name="delegate-layer-trash", daemon=True).start()

    def clear(self) -> None:
        """Empty `upper`: what the subagent wrote is dropped (a read-only type's refused writes)."""
        self.close()
        remove_tree(self.root, f"{self.rel}/upper")
        fd = self.folder(create=True)
        if fd is not None:
            os.close(fd)

    # -- the view ---------------------------------------------------------------------------

    def over(self, lower: Located, *, write: bool) -> Located:
        """Where the path `lower` found in the workspace is in the subagent's view (see the module's
        doc); with `write`, in the layer, the workspace's file copied up first. `lower` is consumed."""
        from ._root import Located

        parts = lower.found.parts
        if not parts:
            return lower
        up = self.folder(create=write)
        if up is None:  # nothing written yet: the workspace is the view
            self._see(lower)
            return lower
        try:
            found = self._for_write(up, lower) if write else self._for_read(up, lower)
        except BaseException:
            lower.close()
            raise
        finally:
            os.close(up)
        if found is None:
            return lower
        lower.close()
        return Located(found=found, rel=lower.rel, real=lower.real)

    def _for_read(self, up: int, lower: Located) -> Found | None:
        """The layer's `Found` for `lower`'s path, or None to read the workspace's (`lower`, which
        is marked missing when the layer deleted the path)."""
        state, found = self._find(up, lower.found.parts)
        if state == "present":
            return found
        if found is not None:
            found.close()
        if state == "deleted":
            lower.found.info = None
            return None
        self._see(lower)
        return None

    def _for_write(self, up: int, lower: Located) -> Found:
        parts = lower.found.parts
        folder = self._make_folders(up, parts[:-1], lower.rel)
        name = parts[-1]
        try:
            info = lstat_at(folder, name)
            if info is not None and not is_whiteout(info):
                return Found(folder=folder, name=name, parts=parts, info=info)
            if info is not None or self._hidden_below(up, parts):  # deleted in the layer
                return Found(folder=folder, name=name, parts=parts, info=None)
            self._see(lower)
            if lower.info is None:
                return Found(folder=folder, name=name, parts=parts, info=None)
            if stat.S_ISDIR(lower.info.st_mode):
                with suppress(FileExistsError):
                    os.mkdir(name, stat.S_IMODE(lower.info.st_mode), dir_fd=folder)
            elif stat.S_ISREG(lower.info.st_mode):
                self._copy_up(lower, folder, name)
            else:
                raise WorkspaceError(f"{lower.rel} is not a regular file; it cannot be written")
            return Found(folder=folder, name=name, parts=parts, info=lstat_at(folder, name))
        except BaseException:
            os.close(folder)
            raise

    def _find(self, up: int, parts: tuple[str, ...]) -> tuple[Literal["present", "deleted", "absent"], Found | None]:
        """Look `parts` up in the layer: `present` (its `Found`), `deleted` (a whiteout on the way,
        or an opaque folder above a name it lacks), or `absent` (read the workspace's)."""
        fd = os.dup(up)
        opaque = False
        try:
            for i, name in enumerate(parts):
                if i < len(parts) - 1:  # a folder on the way: entered in one call when it is one
                    try:
                        step = os.open(name, _PATH_DIR, dir_fd=fd)
                    except OSError:
                        step = -1
                    if step >= 0:
                        os.close(fd)
                        fd = step
                        opaque = opaque or self._opaque(fd)
                        continue
                info = lstat_at(fd, name)
                if info is None:
                    state = "deleted" if opaque or self._opaque(fd) else "absent"
                    return state, None
                if is_whiteout(info):
                    if i == len(parts) - 1:
                        found, fd = Found(folder=fd, name=name, parts=parts, info=None), -1
                        return "deleted", found
                    return "deleted", None
                if i == len(parts) - 1:
                    found, fd = Found(folder=fd, name=name, parts=parts, info=info), -1
                    return "present", found
                raise WorkspaceError(f"path {'/'.join(parts)!r} cannot be resolved: {name} is not a folder here")
            return "absent", None
        finally:
            if fd >= 0:
                os.close(fd)

    def _opaque(self, fd: int) -> bool:
        """`is_opaque`, skipped while the layer is known to have no opaque folder."""
        return self.opaque is not False and is_opaque(fd)

    def _hidden_below(self, up: int, parts: tuple[str, ...]) -> bool:
        """Whether a folder of the layer above `parts` is opaque (the workspace's below it is gone)."""
        state, found = self._find(up, parts)
        if found is not None:
            found.close()
        return state == "deleted"

    def _make_folders(self, up: int, parts: tuple[str, ...], rel: str) -> int:
        """A handle on the layer's folder `parts`, each missing folder made (a whiteout in the way
        becomes an opaque folder: the workspace's folder was deleted, this one is new)."""
        fd = os.dup(up)
        try:
            for name in parts:
                info = lstat_at(fd, name)
                if info is not None and is_whiteout(info):
                    os.unlink(name, dir_fd=fd)
                    os.mkdir(name, 0o755, dir_fd=fd)
                    step = os.open(name, _PATH_DIR, dir_fd=fd)
                    os.setxattr(f"/proc/self/fd/{step}", OPAQUE[0], b"y")
                    self.opaque = True
                else:
                    if info is None:
                        with suppress(FileExistsError):
                            os.mkdir(name, 0o755, dir_fd=fd)
                    try:
                        step = os.open(name, _PATH_DIR, dir_fd=fd)
                    except OSError:
                        raise WorkspaceError(f"{rel} cannot be written: {name} is not a folder") from None
                os.close(fd)
                fd = step
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _copy_up(self, lower: Located, folder: int, name: str) -> None:
        """Copy the workspace's file into the layer, its mode kept (less the set-user-ID and
        set-group-ID bits, which a write drops): a temporary file in the layer's `tmp/`, renamed
        into place (a reader never sees half of it)."""
        assert lower.info is not None
        tmp = self.folder(create=True, sub="tmp")
        assert tmp is not None
        temp = f"{secrets.token_hex(8)}.up"
        try:
            src = lower.open(os.O_RDONLY | os.O_NONBLOCK)
            try:
                dst = os.open(
                    temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=tmp
                )
                try:
                    _copy(src, dst, lower.info.st_size)
                    os.fchmod(dst, stat.S_IMODE(lower.info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                finally:
                    os.close(dst)
            finally:
                os.close(src)
            os.rename(temp, name, src_dir_fd=tmp, dst_dir_fd=folder)
        except BaseException:
            with suppress(OSError):
                os.unlink(temp, dir_fd=tmp)
            raise
        finally:
            os.close(tmp)

    def _see(self, lower: Located) -> None:
        """Record what the workspace holds at `lower` the first time the subagent sees it."""
        if not self.track or lower.rel in self.seen or getattr(_glancing, "on", False):
            return
        info = lower.info
        if info is not None and stat.S_ISDIR(info.st_mode):
            return
        digest = None if info is None else _hash_located(lower)
        with self._lock:
            self.seen.setdefault(lower.rel, digest)

    def note_seen(self, rel: str, digest: str | None) -> None:
        """Record `digest` for `rel` unless the subagent saw it before (a command's change)."""
        with self._lock:
            self.seen.setdefault(rel, digest)

    def listing(self, rel: str, names: list[str]) -> list[str]:
        """The names of the view's folder `rel`: the workspace's `names` with what the layer adds
        and less what it deletes (all of them but its own when its folder is opaque)."""
        up = self.folder(create=False)
        if up is None:
            return names
        try:
            parts = () if rel in (".", "") else tuple(rel.split("/"))
            if parts:
                state, found = self._find(up, parts)
                if found is not None:
                    found.close()
                if state != "present":
                    return [] if state == "deleted" else names
            folder = open_below(up, parts)
            if folder is None:
                return names
            try:
                with os.scandir(folder) as entries:
                    mine = {e.name: e.stat(follow_symlinks=False) for e in entries}
                kept = [] if is_opaque(folder) else [n for n in names if n not in mine]
            finally:
                os.close(folder)
        finally:
            os.close(up)
        return sorted([*kept, *(n for n, info in mine.items() if not is_whiteout(info))])

    def pending_bytes(self) -> int:
        """Bytes the layer would add to the workspace if merged (its files' and links' sizes,
        counted whole even where they replace a file: the disk quota counts them up front)."""
        return sum(info.st_size for _, info, _, _ in self.entries() if not stat.S_ISDIR(info.st_mode))

    def entries(self) -> Iterator[tuple[str, os.stat_result, bool, int]]:
        """Every entry of `upper` below the root, parents first: its view path, its `lstat`,
        whether it is a folder marked opaque, and a handle on the folder that holds it (valid until
        the iteration moves on)."""
        up = self.folder(create=False)
        if up is None:
            return
        stack: list[tuple[int, str]] = [(os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=up), "")]
        os.close(up)
        try:
            while stack:
                fd, rel = stack.pop()
                try:
                    with os.scandir(fd) as found:
                        listed = sorted(found, key=lambda e: e.name)
                    for entry in listed:
                        path = f"{rel}/{entry.name}" if rel else entry.name
                        info = entry.stat(follow_symlinks=False)
                        if stat.S_ISDIR(info.st_mode):
                            sub = os.open(
                                entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                            )
                            yield path, info, is_opaque(sub), fd
                            stack.append((sub, path))
                        else:
                            yield path, info, False, fd
                finally:
                    os.close(fd)
        finally:
            for fd, _ in stack:
                os.close(fd)


_glancing = threading.local()


@contextmanager
def glance() -> Generator[None]:
    """Within it, what the layered view finds is not recorded as seen (a listing names files and
    sizes; hashing each one listed would cost a read of the whole folder)."""
    before = getattr(_glancing, "on", False)
    _glancing.on = True
    try:
        yield
    finally:
        _glancing.on = before


def open_root(root: Path) -> int:
    """A handle (`O_PATH`) on the workspace's root folder: every walk below it starts here."""
    return os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def descend(up: int, parts: Iterable[str], *, create: bool = False) -> int:
    """A handle (`O_PATH`) on the folder `parts` below the handle `up`, opened one component at a
    time, none a symlink (each made first, private to its owner, when `create`). `up` stays
    open; a step that fails closes what was opened and raises its `OSError`."""
    fd = os.dup(up)
    try:
        for name in parts:
            if create:
                with suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=fd)
            step = os.open(name, _PATH_DIR, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_layers(root: Path, *, create: bool = False) -> int:
    """A handle on the workspace's `.delegate/layers` folder (made with `create`), walked from
    its root without following a symlink."""
    top = open_root(root)
    try:
        return descend(top, LAYERS.split("/"), create=create)
    finally:
        os.close(top)


def open_below(up: int, parts: tuple[str, ...]) -> int | None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=up)
    for name in parts:
        try:
            step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = step
    return fd


def _hash_located(at: Located) -> str | None:
    try:
        return content_hash(at.folder, at.name)
    except OSError:
        return None


def _copy(src: int, dst: int, size: int) -> None:
    """Copy `size` bytes and whatever follows (a file still growing) from `src` to `dst`."""
    with suppress(OSError):
        while size > 0:
            sent = os.copy_file_range(src, dst, size)
            if sent == 0:
                break
            size -= sent
    while chunk := os.read(src, _CHUNK):
        os.write(dst, chunk)


def write_json(folder: int, name: str, data: Any) -> None:
    """Write `data` as JSON to `name` in the folder handle `folder`, durably and atomically: a
    temporary file, flushed to disk, renamed over the name, and the folder flushed."""
    temp = f".{name}.{secrets.token_hex(4)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    sync_folder(folder)


def read_json(folder: int, name: str) -> Any:
    """What `write_json` wrote (None when there is nothing, or it cannot be read)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def sync_folder(folder: int) -> None:
    """Flush a folder's entries to disk (an `O_PATH` handle is reopened to be flushed)."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _empty(root: Path, rel: str) -> None:
    """`remove_tree` in a thread of its own: what it cannot remove now, the next sweep does."""
    with suppress(OSError):
        remove_tree(root, rel)


def remove_tree(root: Path, rel: str) -> None:
    """Remove the folder `rel` of the workspace `root` and everything in it, walked by handles
    from the root without following a symlink (what is removed is what lies below `rel`)."""
    *parents, name = rel.split("/")
    try:
        top = open_root(root)
    except OSError:
        return
    try:
        fd = descend(top, parents)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise
        return
    finally:
        os.close(top)
    try:
        info = lstat_at(fd, name)
        if info is None:
            return
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=fd)
            return
        holder = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            shutil.rmtree(name, dir_fd=holder)
        finally:
            os.close(holder)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise
    finally:
        os.close(fd)
