"""Race-free path resolution: a path is walked from a handle on its base folder, never looked up
by name again.

A check on a path followed by an operation on the same *name* is a race: between the two, an agent
with a command can swap a folder of its workspace for a symlink (`renameat2(RENAME_EXCHANGE)` in a
loop), and the operation lands wherever the link points (the host's `/etc/shadow`, another user's
folder, the shared definitions). So nothing here returns a name to be looked up later. `walk`
opens the base folder once and goes down one component at a time, each step `openat(parent,
name, O_PATH | O_NOFOLLOW)` relative to the handle of the step before; a symlink met on the way is
read (`readlinkat`) and its target walked the same way, from the base again when it is absolute,
and refused when it leads out of the base. What it returns, a `Found`, holds the handle of the
folder the last component is in and that component's name: every operation is then an `*at` call
on that handle (`os.open(name, dir_fd=...)`, `os.rename(..., dst_dir_fd=...)`, `os.scandir(fd)`),
with `O_NOFOLLOW`, so a swap made after the walk can change which file of that folder is opened,
never which folder it is in.

Where the kernel has `openat2` (Linux 5.6), the common case (a path without symlinks) costs one
system call: the folder is opened with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS`, which the kernel refuses if any component is a link; then, and only then,
the walk above runs. Either way the path that comes out (`Found.parts`) is where the object really
is, below the base, so checks made on it (hidden folders, read-only ones) are checks on the real
thing.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import sys
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from .._empty import empty_list

__all__ = ["MAX_LINKS", "Found", "MayCreate", "PathEscape", "PathLoop", "lstat_at", "open_base", "walk"]

MAX_LINKS = 40
"""Symlinks one walk follows before it calls the path a loop (the kernel's own bound)."""

_PATH = os.O_PATH | os.O_CLOEXEC
_FOLDER = _PATH | os.O_DIRECTORY | os.O_NOFOLLOW


MayCreate = Callable[[tuple[str, ...]], None]
"""Called with a missing folder's real path below the base before the walk makes it; raises to
refuse (a folder that would land in hidden or read-only state)."""


class PathEscape(Exception):
    """The path, or a symlink on it, leads out of the base folder."""


class PathLoop(Exception):
    """The path goes through more than `MAX_LINKS` symlinks (a loop)."""


@dataclass(kw_only=True, slots=True)
class Found:
    """Where a walk ended: the handle of the folder that holds the object, and its name there.

    `parts` is the object's real path below the base, component by component (empty for the base
    itself, whose `name` is then `.` and `folder` the base's own handle). `info` is its `lstat`
    (None when it does not exist; the folder does). `followed` is True when the path named a
    symlink and this is where it leads. The handle is the caller's to close (`close`, or `with`).
    """

    folder: int
    name: str
    parts: tuple[str, ...]
    info: os.stat_result | None
    followed: bool = False
    _closed: bool = field(default=False, repr=False)

    def open(self, flags: int) -> int:
        """`os.open` of the object, relative to its folder's handle, never following a symlink."""
        return os.open(self.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.folder)

    def stat(self) -> os.stat_result | None:
        """The object's `lstat` now (None once it is gone)."""
        try:
            return os.stat(self.name, dir_fd=self.folder, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.folder)

    def __enter__(self) -> Found:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_base(path: str) -> int:
    """A handle on a base folder (a workspace root, a mount's source): the operator's path."""
    return os.open(path, _PATH | os.O_DIRECTORY)


def walk(base: int, base_path: str, parts: list[str], *, create: MayCreate | None = None) -> Found:
    """Walk `parts` (components of a path relative to the base; `..` allowed) from the handle
    `base` (which stays the caller's) and return where it ends.

    `base_path` is the base's real path, which absolute symlink targets are read against.
    Missing folders on the way are made when `create` is given (for a file about to be written),
    each once `create` has seen its real path below the base and not raised; otherwise a missing
    folder ends the walk there, with `info` None for the rest. Raises
    `PathEscape` for a path or link that leaves the base, `PathLoop` for too many links,
    `NotADirectoryError` when a component that must be a folder is a file.
    """
    if "" not in parts and "." not in parts and ".." not in parts and parts:
        found = _beneath(base, parts)
        if found is not None:
            return found
    return _walk(base, base_path, parts, create=create)


@dataclass(slots=True)
class _Walk:
    """The state of one walk: the folders entered below the base (names and handles), what is
    left to walk (last component first), and the links followed so far."""

    base: int
    base_path: str
    todo: list[str]
    stack: list[tuple[str, int]] = field(default_factory=empty_list)
    links: int = 0
    followed: bool = False

    @property
    def here(self) -> int:
        return self.stack[-1][1] if self.stack else self.base

    def follow(self, name: str) -> None:
        """Put the target of the link `name` (in `here`) in front of what is left to walk."""
        self.count_link("the path goes through a symlink loop")
        try:
            target = os.readlink(name, dir_fd=self.here)
        except OSError:  # it was swapped for something else: walk the name again
            self.todo.append(name)
            return
        if target.startswith("/"):
            root = self.base_path.rstrip("/")
            if target != self.base_path and not target.startswith(root + "/"):
                raise PathEscape("a symlink on the path leads out of the folder")
            target = target[len(root) :]
            self.close_all()
        self.todo += reversed(target.split("/"))

    def count_link(self, why: str) -> None:
        self.links += 1
        if self.links > MAX_LINKS:
            raise PathLoop(why)

    def close_all(self) -> None:
        for _, fd in self.stack:
            os.close(fd)
        self.stack.clear()


def _walk(base: int, base_path: str, parts: list[str], *, create: MayCreate | None) -> Found:
    state = _Walk(base=base, base_path=base_path, todo=list(reversed(parts)))
    try:
        while state.todo:
            name = state.todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if not state.stack:
                    raise PathEscape("the path leads out of the folder")
                os.close(state.stack.pop()[1])
            elif not state.todo:  # the last component: looked at, not opened
                info = lstat_at(state.here, name)
                if info is None or not stat.S_ISLNK(info.st_mode):
                    return _found(state, name, info)
                state.follow(name)
                state.followed = True
            else:
                found = _enter(state, name, create)
                if found is not None:
                    return found
        # the path named the base itself, or a folder walked into (`a/..`, `a/`)
        if not state.stack:
            return Found(folder=os.dup(base), name=".", parts=(), info=os.stat(base), followed=state.followed)
        name, fd = state.stack.pop()
        try:
            return _found(state, name, os.fstat(fd))
        finally:
            os.close(fd)
    except BaseException:
        state.close_all()
        raise


def _enter(state: _Walk, name: str, create: MayCreate | None) -> Found | None:
    """Go into the folder `name` of `here`: follow it if it is a link, make it if it is missing
    and `create` allows. A `Found` (for a missing object) when the walk must end here."""
    try:
        fd = os.open(name, _FOLDER, dir_fd=state.here)
    except FileNotFoundError:
        if create is None:
            back = _back_here(state.todo)
            if back is None:
                return _found(state, name, None, missing=state.todo)
            del state.todo[back:]  # `name/..`: on from here, as a walk that makes `name` goes
            return None
        create((*(n for n, _ in state.stack), name))
        with suppress(FileExistsError):
            os.mkdir(name, dir_fd=state.here)
        state.todo.append(name)  # opened on the next round (or followed, if a link won the race)
        return None
    except OSError as exc:
        if not isinstance(exc, NotADirectoryError) and exc.errno != errno.ELOOP:
            raise
        info = lstat_at(state.here, name)
        if info is not None and stat.S_ISLNK(info.st_mode):
            state.follow(name)
        elif info is not None and not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "part of the path is a file", name) from None
        else:  # it changed under us: look again
            state.todo.append(name)
            state.count_link("the path keeps changing")
        return None
    state.stack.append((name, fd))
    return None


