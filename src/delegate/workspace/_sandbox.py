"""The command sandbox: bubblewrap (`bwrap`) argv built from the workspace's view and policy.

A command runs in new PID, IPC, UTS and cgroup namespaces (and a new network namespace, with only
a loopback of its own, unless the operator allows the network), with a file system put together
from scratch:

- the system read-only: `/usr`, `/etc` and the `/bin`, `/sbin`, `/lib*` links or folders (nothing
  else of the host: not `/home`, `/root`, `/var`, `/srv`, `/opt`, `/tmp`, nor the store wherever
  it lives), as any user of the machine sees it: what its owner and group alone may read (the
  shadow passwords, TLS and SSH private keys, a database's access rules) is mounted over, a file
  by the null device where devices do not open (reading it is refused) and a folder by an empty
  read-only folder, since a command runs with the server's user id and a server run as root
  would read them all (see `_unreadable`; `/etc` is looked at for every command);
- a fresh `/proc` (of the new PID namespace: the server's processes are not in it), a minimal
  read-only `/dev` with a `/dev/shm` of `shm_size` bytes, and an empty `/tmp` of `tmp_size` bytes;
- the workspace's root, at its own path, the only writable mount;
- over it, exactly as the file tools see it (`Workspace`), and closed whatever the view says
  (`view_mounts`): an empty folder over each hidden folder (`.delegate/`), the mounts bound
  read-only in it, then `.claude`, `.delegate`, `.git` and each read-only folder bound read-only
  whole (a mount point cannot be renamed away), then the hidden folders remounted read-only.

The environment is built from nothing: `PATH`, `LANG`, `TERM` (when set) and the variables the
operator names, plus `HOME` set to the workspace root. The model providers' keys and the database
URL are never passed, even when named. Every capability is dropped (bwrap keeps them for a caller
of uid 0 unless told), in a user namespace that cannot make another, and the command gets a new
session, so it cannot push input to a terminal. Each command runs within the workspace's
`CommandLimits`: rlimits set by `prlimit` inside the sandbox, a cgroup (`_cgroup.CommandCgroup`:
processes, and memory as a whole) where one can be made, sized tmpfs (`/tmp`, `/dev/shm`; `/dev`
and the sandbox's own root read-only), and the disk quota (`workspace_usage`, watched by
`run_command`).

Where bwrap is missing or cannot run (no user namespaces, say), commands are refused with a
message saying what to install, unless the operator runs them unconfined, explicitly
(`CommandPolicy(sandbox=False)`, `--unsandboxed-commands`).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

from .._errors import ToolError
from ._command_limits import CommandLimits
from ._layer import Layer
from ._overlay import CLOSED, PROBE_ENV, overlay_argv
from ._root import COMMAND_ENV, Workspace, is_git_name, names_a_ref

SECRET_VARIABLES = frozenset(
    {
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "DELEGATE_DB",
        "DELEGATE_TEST_PG",
        "DATABASE_URL",
        "PGPASSWORD",
    }
)
"""The runtime's own credentials: commands never see them, even when the operator names them."""
SYSTEM_FOLDERS = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
INSTALL_HINT = (
    "commands run in a bubblewrap sandbox, and bubblewrap cannot run here{why}: install it "
    "(Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) and allow user "
    "namespaces, or have the operator run commands unconfined with --unsandboxed-commands"
)


