"""Commands of a subagent that runs on a layer: the sandbox's root is an overlay mount.

The workspace is the overlay's lower layer and the subagent's `<layer>/upper` its upper one, so
what a command writes lands in the layer (a deletion as a whiteout), never in the workspace, and
it reads its own writes (the file tools' too) over the shared files. Two ways to mount it:

- bubblewrap 0.9 and later mount it themselves: `--overlay-src <root> --overlay <upper> <work>
  <root>` takes the place of the root's `--bind`;
- older bubblewrap (0.8 has no `--overlay`) runs inside a user and mount namespace of its own
  (`unshare --user --map-root-user --mount`) in which the overlay is mounted over the root first
  (overlayfs in a user namespace: Linux 5.11 and later, with `userxattr`); bwrap then binds that
  root as it binds any.

Where neither works, commands of such a subagent are refused with a message saying why (its file
tools still isolate it). After each command, `after_command` records what the workspace held at
each path the command changed that the subagent had not seen yet, and refuses the writes of a
read-only type: they are dropped from the layer and reported.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable

from .._errors import ToolError
from ._changes import Folders, layer_changes
from ._layer import Layer, content_hash
from ._paths import PathEscape, PathLoop
from ._root import Workspace, in_repository

CLOSED = (".claude", ".delegate", ".git")
"""Folders of every workspace that commands may never change (see `_sandbox.py`)."""
PROBE_ENV = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C"}
"""The environment of the probes that learn what bwrap and the kernel allow: built from nothing, as
a command's is (the server's own holds provider keys and database URLs)."""
NO_OVERLAY = (
    "this subagent runs on a private layer (isolation: overlay, or a read-only type), and its commands "
    "need an overlay mount, which cannot be made here{why}: install bubblewrap 0.9 or later (it has "
    "--overlay), or run on Linux 5.11 or later with unprivileged user namespaces; its file tools still "
    "work, and keep its writes in its layer"
)
_MOUNT = 'mount -t overlay overlay -o "userxattr,lowerdir=$1,upperdir=$2,workdir=$3" "$1" && shift 3 && exec "$@"'
_locks: dict[int, asyncio.Lock] = {}


def never_merged(workspace: Workspace) -> Callable[[str], bool]:
    """Whether a path of a layer is one a merge never applies: in a hidden or read-only folder of
    the view, or a closed one (the mount points a command's sandbox makes there), or a `.git`
    anywhere (no repository is agents' to make or change)."""
    closed = (*workspace.hidden, *workspace.read_only, *CLOSED)
    return lambda rel: in_repository(rel) or any(rel == c or rel.startswith(c + "/") for c in closed)


def command_lock(layer: Layer) -> asyncio.Lock:
    """One command at a time on a layer: overlayfs refuses a second mount of an upper folder in use."""
    return _locks.setdefault(id(layer), asyncio.Lock())


def overlay_argv(workspace: Workspace, options: frozenset[str]) -> tuple[list[str], list[str]]:
    """What puts `workspace.layer` under a command: (a prefix for the whole command line, the
    bwrap arguments that replace the root's `--bind`). Raises `ToolError` where it cannot be done."""
    layer = workspace.layer
    assert layer is not None
    if not workspace.commands.sandbox:
        raise ToolError(NO_OVERLAY.format(why=" (the operator runs commands unconfined, without the sandbox)"))
    root, upper, work = str(workspace.root), str(layer.upper), str(layer.work)
    if any(c in p for p in (root, upper, work) for c in ",:\\\n"):
        raise ToolError(NO_OVERLAY.format(why=f" (the workspace's path {root!r} holds a ',', ':' or '\\\\')"))
    layer.prepare()
    if "--overlay-src" in options:
        return [], ["--overlay-src", root, "--overlay", upper, work, root]
    why = _unshare_overlay()
    if why is not None:
        raise ToolError(NO_OVERLAY.format(why=f" (bubblewrap has no --overlay, and {why})"))
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    assert unshare is not None
    prefix = [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"]
    return [*prefix, "/bin/sh", "-c", _MOUNT, "sh", root, upper, work], ["--bind", root, root]


@functools.cache
def _unshare_overlay() -> str | None:
    """Why an overlay cannot be mounted in a user namespace here (None: it can), tried once."""
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if unshare is None:
        return "unshare (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="delegate-overlay-") as tmp:
        for name in ("lower", "upper", "work"):
            os.mkdir(os.path.join(tmp, name))
        lower, upper, work = (os.path.join(tmp, n) for n in ("lower", "upper", "work"))
        probe = [unshare, "--user", "--map-root-user", "--mount", "/bin/sh", "-c", _MOUNT, "sh", lower, upper, work]
        try:
            done = subprocess.run(
                [*probe, "/bin/true"], capture_output=True, text=True, timeout=30, check=False, env=PROBE_ENV
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"a user namespace cannot mount one ({exc})"
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["it failed"])[-1]
            return f"a user namespace cannot mount one ({said})"
    return None


def after_command(workspace: Workspace) -> list[str]:
    """After a command on `workspace.layer`: record what the workspace holds at each path the
    command changed that the subagent had not seen (what the merge compares with); for a
    read-only type, drop what it wrote and return those paths (refused)."""
    layer = workspace.layer
    assert layer is not None
    layer.opaque = None  # the command may have made opaque folders: look for them
    layer.opaque = any(opaque for _, _, opaque, _ in layer.entries())
    changes = layer_changes(layer, never_merged(workspace.shared))
    if layer.read_only:
        if changes:
            layer.clear()
            layer.refused += [c.path for c in changes]
        return [c.path for c in changes]
    if layer.track:
        with Folders(workspace.root) as folders:
            for change in changes:
                if change.path not in layer.seen:
                    layer.note_seen(change.path, _hash_at(folders, change.path))
    return []


def _hash_at(folders: Folders, rel: str) -> str | None:
    """What the workspace holds at `rel` now (None: nothing, or it cannot be read)."""
    try:
        parent = folders.parent(rel)
        return None if parent is None else content_hash(parent.folder, rel.rsplit("/", 1)[-1])
    except (OSError, PathEscape, PathLoop):
        return None