def _back_here(todo: list[str]) -> int | None:
    """Where in `todo` (last component first) a walk that went into a missing folder comes back out
    of it (`missing/..`, `missing/a/../..`): what is left after that place is walked from here, as a
    walk that makes the folders would (a write does). None when it stays below the missing folder.
    So a path's landing place is the same whether the walk makes folders or only looks (`create`)."""
    depth = 1
    for i in range(len(todo) - 1, -1, -1):
        part = todo[i]
        if part == "..":
            depth -= 1
            if depth == 0:
                return i
        elif part not in ("", "."):
            depth += 1
    return None


def _found(state: _Walk, name: str, info: os.stat_result | None, *, missing: list[str] | None = None) -> Found:
    """The `Found` for `name` in the folder `here`; the walk's other handles are closed."""
    folder = os.dup(state.here)
    parts = tuple(n for n, _ in state.stack)
    state.close_all()
    if missing:  # a folder on the way is missing: so is the object, named in full
        rest: list[str] = []
        for part in reversed(missing):  # a `..` below it leaves a folder a write would make
            if part == "..":
                rest.pop()
            elif part not in ("", "."):
                rest.append(part)
        return Found(folder=folder, name=name, parts=(*parts, name, *rest), info=None, followed=state.followed)
    return Found(folder=folder, name=name, parts=(*parts, name), info=info, followed=state.followed)


def lstat_at(folder: int, name: str) -> os.stat_result | None:
    """What `name` of the folder handle `folder` is (a link itself, not followed); None if nothing."""
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


# ---------------------------------------------------------------------------------------------
# openat2: the one-call fast path


_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (it came after the tables merged)


@functools.cache
def _openat2() -> Callable[[int, bytes], int] | None:
    """`openat2(base, path)` of a folder beneath `base` through no symlink and no magic link: its
    descriptor, or minus the errno. None off Linux or without a C library. Made on first use:
    `ctypes` is half a megabyte a process that never resolves a path does not need."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    class OpenHow(ctypes.Structure):
        _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]

    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(OpenHow), ctypes.c_size_t]
    how = OpenHow(_FOLDER, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    how_ref, how_size = ctypes.byref(how), ctypes.sizeof(how)

    def openat2(base: int, path: bytes) -> int:
        fd = int(syscall(_SYS_OPENAT2, base, path, how_ref, how_size))
        return fd if fd >= 0 else -(ctypes.get_errno() or errno.EIO)  # never 0: a descriptor

    return openat2


_has_openat2: bool | None = None  # learnt on the first call


def _beneath(base: int, parts: list[str]) -> Found | None:
    """The walk in one `openat2` call when no component is a symlink; None when it cannot tell
    (a link on the way, a missing folder, no `openat2` here): then the step-by-step walk runs."""
    global _has_openat2
    openat2 = _openat2() if _has_openat2 is not False else None
    if openat2 is None:
        return None
    *folders, name = parts
    if folders:
        path = os.fsencode("/".join(folders))
        if b"\0" in path:  # C would stop at it: the step-by-step walk refuses it, as `os` does
            return None
        fd = openat2(base, path)
        if fd < 0:
            if -fd in (errno.ENOSYS, errno.EPERM) and _has_openat2 is None:
                _has_openat2 = False  # an old kernel, or a seccomp filter that forbids it
            return None
        _has_openat2 = True
        folder = int(fd)
    else:
        folder = os.dup(base)
    info = lstat_at(folder, name)
    if info is not None and stat.S_ISLNK(info.st_mode):
        os.close(folder)
        return None
    return Found(folder=folder, name=name, parts=tuple(parts), info=info)