def command_environment(workspace: Workspace) -> dict[str, str]:
    """The environment of agents' commands: an allowlist of ours, never a credential of the runtime."""
    names = [*COMMAND_ENV, *workspace.commands.env]
    env = {name: os.environ[name] for name in names if name in os.environ and name not in SECRET_VARIABLES}
    env["HOME"] = str(workspace.root)
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def sandbox_argv(
    command: str,
    workspace: Workspace,
    *,
    marker: str = "",
    file_size: int | None = None,
    seccomp: int | None = None,
    repositories: Repositories | None = None,
) -> list[str]:
    """The bwrap command line that runs `command` with /bin/sh in the workspace's sandbox, within
    the workspace's `CommandLimits` (`file_size`, when given, in place of the limits' own), under
    the seccomp filter held by the descriptor `seccomp` (`_seccomp.filter_fd`; the caller passes
    it to the process), with the git `repositories` found in the workspace read-only.

    With a `marker`, the sandbox prints it on a line of its own once it is set up, before the
    command runs: output without it means the sandbox itself failed. Raises `ToolError` (saying
    what to install) when bwrap cannot run here.
    """
    bwrap = _usable_bwrap(workspace.commands.bwrap)
    prefix, root_mount = overlay_argv(workspace, _bwrap_options(bwrap)) if workspace.layer is not None else ([], None)
    limits = workspace.commands.limits
    root = str(workspace.root)
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--hostname", "sandbox", "--cap-drop", "ALL"]
    if "--disable-userns" in _bwrap_options(bwrap):
        argv += ["--unshare-user", "--disable-userns"]  # no namespace of its own to gain capabilities in
    if not workspace.commands.network:
        argv.append("--unshare-net")
    if seccomp is not None:
        argv += ["--seccomp", str(seccomp)]
    argv += _system_mounts()
    argv += ["--proc", "/proc", *_tmpfs_mounts(limits, sized="--size" in _bwrap_options(bwrap))]
    argv += view_mounts(workspace, root_mount)
    argv += [*(repositories.mounts(root) if repositories is not None else []), "--remount-ro", "/"]
    argv += ["--chdir", root, "--clearenv"]
    for name, value in command_environment(workspace).items():
        argv += ["--setenv", name, value]
    shell = f"printf '%s\\n' {marker}; exec /bin/sh -c \"$0\"" if marker else 'exec /bin/sh -c "$0"'
    return [*prefix, *argv, "--", *_rlimits(limits, file_size), "/bin/sh", "-c", shell, command]


def _tmpfs_mounts(limits: CommandLimits, *, sized: bool) -> list[str]:
    """`/dev`, `/dev/shm` and `/tmp`: the only tmpfs a command may write, each of a set size.

    bwrap's `/dev` is a tmpfs of no size (half the machine's RAM): it is made read-only once
    `/dev/shm`, a sized tmpfs of its own, is mounted in it (its device nodes are mounts of their
    own, and stay usable). A bwrap with no `--size` (before 0.8) cannot size a tmpfs: `/dev/shm` is
    then left read-only (and `/tmp` unsized, as before). The sandbox's root, a tmpfs bwrap makes,
    is made read-only last (`sandbox_argv`)."""
    shm = ["--size", str(limits.shm_size), "--tmpfs", "/dev/shm"] if sized else []  # else read-only with /dev
    tmp = ["--size", str(limits.tmp_size), "--tmpfs", "/tmp"] if sized else ["--tmpfs", "/tmp"]
    return ["--dev", "/dev", *shm, "--remount-ro", "/dev", *tmp]


def view_mounts(workspace: Workspace, root_mount: list[str] | None = None) -> list[str]:
    """The bwrap arguments that lay the workspace's view over its root, in an order that works:

    1. the root, bound writable (`root_mount`, for a subagent on a layer: an overlay, see
       `_overlay.py`);
    2. an empty tmpfs over each hidden folder (`.delegate/`), still writable, so that
    3. each mount (a skill, under `.delegate/skills/<name>`) gets its mount point there and is
       bound read-only;
    4. every closed folder (`CLOSED`, and the view's `read_only` ones) bound read-only whole, a
       missing one made an empty read-only folder (so it cannot be created either), one inside
       another left to the outer one, one inside a hidden folder left hidden;
    5. only then each hidden folder remounted read-only.

    A mount point cannot be renamed or removed (EBUSY), so a command can neither move a closed
    folder aside nor put a writable one in its place. A closed name that is a symbolic link is
    refused: the link could be replaced, and binding it would bind what it points to.
    """
    root = str(workspace.root)
    argv = root_mount or ["--bind", root, root]
    hidden = [os.path.join(root, h) for h in workspace.hidden]
    for path in hidden:
        argv += ["--tmpfs", path]
    for mount in workspace.mounts:
        argv += ["--ro-bind", str(mount.source), os.path.join(root, mount.at)]
    closed: list[str] = []
    for rel in sorted({*CLOSED, *workspace.read_only}, key=lambda r: (r.count("/"), r)):
        if any(_under(rel, other) for other in (*workspace.hidden, *closed)):
            continue
        closed.append(rel)
        path = os.path.join(root, rel)
        if os.path.islink(path):
            raise ToolError(
                f"{rel} in the workspace is a symbolic link; commands run only while it is a real folder "
                f"or absent (the operator must replace the link with the folder it points to)"
            )
        if os.path.lexists(path):
            argv += ["--ro-bind", path, path]
        else:
            argv += ["--tmpfs", path, "--remount-ro", path]
    for path in hidden:
        argv += ["--remount-ro", path]
    return argv


def state_hidden_argv(roots: list[Path], bwrap: str = "bwrap") -> list[str]:
    """The bwrap command line prefix (up to `--`) that runs a program, an MCP server, as the
    operator's own, with everything the operator's user may reach (the network, `npx`'s cache, its
    home) but the hidden folders of the workspaces `roots`: each `.delegate` covered by an empty
    read-only folder, a workspace inside another's `.delegate` (a user's, under `delegate serve`)
    bound back over the cover with its own `.delegate` covered. In PID namespace of its own with a
    fresh `/proc` (the server's processes, and through them its view, are out of sight), with no
    capability (it cannot unmount a cover). Raises `ToolError` where bwrap cannot run."""
    bwrap = _usable_bwrap(bwrap)
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--cap-drop", "ALL", "--dev-bind", "/", "/", "--proc", "/proc"]
    covers: list[str] = []
    for root in sorted({str(r) for r in roots}, key=len):
        if any(root == c or root.startswith(c + "/") for c in covers):
            argv += ["--bind", root, root]
        cover = os.path.join(root, ".delegate")
        argv += ["--tmpfs", cover]
        covers.append(cover)
    for cover in reversed(covers):
        argv += ["--remount-ro", cover]
    return [*argv, "--"]


def _under(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


def _rlimits(limits: CommandLimits, file_size: int | None) -> list[str]:
    """`prlimit` and its options: each cap of `limits`, soft and hard alike (so a command cannot
    raise it again), none above what the server itself may use."""
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if prlimit is None:
        raise ToolError(
            "commands' limits are set with prlimit, which is not installed: install util-linux "
            "(Debian/Ubuntu: apt-get install util-linux)"
        )
    caps = [
        ("nproc", resource.RLIMIT_NPROC, limits.processes),
        ("as", resource.RLIMIT_AS, limits.memory),
        ("fsize", resource.RLIMIT_FSIZE, limits.file_size if file_size is None else file_size),
        ("nofile", resource.RLIMIT_NOFILE, limits.open_files),
    ]
    argv = [prlimit]
    for option, kind, value in caps:
        value = _within_hard(kind, value)
        argv.append(f"--{option}={value}:{value}")
    # SIGXCPU at the soft cap (a process may report it), SIGKILL a second later
    soft = _within_hard(resource.RLIMIT_CPU, limits.cpu_seconds)
    argv.append(f"--cpu={soft}:{_within_hard(resource.RLIMIT_CPU, soft + 1)}")
    return [*argv, "--"]


def _within_hard(kind: int, value: int) -> int:
    hard = resource.getrlimit(kind)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _system_mounts() -> list[str]:
    argv: list[str] = []
    folders = [f for f in SYSTEM_FOLDERS if os.path.isdir(f)]
    for folder in folders:
        argv += ["--ro-bind", folder, folder]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
            folders.append(link)
    for path, is_folder in _unreadable(tuple(folders)):
        argv += ["--tmpfs", path, "--remount-ro", path] if is_folder else ["--ro-bind", "/dev/null", path]
    return argv


SYSTEM_RESCAN = 60.0
"""Seconds a look at what a system folder hides (`_unreadable`) is used for before another."""
LOOKED_AT_EACH_COMMAND = frozenset({"/etc"})
"""System folders looked at anew for every command: where an operator's secrets are put (a key
made owner-only a moment ago is masked from the next command), and small enough to walk in a few
milliseconds; walking `/usr` takes about half a second."""
_seen: dict[str, tuple[float, list[tuple[str, bool]]]] = {}
_seen_lock = threading.Lock()


def _unreadable(folders: tuple[str, ...]) -> list[tuple[str, bool]]:
    """The paths under `folders` that a user who is neither their owner nor in their group may
    not read (a folder: nor list and enter), with whether each is a folder; each folder looked at
    again after `SYSTEM_RESCAN` seconds, or for every command (`LOOKED_AT_EACH_COMMAND`)."""
    found: list[tuple[str, bool]] = []
    for folder in folders:
        found += _unreadable_in(folder)
    return found


def _unreadable_in(folder: str) -> list[tuple[str, bool]]:
    kept = 0.0 if folder in LOOKED_AT_EACH_COMMAND else SYSTEM_RESCAN
    with _seen_lock:
        seen = _seen.get(folder)
        if seen is None or time.monotonic() - seen[0] >= kept:
            found: list[tuple[str, bool]] = []
            _walk_unreadable(folder, found)
            seen = _seen[folder] = (time.monotonic(), found)
        return seen[1]


def _walk_unreadable(folder: str, found: list[tuple[str, bool]]) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            continue  # its target is masked where it lives, or not mounted at all
        if stat.S_ISDIR(mode):
            if mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
                found.append((entry.path, True))
            else:
                _walk_unreadable(entry.path, found)
        elif not mode & stat.S_IROTH:
            found.append((entry.path, False))


@functools.cache
def _bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bwrap knows (`--size` and `--disable-userns` came with 0.8)."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30, check=False, env=PROBE_ENV)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(word for word in (done.stdout + done.stderr).split() if word.startswith("--"))


@functools.cache
def _usable_bwrap(program: str) -> str:
    """The path of a bwrap that can build a sandbox here (checked once per process)."""
    found = shutil.which(program)
    if program == "bwrap" and found is None and Path("/usr/bin/bwrap").exists():
        found = "/usr/bin/bwrap"  # PATH may lack /usr/bin in a service's environment
    if found is None:
        raise ToolError(INSTALL_HINT.format(why=f" ({program} is not installed)"))
    probe = [found, "--unshare-pid", "--unshare-net", *_system_mounts(), "--proc", "/proc", "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=30, check=False, env=PROBE_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(INSTALL_HINT.format(why=f" ({exc})")) from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["it failed"]
        raise ToolError(INSTALL_HINT.format(why=f" ({reason[0]})"))
    return found


_log = logging.getLogger("delegate.sandbox")


# ---------------------------------------------------------------------------------------------
# The disk quota of a workspace


USAGE_KEPT = 5.0
"""Seconds a file tool's measure of a workspace is reused, the bytes it wrote since added: a
measure costs about 15 µs a file (0.4 s for 28,000 files), too much to pay on every write."""
_measured: dict[str, tuple[float, int]] = {}
_measured_lock = threading.Lock()


_LISTED = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_HANDLES_MOST = 64
"""Folder handles the measure holds open at once, however deep the tree: past it, the shallowest
are closed, and opened again (level by level from the nearest one still open) when a folder in
them is still to walk."""
_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
"""Why a folder fails to open when it was removed, or swapped for a link or a file, meanwhile."""
UNMEASURED = 1 << 62
"""The measure of a workspace that could not be walked whole (a folder that cannot be opened or
listed, no handle left): past any quota, so that nothing in it is hidden from the quota."""


class _Level:
    """A folder of the path being walked: its handle (-1 while closed), its name in its parent,
    its identity, and the folders in it still to walk."""

    __slots__ = ("fd", "folders", "ident", "name", "rel")

    def __init__(self, fd: int, name: str, rel: str) -> None:
        info = os.fstat(fd)
        self.fd, self.name, self.rel = fd, name, rel
        self.ident = (info.st_dev, info.st_ino)
        self.folders: list[tuple[str, str]] = []


class _Path:
    """The levels of the folder being walked, from the workspace root, with at most
    `_HANDLES_MOST` handles open (the root's always)."""

    def __init__(self) -> None:
        self.levels: list[_Level] = []
        self.held = 0
        self.low = 1  # the levels above it (but the root) are closed

    def push(self, level: _Level) -> None:
        self.levels.append(level)
        self.held += 1
        self._hold_at_most()

    def pop(self) -> None:
        self._close(self.levels.pop())
        self.low = min(self.low, max(1, len(self.levels)))

    def reopen(self) -> bool:
        """Open the deepest level's handle again, from the nearest level still open, each folder
        on the way by its name in its parent without following a link; False when one on the
        way is no longer the folder it was (moved, removed, swapped)."""
        levels = self.levels
        start = len(levels) - 1
        while levels[start].fd < 0:
            start -= 1
        self.low = min(self.low, start + 1)
        try:
            for parent, level in zip(levels[start:], levels[start + 1 :], strict=False):
                try:
                    level.fd = os.open(level.name, _LISTED, dir_fd=parent.fd)
                except OSError as error:
                    if error.errno in _GONE:
                        return False
                    raise
                self.held += 1
                info = os.fstat(level.fd)
                if (info.st_dev, info.st_ino) != level.ident:
                    return False
                self._hold_at_most()
            return True
        finally:
            self._hold_at_most()

    def close(self) -> None:
        for level in self.levels:
            self._close(level)

    def _hold_at_most(self) -> None:
        while self.held > _HANDLES_MOST:
            while self.levels[self.low].fd < 0:
                self.low += 1
            self._close(self.levels[self.low])

    def _close(self, level: _Level) -> None:
        if level.fd >= 0:
            os.close(level.fd)
            level.fd = -1
            self.held -= 1


def workspace_usage(workspace: Workspace, repositories: Repositories | None = None) -> int:
    """Bytes on disk of what agents can write in the workspace: everything under the root but
    its hidden and closed folders and mounts, each file counted once (hard links), by blocks
    used (a sparse file counts what it holds); `UNMEASURED` when a folder in it cannot be
    walked. Walked by handles, each folder opened from its parent's without following a link (a
    folder swapped for one meanwhile is not walked), at most `_HANDLES_MOST` open at once.
    `repositories`, when given, is told of each entry on the way (the same walk finds them)."""
    skipped = {*workspace.hidden, *CLOSED, *workspace.read_only}
    seen: set[tuple[int, int]] = set()
    walk = _Path()
    total, rel = 0, ""
    try:
        with contextlib.suppress(FileNotFoundError):
            walk.push(_Level(os.open(workspace.root, _LISTED & ~os.O_NOFOLLOW), "", ""))
            total += _list(walk.levels[0], skipped, seen, repositories)
        while walk.levels:
            level = walk.levels[-1]
            if not level.folders:
                walk.pop()
                continue
            name, rel = level.folders.pop()
            if level.fd < 0 and not walk.reopen():
                level.folders.clear()  # moved or removed meanwhile: what it held is no longer here
                continue
            try:
                sub = _Level(os.open(name, _LISTED, dir_fd=level.fd), name, rel)
            except OSError as error:
                if error.errno in _GONE:
                    continue
                raise
            walk.push(sub)
            total += _list(sub, skipped, seen, repositories)
    except OSError as error:
        _log.warning("the disk quota counts %s as full: %s cannot be measured (%s)", workspace.root, rel, error)
        total = UNMEASURED
    finally:
        walk.close()
    with _measured_lock:  # the file tools' check starts from the latest measure (see `check_disk_quota`)
        _measured[str(workspace.root)] = (time.monotonic(), total)
    return total


def _list(
    level: _Level, skipped: set[str], seen: set[tuple[int, int]], repositories: Repositories | None = None
) -> int:
    """Bytes of the entries of `level` not seen before; its folders are kept in `level.folders`."""
    total = 0
    with os.scandir(level.fd) as found:
        for entry in found:
            path = f"{level.rel}/{entry.name}" if level.rel else entry.name
            try:
                info = entry.stat(follow_symlinks=False)  # by the handle, so while it is open
            except FileNotFoundError:
                continue
            if path in skipped or (info.st_dev, info.st_ino) in seen:
                continue
            if repositories is not None and not repositories.visit(level.fd, level.ident, level.rel, entry.name, info):
                continue  # removed
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                level.folders.append((entry.name, path))
    return total


# ---------------------------------------------------------------------------------------------
# Git repositories in a workspace


class Repositories:
    """The git repositories a walk of the workspace met (`workspace_usage(..., repositories)`),
    by identity: each entry named `.git` (a folder, a file `gitdir: ...` pointing anywhere, a
    link), and each folder git would take for a bare repository (one holding a `HEAD` that names
    a ref or a commit: git's own test, `is_git_directory`, also wants `objects` and `refs`, which
    may be named by a `commondir` file; a `HEAD` alone is taken for enough).

    The operator's `git`, run in a folder below one of them, runs its configuration
    (`core.fsmonitor`, `core.pager`, aliases, hooks) as the operator. So the repositories found
    before a command are bound read-only in its sandbox (`mounts`), and with `keep` (those found
    before it) the walk after it removes any other: a `.git` whole, a bare repository's `HEAD`
    (so that it is a plain folder again), each from a handle on the folder that holds it."""

    def __init__(self, keep: frozenset[tuple[int, int]] | None = None) -> None:
        self.found: dict[tuple[int, int], str] = {}
        self.removed: list[str] = []
        self.keep = keep

    def visit(self, folder: int, ident: tuple[int, int], rel: str, name: str, info: os.stat_result) -> bool:
        """Note the entry `name` of the folder `rel` (its handle `folder`, its identity `ident`);
        False when it was removed (a repository made since `keep` was found)."""
        path = f"{rel}/{name}" if rel else name
        if is_git_name(name):
            found, where = (info.st_dev, info.st_ino), path
        elif name == "HEAD" and _names_a_ref(folder, name, info):
            found, where = ident, rel or "."
        else:
            return True
        if self.keep is None or found in self.keep:
            self.found[found] = where
            return True
        try:
            if stat.S_ISDIR(info.st_mode) and name != "HEAD":
                shutil.rmtree(name, dir_fd=folder)
            else:
                os.unlink(name, dir_fd=folder)
        except OSError as error:
            _log.warning("a git repository an agent made at %s could not be removed: %s", where, error)
            self.found[found] = where
            return True
        self.removed.append(where)
        return False

    def mounts(self, root: str) -> list[str]:
        """The bwrap arguments that bind each repository found read-only (one inside another is
        left to the outer one: every `.git` holds a `HEAD`)."""
        argv: list[str] = []
        bound: list[str] = []
        for rel in sorted(self.found.values()):
            if rel == "." or any(_under(rel, outer) for outer in bound):  # the root: its .git is closed
                continue
            bound.append(rel)
            path = os.path.normpath(os.path.join(root, rel))
            argv += ["--ro-bind", path, path]
        return argv


def _names_a_ref(folder: int, name: str, info: os.stat_result) -> bool:
    """Whether the `HEAD` named `name` in `folder` is one git accepts (`validate_headref`): a link
    to `refs/...`, or a file starting `ref: refs/` or with a commit id."""
    try:
        if stat.S_ISLNK(info.st_mode):
            return os.readlink(name, dir_fd=folder).startswith("refs/")
        if not stat.S_ISREG(info.st_mode):
            return False
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return False
    try:
        return names_a_ref(os.read(fd, 255))
    except OSError:
        return False
    finally:
        os.close(fd)


def disk_room(workspace: Workspace) -> int | None:
    """Bytes the workspace may still grow by under its disk quota (0 when at or past it), or
    None when it has no quota."""
    quota = workspace.commands.limits.disk_quota
    return None if quota == 0 else max(0, quota - workspace_usage(workspace))


def check_disk_quota(workspace: Workspace, adding: int) -> None:
    """Refuse (`ToolError`) a write of `adding` bytes that would take the workspace past its
    disk quota: the file tools call this before they write. In an overlay subagent's view the
    bytes waiting in its layer count as written (`Layer.pending_bytes`). The workspace is measured at most
    every `USAGE_KEPT` seconds (or by the last command's own measure); the writes accepted in
    between are counted as they are made."""
    quota = workspace.commands.limits.disk_quota
    if quota == 0:
        return
    key = str(workspace.root)
    with _measured_lock:
        seen = _measured.get(key)
    if seen is None or time.monotonic() - seen[0] >= USAGE_KEPT:
        workspace_usage(workspace)
        with _measured_lock:
            seen = _measured[key]
    pending = 0 if workspace.layer is None else workspace.layer.pending_bytes()
    room = max(0, quota - seen[1] - pending)
    if workspace.layer is None:  # a layer's writes are counted from the layer itself (`pending`)
        with _measured_lock:
            _measured[key] = (seen[0], seen[1] + (adding if adding <= room else 0))
    if adding > room:
        raise ToolError(
            f"the write was refused: it would take the workspace past its disk quota of {size_text(quota)} "
            f"({size_text(room)} left); delete files you no longer need to make room"
        )


def merge_over_quota(workspace: Workspace, layer: Layer) -> str | None:
    """Why merging `layer` would take `workspace` past its disk quota, or None when it fits."""
    quota = workspace.commands.limits.disk_quota
    if quota == 0:
        return None
    adding, usage = layer.pending_bytes(), workspace_usage(workspace)
    if usage + adding <= quota:
        return None
    return (
        f"not merged: it would take the workspace past its disk quota of {size_text(quota)} "
        f"({size_text(usage)} used, the layer adds {size_text(adding)}); delete files to make room"
    )


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
